package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/internal/tcpframe"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

type relayStream = grpc.BidiStreamingClient[openshellv1.TcpForwardFrame, openshellv1.TcpForwardFrame]

// sshInit is the init frame ferry's client sends for sandbox id.
func sshInit(id, token string) *openshellv1.TcpForwardInit {
	return &openshellv1.TcpForwardInit{
		SandboxId:          id,
		ServiceId:          "ssh-proxy:" + id,
		Target:             &openshellv1.TcpForwardInit_Ssh{Ssh: &openshellv1.SshRelayTarget{}},
		AuthorizationToken: token,
	}
}

func initFrame(init *openshellv1.TcpForwardInit) *openshellv1.TcpForwardFrame {
	return &openshellv1.TcpForwardFrame{Payload: &openshellv1.TcpForwardFrame_Init{Init: init}}
}

func dataFrame(b []byte) *openshellv1.TcpForwardFrame {
	return &openshellv1.TcpForwardFrame{Payload: &openshellv1.TcpForwardFrame_Data{Data: b}}
}

// token asks the gateway for an SSH session token for sandbox id.
func token(t testing.TB, c openshellv1.OpenShellClient, id string) string {
	t.Helper()
	resp, err := c.CreateSshSession(ctxFor(t), &openshellv1.CreateSshSessionRequest{SandboxId: id})
	if err != nil {
		t.Fatalf("CreateSshSession: %v", err)
	}
	return resp.GetToken()
}

// openRelay sends first on a new ForwardTcp stream and returns the stream
// once the gateway has accepted it (its headers), or the gateway's
// refusal. The stream ends with ctx.
func openRelay(ctx context.Context, c openshellv1.OpenShellClient, first *openshellv1.TcpForwardFrame) (relayStream, error) {
	s, err := c.ForwardTcp(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Send(first); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	md, err := s.Header()
	if err != nil || md == nil {
		_, rerr := s.Recv()
		if rerr == nil {
			rerr = errors.New("refused stream sent a frame")
		}
		return nil, rerr
	}
	return s, nil
}

// relayFixture is a gateway with a READY sandbox, reached over the SSH
// relay by a plain x/crypto client.
type relayFixture struct {
	*boxFixture
}

func newRelay(t testing.TB, cfg gateway.Config) relayFixture {
	return relayFixture{newBox(t, gatewaytest.Options{Config: cfg}, "box")}
}

// dial opens a relay with a fresh token and an SSH connection over it, as
// user, and returns the client, its stream's context cancel and the host
// key the server showed. Both end with t.
func (f relayFixture) dial(t testing.TB, user string) (*ssh.Client, context.CancelFunc, ssh.PublicKey) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := openRelay(ctx, f.c, initFrame(sshInit(f.id, token(t, f.c, f.id))))
	if err != nil {
		t.Fatalf("open relay: %v", err)
	}
	return sshOver(t, s, cancel, user)
}

func sshOver(t testing.TB, s relayStream, cancel context.CancelFunc, user string) (*ssh.Client, context.CancelFunc, ssh.PublicKey) {
	t.Helper()
	conn := tcpframe.New(s, tcpframe.Addr("test"), tcpframe.Addr("gateway"), cancel)
	var key ssh.PublicKey
	sc, chans, reqs, err := ssh.NewClientConn(conn, "box:22", &ssh.ClientConfig{
		User: user,
		HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error {
			key = k
			return nil
		},
	})
	if err != nil {
		conn.Close()
		t.Fatalf("ssh handshake over the relay: %v", err)
	}
	c := ssh.NewClient(sc, chans, reqs)
	t.Cleanup(func() { c.Close() })
	return c, cancel, key
}

// run runs script in a new session and returns its output and exit error.
func run(t testing.TB, c *ssh.Client, script string) (stdout, stderr string, err error) {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	defer sess.Close()
	var out, errb bytes.Buffer
	sess.Stdout, sess.Stderr = &out, &errb
	err = sess.Run(script)
	return out.String(), errb.String(), err
}

