package ferry_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer"

	"google.golang.org/grpc"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/internal/waitfor"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
)

var _ ferry.Sandboxes = (*openshell.Client)(nil)

// The test binary doubles as an orchestrator process that a test kills:
// with launcherHelperEnv set, it starts a run and polls it until killed.
const launcherHelperEnv = "FERRY_TEST_LAUNCHER_HELPER"

func init() {
	if cfg := os.Getenv(launcherHelperEnv); cfg != "" {
		os.Exit(launcherHelper(cfg))
	}
}

// helperConfig is what the helper process gets from the test.
type helperConfig struct {
	Settings openshell.Settings
	RunsDir  string
	StoreDir string
	Spec     ferry.LaunchSpec
}

// launcherHelper starts the run, says "started" on stdout, then polls it
// as rascald does, until it is killed (or two minutes pass).
func launcherHelper(raw string) int {
	var cfg helperConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	c, err := openshell.Dial(openshell.Config{Settings: cfg.Settings})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer c.Close()
	b, err := local.NewDir(cfg.StoreDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	st, err := session.New(session.Config{Backend: b})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	bundle, err := agenttest.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	l, err := ferry.NewLauncher(ferry.LauncherConfig{Sandboxes: c, X: c, RunsDir: cfg.RunsDir, Store: st, Agents: bundle, Mode: transfer.ModeAgent})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := l.StartDetached(ctx, cfg.Spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: start:", err)
		return 1
	}
	fmt.Printf("started %s\n", h.Name)
	for ctx.Err() == nil {
		s, err := l.Inspect(ctx, h)
		fmt.Printf("inspect %+v %v\n", s, err)
		time.Sleep(time.Second)
	}
	return 1
}

// launchEnv is an embedded gateway, a runs directory and a session store.
type launchEnv struct {
	g        *gatewaytest.Gateway
	c        *openshell.Client
	runs     string
	st       *session.Store
	storeDir string
}

func newLaunchEnv(t *testing.T) *launchEnv {
	t.Helper()
	g := gatewaytest.Start(t, gatewaytest.Options{})
	st, dir := newStore(t, nil)
	return &launchEnv{g: g, c: g.Client(t, openshell.Config{}), runs: t.TempDir(), st: st, storeDir: dir}
}

func newLauncher(t *testing.T, c *openshell.Client, runs string, st *session.Store) *ferry.Launcher {
	t.Helper()
	l, err := ferry.NewLauncher(ferry.LauncherConfig{
		Sandboxes: c, X: c, RunsDir: runs, Store: st, Agents: agenttest.Bundle(t), Mode: transfer.ModeAgent,
		KillGrace: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

const (
	testRepo   = "rtzll/rascal"
	testTask   = "42"
	testSecret = "ghp_s3cr3t-token-never-in-a-log"
)

// workerScript stands for Rascal's worker: it reads the inputs, the secret
// and the session where the environment says, writes meta.json first with
// exit_code 1 (as the worker does) and again at the end, and appends to
// its session's transcript. EXIT, SLEEP, WAIT_FOR (a file in the
// workspace), NO_META and IGNORE_TERM shape it.
const workerScript = `[ -n "$IGNORE_TERM" ] && trap '' TERM
echo "worker: start $RASCAL_RUN_ID"
echo x >> "$RASCAL_META_DIR/../starts"
mkdir -p "$RASCAL_REPO_DIR"
seen=$(cat "$CODEX_HOME/t.jsonl" 2>/dev/null | wc -l | tr -d ' ')
echo "{\"run\":\"$RASCAL_RUN_ID\"}" >> "$CODEX_HOME/t.jsonl"
tok=$(wc -c < "$GH_TOKEN_FILE" | tr -d ' ')
modes="$(stat -c %a "$(dirname "$GH_TOKEN_FILE")") $(stat -c %a "$GH_TOKEN_FILE")"
meta() { printf '{"run_id":"%s","exit_code":%s,"seen":%s,"token_len":%s,"modes":"%s","instructions":"%s","meta_dir":"%s","codex_home":"%s","work_root":"%s","claude":"%s"}\n' \
  "$RASCAL_RUN_ID" "$1" "$seen" "$tok" "$modes" "$(cat "$RASCAL_META_DIR/instructions.md")" "$RASCAL_META_DIR" "$CODEX_HOME" "$RASCAL_WORK_ROOT" "${CLAUDE_CODE_OAUTH_TOKEN_FILE:-unset}" > "$RASCAL_META_DIR/meta.json"; }
[ -n "$NO_META" ] || meta 1
echo '{"type":"message"}' >> "$RASCAL_META_DIR/agent.ndjson"
if [ -n "$WAIT_FOR" ]; then while [ ! -e "$WAIT_FOR" ]; do sleep 0.05; done; fi
if [ -n "$SLEEP" ]; then sleep "$SLEEP"; fi
[ -n "$NO_META" ] || meta "${EXIT:-0}"
echo "worker: done"
exit "${EXIT:-0}"`

// newRun writes the run directory and secrets the orchestrator writes
// before a run, and returns the run's spec.
func newRun(t *testing.T, runs, id string, env map[string]string) ferry.LaunchSpec {
	t.Helper()
	dir := filepath.Join(runs, id)
	write(t, dir, map[string]string{
		"instructions.md":            "fix the bug " + id,
		"context.json":               `{"run_id":"` + id + `"}`,
		"persistent_instructions.md": "be careful",
		"runner.log":                 "queued\n",
		"codex/":                     "",
	})
	secrets := filepath.Join(runs, "."+id+"-secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secrets, "gh_token"), []byte(testSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	e := map[string]string{"RASCAL_RUN_ID": id}
	for k, v := range env {
		e[k] = v
	}
	return ferry.LaunchSpec{
		RunID:    id,
		Inputs:   []string{"instructions.md", "context.json", "persistent_instructions.md", "runner.log", "codex"},
		Secrets:  []string{"gh_token", "codex_auth.json", "claude_oauth_token"},
		Sessions: []ferry.SessionMapping{{Key: session.TaskKey(testRepo, testTask), Remote: "rascal-codex-session"}},
		Dirs:     []string{"work"},
		Argv:     []string{"sh", "-c", workerScript}, Env: e,
		PathEnv: map[string]string{
			"RASCAL_META_DIR": "${META}", "RASCAL_WORK_ROOT": "${WORK}", "RASCAL_REPO_DIR": "${WORK}/repo",
			"CODEX_HOME": "${WORKSPACE}/rascal-codex-session", "GH_TOKEN_FILE": "${SECRETS}/gh_token",
		},
	}
}

// inspectUntilDone polls Inspect every second, as rascald does, for at
// most 90 seconds.
func inspectUntilDone(t *testing.T, l *ferry.Launcher, h ferry.Handle) ferry.State {
	t.Helper()
	for i := 0; i < 90; i++ {
		s, err := l.Inspect(ctx(t), h)
		if err != nil {
			t.Fatalf("inspect %s: %v", h.Name, err)
		}
		if !s.Running {
			return s
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("run %s still running after 90 polls", h.Name)
	return ferry.State{}
}

// metaOf reads the run's meta.json from the run directory.
func metaOf(t *testing.T, runs, id string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runs, id, "meta.json"))
	if err != nil {
		t.Fatalf("meta.json of %s: %v", id, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("meta.json of %s: %v: %s", id, err, b)
	}
	return m
}

// snapshots is how many snapshots the task's session has.
func snapshots(t *testing.T, st *session.Store) int {
	t.Helper()
	list, err := st.List(ctx(t), session.TaskKey(testRepo, testTask))
	if err != nil && !errors.Is(err, session.ErrNoSnapshot) {
		t.Fatal(err)
	}
	return len(list)
}

// TestLauncherRascalContract drives the Launcher as rascald does: start,
// poll Inspect every second until not running, read meta.json from the
// run directory, remove. Four runs of one task, each in a fresh sandbox: a
// success, a failure (exit 3), a timeout, and a worker that writes no
// meta.json. Each leaves its artifacts and a new session snapshot that the
// next run resumes.
func TestLauncherRascalContract(t *testing.T) {
	e := newLaunchEnv(t)
	l := newLauncher(t, e.c, e.runs, e.st)
	cases := []struct {
		id       string
		env      map[string]string
		timeout  time.Duration
		wantCode int
		wantMeta float64 // meta.json's exit_code; -1: no meta.json
	}{
		{"ok", map[string]string{"EXIT": "0"}, 0, 0, 0},
		{"failed", map[string]string{"EXIT": "3"}, 0, 3, 3},
		{"slow", map[string]string{"SLEEP": "30"}, time.Second, 124, 1},
		// A Rascal-length run id: its sandbox name is fitted to 19.
		{"nometa-20261130-7f3a9c0b2d", map[string]string{"NO_META": "1"}, 0, 0, -1},
	}
	for i, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			spec := newRun(t, e.runs, tc.id, tc.env)
			spec.Timeout = tc.timeout
			h, err := l.StartDetached(ctx(t), spec)
			if err != nil {
				t.Fatal(err)
			}
			if h.Name != "rascal-"+tc.id || h.ID != h.Name || h.Backend != "ferry" {
				t.Fatalf("handle %+v", h)
			}
			s := inspectUntilDone(t, l, h)
			if s.ExitCode != tc.wantCode {
				t.Fatalf("exit code %d, want %d", s.ExitCode, tc.wantCode)
			}
			if n := snapshots(t, e.st); n != i+1 {
				t.Fatalf("%d session snapshots, want %d", n, i+1)
			}
			runDir := filepath.Join(e.runs, tc.id)
			log, _ := os.ReadFile(filepath.Join(runDir, "runner.log"))
			if !strings.HasPrefix(string(log), "queued\nworker: start "+tc.id+"\n") {
				t.Fatalf("runner.log %q", log)
			}
			if tc.wantMeta < 0 {
				if _, err := os.Stat(filepath.Join(runDir, "meta.json")); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("meta.json: %v, want none", err)
				}
			} else {
				m := metaOf(t, e.runs, tc.id)
				ws := filepath.Join(e.g.Root, ferry.SandboxName(h))
				if m["exit_code"] != tc.wantMeta || m["seen"] != float64(i) {
					t.Fatalf("meta.json %v: want exit_code %v, seen %d", m, tc.wantMeta, i)
				}
				want := map[string]any{
					"token_len": float64(len(testSecret)), "modes": "700 600", "instructions": "fix the bug " + tc.id,
					"meta_dir": filepath.Join(ws, "rascal-meta"), "codex_home": filepath.Join(ws, "rascal-codex-session"),
					"work_root": filepath.Join(ws, "work"), "claude": "unset",
				}
				for k, v := range want {
					if m[k] != v {
						t.Errorf("meta.json %s = %v, want %v", k, m[k], v)
					}
				}
				if _, err := os.Stat(filepath.Join(runDir, "agent.ndjson")); err != nil {
					t.Errorf("agent.ndjson: %v", err)
				}
			}
			if tc.timeout > 0 && !strings.Contains(string(log), "timed out") {
				t.Errorf("runner.log does not say the run timed out: %q", log)
			}
			// Finished is stable, and cheap: no sandbox needed.
			if err := l.Remove(ctx(t), h); err != nil {
				t.Fatal(err)
			}
			if err := l.Remove(ctx(t), h); err != nil {
				t.Fatalf("second remove: %v", err)
			}
			// Removed, the run is unknown, as a container is to Docker
			// after docker rm.
			if s2, err := l.Inspect(ctx(t), h); !errors.Is(err, ferry.ErrUnknownRun) {
				t.Fatalf("inspect after remove: %+v %v, want ErrUnknownRun", s2, err)
			}
			if err := l.Stop(ctx(t), h, time.Second); !errors.Is(err, ferry.ErrUnknownRun) {
				t.Fatalf("stop after remove: %v, want ErrUnknownRun", err)
			}
		})
	}
	if seen := e.g.Seen.String(); strings.Contains(seen, testSecret) || !strings.Contains(seen, "argv:") {
		t.Fatalf("the gateway saw the secret (or nothing at all)")
	}
	filepath.WalkDir(e.runs, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(p, "-secrets") {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), testSecret) {
				t.Errorf("%s holds the secret", p)
			}
		}
		return nil
	})
}

