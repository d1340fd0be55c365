package openshell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/ferry-dev/ferry/internal/rpctrace"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/internal/execcodec"
)

// Config configures a Client.
type Config struct {
	Settings
	// ConnectTimeout bounds the first connection. Default 10s, as the
	// OpenShell CLI.
	ConnectTimeout time.Duration
	// KeepAlive is the HTTP/2 ping interval that finds a dead gateway
	// connection. Default 10s, as the OpenShell CLI.
	KeepAlive time.Duration
	// ChunkSize is the stdin bytes per message. Default 256 KiB less room
	// for framing, so a message fits a 256 KiB buffer; at most
	// relay.MaxMessageSize minus room for framing.
	ChunkSize int
	// HeaderWait bounds how long Exec keeps the stdin it sent before the
	// gateway's response headers, for a second attempt (see Exec); after
	// it, stdin is no longer kept and no second attempt is made. Default
	// 5s.
	HeaderWait time.Duration
	// Dialer, when set, replaces TCP for reaching the gateway (tests use it
	// to cut connections).
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// IDs, when set, keeps the sandbox ids this Client resolves for other
	// Clients (other processes) of the same gateway and workspace, and
	// gives it theirs.
	IDs IDCache
}

const maxChunk = relay.MaxMessageSize - 64<<10

// Client talks to one OpenShell gateway. It is safe for concurrent use.
type Client struct {
	cfg  Config
	conn *grpc.ClientConn
	api  openshellv1.OpenShellClient

	mu      sync.Mutex
	ids     map[string]string      // sandbox name -> id
	lookups map[string]*lookupCall // GetSandbox calls in flight, by name
	oneShot bool                   // the gateway lacks ExecSandboxInteractive

	// For tests: replay's counts, summed over Execs.
	stdinStats [3]atomic.Int64
}

var _ relay.Execer = (*Client)(nil)

// Dial connects to the gateway in cfg. The connection is made lazily by
// gRPC; the first RPC reports an unreachable gateway.
func Dial(cfg Config) (*Client, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("openshell: no gateway endpoint")
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 10 * time.Second
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = 256<<10 - 64
	}
	if cfg.ChunkSize < 0 || cfg.ChunkSize > maxChunk {
		return nil, fmt.Errorf("openshell: ChunkSize %d outside 1..%d", cfg.ChunkSize, maxChunk)
	}
	if cfg.HeaderWait == 0 {
		cfg.HeaderWait = 5 * time.Second
	}
	if cfg.Workspace == "" {
		cfg.Workspace = "default"
	}
	tlsCfg, err := cfg.TLSConfig()
	if err != nil {
		return nil, err
	}
	var creds credentials.TransportCredentials
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	} else {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(earlyCreds{creds}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: cfg.KeepAlive, Timeout: cfg.KeepAlive, PermitWithoutStream: true}),
		grpc.WithConnectParams(connectParams(cfg.ConnectTimeout)),
		grpc.WithInitialWindowSize(windowSize),
		grpc.WithInitialConnWindowSize(windowSize),
		grpc.WithWriteBufferSize(ioBuffer),
		grpc.WithReadBufferSize(ioBuffer),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16 << 20)),
		grpc.WithUserAgent("ferry"),
		grpc.WithDefaultServiceConfig(retryConfig),
	}
	if cfg.BearerToken != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: cfg.BearerToken, secure: tlsCfg != nil}))
	}
	if cfg.Dialer != nil {
		opts = append(opts, grpc.WithContextDialer(cfg.Dialer))
	}
	opts = append(opts, rpctrace.Options("gw")...)
	conn, err := grpc.NewClient("passthrough:///"+cfg.Target(), opts...)
	if err != nil {
		return nil, fmt.Errorf("dial gateway %s: %w", cfg.Endpoint, err)
	}
	return &Client{cfg: cfg, conn: conn, api: openshellv1.NewOpenShellClient(conn), ids: map[string]string{}, lookups: map[string]*lookupCall{}}, nil
}

