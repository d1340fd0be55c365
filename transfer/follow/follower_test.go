package follow_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/agent/server"
	"github.com/ferry-dev/ferry/transfer/follow"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sandbox is an in-process agent whose connections the test can cut.
type sandbox struct {
	t     *testing.T
	ws    string
	mu    sync.Mutex
	cut   func()
	dials int
}

func newSandbox(t *testing.T) *sandbox {
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "rascal-meta"), 0o700); err != nil {
		t.Fatal(err)
	}
	return &sandbox{t: t, ws: ws}
}

// dial must run on the test's goroutine (agenttest may call t.Fatal).
func (s *sandbox) dial(context.Context) (*agent.Client, error) {
	c, cut := agenttest.Cuttable(s.t, server.Config{Workspace: s.ws})
	s.mu.Lock()
	s.cut = cut
	s.dials++
	s.mu.Unlock()
	return c, nil
}

// cutNow breaks the current connection, if there is one.
func (s *sandbox) cutNow() bool {
	s.mu.Lock()
	cut := s.cut
	s.cut = nil
	s.mu.Unlock()
	if cut != nil {
		cut()
	}
	return cut != nil
}

func (s *sandbox) remote(name string) string { return filepath.Join(s.ws, "rascal-meta", name) }

func line(i int) string {
	return fmt.Sprintf(`{"type":"event","n":%d,"text":"some agent output for line %d"}`+"\n", i, i)
}

// appendTo appends to name, reporting errors on t (from any goroutine).
func appendTo(t *testing.T, name string, data []byte) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Error(err)
	}
}