func TestSSHCreateSession(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{ReadyDelay: 10 * time.Second}})
	c, _ := rawClient(t, g)
	slow, err := c.CreateSandbox(ctxFor(t), &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	// A gateway whose sandboxes are ready at once, for the READY case.
	b := newBox(t, gatewaytest.Options{}, "box")

	t.Run("Ready", func(t *testing.T) {
		before := time.Now()
		resp, err := b.c.CreateSshSession(ctxFor(t), &openshellv1.CreateSshSessionRequest{SandboxId: b.id})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetSandboxId() != b.id || len(resp.GetToken()) < 32 {
			t.Errorf("response %v: want the sandbox id and a long token", resp)
		}
		if resp.GetHostKeyFingerprint() != "" {
			t.Errorf("host_key_fingerprint %q, want it empty as upstream's", resp.GetHostKeyFingerprint())
		}
		exp := time.UnixMilli(resp.GetExpiresAtMs())
		if lo, hi := before.Add(86400*time.Second), time.Now().Add(86400*time.Second); exp.Before(lo.Add(-time.Second)) || exp.After(hi.Add(time.Second)) {
			t.Errorf("expires_at_ms %v, want 86400s from now", exp)
		}
		if resp.GetGatewayScheme() != "https" || resp.GetGatewayPort() == 0 {
			t.Errorf("gateway address %s://%s:%d, want the https address the client used", resp.GetGatewayScheme(), resp.GetGatewayHost(), resp.GetGatewayPort())
		}
		if other := token(t, b.c, b.id); other == resp.GetToken() {
			t.Error("two sessions got the same token")
		}
	})
	for _, tc := range []struct {
		name string
		c    openshellv1.OpenShellClient
		id   string
		code codes.Code
		msg  string
	}{
		{"EmptyID", c, "", codes.InvalidArgument, "sandbox_id is required"},
		{"Unknown", c, "0b7c5e2a-0000-4000-8000-000000000000", codes.NotFound, "sandbox not found"},
		{"NotReady", c, slow.GetSandbox().GetMetadata().GetId(), codes.FailedPrecondition, "sandbox is not ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.CreateSshSession(ctxFor(t), &openshellv1.CreateSshSessionRequest{SandboxId: tc.id})
			wantStatus(t, err, tc.code, tc.msg)
		})
	}
}

