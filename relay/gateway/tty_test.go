package gateway_test

import (
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

var ptsRE = regexp.MustCompile(`(?m)^/dev/pts/[0-9]+\r$`)

// TestTTYExec runs tty=true through both exec RPCs: the command is on a
// terminal of its own, stderr comes out merged into stdout with the
// terminal's CRLF, TERM is upstream's, stdin is typed at the terminal, and
// the exit code is the command's. The one-shot RPC's terminal is one cell
// (upstream asks its sandbox for 0x0), the streaming one's 80x24 by
// default or the start's cols and rows.
func TestTTYExec(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	script := `tty; stty size; echo "term:$TERM"; echo to-stderr >&2; read x; echo "got:$x"; exit 7`
	for _, tc := range []struct {
		rpc        string
		cols, rows uint32
		size       string
	}{
		{"ExecSandbox", 100, 30, "1 1"},
		{"ExecSandboxInteractive", 0, 0, "24 80"},
		{"ExecSandboxInteractive", 100, 30, "30 100"},
		{"ExecSandboxInteractive", 100, 0, "24 100"},
	} {
		t.Run(tc.rpc+"/"+tc.size, func(t *testing.T) {
			req := &openshellv1.ExecSandboxRequest{
				SandboxId: b.id, Command: []string{"sh", "-c", script},
				Tty: true, Cols: tc.cols, Rows: tc.rows, TimeoutSeconds: 30,
			}
			var r *execResult
			if tc.rpc == "ExecSandbox" {
				req.Stdin = []byte("hello\n")
				r = execOnce(ctxFor(t), b.c, req)
			} else {
				r = execInteractive(ctxFor(t), b.c, req, []byte("hello\n"))
			}
			wantExit(t, r, 7)
			out := r.stdout.String()
			if !ptsRE.MatchString(out) {
				t.Errorf("no /dev/pts/N line from tty in %q", out)
			}
			for _, want := range []string{"\r\n" + tc.size + "\r\n", "term:xterm-256color\r\n", "to-stderr\r\n", "got:hello\r\n"} {
				if !strings.Contains(out, want) {
					t.Errorf("output %q lacks %q", out, want)
				}
			}
			if r.stderr.Len() != 0 {
				t.Errorf("stderr %q: on a terminal it is the output", r.stderr.String())
			}
		})
	}
}

// TestTTYNoTerminal: without tty a command has no terminal, and a resize
// is dropped, as upstream drops it.
func TestTTYNoTerminal(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	ctx := ctxFor(t)
	s, err := b.c.ExecSandboxInteractive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(in *openshellv1.ExecSandboxInput) {
		t.Helper()
		if err := s.Send(in); err != nil {
			t.Fatal(err)
		}
	}
	send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: &openshellv1.ExecSandboxRequest{
		SandboxId: b.id, Command: []string{"sh", "-c", "cat; tty; s=$?; echo err >&2; exit $s"},
	}}})
	send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Resize{Resize: &openshellv1.ExecSandboxWindowResize{Cols: 10, Rows: 10}}})
	send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: []byte("in\n")}})
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	r := &execResult{}
	collect(r, s.Recv, nil)
	wantExit(t, r, 1)
	if got := r.stdout.String(); got != "in\nnot a tty\n" {
		t.Errorf("stdout %q, want cat's line and tty's complaint", got)
	}
	if got := r.stderr.String(); got != "err\n" {
		t.Errorf("stderr %q, want it apart", got)
	}
}

