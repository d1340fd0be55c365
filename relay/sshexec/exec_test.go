package sshexec_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/relaytest"
	"github.com/ferry-dev/ferry/relay/sshexec"
	"github.com/ferry-dev/ferry/relay/sshexec/sshdtest"
)

type result struct {
	code           int
	err            error
	stdout, stderr string
}

func run(ctx context.Context, x relay.Execer, cmd *relay.Command) result {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code, err := x.Exec(ctx, cmd)
	return result{code, err, out.String(), errb.String()}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func marker(t *testing.T) string {
	var b [8]byte
	rand.Read(b[:])
	return "sshexec-" + hex.EncodeToString(b[:])
}

func TestExec(t *testing.T) {
	srv := sshdtest.Start(t)
	c := newClient(t, srv, nil)
	hostile := []string{"a b", "it's", `"dq"`, "$(touch /tmp/ferry-pwned)", "`id`", "*", "~", "$HOME", `\`, "-n", "ünïcødé ✓", "tab\tx", ";", "&&", "|", ""}
	tests := []struct {
		name        string
		cmd         relay.Command
		code        int
		out, errOut string
	}{
		{name: "Echo", cmd: relay.Command{Argv: []string{"echo", "hello", "ferry"}}, out: "hello ferry\n"},
		{name: "Exit0", cmd: relay.Command{Argv: []string{"sh", "-c", "exit 0"}}},
		{name: "Exit1", cmd: relay.Command{Argv: []string{"sh", "-c", "exit 1"}}, code: 1},
		{name: "Exit42", cmd: relay.Command{Argv: []string{"sh", "-c", "exit 42"}}, code: 42},
		{name: "KilledBySignal", cmd: relay.Command{Argv: []string{"sh", "-c", "kill -9 $$"}}, code: 137},
		{name: "NotFound", cmd: relay.Command{Argv: []string{"ferry-no-such-program"}}, code: 127, errOut: "*"},
		{name: "StderrApart", cmd: relay.Command{Argv: []string{"sh", "-c", "echo out; echo err >&2; echo out2"}}, out: "out\nout2\n", errOut: "err\n"},
		{
			name: "HostileArgv",
			cmd:  relay.Command{Argv: append([]string{"printf", `%s\n`}, hostile...)},
			out:  strings.Join(hostile, "\n") + "\n",
		},
		{
			name: "EnvAndWorkdir",
			cmd:  relay.Command{Argv: []string{"sh", "-c", `printf '%s|%s' "$V" "$PWD"`}, Workdir: "/tmp", Env: map[string]string{"V": `x'y "$(z)"`}},
			out:  `x'y "$(z)"|/tmp`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run(testCtx(t), c, &tc.cmd)
			if r.err != nil || r.code != tc.code || r.stdout != tc.out || (tc.errOut != "*" && r.stderr != tc.errOut) {
				t.Fatalf("got code=%d err=%v stdout=%q stderr=%q\nwant code=%d stdout=%q stderr=%q", r.code, r.err, r.stdout, r.stderr, tc.code, tc.out, tc.errOut)
			}
		})
	}
}