// TestSSHForwardRefusals sends ForwardTcp openings the gateway must refuse,
// each before its headers (trailers only), so no SSH byte flows.
func TestSSHForwardRefusals(t *testing.T) {
	f := newRelay(t, gateway.Config{})
	other := createReady(t, f.c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "other"}).GetMetadata().GetId()
	slow := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{ReadyDelay: 10 * time.Second}})
	sc, _ := rawClient(t, slow)
	slowBox, err := sc.CreateSandbox(ctxFor(t), &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	slowID := slowBox.GetSandbox().GetMetadata().GetId()
	short := newRelay(t, gateway.Config{SSHSessionTTL: 50 * time.Millisecond})
	expired := token(t, short.c, short.id)
	time.Sleep(100 * time.Millisecond)
	revoked := token(t, f.c, f.id)
	if r, err := f.c.RevokeSshSession(ctxFor(t), &openshellv1.RevokeSshSessionRequest{Token: revoked}); err != nil || !r.GetRevoked() {
		t.Fatalf("RevokeSshSession = %v, %v; want revoked", r, err)
	}
	doomed := createReady(t, f.c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "doomed"}).GetMetadata().GetId()
	doomedToken := token(t, f.c, doomed)
	if _, err := f.c.DeleteSandbox(ctxFor(t), &openshellv1.DeleteSandboxRequest{Name: "doomed"}); err != nil {
		t.Fatal(err)
	}
	good := token(t, f.c, f.id)
	with := func(edit func(*openshellv1.TcpForwardInit)) *openshellv1.TcpForwardFrame {
		init := sshInit(f.id, good)
		edit(init)
		return initFrame(init)
	}

	for _, tc := range []struct {
		name  string
		c     openshellv1.OpenShellClient
		first *openshellv1.TcpForwardFrame
		code  codes.Code
		msg   string
	}{
		{"DataFirst", f.c, dataFrame([]byte("SSH-2.0-x\r\n")), codes.InvalidArgument, "first frame must be init"},
		{"NoSandboxID", f.c, with(func(i *openshellv1.TcpForwardInit) { i.SandboxId = "" }), codes.InvalidArgument, "sandbox_id is required"},
		{"NoTarget", f.c, with(func(i *openshellv1.TcpForwardInit) { i.Target = nil }), codes.InvalidArgument, "target is required"},
		{"TCPTarget", f.c, with(func(i *openshellv1.TcpForwardInit) {
			i.Target = &openshellv1.TcpForwardInit_Tcp{Tcp: &openshellv1.TcpRelayTarget{Host: "127.0.0.1", Port: 22}}
		}), codes.Unimplemented, "tcp relay targets"},
		{"MissingToken", f.c, with(func(i *openshellv1.TcpForwardInit) { i.AuthorizationToken = "" }), codes.Unauthenticated, "token is required"},
		{"BogusToken", f.c, with(func(i *openshellv1.TcpForwardInit) { i.AuthorizationToken = "bogus" }), codes.Unauthenticated, "invalid or revoked"},
		{"RevokedToken", f.c, initFrame(sshInit(f.id, revoked)), codes.Unauthenticated, "invalid or revoked"},
		{"ExpiredToken", short.c, initFrame(sshInit(short.id, expired)), codes.Unauthenticated, "expired"},
		{"OtherSandboxToken", f.c, initFrame(sshInit(other, good)), codes.PermissionDenied, "another sandbox"},
		{"UnknownSandbox", f.c, initFrame(sshInit("0b7c5e2a-0000-4000-8000-000000000000", good)), codes.NotFound, "sandbox not found"},
		{"DeletedSandbox", f.c, initFrame(sshInit(doomed, doomedToken)), codes.NotFound, "sandbox not found"},
		{"NotReady", sc, initFrame(sshInit(slowID, "any")), codes.FailedPrecondition, "sandbox is not ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := openRelay(ctxFor(t), tc.c, tc.first)
			wantStatus(t, err, tc.code, tc.msg)
		})
	}
	if r, err := f.c.RevokeSshSession(ctxFor(t), &openshellv1.RevokeSshSessionRequest{Token: revoked}); err != nil || r.GetRevoked() {
		t.Errorf("second RevokeSshSession = %v, %v; want revoked false", r, err)
	}
}

// TestSSHServiceIDOptional: upstream's ForwardTcp passes service_id on
// and checks nothing of it; an SSH relay with none, or any, works.
func TestSSHServiceIDOptional(t *testing.T) {
	f := newRelay(t, gateway.Config{})
	for _, id := range []string{"", "anything", "ssh-proxy:another-sandbox"} {
		t.Run(fmt.Sprintf("%q", id), func(t *testing.T) {
			init := sshInit(f.id, token(t, f.c, f.id))
			init.ServiceId = id
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			s, err := openRelay(ctx, f.c, initFrame(init))
			if err != nil {
				t.Fatalf("open relay with service_id %q: %v", id, err)
			}
			c, _, _ := sshOver(t, s, cancel, "sandbox")
			sess, err := c.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			if out, err := sess.Output("echo relayed"); err != nil || string(out) != "relayed\n" {
				t.Fatalf("command over the relay: %q, %v", out, err)
			}
		})
	}
}

