package openshell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/internal/tcpframe"
	"github.com/ferry-dev/ferry/relay/sshexec"
)

// SSHConfig configures an SSH Execer (see Client.SSH). The zero value is
// what the OpenShell CLI does.
type SSHConfig struct {
	// User is the SSH login name. Default "sandbox", as the OpenShell CLI;
	// the sandbox's SSH server accepts any.
	User string
	// ConnectTimeout bounds opening the relay plus the SSH handshake.
	// Default sshexec's (10s).
	ConnectTimeout time.Duration
	// KeepAlive is the SSH keepalive interval. Default sshexec's (10s).
	KeepAlive time.Duration
	// MaxSessions is passed to sshexec. Default sshexec's (10).
	MaxSessions int
}

// sshServicePrefix + sandbox id is the service_id of an SSH relay.
const sshServicePrefix = "ssh-proxy:"

// SSH is a relay.Execer that runs commands over SSH, carried by the
// gateway's ForwardTcp relay to the sandbox's SSH server, instead of the
// exec RPCs. It keeps one SSH connection per sandbox (sshexec runs the
// commands, each on its own session) and one CreateSshSession token for
// it; after a drop the next Exec opens a new connection, and a token the
// gateway no longer takes (expired, revoked) is replaced once.
//
// Limitations first: the sandbox's host key is not checked. The sandbox
// SSH server makes a new random key at every start and the gateway
// publishes no fingerprint (host_key_fingerprint is always empty), so
// there is nothing to pin; what authenticates the far end is the
// gateway's TLS and the token, and the relay never leaves the gateway's
// own connection.
//
// Failures map to the relay sentinels as Client.Exec's do: a dropped
// relay is relay.ErrRelayLost, an unknown sandbox relay.ErrNotFound, one
// that is not READY relay.ErrNotReady, a refused token ErrAuth, and the
// gateway's connection limits (RESOURCE_EXHAUSTED) relay.ErrInvalid.
type SSH struct {
	c   *Client
	cfg SSHConfig

	mu     sync.Mutex
	boxes  map[string]*sshBox // by sandbox name
	closed bool
}

var _ relay.Execer = (*SSH)(nil)

// SSH returns an Execer that reaches sandboxes through c's gateway over
// SSH. Close it before c.
func (c *Client) SSH(cfg SSHConfig) *SSH {
	if cfg.User == "" {
		cfg.User = "sandbox"
	}
	return &SSH{c: c, cfg: cfg, boxes: map[string]*sshBox{}}
}

var errSSHClosed = fmt.Errorf("openshell: ssh execer closed: %w", net.ErrClosed)

// Exec implements relay.Execer (see sshexec.Client.Exec for how a command
// is run and stopped).
func (x *SSH) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	if err := cmd.Validate(); err != nil {
		return 0, err
	}
	b, err := x.box(cmd.Sandbox)
	if err != nil {
		return 0, err
	}
	code, err := b.ssh.Exec(ctx, cmd)
	if err != nil {
		return 0, err
	}
	return code, nil
}

func (x *SSH) box(name string) (*sshBox, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil, errSSHClosed
	}
	if b, ok := x.boxes[name]; ok {
		return b, nil
	}
	b := &sshBox{x: x, name: name}
	c, err := sshexec.New(sshexec.Config{
		User: x.cfg.User,
		// Only a label here: Dial reaches the sandbox.
		Addr: net.JoinHostPort(name, "22"),
		Dial: b.dial,
		// The host key is new at every sandbox start: see SSH.
		InsecureIgnoreHostKey: true,
		ConnectTimeout:        x.cfg.ConnectTimeout,
		KeepAlive:             x.cfg.KeepAlive,
		MaxSessions:           x.cfg.MaxSessions,
	})
	if err != nil {
		return nil, fmt.Errorf("openshell: ssh to %s: %w", name, err)
	}
	b.ssh = c
	x.boxes[name] = b
	return b, nil
}

// Close closes every SSH connection, which fails the Execs still running
// on them with relay.ErrRelayLost, and revokes the tokens, each revoke
// bounded by a few seconds. Later Execs fail.
func (x *SSH) Close() error {
	x.mu.Lock()
	x.closed = true
	boxes := x.boxes
	x.boxes = nil
	x.mu.Unlock()
	for _, b := range boxes {
		b.ssh.Close()
		b.revoke()
	}
	return nil
}

// sshBox is one sandbox's SSH client and its token.
type sshBox struct {
	x    *SSH
	name string
	ssh  *sshexec.Client

	mu      sync.Mutex
	token   string
	expires time.Time // zero: the gateway set none
}

