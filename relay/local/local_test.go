package local_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/local"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	newRunner := func(t *testing.T, cfg local.Config) (relay.Execer, string) {
		cfg.Dir = t.TempDir()
		r, err := local.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r, "local"
	}
	relaytest.Run(t, relaytest.Harness{
		New: func(t *testing.T) (relay.Execer, string) { return newRunner(t, local.Config{}) },
		Cut: func(t *testing.T, n int64) (relay.Execer, string) {
			x, box := newRunner(t, local.Config{})
			return relaytest.CutOutput(x, n), box
		},
		KilledExit: 137,
	})
}

func TestLoginShellMode(t *testing.T) {
	dir := t.TempDir()
	r, err := local.New(local.Config{Dir: dir, Shell: []string{"/bin/bash", "-lc"}, Env: []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}, KilledExitCode: 1})
	if err != nil {
		t.Fatal(err)
	}
	relaytest.Run(t, relaytest.Harness{
		New: func(t *testing.T) (relay.Execer, string) { return r, "shell" },
		Cut: func(t *testing.T, n int64) (relay.Execer, string) {
			c, err := local.New(local.Config{Dir: t.TempDir(), Shell: []string{"/bin/bash", "-lc"}})
			if err != nil {
				t.Fatal(err)
			}
			return relaytest.CutOutput(c, n), "shell"
		},
		KilledExit: 1,
	})
}

// syncBuffer is read while an Exec writes it.
type syncBuffer = relaytest.SyncBuffer

// TestTTY runs commands on a terminal: its size, a resize, stderr merged
// into the output, typed input, the exit code, and a timeout that kills a
// background child too.
func TestTTY(t *testing.T) {
	r, err := local.New(local.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("SizeResizeStdin", func(t *testing.T) {
		resize := make(chan relay.WindowSize)
		inR, inW := io.Pipe()
		defer inW.Close()
		var out, errOut syncBuffer
		script := `tty; stty size; echo e >&2; echo ready; while [ "$(stty size)" != "7 41" ]; do sleep 0.02; done; read x; echo "got:$x"; exit 9`
		type res struct {
			code int
			err  error
		}
		done := make(chan res, 1)
		go func() {
			code, err := r.Exec(ctx, &relay.Command{
				Argv: []string{"sh", "-c", script}, TTY: true, Size: relay.WindowSize{Cols: 61, Rows: 17},
				Resize: resize, Stdin: inR, Stdout: &out, Stderr: &errOut, Timeout: 20 * time.Second,
			})
			done <- res{code, err}
		}()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(out.String(), "ready") {
			if time.Now().After(deadline) {
				t.Fatalf("no ready in %q", out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		resize <- relay.WindowSize{Cols: 41, Rows: 7}
		if _, err := inW.Write([]byte("abc\r")); err != nil {
			t.Fatal(err)
		}
		got := <-done
		o := out.String()
		if got.err != nil || got.code != 9 {
			t.Fatalf("exec = %d, %v; output %q", got.code, got.err, o)
		}
		if !strings.HasPrefix(o, "/dev/pts/") || !strings.Contains(o, "\r\n17 61\r\ne\r\nready\r\n") || !strings.Contains(o, "got:abc\r\n") || errOut.String() != "" {
			t.Fatalf("stdout %q, stderr %q", o, errOut.String())
		}
	})
	t.Run("DefaultSize", func(t *testing.T) {
		var out syncBuffer
		code, err := r.Exec(ctx, &relay.Command{Argv: []string{"stty", "size"}, TTY: true, Stdout: &out})
		if err != nil || code != 0 || out.String() != "24 80\r\n" {
			t.Fatalf("exec = %d, %v, %q; want 24 80", code, err, out.String())
		}
	})
	t.Run("Timeout", func(t *testing.T) {
		marker := fmt.Sprintf("tty-%d", time.Now().UnixNano())
		code, err := r.Exec(ctx, &relay.Command{
			Argv: []string{"sh", "-c", "sleep 600 & sleep 600; wait"}, Env: map[string]string{"FERRY_MARKER": marker},
			TTY: true, Timeout: 500 * time.Millisecond,
		})
		if err != nil || code != relay.ExitTimeout {
			t.Fatalf("exec = %d, %v; want %d", code, err, relay.ExitTimeout)
		}
		relaytest.WaitNoMarked(t, marker, 10*time.Second)
	})
}

// TestAbandon: with Abandon, a cancel, the timeout or a failed output
// leave the process running, as upstream's sandbox does: Exec returns as
// it would have, the process gets its stdin's EOF and goes on (here: to
// leave a file), and nothing reaches the caller's writers after Exec.
func TestAbandon(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(cancel context.CancelFunc, cmd *relay.Command, out *failingAfter)
	}{
		{"Cancel", func(cancel context.CancelFunc, _ *relay.Command, _ *failingAfter) { cancel() }},
		{"Timeout", func(context.CancelFunc, *relay.Command, *failingAfter) {}},
		{"FailedOutput", func(_ context.CancelFunc, _ *relay.Command, out *failingAfter) { out.fail() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pr, pw := io.Pipe()
			defer pw.Close()
			out := &failingAfter{ready: make(chan struct{})}
			cmd := &relay.Command{
				Argv:   []string{"sh", "-c", "echo ready; cat >/dev/null; sleep 0.3; : >went-on; while :; do echo more; sleep 0.05; done"},
				Stdin:  pr,
				Stdout: out,
			}
			if tc.name == "Timeout" {
				cmd.Timeout = 500 * time.Millisecond
			}
			done := abandoning(t, ctx, dir, cmd)
			<-out.ready
			tc.end(cancel, cmd, out)
			if tc.name == "FailedOutput" {
				// The next line fails the writer.
				pw.Close()
			}
			returned(t, done)
			writes := out.count()
			waitFile(t, filepath.Join(dir, "went-on"), "the abandoned process did not go on past its stdin's EOF")
			time.Sleep(200 * time.Millisecond)
			if n := out.count(); n != writes {
				t.Fatalf("%d writes to Stdout after Exec returned", n-writes)
			}
			// The process is this test's, still running: end it, so
			// that the reaper Exec left behind ends too.
			if n := killIn(t, dir); n == 0 {
				t.Fatal("the abandoned process is gone: it was killed")
			}
		})
	}
}

// abandoning runs cmd in dir on a Runner that abandons, and returns where
// Exec's error will come.
func abandoning(t *testing.T, ctx context.Context, dir string, cmd *relay.Command) <-chan error {
	t.Helper()
	r, err := local.New(local.Config{Dir: dir, Abandon: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Exec(ctx, cmd)
		done <- err
	}()
	return done
}

// returned is Exec's error from done, which must come within 10 s.
func returned(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return")
		return nil
	}
}

// waitFile waits up to 5 s for path to exist, and fails with why if it
// does not.
func waitFile(t *testing.T, path, why string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
	}
}

// failingAfter is a Stdout that closes ready at the first write and fails
// every write once fail is called.
type failingAfter struct {
	mu     sync.Mutex
	ready  chan struct{}
	n      int
	failed bool
}

func (f *failingAfter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		close(f.ready)
	}
	f.n++
	if f.failed {
		return 0, errors.New("the caller's writer failed")
	}
	return len(p), nil
}

func (f *failingAfter) fail() {
	f.mu.Lock()
	f.failed = true
	f.mu.Unlock()
}

func (f *failingAfter) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// killIn SIGKILLs the processes whose working directory is dir, waits
// for them to be gone, and returns how many it found at first.
func killIn(t *testing.T, dir string) int {
	t.Helper()
	first := -1
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n := 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == dir {
				syscall.Kill(pid, syscall.SIGKILL)
				n++
			}
		}
		if first < 0 {
			first = n
		}
		if n == 0 {
			return first
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes in %s would not die", dir)
		}
	}
}