// TestSSHConnectionLimits opens relays up to the limits: 3 per token, 20
// per sandbox; one more is RESOURCE_EXHAUSTED, and a closed relay frees
// its place.
func TestSSHConnectionLimits(t *testing.T) {
	f := newRelay(t, gateway.Config{})
	other := createReady(t, f.c, &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "other"}).GetMetadata().GetId()
	open := func(t *testing.T, id, tok string) (context.CancelFunc, error) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		s, err := openRelay(ctx, f.c, initFrame(sshInit(id, tok)))
		if err != nil {
			cancel()
			return nil, err
		}
		return func() {
			cancel()
			// The gateway has let go once the stream has ended.
			for {
				if _, err := s.Recv(); err != nil {
					return
				}
			}
		}, nil
	}
	mustOpen := func(t *testing.T, id, tok string) context.CancelFunc {
		t.Helper()
		stop, err := open(t, id, tok)
		if err != nil {
			t.Fatalf("relay refused within the limits: %v", err)
		}
		return stop
	}
	waitOpen := func(t *testing.T, id, tok string) context.CancelFunc {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			stop, err := open(t, id, tok)
			if err == nil {
				return stop
			}
			if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
				t.Fatalf("a freed place was not given back: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	for _, tc := range []struct {
		name   string
		tokens int // tokens for the sandbox, each used up to 3 times
		full   int // relays open when the next is refused
		msg    string
	}{
		{"PerToken", 1, 3, "per ssh session token"},
		{"PerSandbox", 7, 20, "per sandbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var toks []string
			for range tc.tokens {
				toks = append(toks, token(t, f.c, f.id))
			}
			var stops []context.CancelFunc
			for i := range tc.full {
				stops = append(stops, mustOpen(t, f.id, toks[i/3]))
			}
			_, err := open(t, f.id, toks[min(tc.full/3, tc.tokens-1)])
			wantStatus(t, err, codes.ResourceExhausted, tc.msg)
			// Another sandbox has places of its own.
			mustOpen(t, other, token(t, f.c, other))()
			stops[len(stops)-1]()
			waitOpen(t, f.id, toks[(tc.full-1)/3])()
			for _, stop := range stops[:len(stops)-1] {
				stop()
			}
		})
	}
}

// TestSSHFrames checks the frame rules both ways: the gateway sends data
// frames of at most 64 KiB, and ends a relay whose client sends a bigger
// one, or a second init, with INVALID_ARGUMENT.
func TestSSHFrames(t *testing.T) {
	f := newRelay(t, gateway.Config{})
	t.Run("GatewayFramesAtMost64KiB", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		s, err := openRelay(ctx, f.c, initFrame(sshInit(f.id, token(t, f.c, f.id))))
		if err != nil {
			t.Fatal(err)
		}
		rec := &frameSizes{relayStream: s}
		c, _, _ := sshOver(t, rec, cancel, "sandbox")
		out, _, err := run(t, c, "head -c 4194304 /dev/zero")
		if err != nil || len(out) != 4<<20 {
			t.Fatalf("4 MiB of output: %d bytes, %v", len(out), err)
		}
		if rec.max > 64<<10 || rec.n < 64 {
			t.Fatalf("%d frames, largest %d bytes; want many, none over 64 KiB", rec.n, rec.max)
		}
	})
	for _, tc := range []struct {
		name  string
		frame *openshellv1.TcpForwardFrame
		msg   string
	}{
		{"DataOver64KiB", dataFrame(make([]byte, 64<<10+1)), "over 64 KiB"},
		{"SecondInit", initFrame(sshInit(f.id, "x")), "init frame after the first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := openRelay(ctxFor(t), f.c, initFrame(sshInit(f.id, token(t, f.c, f.id))))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(tc.frame); err != nil {
				t.Fatal(err)
			}
			for {
				if _, err = s.Recv(); err != nil {
					break
				}
			}
			wantStatus(t, err, codes.InvalidArgument, tc.msg)
		})
	}
}