// retryConfig retries the calls that change nothing, or nothing a second
// call would undo, when the connection under them is lost: a call made on
// a connection whose drop gRPC has not yet seen fails before the server
// has it, and the retry goes out on a new one. Exec, ForwardTcp and the
// calls that create or delete are not retried: a command may have run, a
// sandbox may have been made, and the second call would say otherwise.
const retryConfig = `{"methodConfig": [{
	"name": [
		{"service": "openshell.v1.OpenShell", "method": "Health"},
		{"service": "openshell.v1.OpenShell", "method": "GetGatewayInfo"},
		{"service": "openshell.v1.OpenShell", "method": "GetSandbox"},
		{"service": "openshell.v1.OpenShell", "method": "ListSandboxes"},
		{"service": "openshell.v1.OpenShell", "method": "CreateSshSession"},
		{"service": "openshell.v1.OpenShell", "method": "RevokeSshSession"},
		{"service": "openshell.v1.OpenShell", "method": "GetSandboxLogs"},
		{"service": "openshell.v1.OpenShell", "method": "GetWorkspace"},
		{"service": "openshell.v1.OpenShell", "method": "ListWorkspaces"},
		{"service": "openshell.v1.OpenShell", "method": "GetProvider"},
		{"service": "openshell.v1.OpenShell", "method": "ListProviders"}
	],
	"retryPolicy": {
		"maxAttempts": 3,
		"initialBackoff": "0.05s",
		"maxBackoff": "1s",
		"backoffMultiplier": 4,
		"retryableStatusCodes": ["UNAVAILABLE"]
	}
}]}`

const (
	windowSize = 4 << 20
	ioBuffer   = 256 << 10
)

// Close closes the connection; running Execs fail.
func (c *Client) Close() error { return c.conn.Close() }

type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false only so that a plaintext loopback
// gateway can be used with a token, as the OpenShell CLI allows.
func (b bearer) RequireTransportSecurity() bool { return false }

// Exec implements relay.Execer.
//
// The request stream opens with `start`, and stdin follows at once, without
// waiting a round trip for the gateway's response headers: a caller that
// writes first (an agent's host, with its hello and first calls) reaches
// the command with the exec itself. Until the headers say the start was
// accepted, what stdin gave is kept (see replay), so that a gateway without
// the interactive RPC, or a stale sandbox id, costs a second attempt but
// no input.
//
// The gateway stops nothing: an exec whose RPC is cancelled, whose relay
// drops or whose timeout passes gets its stdin's EOF and runs on in the
// sandbox (upstream's supervisor, v0.0.111). So the command carries a
// mark (relay.MarkVar), and on each of those ends Exec runs
// relay.StopScript in the sandbox before it returns, ending every process
// that still carries the mark.
func (c *Client) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	if err := cmd.Validate(); err != nil {
		return 0, err
	}
	if cmd.EndsAtEOF && !cmd.TTY {
		return c.exec(ctx, cmd)
	}
	mark := relay.NewMark()
	marked := *cmd
	marked.Env = make(map[string]string, len(cmd.Env)+1)
	for k, v := range cmd.Env {
		marked.Env[k] = v
	}
	marked.Env[relay.MarkVar] = mark
	if err := marked.Validate(); err != nil {
		return 0, err
	}
	// The RPC outlives a cancel of ctx until the stop is done: ending it
	// first would give the command its stdin's EOF, and a command that
	// takes EOF for the end of its input (tar at an entry's boundary)
	// would act on a part of it.
	rctx, rcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer rcancel()
	var cancelled bool
	var cancelStop error
	execDone := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			cancelled = true
			cancelStop = c.stopUntil(ctx, cmd.Sandbox, mark, execDone)
			rcancel()
		case <-execDone:
		}
	}()
	start := time.Now()
	code, err := c.exec(rctx, &marked)
	close(execDone)
	<-stopped
	if cancelled {
		if cancelStop != nil {
			// Still a cancel; but not one that left nothing behind.
			return 0, errors.Join(ctx.Err(), cancelStop)
		}
		return 0, ctx.Err()
	}
	timedOut := err == nil && code == relay.ExitTimeout && cmd.Timeout > 0 && time.Since(start) >= cmd.Timeout
	if timedOut || errors.Is(err, relay.ErrRelayLost) {
		if serr := c.stop(ctx, cmd.Sandbox, mark); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	return code, err
}