// TestAbandonTTY: a terminal's process, abandoned, gets no hangup and no
// more input: it runs on (here: to leave a file), and a line typed after
// Exec has returned never reaches it.
func TestAbandonTTY(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, pw := io.Pipe()
	defer pw.Close()
	out := &failingAfter{ready: make(chan struct{})}
	done := abandoning(t, ctx, dir, &relay.Command{
		Argv:  []string{"sh", "-c", "echo ready; (sleep 0.3; : >went-on) & read line; echo \"$line\" >got; wait; sleep 30"},
		TTY:   true,
		Stdin: pr, Stdout: out,
	})
	<-out.ready
	cancel()
	if err := returned(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("exec: %v, want context.Canceled", err)
	}
	// The pump, blocked in Read, takes the line; the terminal must not.
	if _, err := pw.Write([]byte("late\n")); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(dir, "went-on"), "the abandoned terminal's process did not run on: hung up or killed")
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(dir, "got")); err == nil {
		t.Fatal("a line typed after Exec returned reached the abandoned process")
	}
	if n := killIn(t, dir); n == 0 {
		t.Fatal("the abandoned process is gone")
	}
}

// TestAbandonSettle: after the exit, a background child that holds the
// output delays the exit's report as long as upstream's supervisor waits
// for its readers (2 s for the first stream, 1 s more for the second),
// and is then left running with its output dropped. (A terminal's
// background child gets no such wait: the kernel hangs the terminal up
// when its session leader exits.)
func TestAbandonSettle(t *testing.T) {
	// The child goes on once the test says so, after the exit's report:
	// a child killed then never leaves went-on.
	const child = "(sleep 0.1; echo late; while [ ! -e go ]; do sleep 0.05; done; : >went-on; sleep 30)"
	for _, tc := range []struct {
		name     string
		script   string
		min, max time.Duration
	}{
		{"NoneHeld", child + " >/dev/null 2>&1 & echo out; exit 3", 0, 900 * time.Millisecond},
		{"StdoutHeld", child + " 2>/dev/null & echo out; exit 3", 900 * time.Millisecond, 1900 * time.Millisecond},
		{"BothHeld", child + " & echo out; exit 3", 2900 * time.Millisecond, 3900 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			r, err := local.New(local.Config{Dir: dir, Abandon: true})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out strings.Builder
			start := time.Now()
			code, err := r.Exec(ctx, &relay.Command{Argv: []string{"sh", "-c", tc.script}, Stdout: &out})
			took := time.Since(start)
			if err != nil || code != 3 {
				t.Fatalf("exec = %d, %v; want 3", code, err)
			}
			if took < tc.min || took > tc.max {
				t.Fatalf("the exit was reported after %v, want %v to %v", took, tc.min, tc.max)
			}
			if !strings.Contains(out.String(), "out") {
				t.Fatalf("stdout %q lacks the command's own output", out.String())
			}
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			waitFile(t, filepath.Join(dir, "went-on"), "the background child did not go on after the exit: killed")
			killIn(t, dir)
		})
	}
}