// frameSizes records the size of every data frame received.
type frameSizes struct {
	relayStream
	n, max int
}

func (f *frameSizes) Recv() (*openshellv1.TcpForwardFrame, error) {
	m, err := f.relayStream.Recv()
	if err == nil {
		f.n++
		f.max = max(f.max, len(m.GetData()))
	}
	return m, err
}

// TestSSHServer checks the SSH server behind the relay against what
// upstream's supervisor does.
func TestSSHServer(t *testing.T) {
	t.Setenv("FERRY_GATEWAY_ONLY", "leak")
	f := newRelay(t, gateway.Config{})
	c, _, key := f.dial(t, "anyone-at-all")
	dir := filepath.Join(f.g.Root, "box")

	t.Run("HostKeyEd25519FreshPerStart", func(t *testing.T) {
		if key.Type() != ssh.KeyAlgoED25519 {
			t.Fatalf("host key %s, want ssh-ed25519", key.Type())
		}
		if _, _, again := f.dial(t, "sandbox"); !bytes.Equal(again.Marshal(), key.Marshal()) {
			t.Fatal("one gateway showed two host keys")
		}
		g2 := newRelay(t, gateway.Config{})
		if _, _, k2 := g2.dial(t, "sandbox"); bytes.Equal(k2.Marshal(), key.Marshal()) {
			t.Fatal("two gateway starts share a host key")
		}
	})
	t.Run("ExecInSandboxWithClearedEnv", func(t *testing.T) {
		out, _, err := run(t, c, `pwd; echo "$HOME|$SHELL|${FERRY_GATEWAY_ONLY-unset}"`)
		if err != nil {
			t.Fatal(err)
		}
		if want := dir + "\n" + dir + "|/bin/bash|unset\n"; out != want {
			t.Fatalf("got %q, want %q", out, want)
		}
	})
	t.Run("LoginShell", func(t *testing.T) {
		// bash -lc: shopt reports a login shell.
		out, _, err := run(t, c, `shopt -q login_shell && echo login`)
		if err != nil || out != "login\n" {
			t.Fatalf("got %q, %v; want a login shell", out, err)
		}
	})
	t.Run("EnvAcknowledgedAndIgnored", func(t *testing.T) {
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		if err := sess.Setenv("FERRY_FROM_CLIENT", "x"); err != nil {
			t.Fatalf("env request refused: %v", err)
		}
		out, err := sess.Output(`echo "${FERRY_FROM_CLIENT-unset}"`)
		if err != nil || string(out) != "unset\n" {
			t.Fatalf("got %q, %v; want the variable ignored", out, err)
		}
	})
	t.Run("ExitStatus", func(t *testing.T) {
		_, errOut, err := run(t, c, "echo oops >&2; exit 42")
		var ee *ssh.ExitError
		if !errors.As(err, &ee) || ee.ExitStatus() != 42 || errOut != "oops\n" {
			t.Fatalf("got %v, stderr %q; want exit 42 and oops", err, errOut)
		}
	})
	t.Run("KilledReportsOne", func(t *testing.T) {
		// Upstream's sandbox sends no exit-signal: a process with no
		// exit code reports exit-status 1.
		_, _, err := run(t, c, "kill -9 $$")
		var ee *ssh.ExitError
		if !errors.As(err, &ee) || ee.Signal() != "" || ee.ExitStatus() != 1 {
			t.Fatalf("got %v, want exit-status 1", err)
		}
	})
	t.Run("SignalIgnored", func(t *testing.T) {
		// Upstream's sandbox signals only its canonical main session.
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		out := &syncBuffer{}
		sess.Stdout = out
		if err := sess.Start("echo ready; sleep 0.5; echo after; exit 4"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, out, "ready")
		if err := sess.Signal(ssh.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var ee *ssh.ExitError
		if err := sess.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 4 || out.String() != "ready\nafter\n" {
			t.Fatalf("wait: %v, output %q; want the signal ignored", err, out.String())
		}
	})
	t.Run("BackgroundHoldsOutput", func(t *testing.T) {
		// Upstream's sandbox waits 2 s for the first output stream to
		// end and 1 s for the second, then reports the exit and leaves
		// the background child running.
		marker := newMarker(t)
		begin := time.Now()
		out, _, err := run(t, c, "export FERRY_MARKER="+marker+"; (sleep 0.1; echo late; sleep 600) & echo out; exit 5")
		took := time.Since(begin)
		var ee *ssh.ExitError
		if !errors.As(err, &ee) || ee.ExitStatus() != 5 || !strings.HasPrefix(out, "out\n") {
			t.Fatalf("got %v, %q; want exit 5 after out", err, out)
		}
		if took < 2900*time.Millisecond || took > 6*time.Second {
			t.Fatalf("the exit came after %v, want about 3s", took)
		}
		// A kill at the exit's report would have come by now.
		time.Sleep(300 * time.Millisecond)
		if len(relaytest.Marked(marker)) == 0 {
			t.Fatal("the background child was killed")
		}
	})
	t.Run("Stdin", func(t *testing.T) {
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		sess.Stdin = strings.NewReader("through stdin")
		out, err := sess.Output("cat")
		if err != nil || string(out) != "through stdin" {
			t.Fatalf("got %q, %v", out, err)
		}
	})
	t.Run("Shell", func(t *testing.T) {
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		var out bytes.Buffer
		sess.Stdout = &out
		sess.Stdin = strings.NewReader("echo from-shell; exit 3\n")
		if err := sess.Shell(); err != nil {
			t.Fatal(err)
		}
		var ee *ssh.ExitError
		if err := sess.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 3 || out.String() != "from-shell\n" {
			t.Fatalf("shell: %v, %q", err, out.String())
		}
	})
	t.Run("Pty", func(t *testing.T) {
		// As upstream's sandbox serves pty-req: the command runs on a
		// terminal of the asked size and TERM, stderr is the terminal,
		// and window-change resizes it.
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		if err := sess.RequestPty("vt100", 25, 81, ssh.TerminalModes{}); err != nil {
			t.Fatalf("pty-req refused: %v", err)
		}
		out := &syncBuffer{}
		var errb bytes.Buffer
		sess.Stdout, sess.Stderr = out, &errb
		in, err := sess.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := sess.Start(`tty; stty size; echo "$TERM"; echo e >&2; echo ready; ` +
			`while [ "$(stty size)" != "9 33" ]; do sleep 0.02; done; read x; echo "got:$x"; exit 6`); err != nil {
			t.Fatal(err)
		}
		waitFor(t, out, "ready")
		if err := sess.WindowChange(9, 33); err != nil {
			t.Fatalf("window-change: %v", err)
		}
		if _, err := in.Write([]byte("typed\r")); err != nil {
			t.Fatal(err)
		}
		var ee *ssh.ExitError
		if err := sess.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 6 {
			t.Fatalf("wait: %v; output %q", err, out.String())
		}
		got := out.String()
		if !ptsRE.MatchString(got) || !strings.Contains(got, "\r\n25 81\r\nvt100\r\ne\r\nready\r\n") || !strings.Contains(got, "got:typed\r\n") || errb.Len() != 0 {
			t.Fatalf("stdout %q, stderr %q", got, errb.String())
		}
	})
	t.Run("SFTP", func(t *testing.T) {
		sc, err := sftp.NewClient(c)
		if err != nil {
			t.Fatalf("sftp subsystem: %v", err)
		}
		defer sc.Close()
		if wd, err := sc.Getwd(); err != nil || wd != dir {
			t.Fatalf("sftp working directory %q, %v; want the sandbox's %q", wd, err, dir)
		}
		w, err := sc.Create("via-sftp.txt")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte("sftp bytes")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "via-sftp.txt")); err != nil || string(b) != "sftp bytes" {
			t.Fatalf("file written over sftp: %q, %v", b, err)
		}
	})
	t.Run("OtherSubsystemRefused", func(t *testing.T) {
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		if err := sess.RequestSubsystem("netconf"); err == nil {
			t.Fatal("an unknown subsystem was accepted")
		}
	})
	t.Run("UnknownChannel", func(t *testing.T) {
		_, _, err := c.OpenChannel("x11", nil)
		var oce *ssh.OpenChannelError
		if !errors.As(err, &oce) || oce.Reason != ssh.UnknownChannelType {
			t.Fatalf("x11 channel: %v, want UnknownChannelType", err)
		}
	})
	t.Run("DirectTCPIPLoopback", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		served := make(chan error, 1)
		go func() {
			conn, err := lis.Accept()
			if err != nil {
				served <- err
				return
			}
			defer conn.Close()
			_, err = io.Copy(conn, conn)
			served <- err
		}()
		conn, err := c.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatalf("direct-tcpip to loopback: %v", err)
		}
		if _, err := conn.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo through direct-tcpip: %q, %v", buf, err)
		}
		conn.Close()
		if err := <-served; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("DirectTCPIPElsewhereRefused", func(t *testing.T) {
		// 192.0.2.0/24 is TEST-NET-1: never routed, and not loopback.
		_, err := c.Dial("tcp", "192.0.2.1:80")
		var oce *ssh.OpenChannelError
		if !errors.As(err, &oce) || oce.Reason != ssh.Prohibited {
			t.Fatalf("direct-tcpip to 192.0.2.1: %v, want Prohibited", err)
		}
	})
}