// stopWait bounds the stop that follows an exec's abnormal end.
const stopWait = 15 * time.Second

// stopTries bounds stopUntil: its waits add up to 6.3 s.
const stopTries = 6

// stopUntil stops what carries mark until done is closed, that is until
// the exec has ended. The exec's RPC is still open, so that its command
// gets no EOF while it may yet act on it; but its command may not have
// started when a stop runs (upstream starts it after its headers, and
// the stop is an RPC of its own), so the stop runs again, less and less
// often, while done stays open.
func (c *Client) stopUntil(ctx context.Context, sandbox, mark string, done <-chan struct{}) error {
	var err error
	wait := 100 * time.Millisecond
	for range stopTries {
		err = c.stop(ctx, sandbox, mark)
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return err
		case <-t.C:
		}
		wait *= 2
	}
	return err
}

// ErrNotStopped means that what an exec left running in the sandbox,
// after its cancel, its lost relay or its timeout, may still be running:
// the exec that would have stopped it failed.
var ErrNotStopped = errors.New("openshell: cannot stop what the command left running")

// stop ends the processes that carry mark in the sandbox, through an exec
// of its own that outlives ctx's cancel.
func (c *Client) stop(ctx context.Context, sandbox, mark string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopWait)
	defer cancel()
	var stderr strings.Builder
	code, err := c.exec(ctx, &relay.Command{Sandbox: sandbox, Argv: []string{"sh", "-c", relay.StopScript, "sh", mark}, Stderr: &stderr})
	switch {
	case err != nil:
		return fmt.Errorf("%w in %s: %w", ErrNotStopped, sandbox, err)
	case code != 0:
		return fmt.Errorf("%w in %s: exit %d: %s", ErrNotStopped, sandbox, code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// exec is Exec without the mark and the stop.
func (c *Client) exec(ctx context.Context, cmd *relay.Command) (int, error) {
	id, cached, err := c.readyID(ctx, cmd.Sandbox)
	if err != nil {
		return 0, err
	}
	var in *replay
	if cmd.Stdin != nil {
		in = newReplay(cmd.Stdin, earlyStdin)
		defer func() {
			logged, replayed, inherited := in.counts()
			c.stdinStats[0].Add(logged)
			c.stdinStats[1].Add(replayed)
			c.stdinStats[2].Add(inherited)
		}()
	}
	code, err := c.execOnce(ctx, id, cmd, in)
	switch {
	case !in.replayable():
		// Retrying is safe only while stdin can be given again whole.
	case errors.Is(err, relay.ErrNotFound):
		// The id may be stale: the sandbox was recreated under its name.
		c.forget(cmd.Sandbox)
		if id2, err2 := c.SandboxID(ctx, cmd.Sandbox); err2 == nil && id2 != id {
			return c.execOnce(ctx, id2, cmd, in)
		}
	case cached && errors.Is(err, relay.ErrNotReady):
		// A cached id skipped the lookup that says which phase the
		// sandbox is in; the lookup's error says it (or, ready by now,
		// the command runs). Without the cache the lookup has just
		// been made.
		c.forget(cmd.Sandbox)
		id2, err2 := c.SandboxID(ctx, cmd.Sandbox)
		if err2 != nil {
			return 0, err2
		}
		return c.execOnce(ctx, id2, cmd, in)
	}
	return code, err
}

// execOnce is one attempt at cmd. Its stdin, when it has one, comes from
// in, from the first byte.
func (c *Client) execOnce(ctx context.Context, id string, cmd *relay.Command, in *replay) (int, error) {
	c.mu.Lock()
	oneShot := c.oneShot
	c.mu.Unlock()
	if oneShot {
		return c.execOneShot(ctx, id, cmd, in)
	}
	code, err := c.execInteractive(ctx, id, cmd, in)
	if errors.Is(err, errUnimplemented) {
		c.mu.Lock()
		c.oneShot = true
		c.mu.Unlock()
		return c.execOneShot(ctx, id, cmd, in)
	}
	return code, err
}

var errUnimplemented = errors.New("openshell: ExecSandboxInteractive not implemented")

func (c *Client) request(id string, cmd *relay.Command) *openshellv1.ExecSandboxRequest {
	req := &openshellv1.ExecSandboxRequest{
		SandboxId:   id,
		Command:     cmd.Argv,
		Workdir:     cmd.Workdir,
		Environment: cmd.Env,
		Tty:         cmd.TTY,
	}
	if cmd.TTY {
		req.Cols, req.Rows = uint32(cmd.Size.Cols), uint32(cmd.Size.Rows)
	}
	if cmd.Timeout > 0 {
		secs := math.Ceil(cmd.Timeout.Seconds())
		if secs > math.MaxUint32 {
			secs = math.MaxUint32
		}
		req.TimeoutSeconds = uint32(secs)
	}
	return req
}

func (c *Client) execInteractive(ctx context.Context, id string, cmd *relay.Command, in *replay) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.ExecSandboxInteractive(ctx, execcodec.CallOption())
	if err != nil {
		return 0, c.rpcError(ctx, cmd, err)
	}
	if err := stream.Send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Start{Start: c.request(id, cmd)}}); err != nil && !errors.Is(err, io.EOF) {
		return 0, c.rpcError(ctx, cmd, err)
	}

	// The pump is the only sender from here on (gRPC allows one sender and
	// one receiver at a time). It is not waited for: it may be blocked in
	// the caller's Read; cancel makes its next Send fail. What it reads
	// before the headers is kept by in for an attempt that follows this
	// one.
	var rd *replayReader
	if in != nil {
		rd = in.reader(ctx)
		c2 := *cmd
		c2.Stdin = rd
		cmd = &c2
	}
	stdinErr := make(chan error, 1)
	abort := cancel
	if mark := cmd.Env[relay.MarkVar]; mark != "" {
		// A broken stdin must not reach the command as its EOF, which
		// ending the RPC would give it: it is stopped first, until the
		// exec has ended.
		ended := make(chan struct{})
		defer close(ended)
		abort = func() {
			// Not when the attempt is over anyway: its ctx is done (the
			// caller's cancel, which Exec stops), or a later attempt
			// has the command and stdin.
			if ctx.Err() == nil && (rd == nil || !rd.superseded()) {
				_ = c.stopUntil(ctx, cmd.Sandbox, mark, ended)
			}
			cancel()
		}
	}
	go c.pump(ctx, stream, cmd, stdinErr, abort)
	failed := func(err error) error {
		select {
		case serr := <-stdinErr:
			return fmt.Errorf("read stdin: %w", serr)
		default:
			return err
		}
	}

	// Header blocks until the gateway answers or the stream fails; it is
	// released by cancel at the latest.
	headers := make(chan error, 1)
	go func() {
		md, err := stream.Header()
		if err == nil && md == nil {
			// Trailers only: the RPC ended before it began (for example
			// UNIMPLEMENTED); Recv below gives the status.
			err = io.EOF
		}
		headers <- err
	}()
	wait := time.NewTimer(c.cfg.HeaderWait)
	defer wait.Stop()
	select {
	case err := <-headers:
		if err != nil {
			// Header's error is not the status; Recv gives it.
			_, rerr := stream.Recv()
			if status.Code(rerr) == codes.Unimplemented {
				return 0, errUnimplemented
			}
			if rerr == nil || errors.Is(rerr, io.EOF) {
				return 0, fmt.Errorf("exec in %s: %w: stream ended before headers", cmd.Sandbox, relay.ErrRelayLost)
			}
			return 0, failed(c.rpcError(ctx, cmd, rerr))
		}
	case <-wait.C:
		// No headers yet, and perhaps none to come before the
		// command's output (a gateway may hold them): stdin is no
		// longer kept, and this attempt is the only one.
	case <-ctx.Done():
		return 0, failed(ctx.Err())
	}
	if in != nil {
		in.commit(rd)
	}

	code, err := c.deliver(ctx, stream, cmd)
	if err != nil {
		return 0, failed(err)
	}
	// An exit status that raced a broken stdin is still no success: the
	// process did not get all its input.
	return code, failed(nil)
}

