package ferry_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/relaytest"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// afterCommit is a Backend that calls fn right after each commit (an
// exclusive Put of a manifest) has succeeded, before the Store hears of
// it.
type afterCommit struct {
	session.Backend
	fn func(name string)
}

func (b afterCommit) Put(ctx context.Context, name string, r io.Reader, exclusive bool) error {
	err := b.Backend.Put(ctx, name, r, exclusive)
	if err == nil && exclusive && strings.HasPrefix(name, "snapshots/") {
		b.fn(name)
	}
	return err
}

// cutAfterCommit is a gateway with the sandbox "box", a client of it
// whose connections are cut right after every commit to the store it
// returns, and the number of cuts so far. A cut returns once a command
// running through the lostExecs returned has failed for it: a save
// closes its agent without waiting once every call is answered, and sees
// a loss only if its exec has seen it.
func cutAfterCommit(t *testing.T) (*gatewaytest.Gateway, *openshell.Client, *lostExecs, *session.Store, *atomic.Int32) {
	t.Helper()
	g := gatewaytest.Start(t, gatewaytest.Options{})
	var cc relaytest.Cutter
	c := g.Client(t, openshell.Config{Dialer: cc.Dial})
	g.Sandbox(t, c, "box")
	lost := &lostExecs{Execer: c, seen: make(chan struct{})}
	var cuts atomic.Int32
	st, _ := newStore(t, func(b session.Backend) session.Backend {
		return afterCommit{b, func(string) {
			cuts.Add(1)
			cc.Cut()
			select {
			case <-lost.seen:
			case <-time.After(30 * time.Second):
				t.Error("no command failed for the cut")
			}
		}}
	})
	return g, c, lost, st, &cuts
}

// lostExecs is an Execer that closes seen when one of its commands
// first fails as a lost relay.
type lostExecs struct {
	relay.Execer
	once sync.Once
	seen chan struct{}
}

func (l *lostExecs) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	code, err := l.Execer.Exec(ctx, cmd)
	if errors.Is(err, relay.ErrRelayLost) {
		l.once.Do(func() { close(l.seen) })
	}
	return code, err
}

// cutEnv is cutAfterCommit's sandbox in agent mode over v's transport.
func cutEnv(t *testing.T, v variant) (env, *session.Store, *atomic.Int32) {
	t.Helper()
	g, c, lost, st, cuts := cutAfterCommit(t)
	sb := sandboxVia(t, c, v)
	lost.Execer = sb.X
	sb.X = lost
	return env{sb: sb, root: filepath.Join(g.Root, "box")}, st, cuts
}

// relayLostVariants are the ways through the gateway where a save talks
// to the sandbox after its commit: the agent's exec, whose end (its exit
// status) is read after the commit. POSIX mode's save has no channel open
// by then.
var relayLostVariants = map[string]variant{"agent": {Mode: transfer.ModeAgent}, "agent-ssh": {Mode: transfer.ModeAgent, ssh: true}}

