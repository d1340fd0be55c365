package ferry_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer"
)

// keptX breaks the first agent exec of a run, the one kept from before
// the command to after it, in one of the ways a kept connection meets:
// dropped while the command runs ("drop"), dropped by the first call
// after the command, before the host has seen it go ("drop-at-call"), or
// silent after the command, the exec still up ("stall").
type keptX struct {
	x      relay.Execer
	marker string // an argument of the run's command
	how    string

	serves  atomic.Int32
	ran     atomic.Bool // the command has ended
	mu      sync.Mutex
	cancel  context.CancelFunc
	stopped chan struct{} // the kept exec has returned
}

func (k *keptX) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	a := cmd.Argv
	switch {
	case a[len(a)-1] == "serve" && k.serves.Add(1) == 1:
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stopped := make(chan struct{})
		defer close(stopped)
		k.mu.Lock()
		k.cancel, k.stopped = cancel, stopped
		k.mu.Unlock()
		c := *cmd
		c.Stdin = &keptStdin{r: cmd.Stdin, k: k, ctx: ctx, cancel: cancel}
		if k.how == "stall" {
			c.Stdout = &keptStdout{w: cmd.Stdout, k: k, ctx: ctx}
		}
		return k.x.Exec(ctx, &c)
	case slices.Contains(a, k.marker):
		if k.how == "drop" {
			k.mu.Lock()
			cancel, stopped := k.cancel, k.stopped
			k.mu.Unlock()
			cancel()
			<-stopped
		}
		defer k.ran.Store(true)
	}
	return k.x.Exec(ctx, cmd)
}

// keptStdin is the kept exec's stdin: "drop-at-call" ends the exec at
// the first bytes after the command, which never reach the agent; the
// end of stdin (the host closing) ends a stalled exec at once.
type keptStdin struct {
	r      io.Reader
	k      *keptX
	ctx    context.Context
	cancel context.CancelFunc
}

func (s *keptStdin) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 && s.k.how == "drop-at-call" && s.k.ran.Load() {
		s.cancel()
		<-s.ctx.Done()
		return 0, s.ctx.Err()
	}
	if err != nil && s.k.how == "stall" {
		s.cancel()
	}
	return n, err
}

// keptStdout is a stalled kept exec's stdout: nothing more reaches the
// host after the command.
type keptStdout struct {
	w   io.Writer
	k   *keptX
	ctx context.Context
}

func (s *keptStdout) Write(p []byte) (int, error) {
	if s.k.ran.Load() {
		<-s.ctx.Done()
		return 0, s.ctx.Err()
	}
	return s.w.Write(p)
}

// TestRunKeptConnectionLost: a run keeps its agent connection from
// before the command to after it; one lost meanwhile, seen before the
// pull or only by its first call, is replaced by a new one (a second
// agent exec) and the artifacts and the session still arrive.
func TestRunKeptConnectionLost(t *testing.T) {
	warmAgent(t)
	for how, seen := range map[string]string{"drop": "lost while it ran", "drop-at-call": "lost at its first call"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, transfer.ModeAgent)
			const marker = "the-command"
			k := &keptX{x: e.sb.X, marker: marker, how: how}
			sb := e.sb
			sb.X = k
			var logs bytes.Buffer
			sb.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			st, err := session.New(session.Config{Backend: mustDirBackend(t)})
			if err != nil {
				t.Fatal(err)
			}
			local := t.TempDir()
			write(t, local, map[string]string{"in.md": "do it"})
			out := filepath.Join(t.TempDir(), "run")
			res, err := ferry.Run(ctx(t), sb, ferry.RunSpec{
				Inputs:   []ferry.Mapping{{Local: filepath.Join(local, "in.md"), Remote: "work/in.md"}},
				Argv:     []string{"sh", "-c", `mkdir -p rascal-meta sess && echo s > sess/s && echo '{"exit_code":0}' > rascal-meta/meta.json`, marker},
				Out:      out,
				Sessions: []ferry.SessionMapping{{Key: "task", Remote: "sess"}},
				Store:    st,
			})
			if err != nil || res.PullErr != nil || res.SessionErr != nil {
				t.Fatalf("run: %v, pull: %v, session: %v", err, res.PullErr, res.SessionErr)
			}
			if n := k.serves.Load(); n != 2 {
				t.Fatalf("%d agent execs, want 2: the kept one, lost, and the one that replaced it", n)
			}
			if !strings.Contains(logs.String(), seen+"; connecting again") {
				t.Errorf("no log of the new connection after the kept one was %s:\n%s", seen, logs.String())
			}
			if b, err := os.ReadFile(filepath.Join(out, "meta.json")); err != nil || !strings.Contains(string(b), "exit_code") {
				t.Fatalf("meta.json: %q, %v", b, err)
			}
			if s := res.Sessions[0].Saved; s == nil || s.Snapshot != 1 || s.RelayLost != "" || res.Pull.RelayLost != "" {
				t.Fatalf("session %+v, pull %+v; want a clean save and pull", res.Sessions[0], res.Pull)
			}
		})
	}
}

// TestRunKeptConnectionIdle: the kept agent connection is under no idle
// watch while the command runs (silent for longer than the timeout), and
// under the post-exec phase's after it: an agent that stops answering
// then ends the pull with ErrIdle, not at the pull's timeout.
func TestRunKeptConnectionIdle(t *testing.T) {
	warmAgent(t)
	e := newEnv(t, transfer.ModeAgent)
	const marker = "the-command"
	k := &keptX{x: e.sb.X, marker: marker, how: "stall"}
	sb := e.sb
	sb.X = k
	sb.IdleTimeout = 300 * time.Millisecond
	start := time.Now()
	res, err := ferry.Run(ctx(t), sb, ferry.RunSpec{
		Argv:        []string{"sh", "-c", `sleep 1; mkdir -p rascal-meta && echo '{}' > rascal-meta/meta.json`, marker},
		Out:         t.TempDir(),
		PullTimeout: 30 * time.Second,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %+v, %v; the silent command must not be idle", res, err)
	}
	if !errors.Is(res.PullErr, ferry.ErrIdle) {
		t.Fatalf("pull through a silent kept connection: %v, want ErrIdle", res.PullErr)
	}
	if n := k.serves.Load(); n != 1 {
		t.Fatalf("%d agent execs, want the kept one alone", n)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the run took %v", d)
	}
}