// pump streams stdin, and on a terminal its size changes. At stdin's EOF
// it half-closes the stream, which is the process's EOF; on a terminal
// with sizes to send it does so only once Resize is closed, as a
// half-closed stream carries no more of them (and a terminal's EOF is a
// typed ^D anyway). On any other read error it reports the error and
// cancels the RPC instead, so that the gateway kills the process rather
// than let it take a broken input for a complete one.
func (c *Client) pump(ctx context.Context, stream grpc.BidiStreamingClient[openshellv1.ExecSandboxInput, openshellv1.ExecSandboxEvent], cmd *relay.Command, failed chan<- error, cancel func()) {
	if !cmd.TTY || cmd.Resize == nil {
		if c.pumpStdin(stream.Send, cmd.Stdin, failed, cancel) {
			_ = stream.CloseSend()
		}
		return
	}
	// gRPC allows one sender: stdin's messages come here to be sent, each
	// waited for, as the reader reuses its buffer once its send returns.
	// The reader is not waited for (it may be blocked in the caller's
	// Read); ctx, cancelled when the RPC ends, releases its sends.
	type sendReq struct {
		m    *openshellv1.ExecSandboxInput
		done chan error
	}
	msgs := make(chan sendReq)
	stdinDone := make(chan bool, 1)
	go func() {
		stdinDone <- c.pumpStdin(func(m *openshellv1.ExecSandboxInput) error {
			r := sendReq{m: m, done: make(chan error, 1)}
			select {
			case msgs <- r:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case err := <-r.done:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}, cmd.Stdin, failed, cancel)
	}()
	resize := cmd.Resize
	for {
		select {
		case r := <-msgs:
			err := stream.Send(r.m)
			r.done <- err
			if err != nil {
				return
			}
		case ws, ok := <-resize:
			if !ok {
				resize = nil
				if stdinDone == nil {
					_ = stream.CloseSend()
					return
				}
				continue
			}
			if stream.Send(resizeMsg(ws)) != nil {
				return
			}
		case eof := <-stdinDone:
			if !eof {
				return
			}
			// Sizes still matter after the input: keep sending them
			// while the RPC lasts, or until there are none to come.
			stdinDone, msgs = nil, nil
			if resize == nil {
				_ = stream.CloseSend()
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func resizeMsg(ws relay.WindowSize) *openshellv1.ExecSandboxInput {
	return &openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Resize{Resize: &openshellv1.ExecSandboxWindowResize{Cols: uint32(ws.Cols), Rows: uint32(ws.Rows)}}}
}

// pumpStdin sends stdin's bytes with send. It reports true at stdin's
// EOF (or for a nil stdin), false after a failed send or a read error,
// which it reports on failed, cancelling the RPC.
func (c *Client) pumpStdin(send func(*openshellv1.ExecSandboxInput) error, stdin io.Reader, failed chan<- error, cancel func()) bool {
	if stdin == nil {
		return true
	}
	buf := make([]byte, c.cfg.ChunkSize)
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			// Send does not keep buf after it returns.
			if serr := send(&openshellv1.ExecSandboxInput{Payload: &openshellv1.ExecSandboxInput_Stdin{Stdin: buf[:n]}}); serr != nil {
				return false
			}
		}
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			failed <- err
			cancel()
			return false
		}
	}
}

func (c *Client) execOneShot(ctx context.Context, id string, cmd *relay.Command, in *replay) (int, error) {
	req := c.request(id, cmd)
	if in != nil {
		// The request takes stdin whole: no attempt follows this one.
		rd := in.reader(ctx)
		in.commit(rd)
		room := relay.MaxMessageSize - 64<<10 - len(relay.ShellCommand(cmd.Workdir, cmd.Env, cmd.Argv))
		b, err := io.ReadAll(io.LimitReader(rd, int64(room)+1))
		if err != nil {
			return 0, fmt.Errorf("read stdin: %w", err)
		}
		if len(b) > room {
			return 0, fmt.Errorf("exec in %s: %w: this gateway has no streaming exec and one-shot stdin is limited to %d bytes", cmd.Sandbox, relay.ErrStdinTooLarge, room)
		}
		req.Stdin = b
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.api.ExecSandbox(ctx, req, execcodec.CallOption())
	if err != nil {
		return 0, c.rpcError(ctx, cmd, err)
	}
	return c.deliver(ctx, stream, cmd)
}

// deliver copies an exec's output events to cmd's writers and returns the
// exit code. A stream that ends without an exit event is a lost relay.
//
// Each event's data is an execcodec payload, released once its Write has
// returned: io.Writer's contract is that a writer keeps no slice of it.
func (c *Client) deliver(ctx context.Context, stream interface {
	Recv() (*openshellv1.ExecSandboxEvent, error)
}, cmd *relay.Command) (int, error) {
	stdout, stderr := orDiscard(cmd.Stdout), orDiscard(cmd.Stderr)
	exit := -1
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if exit < 0 {
				return 0, fmt.Errorf("exec in %s: %w: stream ended without an exit status", cmd.Sandbox, relay.ErrRelayLost)
			}
			return exit, nil
		}
		if err != nil {
			return 0, c.rpcError(ctx, cmd, err)
		}
		switch p := ev.GetPayload().(type) {
		case *openshellv1.ExecSandboxEvent_Stdout:
			_, err := stdout.Write(p.Stdout.GetData())
			execcodec.Release(p.Stdout.GetData())
			if err != nil {
				return 0, fmt.Errorf("write stdout: %w", err)
			}
		case *openshellv1.ExecSandboxEvent_Stderr:
			_, err := stderr.Write(p.Stderr.GetData())
			execcodec.Release(p.Stderr.GetData())
			if err != nil {
				return 0, fmt.Errorf("write stderr: %w", err)
			}
		case *openshellv1.ExecSandboxEvent_Exit:
			exit = int(p.Exit.GetExitCode())
		}
	}
}