// TestLauncherIdempotentStart: a second StartDetached, from the same
// Launcher or another, finds the run already started and starts nothing.
func TestLauncherIdempotentStart(t *testing.T) {
	e := newLaunchEnv(t)
	l := newLauncher(t, e.c, e.runs, e.st)
	spec := newRun(t, e.runs, "idem", map[string]string{"WAIT_FOR": "go"})
	h, err := l.StartDetached(ctx(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*ferry.Launcher{l, newLauncher(t, e.c, e.runs, e.st)} {
		h2, err := l.StartDetached(ctx(t), spec)
		if err != nil || h2 != h {
			t.Fatalf("second start: %+v %v, want %+v", h2, err, h)
		}
	}
	// Without its record (a start that died before writing it), the
	// sandbox's own state still says the run is there.
	if err := os.Remove(filepath.Join(e.runs, "idem", ".ferry-launch.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.StartDetached(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	if s, err := l.Inspect(ctx(t), h); err != nil || !s.Running {
		t.Fatalf("inspect: %+v %v, want running", s, err)
	}
	ws := filepath.Join(e.g.Root, ferry.SandboxName(h))
	write(t, ws, map[string]string{"go": ""})
	if s := inspectUntilDone(t, l, h); s.ExitCode != 0 {
		t.Fatalf("exit code %d", s.ExitCode)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "starts")); string(b) != "x\n" {
		t.Fatalf("the command started %d times", strings.Count(string(b), "x"))
	}
	if err := l.Remove(ctx(t), h); err != nil {
		t.Fatal(err)
	}
	if err := l.Remove(ctx(t), h); err != nil {
		t.Fatal(err)
	}
	if _, err := l.StartDetached(ctx(t), ferry.LaunchSpec{RunID: " ", Argv: []string{"true"}}); !errors.Is(err, ferry.ErrInvalidRunID) {
		t.Fatalf("bad run id: %v", err)
	}
	if _, err := l.Inspect(ctx(t), ferry.Handle{Name: "rascal-never"}); !errors.Is(err, ferry.ErrUnknownRun) {
		t.Fatalf("inspect of an unknown run: %v", err)
	}
	if _, err := ferry.NewLauncher(ferry.LauncherConfig{Sandboxes: e.c, X: e.c, RunsDir: e.runs, Mode: transfer.ModePOSIX, Agents: agenttest.Bundle(t)}); !errors.Is(err, transfer.ErrAgentRequired) {
		t.Fatalf("POSIX mode: %v", err)
	}
}

// TestLauncherStop: Stop ends the command with SIGTERM, or SIGKILL when it
// ignores SIGTERM past the timeout; Inspect then reports it ended, with
// its artifacts and its session saved.
func TestLauncherStop(t *testing.T) {
	e := newLaunchEnv(t)
	l := newLauncher(t, e.c, e.runs, e.st)
	for i, tc := range []struct {
		id       string
		env      map[string]string
		wantCode int
	}{
		{"term", map[string]string{"SLEEP": "600"}, 128 + 15},
		{"kill", map[string]string{"SLEEP": "600", "IGNORE_TERM": "1"}, 128 + 9},
	} {
		t.Run(tc.id, func(t *testing.T) {
			h, err := l.StartDetached(ctx(t), newRun(t, e.runs, tc.id, tc.env))
			if err != nil {
				t.Fatal(err)
			}
			// The command has written its first meta.json when its
			// agent.ndjson exists.
			waitFile(t, filepath.Join(e.g.Root, ferry.SandboxName(h), "rascal-meta", "agent.ndjson"))
			start := time.Now()
			if err := l.Stop(ctx(t), h, time.Second); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Fatalf("stop took %s", d)
			}
			s, err := l.Inspect(ctx(t), h)
			if err != nil || s.Running || s.ExitCode != tc.wantCode {
				t.Fatalf("inspect after stop: %+v %v, want exit %d", s, err, tc.wantCode)
			}
			if m := metaOf(t, e.runs, tc.id); m["exit_code"] != float64(1) {
				t.Fatalf("meta.json %v", m)
			}
			if n := snapshots(t, e.st); n != i+1 {
				t.Fatalf("%d snapshots, want %d", n, i+1)
			}
			if err := l.Remove(ctx(t), h); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLauncherOrchestratorKilled: the process that started a run is
// killed with SIGKILL while it polls; the run goes on, and a new Launcher
// in another process (this one) takes it over and finishes it.
func TestLauncherOrchestratorKilled(t *testing.T) {
	e := newLaunchEnv(t)
	spec := newRun(t, e.runs, "orphan", map[string]string{"WAIT_FOR": "go", "EXIT": "5"})
	cfg, err := json.Marshal(helperConfig{Settings: e.g.Settings, RunsDir: e.runs, StoreDir: e.storeDir, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), launcherHelperEnv+"="+string(cfg))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	deadline := time.After(2 * time.Minute)
	polled := 0
	for polled < 2 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("the orchestrator process ended before it was killed")
			}
			switch {
			case line == "started rascal-orphan":
			case strings.HasPrefix(line, "inspect {Running:true"):
				polled++
			default:
				t.Fatalf("orchestrator said %q", line)
			}
		case <-deadline:
			t.Fatal("the orchestrator process did not start the run")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = true
	// The pipe ends with the process: drain it, then reap it.
	for range lines {
	}
	cmd.Wait()

	// The command finishes with nobody watching.
	ws := filepath.Join(e.g.Root, "rascal-orphan")
	write(t, ws, map[string]string{"go": ""})
	waitFile(t, filepath.Join(ws, ".ferry-runs", "orphan", "exit.json"))

	l := newLauncher(t, e.c, e.runs, e.st)
	h, err := l.HandleFor("orphan")
	if err != nil {
		t.Fatal(err)
	}
	if s := inspectUntilDone(t, l, h); s.ExitCode != 5 {
		t.Fatalf("exit code %d, want 5", s.ExitCode)
	}
	if m := metaOf(t, e.runs, "orphan"); m["exit_code"] != float64(5) {
		t.Fatalf("meta.json %v", m)
	}
	if n := snapshots(t, e.st); n != 1 {
		t.Fatalf("%d snapshots, want 1", n)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "starts")); string(b) != "x\n" {
		t.Fatalf("the command started %d times", strings.Count(string(b), "x"))
	}
	if err := l.Remove(ctx(t), h); err != nil {
		t.Fatal(err)
	}
}

// TestLauncherRelayDrop: the gateway goes away mid-run, with an agent
// connection to the sandbox open; every exec it carried is killed. The
// command does not notice: it completes with no gateway at all, and a new
// Launcher through a restarted gateway finishes the run.
func TestLauncherRelayDrop(t *testing.T) {
	root := t.TempDir()
	st, _ := newStore(t, nil)
	runs := t.TempDir()

	addr, stop := serveGateway(t, root)
	c1 := dialGateway(t, addr)
	l1 := newLauncher(t, c1, runs, st)
	h, err := l1.StartDetached(ctx(t), newRun(t, runs, "drop", map[string]string{"WAIT_FOR": "go"}))
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := agent.Dial(ctx(t), agent.DialConfig{X: c1, Sandbox: ferry.SandboxName(h), Bundle: agenttest.Bundle(t)})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := a.RunStatus(ctx(t), ".ferry-runs/drop"); err != nil || st.State != agent.RunRunning {
		t.Fatalf("status: %+v %v", st, err)
	}
	stop()
	a.Close()
	c1.Close()

	ws := filepath.Join(root, ferry.SandboxName(h))
	write(t, ws, map[string]string{"go": ""})
	waitFile(t, filepath.Join(ws, ".ferry-runs", "drop", "exit.json"))

	addr, stop = serveGateway(t, root)
	defer stop()
	c2 := dialGateway(t, addr)
	defer c2.Close()
	l2 := newLauncher(t, c2, runs, st)
	if s := inspectUntilDone(t, l2, h); s.ExitCode != 0 {
		t.Fatalf("exit code %d", s.ExitCode)
	}
	if m := metaOf(t, runs, "drop"); m["exit_code"] != float64(0) {
		t.Fatalf("meta.json %v", m)
	}
	if err := l2.Remove(ctx(t), h); err != nil {
		t.Fatal(err)
	}
}

// serveGateway serves a plaintext embedded gateway on root until stop.
func serveGateway(t *testing.T, root string) (addr string, stop func()) {
	t.Helper()
	srv, err := gateway.New(gateway.Config{Root: root, ReadyDelay: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(gateway.ServerOptions()...)
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		gs.Serve(lis)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		gs.Stop()
		<-done
		srv.Close()
	}
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

func dialGateway(t *testing.T, addr string) *openshell.Client {
	t.Helper()
	c, err := openshell.Dial(openshell.Config{Settings: openshell.Settings{Endpoint: "http://" + addr, Workspace: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFile waits up to a minute for p.
func waitFile(t *testing.T, p string) { waitfor.File(t, p, time.Minute) }

// TestSpawnSurvivesItsExec: the exec that carried the Spawn is killed
// (the gateway stops with the connection still open, and kills the
// agent's process group); the supervised command runs on and records its
// exit status.
func TestSpawnSurvivesItsExec(t *testing.T) {
	root := t.TempDir()
	addr, stop := serveGateway(t, root)
	c := dialGateway(t, addr)
	if _, err := c.Ensure(ctx(t), openshell.Spec{Name: "spawn"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ensure(ctx(t), openshell.Spec{Name: "spawn"}); err != nil {
		t.Fatalf("second ensure: %v", err)
	}
	a, _, err := agent.Dial(ctx(t), agent.DialConfig{X: c, Sandbox: "spawn", Bundle: agenttest.Bundle(t)})
	if err != nil {
		t.Fatal(err)
	}
	st, spawned, err := a.Spawn(ctx(t), agent.SpawnSpec{
		StateDir: "state", RunID: "s", Log: "out.log",
		Argv: []string{"sh", "-c", `echo $$ > pid; while [ ! -e go ]; do sleep 0.05; done; echo survived`},
	})
	if err != nil || !spawned || st.State != agent.RunRunning {
		t.Fatalf("spawn: %+v %v %v", st, spawned, err)
	}
	stop()
	a.Close()
	ws := filepath.Join(root, "spawn")
	write(t, ws, map[string]string{"go": ""})
	waitFile(t, filepath.Join(ws, "state", "exit.json"))
	if b, _ := os.ReadFile(filepath.Join(ws, "out.log")); string(b) != "survived\n" {
		t.Fatalf("out.log %q", b)
	}
	var rec struct {
		ExitCode int `json:"exit_code"`
	}
	if b, err := os.ReadFile(filepath.Join(ws, "state", "exit.json")); err != nil || json.Unmarshal(b, &rec) != nil || rec.ExitCode != 0 {
		t.Fatalf("exit.json %s %v", b, err)
	}
}

func TestSandboxName(t *testing.T) {
	long := ferry.Handle{Name: "rascal-run-20261130-0123456789abcdef"}
	for _, tc := range []struct {
		h    ferry.Handle
		want string
	}{
		{ferry.Handle{Name: "rascal-42"}, "rascal-42"},
		{ferry.Handle{Name: "rascal-123456789012"}, "rascal-123456789012"},
		// Rascal's run ids: an "_" is no DNS label, and they are long.
		{ferry.Handle{Name: "rascal-a_b"}, ferry.SandboxName(ferry.Handle{Name: "rascal-a_b"})},
		{ferry.Handle{ID: "rascal-run_0123456789abcdef", Name: "rascal-run_0123456789abcdef"}, ferry.SandboxName(ferry.Handle{Name: "rascal-run_0123456789abcdef"})},
		{long, ferry.SandboxName(long)},
	} {
		got := ferry.SandboxName(tc.h)
		if got != tc.want || len(got) > 19 || !regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`).MatchString(got) || strings.Contains(got, "--") {
			t.Errorf("SandboxName(%q) = %q", tc.h.Name, got)
		}
	}
	if a, b := ferry.SandboxName(long), ferry.SandboxName(ferry.Handle{Name: long.Name + "x"}); a == b || !strings.HasPrefix(a, "rascal-run-") {
		t.Errorf("fitted names %q and %q: want distinct, with the name's start", a, b)
	}
	if got := ferry.SandboxName(ferry.Handle{Name: "rascal-ab-0123456789abcdef"}); strings.Contains(got, "--") {
		t.Errorf("fitted name %q has a double dash", got)
	}
}

// TestLauncherWorkdirAndDeadStart: a working directory that is not there
// fails the start with a *WorkdirError naming it, before anything is
// spawned; the start's intent is then all there is, so Inspect says
// ErrUnknownRun (and deletes the sandbox the start made), and a new start
// with the directory in Dirs starts the run. The run directory is the
// spec's, outside RunsDir, and its id is Rascal's, which no sandbox name
// allows as it is.
func TestLauncherWorkdirAndDeadStart(t *testing.T) {
	e := newLaunchEnv(t)
	l := newLauncher(t, e.c, e.runs, e.st)
	elsewhere := t.TempDir()
	const id = "run_0123456789ABCDEF"
	spec := newRun(t, elsewhere, id, nil)
	spec.RunDir = filepath.Join(elsewhere, id)
	spec.Workdir = "work/repo"
	_, err := l.StartDetached(ctx(t), spec)
	var we *ferry.WorkdirError
	if !errors.As(err, &we) || we.Dir != "work/repo" {
		t.Fatalf("start without its workdir: %v, want a *WorkdirError for work/repo", err)
	}
	h, err := l.HandleFor(id)
	if err != nil || h.Name != "rascal-run_0123456789abcdef" || h.ID != h.Name {
		t.Fatalf("handle %+v %v", h, err)
	}
	ws := filepath.Join(e.g.Root, ferry.SandboxName(h))
	if _, err := os.Stat(ws); err != nil {
		t.Fatalf("the failed start made no sandbox: %v", err)
	}
	if _, err := l.Inspect(ctx(t), h); !errors.Is(err, ferry.ErrUnknownRun) {
		t.Fatalf("inspect of a start that spawned nothing: %v, want ErrUnknownRun", err)
	}
	if err := l.Stop(ctx(t), h, time.Second); !errors.Is(err, ferry.ErrUnknownRun) {
		t.Fatalf("stop of a start that spawned nothing: %v, want ErrUnknownRun", err)
	}
	if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the sandbox of a dead start is still there: %v", err)
	}
	spec.Dirs = append(spec.Dirs, "work/repo")
	if _, err := l.StartDetached(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	if s := inspectUntilDone(t, l, h); s.ExitCode != 0 {
		t.Fatalf("exit code %d", s.ExitCode)
	}
	if m := metaOf(t, elsewhere, id); m["work_root"] != filepath.Join(ws, "work") || m["token_len"] != float64(len(testSecret)) {
		t.Fatalf("meta.json in the spec's run directory: %v", m)
	}
	if _, err := os.Stat(filepath.Join(e.runs, id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a run directory under RunsDir: %v", err)
	}
	if err := l.Remove(ctx(t), h); err != nil {
		t.Fatal(err)
	}
}

// TestLauncherCrashAfterSpawn: the start dies after the spawn and before
// its record says so (the crash point ends its goroutine, as a killed
// process ends); another Launcher adopts the command from what the
// sandbox's supervisor reports, and it ran once.
func TestLauncherCrashAfterSpawn(t *testing.T) {
	e := newLaunchEnv(t)
	spawned := false
	crashing, err := ferry.NewLauncher(ferry.LauncherConfig{
		Sandboxes: e.c, X: e.c, RunsDir: e.runs, Store: e.st, Agents: agenttest.Bundle(t), Mode: transfer.ModeAgent,
		AfterSpawn: func(string) { spawned = true; runtime.Goexit() },
	})
	if err != nil {
		t.Fatal(err)
	}
	spec := newRun(t, e.runs, "crash", map[string]string{"EXIT": "4"})
	done := make(chan struct{})
	go func() {
		defer close(done)
		crashing.StartDetached(ctx(t), spec)
		t.Error("StartDetached went past its crash point")
	}()
	<-done
	if !spawned {
		t.Fatal("the crash point was not reached")
	}
	l := newLauncher(t, e.c, e.runs, e.st)
	h, _ := l.HandleFor("crash")
	if s := inspectUntilDone(t, l, h); s.ExitCode != 4 {
		t.Fatalf("exit code %d, want 4", s.ExitCode)
	}
	if b, _ := os.ReadFile(filepath.Join(e.g.Root, ferry.SandboxName(h), "starts")); string(b) != "x\n" {
		t.Fatalf("the command started %d times", strings.Count(string(b), "x"))
	}
	if err := l.Remove(ctx(t), h); err != nil {
		t.Fatal(err)
	}
}
