package agent_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/agent/server"
	"github.com/ferry-dev/ferry/transfer/agent/supervisor"
)

// The agent re-executes its own binary to supervise a command; in these
// tests that binary is the test binary, which becomes the supervisor here
// before any test runs.
func init() {
	if len(os.Args) >= 2 && os.Args[1] == "supervise" {
		os.Exit(supervisor.Main(os.Args[2:]))
	}
}

// waitExited polls the command of dir until it has exited, for at most
// 30 seconds.
func waitExited(t *testing.T, c *agent.Client, dir string) agent.RunStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.RunStatus(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == agent.RunExited || st.State == agent.RunLost {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %s after 30s", st.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSpawnOutlivesConnection: the command keeps running after the
// connection that spawned it is gone, a new connection reads its status,
// its output is appended to the log, and a second Spawn of the same run
// starts nothing.
func TestSpawnOutlivesConnection(t *testing.T) {
	ws := t.TempDir()
	first, cut := agenttestCuttable(t, ws)
	mustFile(t, filepath.Join(ws, "meta", "runner.log"), "queued\n")
	spec := agent.SpawnSpec{
		StateDir: ".ferry-runs/r1", RunID: "r1",
		Argv: []string{"sh", "-c", `echo start >> count; while [ ! -e go ]; do sleep 0.05; done; echo "out $FOO"; echo err >&2; exit 3`},
		Env:  map[string]string{"FOO": "bar"}, Log: "meta/runner.log",
	}
	st, spawned, err := first.Spawn(context.Background(), spec)
	if err != nil || !spawned || st.State != agent.RunRunning || st.Pid == 0 {
		t.Fatalf("spawn: %+v spawned=%v err=%v", st, spawned, err)
	}
	cut() // the relay drops: the command must not notice

	c, _ := inProcessAt(t, ws)
	st, spawned, err = c.Spawn(context.Background(), spec)
	if err != nil || spawned || st.State != agent.RunRunning {
		t.Fatalf("second spawn: %+v spawned=%v err=%v", st, spawned, err)
	}
	other := spec
	other.RunID = "r2"
	if _, _, err := c.Spawn(context.Background(), other); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("spawn of another run into the same state dir: %v, want fs.ErrExist", err)
	}
	mustFile(t, filepath.Join(ws, "go"), "")
	st = waitExited(t, c, spec.StateDir)
	if st.State != agent.RunExited || st.ExitCode != 3 || st.RunID != "r1" || st.Ended.IsZero() {
		t.Fatalf("status %+v, want exited 3", st)
	}
	log, _ := os.ReadFile(filepath.Join(ws, "meta", "runner.log"))
	if string(log) != "queued\nout bar\nerr\n" {
		t.Errorf("runner.log %q", log)
	}
	if n, _ := os.ReadFile(filepath.Join(ws, "count")); string(n) != "start\n" {
		t.Errorf("the command ran %d times", strings.Count(string(n), "start"))
	}
	// Exited is final: a signal is a no-op.
	if st, err := c.Signal(context.Background(), spec.StateDir, true); err != nil || st.ExitCode != 3 {
		t.Fatalf("signal after exit: %+v %v", st, err)
	}
}

// TestSpawnTimeout: past its timeout the command gets SIGTERM, then, as it
// ignores it, SIGKILL after the grace; the exit code is 124.
func TestSpawnTimeout(t *testing.T) {
	c, _ := inProcess(t)
	start := time.Now()
	_, _, err := c.Spawn(context.Background(), agent.SpawnSpec{
		StateDir: "st", RunID: "t", Argv: []string{"sh", "-c", `trap '' TERM; sleep 30 & wait; sleep 30`},
		Timeout: 300 * time.Millisecond, KillGrace: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	st := waitExited(t, c, "st")
	if st.ExitCode != agent.ExitTimeout || !st.TimedOut {
		t.Fatalf("status %+v, want 124 timed out", st)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %s: the grace did not end it", d)
	}
}

// TestSpawnSignal: TERM ends the command (128+15); a command that cannot
// be found is recorded as exit 127 with the reason.
func TestSpawnSignal(t *testing.T) {
	c, _ := inProcess(t)
	if _, _, err := c.Spawn(context.Background(), agent.SpawnSpec{StateDir: "st", RunID: "s", Argv: []string{"sleep", "30"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Signal(context.Background(), "st", false); err != nil {
		t.Fatal(err)
	}
	if st := waitExited(t, c, "st"); st.ExitCode != 143 {
		t.Fatalf("status %+v, want 143", st)
	}
	st, _, err := c.Spawn(context.Background(), agent.SpawnSpec{StateDir: "nf", RunID: "n", Argv: []string{"no-such-program-here"}})
	if err != nil || st.State != agent.RunExited || st.ExitCode != agent.ExitCannotRun || st.Error == "" {
		t.Fatalf("missing program: %+v %v", st, err)
	}
	if st, err := c.RunStatus(context.Background(), "never"); err != nil || st.State != agent.RunMissing {
		t.Fatalf("status of nothing: %+v %v", st, err)
	}
}

// agenttestCuttable is an in-process agent on workspace ws whose
// connection cut breaks, as a dropped relay does.
func agenttestCuttable(t *testing.T, ws string) (*agent.Client, func()) {
	t.Helper()
	c, cut := agenttest.Cuttable(t, server.Config{Workspace: ws})
	if _, err := c.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, cut
}

// inProcessAt is inProcess on an existing workspace.
func inProcessAt(t *testing.T, ws string) (*agent.Client, string) {
	t.Helper()
	c := agenttest.InProcess(t, server.Config{Workspace: ws})
	if _, err := c.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, ws
}
