package local_test

import (
	"context"
	"fmt"
	"io"
	"strings"
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
		BigSize:    64 << 20,
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