// dial opens a relay to the sandbox for sshexec. A NOT_FOUND (the id may
// be stale: the sandbox was recreated under its name) or UNAUTHENTICATED
// (the token expired or was revoked) is retried once with a fresh id and
// token; nothing has been sent to the sandbox yet.
func (b *sshBox) dial(ctx context.Context) (net.Conn, error) {
	c := b.x.c
	for attempt := 0; ; attempt++ {
		id, err := c.SandboxID(ctx, b.name)
		if err != nil {
			return nil, err
		}
		token, err := b.grant(ctx, id)
		if attempt == 0 && errors.Is(err, relay.ErrNotFound) && ctx.Err() == nil {
			// A stale id met by a new token's request (the old token
			// expired): grant forgot it, so the retry resolves the name.
			continue
		}
		if err != nil {
			return nil, err
		}
		conn, err := c.forward(ctx, id, token)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		code := status.Code(err)
		if attempt == 0 && (code == codes.NotFound || code == codes.Unauthenticated) {
			b.drop(token)
			if code == codes.NotFound {
				c.forget(b.name)
			}
			continue
		}
		if _, ok := status.FromError(err); ok {
			return nil, statusError("open ssh relay to "+b.name, err)
		}
		return nil, fmt.Errorf("open ssh relay to %s: %w", b.name, err)
	}
}

// grant returns the token for sandbox id, asking the gateway for a new one
// when there is none or it has expired.
func (b *sshBox) grant(ctx context.Context, id string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.token != "" && (b.expires.IsZero() || time.Now().Before(b.expires)) {
		return b.token, nil
	}
	resp, err := b.x.c.api.CreateSshSession(ctx, &openshellv1.CreateSshSessionRequest{SandboxId: id})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if status.Code(err) == codes.NotFound {
			// The id may be stale; the next dial resolves the name again.
			b.x.c.forget(b.name)
		}
		return "", statusError("create ssh session for "+b.name, err)
	}
	b.token = resp.GetToken()
	b.expires = time.Time{}
	if ms := resp.GetExpiresAtMs(); ms > 0 {
		b.expires = time.UnixMilli(ms)
	}
	return b.token, nil
}

// drop forgets token unless a newer one has replaced it already.
func (b *sshBox) drop(token string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.token == token {
		b.token = ""
	}
}

// revoke tells the gateway the token is no longer needed. It is a
// courtesy (tokens expire anyway), so a failure is only logged by nobody.
func (b *sshBox) revoke() {
	b.mu.Lock()
	token := b.token
	b.token = ""
	b.mu.Unlock()
	if token == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = b.x.c.api.RevokeSshSession(ctx, &openshellv1.RevokeSshSessionRequest{Token: token})
}

// forward opens a ForwardTcp relay to sandbox id's SSH server and returns
// it as a net.Conn. The gateway's answer to the init frame (its response
// headers, or a refusal) is awaited within ctx; the relay itself lives
// until the returned conn is closed, not as long as ctx, which only
// bounds the dial.
func (c *Client) forward(ctx context.Context, id, token string) (net.Conn, error) {
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := c.api.ForwardTcp(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	init := &openshellv1.TcpForwardFrame{Payload: &openshellv1.TcpForwardFrame_Init{Init: &openshellv1.TcpForwardInit{
		SandboxId:          id,
		ServiceId:          sshServicePrefix + id,
		Target:             &openshellv1.TcpForwardInit_Ssh{Ssh: &openshellv1.SshRelayTarget{}},
		AuthorizationToken: token,
	}}}
	if err := stream.Send(init); err != nil && !errors.Is(err, io.EOF) {
		cancel()
		return nil, err
	}
	headers := make(chan error, 1)
	go func() {
		md, err := stream.Header()
		if err == nil && md == nil {
			err = io.EOF // trailers only: refused; Recv has the status
		}
		headers <- err
	}()
	select {
	case err = <-headers:
	case <-ctx.Done():
		cancel()
		<-headers
		return nil, ctx.Err()
	}
	if err != nil {
		_, rerr := stream.Recv()
		cancel()
		if rerr == nil || errors.Is(rerr, io.EOF) {
			return nil, fmt.Errorf("%w: relay ended before it opened", relay.ErrRelayLost)
		}
		return nil, rerr
	}
	return &relayConn{Conn: tcpframe.New(stream, tcpframe.Addr("ferry"), tcpframe.Addr(sshServicePrefix+id), cancel)}, nil
}

// relayConn marks a relay that broke under the SSH connection as
// relay.ErrRelayLost, whatever the stage (handshake or command) it broke
// in.
type relayConn struct{ *tcpframe.Conn }

func (r *relayConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	return n, lost(err)
}

func (r *relayConn) Write(p []byte) (int, error) {
	n, err := r.Conn.Write(p)
	return n, lost(err)
}

func lost(err error) error {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: %w", relay.ErrRelayLost, err)
}