func TestInvalidBeforeAnyCall(t *testing.T) {
	// Nothing listens at this address: a call would fail differently.
	c, err := sshexec.New(sshexec.Config{Addr: "127.0.0.1:1", InsecureIgnoreHostKey: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	long := []string{"echo"}
	for len(strings.Join(long, " ")) <= relay.MaxCommandLen {
		long = append(long, strings.Repeat("'", relay.MaxArgLen/8))
	}
	for _, argv := range [][]string{nil, {"echo", "a\x00b"}, long} {
		if _, err := c.Exec(testCtx(t), &relay.Command{Argv: argv}); !errors.Is(err, relay.ErrInvalid) {
			t.Errorf("argv of %d words: err=%v, want relay.ErrInvalid", len(argv), err)
		}
	}
}

// TestTTY runs a command on the terminal sshd allocates: its size and a
// resize, stderr merged into the output, typed input and the exit code.
func TestTTY(t *testing.T) {
	srv := sshdtest.Start(t)
	c := newClient(t, srv, nil)
	resize := make(chan relay.WindowSize)
	inR, inW := io.Pipe()
	t.Cleanup(func() { inW.Close() })
	var out, errb syncBuffer
	script := `tty; stty size; echo "$TERM"; echo e >&2; echo ready; while [ "$(stty size)" != "8 44" ]; do sleep 0.02; done; read x; echo "got:$x"; exit 6`
	type res struct {
		code int
		err  error
	}
	done := make(chan res, 1)
	go func() {
		code, err := c.Exec(testCtx(t), &relay.Command{
			Argv: []string{"sh", "-c", script}, TTY: true, Size: relay.WindowSize{Cols: 66, Rows: 12},
			Resize: resize, Stdin: inR, Stdout: &out, Stderr: &errb, Timeout: 30 * time.Second,
		})
		done <- res{code, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("no ready in %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resize <- relay.WindowSize{Cols: 44, Rows: 8}
	if _, err := inW.Write([]byte("zz\r")); err != nil {
		t.Fatal(err)
	}
	got := <-done
	o := out.String()
	if got.err != nil || got.code != 6 {
		t.Fatalf("exec = %d, %v; output %q", got.code, got.err, o)
	}
	if !strings.HasPrefix(o, "/dev/pts/") || !strings.Contains(o, "\r\n12 66\r\nxterm-256color\r\ne\r\nready\r\n") || !strings.Contains(o, "got:zz\r\n") || errb.String() != "" {
		t.Fatalf("stdout %q, stderr %q", o, errb.String())
	}
}

// syncBuffer is read while an Exec writes it.
type syncBuffer = relaytest.SyncBuffer

func TestStdinToStdoutLarge(t *testing.T) {
	srv := sshdtest.Start(t)
	c := newClient(t, srv, nil)
	const size = 64 << 20
	in, out := sha256.New(), sha256.New()
	var n atomic.Int64
	code, err := c.Exec(testCtx(t), &relay.Command{
		Argv:   []string{"cat"},
		Stdin:  io.TeeReader(io.LimitReader(relaytest.NewPattern(7), size), in),
		Stdout: io.MultiWriter(out, writerFunc(func(p []byte) { n.Add(int64(len(p))) })),
	})
	if err != nil || code != 0 {
		t.Fatalf("cat: code=%d err=%v", code, err)
	}
	if n.Load() != size || !bytes.Equal(in.Sum(nil), out.Sum(nil)) {
		t.Fatalf("cat returned %d bytes, digest %x; want %d bytes, digest %x", n.Load(), out.Sum(nil), size, in.Sum(nil))
	}
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

func TestStdinNeverClosed(t *testing.T) {
	srv := sshdtest.Start(t)
	c := newClient(t, srv, nil)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	start := time.Now()
	code, err := c.Exec(testCtx(t), &relay.Command{Argv: []string{"true"}, Stdin: pr})
	if err != nil || code != 0 {
		t.Fatalf("true: code=%d err=%v", code, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Exec took %v: it waited on a stdin that never closes", d)
	}
}

func TestCancelKillsProcessTree(t *testing.T) {
	srv := sshdtest.Start(t)
	c := newClient(t, srv, nil)
	for _, tc := range []struct{ name, script string }{
		{"Plain", "sleep 600 & sleep 600 & wait"},
		// TERM ignored by the whole tree: KILL must follow.
		{"IgnoresTERM", "trap '' TERM; sleep 600 & sleep 600 & wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := marker(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan result, 1)
			go func() {
				done <- run(ctx, c, &relay.Command{Argv: []string{"sh", "-c", tc.script}, Env: map[string]string{"FERRY_MARKER": m}})
			}()
			deadline := time.Now().Add(10 * time.Second)
			for len(relaytest.Marked(m)) < 3 {
				if time.Now().After(deadline) {
					t.Fatalf("the process tree did not start: %v", relaytest.Marked(m))
				}
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			select {
			case r := <-done:
				if !errors.Is(r.err, context.Canceled) {
					t.Fatalf("code=%d err=%v, want context.Canceled", r.code, r.err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("Exec did not return within 15s of cancel")
			}
			relaytest.WaitNoMarked(t, m, 5*time.Second)
		})
	}
}

func TestTimeoutKillsProcessTree(t *testing.T) {
	srv := sshdtest.Start(t)
	c := newClient(t, srv, nil)
	warm(t, c)
	m := marker(t)
	r := run(testCtx(t), c, &relay.Command{
		Argv:    []string{"sh", "-c", "echo started; sleep 600 & sleep 600; wait"},
		Env:     map[string]string{"FERRY_MARKER": m},
		Timeout: 2 * time.Second,
	})
	if r.err != nil || r.code != relay.ExitTimeout || r.stdout != "started\n" {
		t.Fatalf("code=%d err=%v stdout=%q, want %d and the output so far", r.code, r.err, r.stdout, relay.ExitTimeout)
	}
	relaytest.WaitNoMarked(t, m, 5*time.Second)
}

// warm opens c's connection, so that a command's timeout does not take
// in the handshake, which a loaded machine (make test under -race) can
// make last longer than a short timeout.
func warm(t *testing.T, c relay.Execer) {
	t.Helper()
	if r := run(testCtx(t), c, &relay.Command{Argv: []string{"true"}}); r.err != nil || r.code != 0 {
		t.Fatalf("warm-up: code=%d err=%v", r.code, r.err)
	}
}

// TestTTYTimeoutKillsProcessTree: on a terminal sshd makes the shell a
// session leader of its own; the stop still reaches its whole group.
func TestTTYTimeoutKillsProcessTree(t *testing.T) {
	srv := sshdtest.Start(t)
	c := newClient(t, srv, nil)
	warm(t, c)
	m := marker(t)
	r := run(testCtx(t), c, &relay.Command{
		Argv:    []string{"sh", "-c", "echo started; sleep 600 & sleep 600; wait"},
		Env:     map[string]string{"FERRY_MARKER": m},
		Timeout: 2 * time.Second,
		TTY:     true,
	})
	if r.err != nil || r.code != relay.ExitTimeout || !strings.HasPrefix(r.stdout, "started\r\n") {
		t.Fatalf("code=%d err=%v stdout=%q, want %d and the output so far", r.code, r.err, r.stdout, relay.ExitTimeout)
	}
	relaytest.WaitNoMarked(t, m, 5*time.Second)
}

// TestConnectionCut cuts the connection in the middle of a stream: Exec
// must fail with relay.ErrRelayLost, never report an exit code, and the
// next Exec must connect again.
func TestConnectionCut(t *testing.T) {
	srv := sshdtest.Start(t)
	var dials atomic.Int32
	c := newClient(t, srv, func(cfg *sshexec.Config) {
		cfg.Dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, "tcp", srv.Addr)
			if err != nil {
				return nil, err
			}
			if dials.Add(1) == 1 {
				return &cutConn{Conn: nc, left: 1 << 20}, nil
			}
			return nc, nil
		}
	})
	code, err := c.Exec(testCtx(t), &relay.Command{
		Argv:   []string{"cat"},
		Stdin:  io.LimitReader(relaytest.NewPattern(3), 16<<20),
		Stdout: io.Discard,
	})
	if err == nil || !errors.Is(err, relay.ErrRelayLost) {
		t.Fatalf("cut after 1 MiB of 16: code=%d err=%v, want relay.ErrRelayLost", code, err)
	}
	r := run(testCtx(t), c, &relay.Command{Argv: []string{"echo", "again"}})
	if r.err != nil || r.code != 0 || r.stdout != "again\n" || dials.Load() != 2 {
		t.Fatalf("after the cut: code=%d err=%v stdout=%q dials=%d", r.code, r.err, r.stdout, dials.Load())
	}
}

// TestDeadConnection stalls the connection without closing it: keepalives
// must notice, and the Exec in flight must fail rather than hang.
func TestDeadConnection(t *testing.T) {
	srv := sshdtest.Start(t)
	stall := make(chan struct{})
	c := newClient(t, srv, func(cfg *sshexec.Config) {
		cfg.KeepAlive = 100 * time.Millisecond
		cfg.Dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, "tcp", srv.Addr)
			if err != nil {
				return nil, err
			}
			return newStallConn(nc, stall), nil
		}
	})
	m := marker(t)
	ready := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(testCtx(t), &relay.Command{
			Argv:   []string{"sh", "-c", "echo ready; exec sleep 600"},
			Env:    map[string]string{"FERRY_MARKER": m},
			Stdout: writerFunc(func([]byte) { once.Do(func() { close(ready) }) }),
		})
		done <- err
	}()
	<-ready
	close(stall)
	select {
	case err := <-done:
		if !errors.Is(err, relay.ErrRelayLost) {
			t.Fatalf("err=%v, want relay.ErrRelayLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Exec on a dead connection did not return within 10s")
	}
	// The lost relay could not carry a kill; clean up for the next tests.
	for _, pid := range relaytest.Marked(m) {
		killPID(pid)
	}
}

// TestConcurrentBeyondMaxSessions runs more commands at once than OpenSSH
// allows sessions on one connection (10 by default): the rest must wait,
// not fail.
func TestConcurrentBeyondMaxSessions(t *testing.T) {
	srv := sshdtest.Start(t)
	c := newClient(t, srv, nil)
	const n = 14
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			want := strings.Repeat("x", i)
			r := run(testCtx(t), c, &relay.Command{Argv: []string{"sh", "-c", "sleep 0.2; printf %s \"$0\"", want}})
			if r.err != nil || r.code != 0 || r.stdout != want {
				errs <- r.stdout + ": " + errString(r.err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestBrokenCallerStreams: a failed write to Stdout or a failed read of
// Stdin ends the Exec with that error and stops the command.
func TestBrokenCallerStreams(t *testing.T) {
	srv := sshdtest.Start(t)
	c := newClient(t, srv, nil)
	boom := errors.New("boom")
	tests := []struct {
		name string
		cmd  relay.Command
		want string
	}{
		{
			name: "StdoutWriteFails",
			cmd: relay.Command{
				Argv:   []string{"sh", "-c", "echo x; exec sleep 600"},
				Stdout: failingWriter{boom},
			},
			want: "write stdout",
		},
		{
			name: "StdinReadFails",
			cmd:  relay.Command{Argv: []string{"sh", "-c", "cat >/dev/null; echo eof"}, Stdin: iotest.ErrReader(boom)},
			want: "read stdin",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := marker(t)
			tc.cmd.Env = map[string]string{"FERRY_MARKER": m}
			var out bytes.Buffer
			if tc.cmd.Stdout == nil {
				tc.cmd.Stdout = &out
			}
			code, err := c.Exec(testCtx(t), &tc.cmd)
			if !errors.Is(err, boom) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("code=%d err=%v, want %q wrapping %v", code, err, tc.want, boom)
			}
			if out.Len() != 0 {
				t.Errorf("a truncated stdin was passed on as complete: stdout %q", out.String())
			}
			relaytest.WaitNoMarked(t, m, 5*time.Second)
		})
	}
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

// TestCloseFailsExecInFlight: Close ends the connection under a running
// Exec, which reports the relay lost, and later Execs fail.
func TestCloseFailsExecInFlight(t *testing.T) {
	srv := sshdtest.Start(t)
	c, err := sshexec.New(sshexec.Config{User: srv.User, Addr: srv.Addr, KnownHostsFile: srv.KnownHosts, IdentityFile: srv.IdentityFile})
	if err != nil {
		t.Fatal(err)
	}
	m := marker(t)
	t.Cleanup(func() {
		for _, pid := range relaytest.Marked(m) {
			killPID(pid)
		}
	})
	ready := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(testCtx(t), &relay.Command{
			Argv:   []string{"sh", "-c", "echo ready; exec sleep 600"},
			Env:    map[string]string{"FERRY_MARKER": m},
			Stdout: writerFunc(func([]byte) { once.Do(func() { close(ready) }) }),
		})
		done <- err
	}()
	<-ready
	c.Close()
	if err := <-done; !errors.Is(err, relay.ErrRelayLost) {
		t.Fatalf("Exec under Close: err=%v, want relay.ErrRelayLost", err)
	}
	if _, err := c.Exec(testCtx(t), &relay.Command{Argv: []string{"true"}}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Exec after Close: err=%v, want net.ErrClosed", err)
	}
}