// TestSSHRevoke: a revoked token opens no new relay; one it opened before
// runs on.
func TestSSHRevoke(t *testing.T) {
	f := newRelay(t, gateway.Config{})
	tok := token(t, f.c, f.id)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := openRelay(ctx, f.c, initFrame(sshInit(f.id, tok)))
	if err != nil {
		t.Fatal(err)
	}
	c, _, _ := sshOver(t, s, cancel, "sandbox")
	if r, err := f.c.RevokeSshSession(ctxFor(t), &openshellv1.RevokeSshSessionRequest{Token: tok}); err != nil || !r.GetRevoked() {
		t.Fatalf("revoke: %v, %v", r, err)
	}
	_, err = openRelay(ctxFor(t), f.c, initFrame(sshInit(f.id, tok)))
	wantStatus(t, err, codes.Unauthenticated, "invalid or revoked")
	if out, _, err := run(t, c, "echo still"); err != nil || out != "still\n" {
		t.Fatalf("the live connection after revoke: %q, %v", out, err)
	}
}

// TestSSHRelayEnds: whatever ends a relay (a cut, a deleted sandbox, a
// client that goes away) ends its sessions without an exit status, and the
// RPC's status says which. As in upstream's sandbox, the processes they
// started run on after a cut or a client gone, until the sandbox is
// deleted, which ends them.
func TestSSHRelayEnds(t *testing.T) {
	clientGone := func(t *testing.T, f relayFixture, cancel context.CancelFunc, _ *ssh.Session) { cancel() }
	sessionClosed := func(t *testing.T, f relayFixture, _ context.CancelFunc, sess *ssh.Session) { sess.Close() }
	for _, tc := range []struct {
		name string
		cfg  gateway.Config
		end  func(t *testing.T, f relayFixture, cancel context.CancelFunc, sess *ssh.Session)
		// code is the relay stream's own status; OK: the relay goes on.
		code codes.Code
		// runsOn: the session's process outlives the relay, as in
		// upstream's sandbox, until the sandbox is deleted.
		runsOn bool
		tty    bool
	}{
		{"Cut", gateway.Config{CutAfter: 1 << 20}, nil, codes.Unavailable, true, false},
		{"SandboxDeleted", gateway.Config{}, func(t *testing.T, f relayFixture, _ context.CancelFunc, _ *ssh.Session) {
			if _, err := f.c.DeleteSandbox(ctxFor(t), &openshellv1.DeleteSandboxRequest{Name: "box"}); err != nil {
				t.Fatal(err)
			}
		}, codes.Unavailable, false, false},
		{"ClientGone", gateway.Config{}, clientGone, codes.Canceled, true, false},
		// A terminal's process gets no hangup: upstream's reader keeps
		// its master open.
		{"ClientGone/TTY", gateway.Config{}, clientGone, codes.Canceled, true, true},
		{"SessionClosed", gateway.Config{}, sessionClosed, codes.OK, true, false},
		{"SessionClosed/TTY", gateway.Config{}, sessionClosed, codes.OK, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRelay(t, tc.cfg)
			marker := newMarker(t)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			s, err := openRelay(ctx, f.c, initFrame(sshInit(f.id, token(t, f.c, f.id))))
			if err != nil {
				t.Fatal(err)
			}
			rec := &lastErr{relayStream: s}
			c, _, _ := sshOver(t, rec, cancel, "sandbox")
			sess, err := c.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			out, err := sess.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			in, err := sess.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			ready := "ready\n"
			if tc.tty {
				if err := sess.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
					t.Fatal(err)
				}
				ready = "ready\r\n"
			}
			script := "export FERRY_MARKER=" + marker + "; sleep 600 & echo ready; wait"
			if tc.end == nil {
				// The output that trips the cut waits until the marked
				// process has been seen: a cut before that kills it unseen.
				script = "export FERRY_MARKER=" + marker + "; sleep 600 & read go; head -c 8388608 /dev/zero; wait"
			}
			if err := sess.Start(script); err != nil {
				t.Fatal(err)
			}
			relaytest.WaitMarked(t, marker, 10*time.Second)
			if tc.end != nil {
				buf := make([]byte, len(ready))
				if _, err := io.ReadFull(out, buf); err != nil || string(buf) != ready {
					t.Fatalf("before the end: %q, %v", buf, err)
				}
				tc.end(t, f, cancel, sess)
			} else {
				if _, err := io.WriteString(in, "go\n"); err != nil {
					t.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, out)
				if n >= 8<<20 {
					t.Fatalf("all %d bytes crossed a relay cut after 1 MiB", n)
				}
			}
			var ee *ssh.ExitError
			if err := sess.Wait(); err == nil || errors.As(err, &ee) {
				t.Fatalf("a relay that ended reported an exit status: %v", err)
			}
			if tc.code != codes.Canceled && tc.code != codes.OK {
				// The stream's own status; a client that left has none to read.
				if err := rec.wait(t); status.Code(err) != tc.code {
					t.Fatalf("relay status %v, want %v", err, tc.code)
				}
			}
			if tc.runsOn {
				// A kill at the relay's end would have come by now.
				time.Sleep(300 * time.Millisecond)
				if len(relaytest.Marked(marker)) == 0 {
					t.Fatal("the session's process ended with the relay; upstream's sandbox lets it run on")
				}
				if _, err := f.c.DeleteSandbox(ctxFor(t), &openshellv1.DeleteSandboxRequest{Name: "box"}); err != nil {
					t.Fatal(err)
				}
			}
			relaytest.WaitNoMarked(t, marker, reapTimeout)
		})
	}
}

// lastErr keeps the error that ended a stream's receiving side.
type lastErr struct {
	relayStream
	mu  sync.Mutex
	err error
}

func (l *lastErr) Recv() (*openshellv1.TcpForwardFrame, error) {
	m, err := l.relayStream.Recv()
	if err != nil {
		l.mu.Lock()
		if l.err == nil {
			l.err = err
		}
		l.mu.Unlock()
	}
	return m, err
}

func (l *lastErr) wait(t *testing.T) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		err := l.err
		l.mu.Unlock()
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay stream did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
