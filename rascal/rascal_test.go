package rascal_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/internal/waitfor"
	ferryrascal "github.com/ferry-dev/ferry/rascal"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/stores"
	"github.com/ferry-dev/ferry/session/treediff"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
)

const (
	testRepo        = "rtzll/rascal"
	testGitHubToken = "ghp_ferry-test-token-never-logged"
	testCodexToken  = "codex-ferry-test-token-never-logged"
	testClaudeToken = "claude-ferry-test-token-never-logged"
)

// env is an embedded gateway, a session store, the fakes, and a data
// directory for rascald.
type env struct {
	g     *gatewaytest.Gateway
	f     *fakes
	data  string
	store string
	// sock is rascald's result socket (RunResultSocketPath), served for
	// the env's whole life as by the orchestrator that outlives its
	// runs.
	sock string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{g: gatewaytest.Start(t, gatewaytest.Options{}), f: newFakes(t), data: t.TempDir(), store: t.TempDir()}
	e.sock = serveResults(t, &rascald{t: t, data: e.data})
	return e
}

// runner is a Runner as a new rascald process makes one, through New.
func (e *env) runner(t *testing.T, afterSpawn func(string)) *ferryrascal.Runner {
	t.Helper()
	r, err := ferryrascal.New(ctx(t), ferryrascal.Config{
		Gateway: e.g.Settings, Store: e.store, RunsDir: filepath.Join(e.data, "runs"),
		GitHubToken: testGitHubToken, Env: map[string]string{"PATH": e.f.path()},
		Agents: agenttest.Bundle(t), KillGrace: 500 * time.Millisecond, AfterSpawn: afterSpawn,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func (e *env) rascald(t *testing.T, r *ferryrascal.Runner, mode SessionMode) *rascald {
	return &rascald{t: t, runner: FerryRunner{R: r}, data: e.data, sock: e.sock, mode: mode, tick: 50 * time.Millisecond}
}

// workspace is the run's sandbox workspace on the embedded gateway's host.
func (e *env) workspace(runID string) string {
	return filepath.Join(e.g.Root, ferry.SandboxName(ferry.Handle{Name: ferryrascal.ExecutionHandleForRun(runID).Name}))
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return c
}

// observed is what a fake agent said it found.
type observed struct {
	Agent, Resume, SessionID, Home, Auth, Provider, Moim string
	Seen                                                 int
}

func (o *observed) UnmarshalJSON(b []byte) error {
	var m struct {
		Agent     string `json:"agent"`
		Seen      int    `json:"seen"`
		Resume    string `json:"resume"`
		SessionID string `json:"session_id"`
		Home      string `json:"home"`
		Auth      string `json:"auth"`
		Provider  string `json:"provider"`
		Moim      string `json:"moim"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*o = observed{Agent: m.Agent, Seen: m.Seen, Resume: m.Resume, SessionID: m.SessionID, Home: m.Home, Auth: m.Auth, Provider: m.Provider, Moim: m.Moim}
	return nil
}

// observation is the fake agent's line in the run directory's
// agent.ndjson, pulled from the sandbox.
func observation(t *testing.T, runDir string) observed {
	t.Helper()
	f, err := os.Open(filepath.Join(runDir, "agent.ndjson"))
	if err != nil {
		t.Fatalf("agent.ndjson: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"agent":`) {
			var o observed
			if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
				t.Fatalf("agent.ndjson line %q: %v", sc.Text(), err)
			}
			return o
		}
	}
	t.Fatalf("agent.ndjson holds no fake agent's line")
	return observed{}
}

// sessionDir is where the runtime's state is in the sandbox: its session
// directory when the session is resumed, else the meta directory's.
func sessionDir(ws string, rt Runtime, resumed bool) string {
	if resumed {
		switch rt {
		case "codex":
			return filepath.Join(ws, "rascal-codex-session")
		case "claude":
			return filepath.Join(ws, "rascal-claude-session")
		default:
			return filepath.Join(ws, "rascal-goose-session")
		}
	}
	switch rt {
	case "codex":
		return filepath.Join(ws, "rascal-meta", "codex")
	case "claude":
		return filepath.Join(ws, "rascal-meta", "claude")
	default:
		return filepath.Join(ws, "rascal-meta", "goose")
	}
}

// TestRascalRuntimesAndSessionModes drives the Runner through Rascal's
// interface and adapter as rascald does, for every runtime and session
// mode: two runs of one task, each to a pull request; the second resumes
// the first's session where the mode and trigger say so (SessionEnabled),
// and starts fresh where they do not.
func TestRascalRuntimesAndSessionModes(t *testing.T) {
	e := newEnv(t)
	r := e.runner(t, nil)
	st, err := stores.Open(ctx(t), e.store, stores.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tm := &timings{}
	type trig struct{ first, second Name }
	prPR, prIssue := trig{"pr_comment", "pr_comment"}, trig{"pr_comment", "issue_label"}
	n := 0
	for _, rt := range []Runtime{"goose-codex", "codex", "claude", "goose-claude"} {
		for _, tc := range []struct {
			mode SessionMode
			trig trig
		}{
			{"off", prPR}, {"pr-only", prPR}, {"pr-only", prIssue}, {"all", prIssue},
		} {
			n++
			task := string(rt) + "-" + string(tc.mode) + "-" + string(tc.trig.second)
			t.Run(task, func(t *testing.T) {
				d := e.rascald(t, r, tc.mode)
				d.timings = tm
				for i, trigger := range []Name{tc.trig.first, tc.trig.second} {
					id := "run_" + strings.Repeat("0", 13) + string(rune('a'+n%26)) + string(rune('0'+i)) + string(rune('a'+n/26))
					rn := run{ID: id, TaskID: task, Repo: testRepo, Instruction: "fix it", AgentRuntime: rt, Trigger: trigger, BaseBranch: "main", HeadBranch: "rascal/" + task}
					resumed := ferryrascal.SessionEnabled(ferryrascal.SessionMode(tc.mode), ferryrascal.TriggerName(trigger))
					out := d.execute(ctx(t), rn)
					if !out.Reported {
						t.Errorf("run %d: no result came on the result socket", i+1)
					}
					if out.Status != "review" || out.Meta.PRURL == "" || out.Meta.HeadSHA == "" {
						log, _ := os.ReadFile(filepath.Join(d.runDir(id), "runner.log"))
						t.Fatalf("run %d: %+v\nrunner.log:\n%s", i+1, out, log)
					}
					o := observation(t, d.runDir(id))
					ws := e.workspace(id)
					wantSeen := 0
					if i == 1 && resumed && ferryrascal.SessionEnabled(ferryrascal.SessionMode(tc.mode), ferryrascal.TriggerName(tc.trig.first)) {
						wantSeen = 1
					}
					if (o.Seen > 0) != (wantSeen > 0) {
						t.Errorf("run %d: the agent saw %d session records, want resumed=%v", i+1, o.Seen, wantSeen > 0)
					}
					if want := sessionDir(ws, rt, resumed); o.Home != want {
						t.Errorf("run %d: the agent's directory is %s, want %s", i+1, o.Home, want)
					}
					if o.Auth != "yes" {
						t.Errorf("run %d: the agent found no credential", i+1)
					}
					switch rt {
					case "codex":
						// The worker resumes codex's session by the id the
						// first run's meta.json gave rascald.
						if wantResume := i == 1 && wantSeen > 0; (o.Resume == "1") != wantResume || (wantResume && o.SessionID != "codex-"+task) {
							t.Errorf("run %d: codex resume %q session %q, want resume %v", i+1, o.Resume, o.SessionID, wantResume)
						}
						if out.Meta.TaskSessionID != "codex-"+task && out.Meta.TaskSessionID != o.SessionID {
							t.Errorf("run %d: meta.json task_session_id %q", i+1, out.Meta.TaskSessionID)
						}
					case "goose-codex", "goose-claude":
						wantProvider := map[Runtime]string{"goose-codex": "codex", "goose-claude": "claude-code"}[rt]
						if o.Provider != wantProvider || o.Moim != filepath.Join(ws, "rascal-meta", "persistent_instructions.md") {
							t.Errorf("run %d: goose provider %q moim %q", i+1, o.Provider, o.Moim)
						}
						if wantResume := i == 1 && wantSeen > 0; (o.Resume == "1") != wantResume {
							t.Errorf("run %d: goose resume %q, want %v", i+1, o.Resume, wantResume)
						}
					}
					log, _ := os.ReadFile(filepath.Join(d.runDir(id), "runner.log"))
					for _, want := range []string{"queued run=" + id, "starting ferry runner", "starting rascal-runner"} {
						if !strings.Contains(string(log), want) {
							t.Errorf("run %d: runner.log lacks %q:\n%s", i+1, want, log)
						}
					}
				}
				list, err := st.List(ctx(t), ferryrascal.TaskSessionKey(testRepo, task))
				if err != nil && !errors.Is(err, session.ErrNoSnapshot) {
					t.Fatal(err)
				}
				if saved := len(list) > 0; saved != (tc.mode != "off") {
					t.Errorf("%d snapshots of the task's session in mode %s", len(list), tc.mode)
				}
			})
		}
	}
	if e.f.real {
		t.Log("worker: Rascal's rascal-runner (FERRY_RASCAL_RUNNER)")
	} else {
		t.Log("worker: the stand-in script (set FERRY_RASCAL_RUNNER to a build of Rascal's cmd/rascal-runner)")
	}
	t.Logf("embedded gateway: %s", tm.summary())
	checkNoSecret(t, e)
}

// checkNoSecret fails when a token is in a file the gateway or the run
// directories hold outside the secrets directories, or in what the gateway
// saw.
func checkNoSecret(t *testing.T, e *env) {
	t.Helper()
	seen := e.g.Seen.String()
	for _, tok := range []string{testGitHubToken, testCodexToken, testClaudeToken} {
		if strings.Contains(seen, tok) {
			t.Errorf("the gateway saw a token")
		}
	}
	filepath.WalkDir(filepath.Join(e.data, "runs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(p, "-secrets") {
			b, _ := os.ReadFile(p)
			for _, tok := range []string{testGitHubToken, testCodexToken, testClaudeToken} {
				if strings.Contains(string(b), tok) {
					t.Errorf("%s holds a token", p)
				}
			}
		}
		return nil
	})
}

// waitFile waits up to a minute for p.
func waitFile(t *testing.T, p string) { waitfor.File(t, p, time.Minute) }

// TestRascalTakeoverStopRemove: a rascald process dies while it
// supervises a run, and a new one (a new Runner over the same RunsDir)
// takes the run over from its store, as RecoverRunningRuns does; a
// cancelled run is stopped, its meta.json still read; Remove of a sandbox
// already gone, and the calls on a handle nobody knows, answer as
// Docker's backend does.
func TestRascalTakeoverStopRemove(t *testing.T) {
	e := newEnv(t)
	mode := SessionMode("all")

	t.Run("takeover", func(t *testing.T) {
		rn := run{ID: "run_00000000000000a1", TaskID: "takeover", Repo: testRepo, Instruction: "x", AgentRuntime: "codex", Trigger: "pr_comment", BaseBranch: "main", HeadBranch: "rascal/takeover"}
		must(t, os.WriteFile(e.f.hold(rn.TaskID), nil, 0o644))
		d1 := e.rascald(t, e.runner(t, nil), mode)
		c1, die := context.WithCancel(ctx(t))
		done := make(chan outcome, 1)
		go func() { done <- d1.execute(c1, rn) }()
		waitFile(t, e.f.running(rn.ID))
		die() // the process dies: its supervision ends, the run goes on
		if o := <-done; o.Status != "abandoned" {
			t.Fatalf("first rascald: %+v", o)
		}
		d2 := e.rascald(t, e.runner(t, nil), mode)
		must(t, os.Remove(e.f.hold(rn.TaskID)))
		if o := d2.recover(ctx(t), rn); o.Status != "review" {
			t.Fatalf("taken over: %+v", o)
		}
		if n := strings.Count(readFile(t, filepath.Join(d2.runDir(rn.ID), "runner.log")), "starting rascal-runner"); n != 1 {
			t.Fatalf("the worker started %d times", n)
		}
	})

	t.Run("stop", func(t *testing.T) {
		rn := run{ID: "run_00000000000000b2", TaskID: "stop", Repo: testRepo, Instruction: "x", AgentRuntime: "goose-claude", Trigger: "cli", BaseBranch: "main", HeadBranch: "rascal/stop"}
		must(t, os.WriteFile(e.f.hold(rn.TaskID), nil, 0o644))
		r := e.runner(t, nil)
		d := e.rascald(t, r, mode)
		if err := d.start(ctx(t), rn); err != nil {
			t.Fatal(err)
		}
		waitFile(t, e.f.running(rn.ID))
		cancel := make(chan struct{})
		close(cancel)
		h, _ := d.handleOf(rn.ID)
		o := d.superviseStop(ctx(t), rn, cancel)
		if o.Status != "canceled" || o.Meta.ExitCode != 1 {
			t.Fatalf("stopped run: %+v", o)
		}
		// cleanup removed the sandbox; rascald's retries remove it again.
		for i := 0; i < 2; i++ {
			if err := d.runner.Remove(ctx(t), h); err != nil {
				t.Fatalf("remove of a sandbox already gone: %v", err)
			}
		}
		if _, err := os.Stat(e.workspace(rn.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the sandbox's workspace is still there: %v", err)
		}
		// Removed, the run is unknown, as to Docker after docker rm.
		if err := d.runner.Stop(ctx(t), h, time.Second); err != ErrExecutionNotFound {
			t.Fatalf("stop after remove: %v, want ErrExecutionNotFound", err)
		}
		if _, err := d.runner.Inspect(ctx(t), h); err != ErrExecutionNotFound {
			t.Fatalf("inspect after remove: %v, want ErrExecutionNotFound", err)
		}
	})

	t.Run("unknown", func(t *testing.T) {
		d := e.rascald(t, e.runner(t, nil), mode)
		for _, h := range []ExecutionHandle{
			{Backend: "docker", ID: "rascal-run_0000000000000000", Name: "rascal-run_0000000000000000"},
			{Backend: "docker", Name: "rascal-never"},
			{Backend: "docker", ID: "../../etc"},
			{},
		} {
			if _, err := d.runner.Inspect(ctx(t), h); err != ErrExecutionNotFound {
				t.Errorf("inspect %+v: %v, want ErrExecutionNotFound", h, err)
			}
			if err := d.runner.Stop(ctx(t), h, time.Second); err != ErrExecutionNotFound {
				t.Errorf("stop %+v: %v, want ErrExecutionNotFound", h, err)
			}
			if err := d.runner.Remove(ctx(t), h); err != nil {
				t.Errorf("remove %+v: %v", h, err)
			}
		}
	})
	checkNoSecret(t, e)
}

// TestRascalKilledBetweenStartAndRecord: the rascald process dies inside
// StartDetached after the command is spawned and before the Launcher has
// recorded it (the Launcher's crash point, where the goroutine ends as a
// killed process would), with only the pending handle in its store. A new
// rascald adopts the run from the pending handle and finishes it; the
// command ran once.
func TestRascalKilledBetweenStartAndRecord(t *testing.T) {
	e := newEnv(t)
	rn := run{ID: "run_00000000000000c3", TaskID: "killed", Repo: testRepo, Instruction: "x", AgentRuntime: "claude", Trigger: "issue_label", BaseBranch: "main", HeadBranch: "rascal/killed"}
	must(t, os.WriteFile(e.f.hold(rn.TaskID), nil, 0o644))
	spawned := make(chan struct{})
	d1 := e.rascald(t, e.runner(t, func(string) { close(spawned); runtime.Goexit() }), "off")
	died := make(chan struct{})
	go func() {
		defer close(died)
		d1.start(ctx(t), rn)
		t.Error("StartDetached returned past its crash point")
	}()
	<-spawned
	<-died
	h, ok := d1.handleOf(rn.ID)
	if !ok || h.ID != h.Name || h.Name != "rascal-run_00000000000000c3" || h.Backend != "docker" {
		t.Fatalf("rascald's store holds %+v, want the pending handle", h)
	}
	d2 := e.rascald(t, e.runner(t, nil), "off")
	done := make(chan outcome, 1)
	go func() { done <- d2.recover(ctx(t), rn) }()
	waitFile(t, e.f.running(rn.ID))
	must(t, os.Remove(e.f.hold(rn.TaskID)))
	if o := <-done; o.Status != "review" {
		t.Fatalf("adopted run: %+v\n%s", o, readFile(t, filepath.Join(d2.runDir(rn.ID), "runner.log")))
	}
	if n := strings.Count(readFile(t, filepath.Join(d2.runDir(rn.ID), "runner.log")), "starting rascal-runner"); n != 1 {
		t.Fatalf("the worker started %d times", n)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRascalNewByGatewayName: New finds a gateway by its stored name, as
// the openshell CLI does, and a run goes through it; a name nobody stored
// is an error that says so.
func TestRascalNewByGatewayName(t *testing.T) {
	e := newEnv(t)
	cfgHome := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	t.Setenv("OPENSHELL_GATEWAY_ENDPOINT", "http://127.0.0.1:1")
	dir := filepath.Join(cfgHome, "openshell", "gateways", "embedded")
	must(t, os.MkdirAll(dir, 0o700))
	md, _ := json.Marshal(map[string]string{"gateway_endpoint": e.g.Settings.Endpoint, "auth_mode": "mtls"})
	must(t, os.WriteFile(filepath.Join(dir, "metadata.json"), md, 0o600))
	if s := e.g.Settings; s.CACertFile != "" {
		must(t, os.MkdirAll(filepath.Join(dir, "mtls"), 0o700))
		for from, to := range map[string]string{s.CACertFile: "ca.crt", s.ClientCertFile: "tls.crt", s.ClientKeyFile: "tls.key"} {
			must(t, os.WriteFile(filepath.Join(dir, "mtls", to), []byte(readFile(t, from)), 0o600))
		}
	}
	if _, err := ferryrascal.New(ctx(t), ferryrascal.Config{GatewayName: "nobody", Store: e.store, RunsDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("New with an unknown gateway name: %v", err)
	}
	r, err := ferryrascal.New(ctx(t), ferryrascal.Config{
		GatewayName: "embedded", Store: filepath.Join(t.TempDir(), "new-store"), RunsDir: filepath.Join(e.data, "runs"),
		GitHubToken: testGitHubToken, Env: map[string]string{"PATH": e.f.path()}, Agents: agenttest.Bundle(t),
		Diff: []string{"work/repo"}, DiffFilter: treediff.Filter{Exclude: []string{".git/**"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d := e.rascald(t, r, "all")
	rn := run{ID: "run_00000000000000d4", TaskID: "named", Repo: testRepo, Instruction: "x", AgentRuntime: "codex", Trigger: "cli", BaseBranch: "main", HeadBranch: "rascal/named"}
	if o := d.execute(ctx(t), rn); o.Status != "review" {
		t.Fatalf("run through the named gateway: %+v", o)
	}
	// The worker cloned work/repo during the run: all of it is created,
	// the agent's change included, .git left out by the filter.
	b, err := os.ReadFile(filepath.Join(d.runDir(rn.ID), treediff.DocumentFile))
	if err != nil {
		t.Fatal(err)
	}
	var doc treediff.Document
	must(t, json.Unmarshal(b, &doc))
	if len(doc.Dirs) != 1 || doc.Dirs[0].Error != "" || len(doc.Dirs[0].Modified)+len(doc.Dirs[0].Deleted) != 0 {
		t.Fatalf("workspace-diff.json: %s", b)
	}
	var created []string
	for _, c := range doc.Dirs[0].Created {
		created = append(created, c.Path)
	}
	if !slices.Contains(created, "README.md") || slices.ContainsFunc(created, func(p string) bool { return strings.HasPrefix(p, ".git") }) {
		t.Fatalf("created %q: want README.md and nothing of .git", created)
	}
}