// TestTTYResize sends resizes mid-run on the streaming RPC: the terminal
// takes each, as upstream's sandbox takes window-change, with an unset
// dimension one cell.
func TestTTYResize(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	ctx := ctxFor(t)
	s, err := b.c.ExecSandboxInteractive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(in *openshellv1.ExecSandboxInput) {
		t.Helper()
		if err := s.Send(in); err != nil {
			t.Fatal(err)
		}
	}
	resize := func(cols, rows uint32) {
		t.Helper()
		send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Resize{Resize: &openshellv1.ExecSandboxWindowResize{Cols: cols, Rows: rows}}})
	}
	// The shell waits for each size in turn (bounded by the exec's
	// timeout): a resize is applied apart from the stdin stream.
	script := `stty size; echo ready; ` +
		`while [ "$(stty size)" != "40 120" ]; do sleep 0.02; done; echo "first:$(stty size)"; ` +
		`while [ "$(stty size)" != "1 33" ]; do sleep 0.02; done; echo "second:$(stty size)"; ` +
		`read x; echo "got:$x"; exit 3`
	send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: &openshellv1.ExecSandboxRequest{
		SandboxId: b.id, Command: []string{"sh", "-c", script}, Tty: true, Cols: 90, Rows: 20, TimeoutSeconds: 30,
	}}})
	r := &execResult{}
	collect(r, s.Recv, func(out string) bool { return strings.Contains(out, "ready\r\n") })
	if !strings.HasPrefix(r.stdout.String(), "20 90\r\n") {
		t.Fatalf("before the resize: %v", r)
	}
	resize(120, 40)
	collect(r, s.Recv, func(out string) bool { return strings.Contains(out, "first:40 120\r\n") })
	resize(33, 0)
	collect(r, s.Recv, func(out string) bool { return strings.Contains(out, "second:1 33\r\n") })
	send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: []byte("typed\r")}})
	collect(r, s.Recv, nil)
	wantExit(t, r, 3)
	if !strings.Contains(r.stdout.String(), "got:typed\r\n") {
		t.Fatalf("stdin through the terminal: %v", r)
	}
}