// TestSessionSaveRelayLostAfterCommit is issue 20's gateway lost just
// after a commit: the gateway connections are cut as soon as the manifest
// is in the store, before the save has closed the agent's exec. The save
// reports the committed snapshot with the channel's failure in RelayLost,
// not an error; that snapshot restores byte-identical through the same
// gateway afterwards, and the key has that one snapshot.
func TestSessionSaveRelayLostAfterCommit(t *testing.T) {
	for name, v := range relayLostVariants {
		t.Run(name, func(t *testing.T) {
			e, st, cuts := cutEnv(t, v)
			src := filepath.Join(e.root, "sess")
			if err := os.MkdirAll(src, 0o755); err != nil {
				t.Fatal(err)
			}
			transfertest.RandomTree(t, src, 20, transfertest.TreeOptions{Entries: 30})
			res, err := ferry.SaveSession(ctx(t), e.sb, st, session.SaveSpec{Dir: "sess", Key: "lost-key"})
			if err != nil {
				t.Fatalf("save with the relay cut after the commit: %v, want the committed snapshot", err)
			}
			if cuts.Load() != 1 {
				t.Fatalf("%d cuts, want 1 right after the commit", cuts.Load())
			}
			if res.Snapshot != 1 || !strings.Contains(res.RelayLost, "relay lost") || res.Mode != "agent" {
				t.Fatalf("save: %+v; want snapshot 1 in agent mode, and relay_lost set", res)
			}
			t.Logf("relay_lost: %s", res.RelayLost)
			list, err := st.List(ctx(t), "lost-key")
			if err != nil || len(list) != 1 || list[0].Seq != 1 {
				t.Fatalf("snapshots %+v, %v; want exactly 1", list, err)
			}
			verifyOK(t, st, "after the relay was lost")
			if _, err := ferry.RestoreSession(ctx(t), e.sb, st, session.RestoreSpec{Key: "lost-key", Dir: "back", Seq: 1}); err != nil {
				t.Fatalf("restore of the snapshot committed before the relay was lost: %v", err)
			}
			transfertest.EqualTrees(t, src, filepath.Join(e.root, "back"))
		})
	}
}

// TestRunRelayLostAfterSessionCommit: the same cut in `ferry run`'s
// post-exec phase, after the session's commit. The run keeps its
// command's exit code and its artifacts; the session reports the
// committed snapshot, and neither the pull nor the session failed. The
// next run resumes from that snapshot.
func TestRunRelayLostAfterSessionCommit(t *testing.T) {
	for name, v := range relayLostVariants {
		t.Run(name, func(t *testing.T) {
			e, st, cuts := cutEnv(t, v)
			script := `mkdir -p rascal-meta sess; echo "run 1" >> sess/t.jsonl; echo '{"exit_code":3}' > rascal-meta/meta.json; exit 3`
			out := filepath.Join(t.TempDir(), "run")
			res, err := ferry.Run(ctx(t), e.sb, ferry.RunSpec{
				Argv: []string{"sh", "-c", script}, Out: out,
				Sessions: []ferry.SessionMapping{{Key: "run-key", Remote: "sess"}}, Store: st,
			})
			if err != nil || res.PullErr != nil || res.SessionErr != nil {
				t.Fatalf("run: %v / pull %v / session %v; want none", err, res.PullErr, res.SessionErr)
			}
			if cuts.Load() != 1 {
				t.Fatalf("%d cuts, want 1 right after the commit", cuts.Load())
			}
			if res.ExitCode != 3 {
				t.Errorf("exit code %d, want the command's 3", res.ExitCode)
			}
			if s := res.Sessions[0]; s.Error != "" || s.Saved == nil || s.Saved.Snapshot != 1 || !strings.Contains(s.Saved.RelayLost, "relay lost") {
				t.Fatalf("session %+v (saved %+v); want snapshot 1 committed with relay_lost", s, s.Saved)
			}
			if res.Pull.RelayLost == "" || len(res.Pull.Saved) == 0 {
				t.Errorf("pull %+v; want the artifacts saved and relay_lost", res.Pull)
			}
			if meta, err := os.ReadFile(filepath.Join(out, "meta.json")); err != nil || !strings.Contains(string(meta), `"exit_code":3`) {
				t.Errorf("meta.json: %q, %v", meta, err)
			}

			// The next run resumes the committed snapshot, through the
			// same gateway (a new connection).
			os.RemoveAll(filepath.Join(e.root, "sess"))
			res, err = ferry.Run(ctx(t), e.sb, ferry.RunSpec{
				Argv: []string{"sh", "-c", `mkdir -p rascal-meta; cat sess/t.jsonl > rascal-meta/meta.json`}, Out: out,
				Sessions: []ferry.SessionMapping{{Key: "run-key", Remote: "sess"}}, Store: st,
			})
			if err != nil || res.ExitCode != 0 || res.Sessions[0].Restored == nil || res.Sessions[0].Restored.Snapshot != 1 {
				t.Fatalf("second run: %v, %+v", err, res)
			}
			if meta, _ := os.ReadFile(filepath.Join(out, "meta.json")); string(meta) != "run 1\n" {
				t.Errorf("second run saw %q, want the first run's transcript", meta)
			}
		})
	}
}

