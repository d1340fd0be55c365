package rascal_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry"
	ferryrascal "github.com/ferry-dev/ferry/rascal"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/openshell/policy"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
)

// envWorker stands for the worker: it writes its environment and the
// secrets directory's listing into the meta directory.
const envWorker = `env > "$RASCAL_META_DIR/env.txt"
ls -A "$RASCAL_META_DIR/../.rascal-secrets" > "$RASCAL_META_DIR/secrets.txt" 2>/dev/null
echo '{"exit_code":0}' > "$RASCAL_META_DIR/meta.json"`

// createRunner is a Runner through New whose worker is envWorker.
func createRunner(t *testing.T, e *env, cfg ferryrascal.Config) *ferryrascal.Runner {
	t.Helper()
	cfg.Gateway, cfg.Store, cfg.RunsDir = e.g.Settings, e.store, filepath.Join(e.data, "runs")
	cfg.GitHubToken, cfg.Agents, cfg.KillGrace = testGitHubToken, agenttest.Bundle(t), 500*time.Millisecond
	cfg.Command = []string{"sh", "-c", envWorker}
	// The providers exist on the gateway first, as `openshell provider
	// create` makes them, of the type ProviderTypes says.
	c := e.g.Client(t, openshell.Config{})
	for _, name := range cfg.Providers {
		if _, err := c.Provider(ctx(t), name); err == nil {
			continue
		}
		typ := name
		if tp, ok := cfg.ProviderTypes[name]; ok {
			typ = tp
		}
		k := strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_TOKEN"
		if _, err := c.CreateProvider(ctx(t), openshell.ProviderSpec{Name: name, Type: typ, Credentials: map[string]string{k: "test-" + name}}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := ferryrascal.New(ctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// runOnce starts the run as rascald does (the orchestrator writes the
// agent's credential into the secrets directory), waits until it is not
// running, and returns the worker's environment and the secrets it found.
func runOnce(t *testing.T, e *env, r *ferryrascal.Runner, id string, rt ferryrascal.Runtime) (map[string]string, []string) {
	t.Helper()
	runDir := filepath.Join(e.data, "runs", id)
	secrets := ferryrascal.SecretsDir(runDir)
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"codex_auth.json": testCodexToken, "claude_oauth_token": testClaudeToken} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	spec := ferryrascal.Spec{RunID: id, TaskID: "task-" + id, Repo: testRepo, Instruction: "fix it", AgentRuntime: rt, RunDir: runDir, SecretsDir: secrets}
	h, err := r.StartDetached(ctx(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		st, err := r.Inspect(ctx(t), h)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Running {
			break
		}
		if i > 120 {
			t.Fatal("still running")
		}
		time.Sleep(250 * time.Millisecond)
	}
	meta := filepath.Join(e.workspace(id), ferry.DefaultMetaDir)
	env := map[string]string{}
	for _, l := range strings.Split(readFile(t, filepath.Join(meta, "env.txt")), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env, strings.Fields(readFile(t, filepath.Join(meta, "secrets.txt")))
}

// TestRascalProvidersCoverSecrets: for each Rascal secret, a provider
// that covers it keeps it at the gateway (the file is not in the
// sandbox's secrets directory, its variable is not set) and without one
// it travels as before.
func TestRascalProvidersCoverSecrets(t *testing.T) {
	e := newEnv(t)
	for i, tc := range []struct {
		name      string
		runtime   ferryrascal.Runtime
		providers []string
		types     map[string]string
		covered   map[string]string // secret: its variable
	}{
		{"codex-none", "codex", nil, nil, nil},
		{"claude-none", "claude", nil, nil, nil},
		{"github", "codex", []string{"github"}, nil, map[string]string{"gh_token": "GH_TOKEN_FILE"}},
		{"codex", "codex", []string{"codex"}, nil, map[string]string{"codex_auth.json": "CODEX_AUTH_FILE"}},
		{"openai-named", "goose-codex", []string{"team-openai"}, map[string]string{"team-openai": "openai"}, map[string]string{"codex_auth.json": "CODEX_AUTH_FILE"}},
		{"claude-code", "claude", []string{"claude-code", "github"}, nil, map[string]string{"claude_oauth_token": "CLAUDE_CODE_OAUTH_TOKEN_FILE", "gh_token": "GH_TOKEN_FILE"}},
		{"anthropic", "goose-claude", []string{"anthropic"}, nil, map[string]string{"claude_oauth_token": "CLAUDE_CODE_OAUTH_TOKEN_FILE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := createRunner(t, e, ferryrascal.Config{Providers: tc.providers, ProviderTypes: tc.types})
			id := "run_00000000000000c" + string(rune('0'+i))
			env, files := runOnce(t, e, r, id, tc.runtime)
			// Docker's variable for each secret, by runtime.
			vars := map[string]string{"gh_token": "GH_TOKEN_FILE"}
			if ferryrascal.NormalizeRuntime(string(tc.runtime)).Provider() == ferryrascal.ModelProviderAnthropic {
				vars["claude_oauth_token"] = "CLAUDE_CODE_OAUTH_TOKEN_FILE"
			} else {
				vars["codex_auth.json"] = "CODEX_AUTH_FILE"
			}
			for _, secret := range []string{"gh_token", "codex_auth.json", "claude_oauth_token"} {
				_, covered := tc.covered[secret]
				if has := contains(files, secret); has == covered {
					t.Errorf("%s in the sandbox: %v, covered by a provider: %v (found %v)", secret, has, covered, files)
				}
				v, ok := vars[secret]
				if !ok {
					continue
				}
				if _, set := env[v]; set == covered {
					t.Errorf("%s set: %v, %s covered: %v", v, set, secret, covered)
				}
			}
			if _, err := os.Stat(filepath.Join(ferryrascal.SecretsDir(filepath.Join(e.data, "runs", id)), "gh_token")); (err == nil) == (tc.covered["gh_token"] != "") {
				t.Errorf("host gh_token written: %v, covered: %v", err == nil, tc.covered["gh_token"] != "")
			}
			info, err := e.g.Client(t, openshell.Config{}).Get(ctx(t), ferry.SandboxName(ferry.Handle{Name: ferryrascal.ExecutionHandleForRun(id).Name}))
			if err != nil || strings.Join(info.Providers, ",") != strings.Join(tc.providers, ",") {
				t.Errorf("sandbox providers %v %v, want %v", info.Providers, err, tc.providers)
			}
		})
	}
	checkNoSecret(t, e)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestRascalSandboxSpec: the sandbox is created with Docker's labels (the
// repo made a label value), ferry.managed, the design's static
// environment and the Security mode's CPUs and memory, as GetSandbox
// returns them; a same-named sandbox of another run is refused, naming
// it; a policy file with an error is refused by New naming key and line.
func TestRascalSandboxSpec(t *testing.T) {
	e := newEnv(t)
	c := e.g.Client(t, openshell.Config{})
	r := createRunner(t, e, ferryrascal.Config{
		PolicyPath: "default",
		Security:   ferryrascal.DockerSecurityConfig{Mode: "baseline", CPUs: "2", Memory: "4g", PidsLimit: 256},
	})
	const id = "run_0123456789abcdef"
	env, _ := runOnce(t, e, r, id, "codex")
	if env["GIT_TERMINAL_PROMPT"] != "0" || env["GH_PROMPT_DISABLED"] != "1" {
		t.Errorf("worker environment lacks the design's static variables")
	}
	name := ferry.SandboxName(ferry.Handle{Name: ferryrascal.ExecutionHandleForRun(id).Name})
	info, err := c.Get(ctx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"rascal.run_id": id, "rascal.task_id": "task-" + id, "rascal.repo": openshell.LabelValue(testRepo), "ferry.managed": "true"}
	if len(info.Labels) != len(want) {
		t.Errorf("labels %v, want %v", info.Labels, want)
	}
	for k, v := range want {
		if info.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, info.Labels[k], v)
		}
	}
	if info.Resources != (openshell.Resources{CPULimit: "2", MemoryLimit: "4Gi"}) {
		t.Errorf("resources %+v", info.Resources)
	}
	creates := e.g.Creates()
	if len(creates) != 1 {
		t.Fatalf("%d creates", len(creates))
	}
	pol, _ := policy.Load("default")
	if sp := creates[0].GetSpec(); len(sp.GetEnvironment()) != 2 || sp.GetPolicy() == nil || sp.GetPolicy().String() != pol.Proto().String() {
		t.Errorf("create spec: environment %v policy set %v", sp.GetEnvironment(), sp.GetPolicy() != nil)
	}

	// Another run's sandbox under this run's name.
	const other = "run_fedcba9876543210"
	oname := ferry.SandboxName(ferry.Handle{Name: ferryrascal.ExecutionHandleForRun(other).Name})
	if _, err := c.Create(ctx(t), openshell.Spec{Name: oname, Labels: map[string]string{"rascal.run_id": "run_someone_else"}}); err != nil {
		t.Fatal(err)
	}
	_, err = r.StartDetached(ctx(t), ferryrascal.Spec{RunID: other, TaskID: "t", Repo: testRepo, AgentRuntime: "codex"})
	var fe *openshell.ForeignError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), oname) || fe.Got != "run_someone_else" {
		t.Fatalf("start over another run's sandbox: %v", err)
	}

	// Open mode sets no limits, as Docker's.
	open := createRunner(t, e, ferryrascal.Config{Security: ferryrascal.DockerSecurityConfig{Mode: "open", CPUs: "2", Memory: "4g"}})
	runOnce(t, e, open, "run_00000000000000e1", "codex")
	if info, err := c.Get(ctx(t), ferry.SandboxName(ferry.Handle{Name: ferryrascal.ExecutionHandleForRun("run_00000000000000e1").Name})); err != nil || !info.Resources.IsZero() {
		t.Errorf("open mode: resources %+v %v", info.Resources, err)
	}

	bad := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nnetwork_policies:\n  gh:\n    endpoints:\n      - host: api.github.com\n        prot: 443\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ferryrascal.New(ctx(t), ferryrascal.Config{Gateway: e.g.Settings, Store: e.store, RunsDir: filepath.Join(e.data, "runs"), Agents: agenttest.Bundle(t), PolicyPath: bad})
	var se *policy.SyntaxError
	if !errors.As(err, &se) || se.Line != 6 || !strings.Contains(se.Key, "prot") || !strings.Contains(err.Error(), "line 6") {
		t.Fatalf("New with a bad policy: %v, want its key and line 6", err)
	}
	for _, sec := range []ferryrascal.DockerSecurityConfig{{Memory: "lots"}, {CPUs: "0"}, {Mode: "strict", Memory: "-1g"}} {
		if _, err := ferryrascal.New(ctx(t), ferryrascal.Config{Gateway: e.g.Settings, Store: e.store, RunsDir: filepath.Join(e.data, "runs"), Agents: agenttest.Bundle(t), Security: sec}); err == nil {
			t.Errorf("New accepted security %+v", sec)
		}
	}
}