// TestTTYStop: a timeout and a client that goes away leave a terminal's
// processes running, as upstream's sandbox does (its master stays open:
// no hangup); deleting the sandbox ends them.
func TestTTYStop(t *testing.T) {
	b := newBox(t, gatewaytest.Options{}, "box")
	t.Run("Timeout", func(t *testing.T) {
		tb := newBoxOn(t, b.g, b.c, "tty-timeout")
		marker := newMarker(t)
		r := execInteractive(ctxFor(t), b.c, &openshellv1.ExecSandboxRequest{
			SandboxId: tb.id, Command: []string{"sh", "-c", "sleep 600 & sleep 600; wait"},
			Environment: map[string]string{"FERRY_MARKER": marker}, TimeoutSeconds: 1, Tty: true,
		})
		wantExit(t, r, 124)
		tb.wantRunsOn(t, marker)
	})
	t.Run("Cancel", func(t *testing.T) {
		tb := newBoxOn(t, b.g, b.c, "tty-cancel")
		marker := newMarker(t)
		ctx, cancel := context.WithCancel(ctxFor(t))
		s, err := startExec(ctx, b.c, "ExecSandboxInteractive", &openshellv1.ExecSandboxRequest{
			SandboxId: tb.id, Command: []string{"sh", "-c", "sleep 600 & echo ready; sleep 600; wait"},
			Environment: map[string]string{"FERRY_MARKER": marker}, Tty: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		r := &execResult{}
		collect(r, s.Recv, func(out string) bool { return strings.Contains(out, "ready") })
		if r.err != nil {
			t.Fatal(r)
		}
		cancel()
		tb.wantRunsOn(t, marker)
	})
	t.Run("Delete", func(t *testing.T) {
		marker := newMarker(t)
		ctx := ctxFor(t)
		sb := createReady(t, b.c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "doomed"})
		s, err := startExec(ctx, b.c, "ExecSandboxInteractive", &openshellv1.ExecSandboxRequest{
			SandboxId: sb.GetMetadata().GetId(), Command: []string{"sh", "-c", "sleep 600 & echo ready; sleep 600; wait"},
			Environment: map[string]string{"FERRY_MARKER": marker}, Tty: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		r := &execResult{}
		collect(r, s.Recv, func(out string) bool { return strings.Contains(out, "ready") })
		if _, err := b.c.DeleteSandbox(ctx, &openshellv1.DeleteSandboxRequest{Name: "doomed"}); err != nil {
			t.Fatal(err)
		}
		collect(r, s.Recv, nil)
		wantStatus(t, r.err, codes.Unavailable, "exec relay closed before the command reported an exit status")
		relaytest.WaitNoMarked(t, marker, reapTimeout)
	})
}

// TestTTYCutRelay: the CutAfter hook cuts a terminal's output as it cuts
// a pipe's, and its processes run on.
func TestTTYCutRelay(t *testing.T) {
	b := newBox(t, gatewaytest.Options{Config: gateway.Config{CutAfter: 64 << 10}}, "box")
	for _, rpc := range []string{"ExecSandbox", "ExecSandboxInteractive"} {
		t.Run(rpc, func(t *testing.T) {
			tb := newBoxOn(t, b.g, b.c, shortName(rpc))
			marker := newMarker(t)
			req := &openshellv1.ExecSandboxRequest{
				SandboxId: tb.id, Command: []string{"sh", "-c", "sleep 600 & yes | head -c 8388608; wait"},
				Environment: map[string]string{"FERRY_MARKER": marker}, Tty: true,
			}
			var r *execResult
			if rpc == "ExecSandbox" {
				r = execOnce(ctxFor(t), b.c, req)
			} else {
				r = execInteractive(ctxFor(t), b.c, req)
			}
			wantStatus(t, r.err, codes.Unavailable, "exec relay closed before the command reported an exit status")
			if r.exited || r.stdout.Len() > 64<<10 {
				t.Fatalf("a cut stream: %v", r)
			}
			tb.wantRunsOn(t, marker)
		})
	}
}

// syncBuffer is read while an Exec writes it.
type syncBuffer = relaytest.SyncBuffer

// waitFor polls out until it holds want.
func waitFor(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output %q", want, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTTYClient runs a terminal command through ferry's own client:
// relay.Command's TTY, Size and Resize reach the gateway as tty, cols and
// rows and resize messages, and typed stdin reaches the command.
func TestTTYClient(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	inR, inW := io.Pipe()
	t.Cleanup(func() { inW.Close() })
	resize := make(chan relay.WindowSize)
	var out, errOut syncBuffer
	script := `stty size; echo ready; while [ "$(stty size)" != "50 132" ]; do sleep 0.02; done; echo resized; read x; echo "got:$x"; exit 4`
	done := make(chan struct{})
	var code int
	var err error
	go func() {
		defer close(done)
		code, err = c.Exec(ctxFor(t), &relay.Command{
			Sandbox: "box", Argv: []string{"sh", "-c", script}, Timeout: 30 * time.Second,
			TTY: true, Size: relay.WindowSize{Cols: 77, Rows: 11}, Resize: resize,
			Stdin: inR, Stdout: &out, Stderr: &errOut,
		})
	}()
	waitFor(t, &out, "ready")
	if !strings.HasPrefix(out.String(), "11 77\r\n") {
		t.Fatalf("initial size: output %q", out.String())
	}
	select {
	case resize <- relay.WindowSize{Cols: 132, Rows: 50}:
	case <-done:
		t.Fatalf("exec ended early: %d, %v, %q", code, err, out.String())
	}
	waitFor(t, &out, "resized")
	if _, err := inW.Write([]byte("word\r")); err != nil {
		t.Fatal(err)
	}
	<-done // bounded by the command's timeout
	if err != nil || code != 4 {
		t.Fatalf("exec = %d, %v, want exit 4; output %q", code, err, out.String())
	}
	if !strings.Contains(out.String(), "got:word\r\n") || errOut.String() != "" {
		t.Fatalf("stdout %q, stderr %q", out.String(), errOut.String())
	}
}