// TestSessionSaveRelayLostBeforeCommit is the other side of the line: a
// relay lost before the commit (the connections cut when the first chunk
// is stored, while the agent still streams the rest) is a failed save
// wrapping relay.ErrRelayLost that committed nothing.
func TestSessionSaveRelayLostBeforeCommit(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	var cc relaytest.Cutter
	c := g.Client(t, openshell.Config{Dialer: cc.Dial})
	g.Sandbox(t, c, "box")
	var once sync.Once
	st, _ := newStore(t, func(b session.Backend) session.Backend { return cutOnChunk{b, func() { once.Do(cc.Cut) }} })
	e := env{sb: sandboxVia(t, c, variant{Mode: transfer.ModeAgent}), root: filepath.Join(g.Root, "box")}
	crashTree(t, filepath.Join(e.root, "sess"), 1, 0, 8<<20)
	_, err := ferry.SaveSession(ctx(t), e.sb, st, session.SaveSpec{Dir: "sess", Key: "early-key"})
	if !errors.Is(err, relay.ErrRelayLost) {
		t.Fatalf("save cut at its first chunk: %v, want an error wrapping relay.ErrRelayLost", err)
	}
	if _, err := st.Load(ctx(t), "early-key", 0); !errors.Is(err, session.ErrNoSnapshot) {
		t.Fatalf("after the cut: load: %v, want ErrNoSnapshot", err)
	}
}

// cutOnChunk is a Backend that calls fn before it stores a chunk.
type cutOnChunk struct {
	session.Backend
	fn func()
}

func (b cutOnChunk) Put(ctx context.Context, name string, r io.Reader, exclusive bool) error {
	if strings.HasPrefix(name, "chunks/") {
		b.fn()
	}
	return b.Backend.Put(ctx, name, r, exclusive)
}

// TestLauncherRelayLostAfterSessionCommit: the cut after the session's
// commit in the Launcher's finish (the first Inspect after the command
// ended). The finish is done, not retried: the first Inspect that reports
// the run ended does so without an error, the task has one snapshot (a
// retried finish would have saved a second), and the run's record says
// the snapshot was committed and the relay lost after.
func TestLauncherRelayLostAfterSessionCommit(t *testing.T) {
	_, c, lost, st, cuts := cutAfterCommit(t)
	runs := t.TempDir()
	l, err := ferry.NewLauncher(ferry.LauncherConfig{
		Sandboxes: c, X: lost, RunsDir: runs, Store: st, Agents: agenttest.Bundle(t), Mode: transfer.ModeAgent,
		KillGrace: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.StartDetached(ctx(t), newRun(t, runs, "lost", nil))
	if err != nil {
		t.Fatal(err)
	}
	if s := inspectUntilDone(t, l, h); s.ExitCode != 0 {
		t.Fatalf("exit code %d, want 0", s.ExitCode)
	}
	if cuts.Load() != 1 {
		t.Fatalf("%d cuts, want 1 right after the commit", cuts.Load())
	}
	if n := snapshots(t, st); n != 1 {
		t.Fatalf("%d snapshots of the task, want 1", n)
	}
	b, err := os.ReadFile(filepath.Join(runs, "lost", ".ferry-launch.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		FinishAttempts int                `json:"finish_attempts"`
		FinishError    string             `json:"finish_error"`
		Sessions       []ferry.RunSession `json:"session_results"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.FinishAttempts != 1 || rec.FinishError != "" || len(rec.Sessions) != 1 || rec.Sessions[0].Saved == nil ||
		rec.Sessions[0].Saved.Snapshot != 1 || !strings.Contains(rec.Sessions[0].Saved.RelayLost, "relay lost") {
		t.Fatalf("run record %s; want one finish, snapshot 1 saved with relay_lost", b)
	}
	if err := l.Remove(ctx(t), h); err != nil {
		t.Fatal(err)
	}
}