func newFollower(t *testing.T, cfg follow.Config) *follow.Follower {
	t.Helper()
	cfg.Backoff = 5 * time.Millisecond
	cfg.MaxBackoff = 50 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	f, err := follow.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func checkSame(t *testing.T, local, remote string) {
	t.Helper()
	l, err := os.ReadFile(local)
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.ReadFile(remote)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(l, r) {
		t.Errorf("%s: %d bytes, remote has %d", filepath.Base(local), len(l), len(r))
	}
}

// checkLines asserts that out is exactly lines from..to-1, once each, in
// order.
func checkLines(t *testing.T, out []byte, from, to int) {
	t.Helper()
	var want bytes.Buffer
	for i := from; i < to; i++ {
		want.WriteString(line(i))
	}
	if bytes.Equal(out, want.Bytes()) {
		return
	}
	got := bytes.SplitAfter(out, []byte("\n"))
	for i, g := range got {
		if i+from >= to || string(g) != line(i+from) {
			t.Fatalf("printed %d lines; line %d is %q, want lines %d..%d", len(got), i, g, from, to-1)
		}
	}
	t.Fatalf("printed %d lines, want %d", len(got), to-from)
}

// The scenario: 10,000 lines appended over a few seconds, two
// relay drops in between; everything arrives complete and in order.
func TestFollowSurvivesDrops(t *testing.T) {
	const lines = 10000
	sb := newSandbox(t)
	out := t.TempDir()
	var printed bytes.Buffer
	f := newFollower(t, follow.Config{
		Dial:      sb.dial,
		RemoteDir: "rascal-meta",
		OutDir:    out,
		Files:     []string{"agent.ndjson", "runner.log"},
		Lines:     &printed,
		StopWhen:  "done",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	defer wg.Wait()
	var written atomic.Int64 // lines appended so far
	wg.Go(func() {
		// 200 writes over about 2.5s; every other write ends mid-line, so
		// that lines arrive in pieces and a drop can fall inside one.
		const writes = 200
		var carry string
		for w := range writes {
			var buf bytes.Buffer
			buf.WriteString(carry)
			for i := w * lines / writes; i < (w+1)*lines/writes; i++ {
				buf.WriteString(line(i))
			}
			b := buf.Bytes()
			carry = ""
			if w%2 == 0 && w < writes-1 {
				cut := len(b) - 7
				carry = string(b[cut:])
				b = b[:cut]
			}
			appendTo(t, sb.remote("agent.ndjson"), b)
			appendTo(t, sb.remote("runner.log"), fmt.Appendf(nil, "stage %d\n", w))
			written.Store(int64((w + 1) * lines / writes))
			select {
			case <-ctx.Done():
				return
			case <-time.After(2500 * time.Millisecond / writes):
			}
		}
		appendTo(t, sb.remote("done"), nil)
	})
	cuts := 0
	wg.Go(func() {
		for _, at := range []int64{lines / 3, 2 * lines / 3} {
			for written.Load() < at && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
			}
			for !sb.cutNow() && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
			}
			cuts++
		}
	})

	if err := f.Run(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if cuts != 2 || sb.dials < 3 {
		t.Errorf("%d cuts, %d dials; want 2 cuts and at least 3 dials", cuts, sb.dials)
	}
	checkSame(t, filepath.Join(out, "agent.ndjson"), sb.remote("agent.ndjson"))
	checkSame(t, filepath.Join(out, "runner.log"), sb.remote("runner.log"))
	checkLines(t, printed.Bytes(), 0, lines)
}

// cancelWriter cancels its context once it has been given n bytes.
type cancelWriter struct {
	buf    bytes.Buffer
	n      int
	cancel context.CancelFunc
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if w.buf.Len() >= w.n {
		w.cancel()
	}
	return len(p), nil
}

// On cancel, everything received is on disk and printed, and a second Run
// resumes where the first stopped.
func TestFollowCancelThenResume(t *testing.T) {
	sb := newSandbox(t)
	out := t.TempDir()
	var all bytes.Buffer
	for i := range 2000 {
		all.WriteString(line(i))
	}
	// Half a line at the end: the first Run flushes it when it stops.
	half := all.Len() - 10
	appendTo(t, sb.remote("agent.ndjson"), all.Bytes()[:half])

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cctx, ccancel := context.WithCancel(ctx)
	printed := &cancelWriter{n: half - 100, cancel: ccancel}
	cfg := follow.Config{Dial: sb.dial, RemoteDir: "rascal-meta", OutDir: out, Files: []string{"agent.ndjson"}, Lines: printed}
	if err := newFollower(t, cfg).Run(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	local, err := os.ReadFile(filepath.Join(out, "agent.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(printed.buf.Bytes(), local) || !bytes.HasPrefix(all.Bytes(), local) || len(local) < half-100 {
		t.Fatalf("printed %d bytes, local copy %d, remote %d", printed.buf.Len(), len(local), half)
	}

	// The second Run prints the rest, the end of the half line included.
	appendTo(t, sb.remote("agent.ndjson"), all.Bytes()[half:])
	appendTo(t, sb.remote("done"), nil)
	var rest bytes.Buffer
	cfg.Lines, cfg.StopWhen = &rest, "done"
	if err := newFollower(t, cfg).Run(ctx); err != nil {
		t.Fatal(err)
	}
	checkSame(t, filepath.Join(out, "agent.ndjson"), sb.remote("agent.ndjson"))
	if got := append(printed.buf.Bytes(), rest.Bytes()...); !bytes.Equal(got, all.Bytes()) {
		t.Fatalf("printed %d bytes over both runs, want %d", len(got), all.Len())
	}
}

func TestFollowGivesUp(t *testing.T) {
	errDown := errors.New("gateway down")
	dials := 0
	f := newFollower(t, follow.Config{
		Dial: func(context.Context) (*agent.Client, error) {
			dials++
			return nil, errDown
		},
		OutDir:  t.TempDir(),
		Files:   []string{"agent.ndjson"},
		Retries: 4,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Run(ctx); !errors.Is(err, errDown) || dials != 4 {
		t.Fatalf("got %v after %d dials, want %v after 4", err, dials, errDown)
	}
}

// A remote file shorter than the local copy is a refusal, not retried.
func TestFollowShrunkNotRetried(t *testing.T) {
	sb := newSandbox(t)
	out := t.TempDir()
	appendTo(t, sb.remote("agent.ndjson"), []byte("short\n"))
	appendTo(t, filepath.Join(out, "agent.ndjson"), []byte("a longer local copy\n"))
	f := newFollower(t, follow.Config{Dial: sb.dial, RemoteDir: "rascal-meta", OutDir: out, Files: []string{"agent.ndjson"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Run(ctx); !errors.Is(err, agent.ErrShrunk) || sb.dials != 1 {
		t.Fatalf("got %v after %d dials, want ErrShrunk after 1", err, sb.dials)
	}
}

func TestNewRefuses(t *testing.T) {
	dial := func(context.Context) (*agent.Client, error) { return nil, nil }
	for name, cfg := range map[string]follow.Config{
		"no dial":    {OutDir: "o", Files: []string{"a"}},
		"no out":     {Dial: dial, Files: []string{"a"}},
		"no files":   {Dial: dial, OutDir: "o"},
		"subdir":     {Dial: dial, OutDir: "o", Files: []string{"x/a"}},
		"dot-dot":    {Dial: dial, OutDir: "o", Files: []string{".."}},
		"duplicated": {Dial: dial, OutDir: "o", Files: []string{"a", "a"}},
	} {
		if _, err := follow.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
