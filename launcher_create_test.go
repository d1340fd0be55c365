package ferry_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ferry-dev/ferry"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/openshell/policy"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
)

// createConfig is a Launcher configured as the Rascal backend design
// asks: a policy, providers, static environment, labels and limits.
func createConfig(t *testing.T, e *launchEnv) ferry.LauncherConfig {
	e.g.Providers(t, e.c, "github", "anthropic")
	return ferry.LauncherConfig{
		Sandboxes: e.c, X: e.c, RunsDir: e.runs, Store: e.st, Agents: agenttest.Bundle(t), Mode: transfer.ModeAgent,
		Image: "ghcr.io/rtzll/rascal-runner:1", PolicyPath: "default", Providers: []string{"github", "anthropic"},
		Env:        map[string]string{"GIT_TERMINAL_PROMPT": "0", "GH_PROMPT_DISABLED": "1"},
		Labels:     map[string]string{"team": "ferry/core"},
		RunIDLabel: "rascal.run_id",
		Resources:  openshell.Resources{CPULimit: "2", MemoryLimit: "4Gi"},
	}
}

// TestLauncherCreateRequestPinned pins every field of the
// CreateSandboxRequest the Launcher sends, as the gateway received it,
// and checks that no host variable, secret or environment value of the
// run is in its bytes; a second start sends no second create; the
// sandbox's labels and resources come back from GetSandbox.
func TestLauncherCreateRequestPinned(t *testing.T) {
	const canary = "ferry-launcher-host-canary-7f3a"
	t.Setenv("FERRY_TEST_HOST_SECRET", canary)
	t.Setenv("GH_TOKEN", canary+"-gh")
	t.Setenv("ANTHROPIC_API_KEY", canary+"-anthropic")
	e := newLaunchEnv(t)
	l, err := ferry.NewLauncher(createConfig(t, e))
	if err != nil {
		t.Fatal(err)
	}
	spec := newRun(t, e.runs, "pinned", map[string]string{"EXIT": "0", "RUN_ONLY_VALUE": canary + "-run-env"})
	spec.Labels = map[string]string{"rascal.repo": testRepo, "rascal.task_id": testTask}
	h, err := l.StartDetached(ctx(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.StartDetached(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	if s := inspectUntilDone(t, l, h); s.ExitCode != 0 {
		t.Fatalf("exit code %d", s.ExitCode)
	}
	creates := e.g.Creates()
	if len(creates) != 1 {
		t.Fatalf("%d CreateSandboxRequests, want 1", len(creates))
	}
	pol, err := policy.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	name := ferry.SandboxName(h)
	labels := map[string]string{
		"rascal.run_id": "pinned", "rascal.task_id": testTask, "rascal.repo": openshell.LabelValue(testRepo),
		"team": openshell.LabelValue("ferry/core"), "ferry.managed": "true",
	}
	want := &openshellv1.CreateSandboxRequest{
		Name: name, Workspace: "default", Labels: labels,
		Spec: &openshellv1.SandboxSpec{
			Environment: map[string]string{"GIT_TERMINAL_PROMPT": "0", "GH_PROMPT_DISABLED": "1"},
			Template: &openshellv1.SandboxTemplate{Image: "ghcr.io/rtzll/rascal-runner:1", Resources: &structpb.Struct{Fields: map[string]*structpb.Value{
				"limits": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
					"cpu": structpb.NewStringValue("2"), "memory": structpb.NewStringValue("4Gi"),
				}}),
			}}},
			Policy:    pol.Proto(),
			Providers: []string{"github", "anthropic"},
		},
	}
	if got := creates[0]; !proto.Equal(got, want) {
		o := prototext.MarshalOptions{Multiline: true}
		t.Fatalf("request:\n%s\nwant:\n%s", o.Format(got), o.Format(want))
	}
	if labels["rascal.repo"] == testRepo || !strings.HasPrefix(labels["rascal.repo"], "rtzll_rascal-") {
		t.Fatalf("repo label %q", labels["rascal.repo"])
	}
	b, err := proto.Marshal(creates[0])
	if err != nil {
		t.Fatal(err)
	}
	yaml, _ := policy.Builtin("default")
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if len(v) >= 16 && strings.Contains(string(b), v) && !strings.Contains(string(yaml), v) {
			t.Errorf("host variable %s's value is in the request", k)
		}
	}
	for _, s := range []string{canary, testSecret, "fix the bug", "RASCAL_RUN_ID", "GH_TOKEN_FILE", e.runs} {
		if strings.Contains(string(b), s) {
			t.Errorf("%q is in the request", s)
		}
	}
	info, err := e.c.Get(ctx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	if !equalMaps(info.Labels, labels) || info.Resources != (openshell.Resources{CPULimit: "2", MemoryLimit: "4Gi"}) {
		t.Errorf("GetSandbox: labels %v resources %+v", info.Labels, info.Resources)
	}
	fi, err := os.Stat(filepath.Join(e.runs, "pinned", ".ferry-launch.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("run record: %v %v, want mode 0600", fi, err)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestLauncherRefusesForeignSandbox: a sandbox of the run's name made for
// another run, or by someone else, is an error naming it; the run is
// finished lost; Remove leaves that sandbox alone; once it is gone, a
// retried start creates the run's own.
func TestLauncherRefusesForeignSandbox(t *testing.T) {
	e := newLaunchEnv(t)
	l, err := ferry.NewLauncher(createConfig(t, e))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id     string
		labels map[string]string
	}{
		{"theirs", map[string]string{"rascal.run_id": "another-run"}},
		{"bare", nil},
	} {
		t.Run(tc.id, func(t *testing.T) {
			h, err := l.HandleFor(tc.id)
			if err != nil {
				t.Fatal(err)
			}
			name := ferry.SandboxName(h)
			if _, err := e.c.Create(ctx(t), openshell.Spec{Name: name, Labels: tc.labels}); err != nil {
				t.Fatal(err)
			}
			spec := newRun(t, e.runs, tc.id, map[string]string{"EXIT": "0"})
			_, err = l.StartDetached(ctx(t), spec)
			var fe *openshell.ForeignError
			if !errors.As(err, &fe) || fe.Sandbox != name || !strings.Contains(err.Error(), "sandbox "+name) {
				t.Fatalf("start: %v, want a ForeignError naming %s", err, name)
			}
			if s, err := l.Inspect(ctx(t), h); err != nil || s.Running || s.ExitCode != ferry.ExitLost {
				t.Fatalf("inspect: %+v %v, want finished lost", s, err)
			}
			if err := l.Remove(ctx(t), h); err != nil {
				t.Fatal(err)
			}
			info, err := e.c.Get(ctx(t), name)
			if err != nil || info.Labels["rascal.run_id"] != tc.labels["rascal.run_id"] {
				t.Fatalf("the foreign sandbox after Remove: %+v %v", info, err)
			}
			if _, err := os.Stat(filepath.Join(e.g.Root, name, "starts")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the command ran in the foreign sandbox: %v", err)
			}
			if err := e.c.Delete(ctx(t), name); err != nil {
				t.Fatal(err)
			}
			if _, err := l.StartDetached(ctx(t), spec); err != nil {
				t.Fatalf("start once the sandbox is gone: %v", err)
			}
			if s := inspectUntilDone(t, l, h); s.ExitCode != 0 {
				t.Fatalf("exit code %d", s.ExitCode)
			}
		})
	}
}

// TestLauncherConfigRefused: a policy with an error is refused by
// NewLauncher naming the file, the key and its line; so are a bad label
// key, variable name and resource quantity.
func TestLauncherConfigRefused(t *testing.T) {
	e := newLaunchEnv(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nfilesystem_policy:\n  read_only: [/usr]\n  writable: [/tmp]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := createConfig(t, e)
	cfg.PolicyPath = bad
	_, err := ferry.NewLauncher(cfg)
	var se *policy.SyntaxError
	var pe *ferry.PolicyError
	if !errors.As(err, &se) || !errors.As(err, &pe) || se.Line != 4 || !strings.Contains(se.Key, "writable") || !strings.Contains(err.Error(), bad) {
		t.Fatalf("NewLauncher with %s: %v, want a SyntaxError at line 4 naming writable", bad, err)
	}
	unsafe := filepath.Join(dir, "root.yaml")
	if err := os.WriteFile(unsafe, []byte("version: 1\nprocess:\n  run_as_user: root\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.PolicyPath = unsafe
	var ue *policy.UnsafeError
	if _, err := ferry.NewLauncher(cfg); !errors.As(err, &ue) || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("NewLauncher with a root policy: %v, want an UnsafeError naming line 3", err)
	}
	for _, mod := range []func(*ferry.LauncherConfig){
		func(c *ferry.LauncherConfig) { c.PolicyPath = filepath.Join(dir, "missing.yaml") },
		func(c *ferry.LauncherConfig) { c.Labels = map[string]string{"bad key": "x"} },
		func(c *ferry.LauncherConfig) { c.Env = map[string]string{"A=B": "x"} },
		func(c *ferry.LauncherConfig) { c.Providers = []string{""} },
		func(c *ferry.LauncherConfig) { c.Resources.MemoryLimit = "4g" },
	} {
		c := createConfig(t, e)
		mod(&c)
		if _, err := ferry.NewLauncher(c); err == nil {
			t.Errorf("NewLauncher accepted %+v", c)
		}
	}
}

// TestLauncherRemoveUnknownHandle: Remove of a handle no run answers to
// deletes a sandbox of its name only when a Launcher made it.
func TestLauncherRemoveUnknownHandle(t *testing.T) {
	e := newLaunchEnv(t)
	l, err := ferry.NewLauncher(createConfig(t, e))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id      string
		labels  map[string]string
		deleted bool
	}{
		{"someones", map[string]string{"team": "x"}, false},
		{"managed", map[string]string{ferry.ManagedLabel: "true"}, true},
	} {
		h, _ := l.HandleFor(tc.id)
		name := ferry.SandboxName(h)
		if _, err := e.c.Create(ctx(t), openshell.Spec{Name: name, Labels: tc.labels}); err != nil {
			t.Fatal(err)
		}
		if err := l.Remove(ctx(t), h); err != nil {
			t.Fatal(err)
		}
		_, err := e.c.Get(ctx(t), name)
		if gone := errors.Is(err, relay.ErrNotFound); gone != tc.deleted {
			t.Errorf("%s: sandbox deleted %v (%v), want %v", tc.id, gone, err, tc.deleted)
		}
	}
	if err := l.Remove(ctx(t), ferry.Handle{Name: "rascal-never"}); err != nil {
		t.Errorf("Remove of an unknown handle without a sandbox: %v", err)
	}
}

// TestLauncherStartDeadline: a sandbox that is not READY by the caller's
// deadline fails the start with an error naming it and its last phase,
// and a start with time to wait then finds it, created once.
func TestLauncherStartDeadline(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{ReadyDelay: 3 * time.Second}})
	st, _ := newStore(t, nil)
	e := &launchEnv{g: g, c: g.Client(t, openshell.Config{}), runs: t.TempDir(), st: st}
	l, err := ferry.NewLauncher(createConfig(t, e))
	if err != nil {
		t.Fatal(err)
	}
	spec := newRun(t, e.runs, "slowbox", map[string]string{"EXIT": "0"})
	short, cancel := context.WithTimeout(ctx(t), 500*time.Millisecond)
	defer cancel()
	h, _ := l.HandleFor("slowbox")
	_, err = l.StartDetached(short, spec)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "sandbox "+ferry.SandboxName(h)) || !strings.Contains(err.Error(), "still provisioning") {
		t.Fatalf("start past its deadline: %v, want the sandbox and its phase named", err)
	}
	if _, err := l.StartDetached(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	if s := inspectUntilDone(t, l, h); s.ExitCode != 0 {
		t.Fatalf("exit code %d", s.ExitCode)
	}
	if n := len(g.Creates()); n != 1 {
		t.Errorf("%d creates, want 1", n)
	}
}