// rpcError turns a gRPC status into the relay's errors.
func (c *Client) rpcError(ctx context.Context, cmd *relay.Command, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return statusError("exec in "+cmd.Sandbox, err)
}

func statusError(action string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", action, err)
	}
	var sentinel error
	switch st.Code() {
	case codes.Unavailable:
		sentinel = relay.ErrRelayLost
	case codes.NotFound:
		sentinel = relay.ErrNotFound
	case codes.FailedPrecondition:
		sentinel = relay.ErrNotReady
	case codes.InvalidArgument:
		sentinel = relay.ErrInvalid
	case codes.ResourceExhausted:
		// gRPC says the same of a message over its size limit, which
		// waiting does not cure.
		sentinel = relay.ErrBusy
		if strings.Contains(st.Message(), "larger than max") {
			sentinel = relay.ErrInvalid
		}
	case codes.AlreadyExists:
		sentinel = ErrExists
	case codes.Canceled:
		return fmt.Errorf("%s: %w", action, context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", action, context.DeadlineExceeded)
	case codes.Unauthenticated, codes.PermissionDenied:
		sentinel = ErrAuth
	}
	msg := st.Message()
	if sentinel == nil {
		return fmt.Errorf("%s: %s: %w", action, strings.ToLower(st.Code().String()), err)
	}
	// The gateway's message often repeats the sentinel ("sandbox not
	// found"); say it once.
	if msg == "" || strings.HasSuffix(sentinel.Error(), msg) {
		return fmt.Errorf("%s: %w", action, sentinel)
	}
	return fmt.Errorf("%s: %w: %s", action, sentinel, msg)
}

// ErrExists means a sandbox of that name already exists.
var ErrExists = errors.New("openshell: sandbox already exists")

// ErrAuth means the gateway refused our credentials.
var ErrAuth = errors.New("openshell: not authorized")

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
