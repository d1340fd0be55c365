package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/local"
)

// outputChunk is the most output one event carries: large enough that
// per-message costs vanish on bulk streams, and, with the event's framing,
// still inside a 256 KiB buffer.
const outputChunk = 256<<10 - 64

// errRelayClosed is upstream's wording for a relay that dropped before the
// command's exit status: clients see it as UNAVAILABLE.
var errRelayClosed = status.Error(codes.Unavailable, "exec relay closed before the command reported an exit status")

var (
	errCut     = errors.New("gateway: stream cut by fault hook")
	errDeleted = errors.New("gateway: sandbox deleted")
)

type eventSender interface {
	Send(*openshellv1.ExecSandboxEvent) error
	Context() context.Context
}

func (s *Server) ExecSandbox(req *openshellv1.ExecSandboxRequest, stream grpc.ServerStreamingServer[openshellv1.ExecSandboxEvent]) error {
	a, err := s.admit(req)
	if err != nil {
		return err
	}
	// Upstream's one-shot exec asks its sandbox for a 0x0 terminal, which
	// the sandbox makes one cell: the request's cols and rows go unread.
	a.cmd.Size = relay.WindowSize{Cols: 1, Rows: 1}
	return s.exec(stream, a, bytes.NewReader(req.GetStdin()))
}

func (s *Server) ExecSandboxInteractive(stream grpc.BidiStreamingServer[openshellv1.ExecSandboxInput, openshellv1.ExecSandboxEvent]) error {
	if s.cfg.DisableInteractive {
		return status.Error(codes.Unimplemented, "method ExecSandboxInteractive not implemented")
	}
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "first message must be start")
	}
	if tooLarge(err) {
		// Upstream wraps whatever its first read fails with.
		return status.Errorf(codes.Internal, "failed to read first message: %v", err)
	}
	if err != nil {
		return err
	}
	req := first.GetStart()
	if req == nil {
		return status.Error(codes.InvalidArgument, "first message must be start")
	}
	// A start that will be refused is refused before the headers, as
	// upstream refuses it (trailers-only): clients take headers to mean the
	// start was accepted. Upstream's CLI sends no stdin before them;
	// ferry's keeps what it sent before them, to send again elsewhere.
	a, err := s.admit(req)
	if err != nil {
		return err
	}
	// Headers go out before any output, so that a client knows the method
	// exists before it lets go of the stdin it has sent.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}

	// As upstream: an unset dimension is the usual 80x24.
	a.cmd.Size = relay.WindowSize{Cols: dim(req.GetCols(), 80), Rows: dim(req.GetRows(), 24)}
	resize := make(chan relay.WindowSize, 1)
	a.cmd.Resize = resize

	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	stdin := newStdinStream(req.GetStdin())
	defer stdin.close()
	go func() {
		for {
			in, err := stream.Recv()
			// Upstream's stdin pump stops at the first message it cannot
			// decode as at the end of input: the command reads EOF and
			// goes on, and the RPC ends as the command does.
			if errors.Is(err, io.EOF) || tooLarge(err) {
				stdin.finish(nil)
				return
			}
			if err != nil {
				// The client is gone: nobody will read the output.
				stdin.finish(err)
				cancel(err)
				return
			}
			switch p := in.GetPayload().(type) {
			case *openshellv1.ExecSandboxInput_Stdin:
				if !stdin.put(p.Stdin) {
					return
				}
			case *openshellv1.ExecSandboxInput_Resize:
				// Upstream drops a resize without a terminal.
				if req.GetTty() {
					latest(resize, relay.WindowSize{Cols: dim(p.Resize.GetCols(), 1), Rows: dim(p.Resize.GetRows(), 1)})
				}
			case *openshellv1.ExecSandboxInput_Start:
				// The cause first: the command's end, which finish may
				// bring at once, reads it to answer InvalidArgument.
				err := status.Error(codes.InvalidArgument, "start may only be sent once")
				cancel(err)
				stdin.finish(err)
				return
			}
		}
	}()
	err = s.exec(&ctxSender{ctx: ctx, s: stream}, a, stdin)
	if cause := context.Cause(ctx); cause != nil && status.Code(cause) == codes.InvalidArgument {
		err = cause
	}
	return err
}

// dim is a requested terminal dimension, def when unset; upstream's
// sandbox keeps it to what a winsize holds.
func dim(v uint32, def uint16) uint16 {
	if v == 0 {
		return def
	}
	return uint16(min(v, 0xffff))
}

// latest queues ws for the process's terminal without waiting: a size the
// runner has not taken yet is stale once a newer one comes, and a runner
// that has finished takes none. Only the receiver sends, so the second
// send always finds room.
func latest(c chan relay.WindowSize, ws relay.WindowSize) {
	select {
	case c <- ws:
		return
	default:
	}
	select {
	case <-c:
	default:
	}
	select {
	case c <- ws:
	default:
	}
}

type ctxSender struct {
	ctx context.Context
	s   interface {
		Send(*openshellv1.ExecSandboxEvent) error
	}
}

func (c *ctxSender) Send(e *openshellv1.ExecSandboxEvent) error { return c.s.Send(e) }
func (c *ctxSender) Context() context.Context                   { return c.ctx }

// exec runs an admitted request in its sandbox and streams the result;
// the returned error is the RPC's status.
func (s *Server) exec(stream eventSender, a admitted, stdin io.Reader) error {
	start := time.Now()
	cmd, sb, pb := a.cmd, a.sb, a.pb
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	untrack, err := s.reg.track(pb.GetMetadata().GetId(), cancel)
	if err != nil {
		return err
	}
	defer untrack()

	cgroup, err := s.procs.open(pb.GetMetadata().GetId())
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if cgroup != nil {
		defer cgroup.Close()
	}
	id, pid := pb.GetMetadata().GetId(), 0
	runner, err := local.New(local.Config{
		Dir:            sb.dir,
		Env:            s.environ(sb.dir, pb, termOf(cmd.TTY)),
		Shell:          s.cfg.Shell,
		KilledExitCode: 1,
		// Upstream's supervisor kills nothing when the exec's client goes
		// away or its timeout passes: the process gets its stdin's EOF and
		// runs on (openshell-supervisor-process/src/ssh.rs, v0.0.111).
		Abandon:   true,
		ChunkSize: outputChunk,
		Logger:    s.cfg.Logger.With("sandbox", pb.GetMetadata().GetName()),
		Cgroup:    cgroup,
		Started: func(p int) {
			pid = p
			s.logLaunch(id, cmd, p)
		},
	})
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	var mu sync.Mutex
	send := func(e *openshellv1.ExecSandboxEvent) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(e)
	}
	fault := &cutter{left: s.cfg.CutAfter, on: s.cfg.CutAfter > 0, cancel: cancel}
	cmd.Stdin = &faultReader{r: stdin, c: fault, flip: flipper{at: s.cfg.CorruptStdinAfter}}
	cmd.Stdout = &eventWriter{c: fault, send: send, flip: flipper{at: s.cfg.CorruptStdoutAfter}, wrap: func(b []byte) *openshellv1.ExecSandboxEvent {
		return &openshellv1.ExecSandboxEvent{Payload: &openshellv1.ExecSandboxEvent_Stdout{Stdout: &openshellv1.ExecSandboxStdout{Data: b}}}
	}}
	cmd.Stderr = &eventWriter{c: fault, send: send, wrap: func(b []byte) *openshellv1.ExecSandboxEvent {
		return &openshellv1.ExecSandboxEvent{Payload: &openshellv1.ExecSandboxEvent_Stderr{Stderr: &openshellv1.ExecSandboxStderr{Data: b}}}
	}}

	var counts execCounts
	counts.count(cmd)
	code, err := runner.Exec(ctx, cmd)
	elapsed := time.Since(start)
	end := execEnd(cmd, elapsed, code, err, context.Cause(ctx), stream.Context().Err())
	if pid != 0 {
		s.logTerminate(id, cmd, pid, code, end)
	}
	s.logExec(pb, cmd, &counts, elapsed, code, end)
	log := s.cfg.Logger.With("sandbox", pb.GetMetadata().GetName(), "seconds", elapsed.Seconds())
	if err != nil {
		cause := context.Cause(ctx)
		switch {
		case errors.Is(cause, errCut), errors.Is(err, errCut):
			log.Info("exec cut by fault hook")
			return errRelayClosed
		case errors.Is(cause, errDeleted):
			log.Info("exec stopped: sandbox deleted")
			return errRelayClosed
		case errors.Is(cause, errStopped):
			log.Info("exec stopped: sandbox stopped")
			return errRelayClosed
		case stream.Context().Err() != nil:
			log.Info("exec stopped: client gone")
			return status.FromContextError(stream.Context().Err()).Err()
		case cause != nil && status.Code(cause) != codes.Unknown:
			return cause
		}
		log.Warn("exec failed", "err", err)
		return status.Error(codes.Internal, err.Error())
	}
	log.Debug("exec done", "exit_code", code)
	return send(&openshellv1.ExecSandboxEvent{Payload: &openshellv1.ExecSandboxEvent_Exit{Exit: &openshellv1.ExecSandboxExit{ExitCode: int32(code)}}})
}

// admitted is a request that passed admit: its command, and the READY
// sandbox it runs in as it was then.
type admitted struct {
	cmd *relay.Command
	sb  *sandbox
	pb  *openshellv1.Sandbox
}

// admit checks a request's limits and its sandbox, before any response.
func (s *Server) admit(req *openshellv1.ExecSandboxRequest) (admitted, error) {
	cmd, err := s.command(req)
	if err != nil {
		return admitted{}, err
	}
	sb, ok := s.reg.lookup(req.GetSandboxId())
	if !ok {
		return admitted{}, status.Error(codes.NotFound, "sandbox not found")
	}
	pb := s.reg.record(sb)
	if pb.GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		return admitted{}, status.Error(codes.FailedPrecondition, "sandbox is not ready")
	}
	return admitted{cmd: cmd, sb: sb, pb: pb}, nil
}

// command checks a request against the gateway's limits, in upstream's
// order where a client could tell the difference.
func (s *Server) command(req *openshellv1.ExecSandboxRequest) (*relay.Command, error) {
	if req.GetSandboxId() == "" {
		return nil, status.Error(codes.InvalidArgument, "sandbox_id is required")
	}
	if len(req.GetCommand()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "command is required")
	}
	cmd := &relay.Command{
		TTY:     req.GetTty(),
		Argv:    req.GetCommand(),
		Workdir: req.GetWorkdir(),
		Env:     req.GetEnvironment(),
		Timeout: time.Duration(req.GetTimeoutSeconds()) * time.Second,
	}
	if err := cmd.Validate(); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return cmd, nil
}

// environ is the whole environment of a sandbox process: nothing of the
// gateway's own leaks in, and FERRY_SANDBOX_ID names the sandbox.
//
// TERM is term: dumb without a terminal, and on one the type upstream's
// gateway asks its sandbox's SSH server for (xterm-256color) or an SSH
// client's pty-req names; the sandbox's own variables may still override it.
func (s *Server) environ(dir string, pb *openshellv1.Sandbox, term string) []string {
	env := []string{
		"HOME=" + dir,
		"USER=" + s.user,
		"SHELL=/bin/bash",
		"PATH=" + s.cfg.Path,
		"TERM=" + term,
	}
	for _, m := range []map[string]string{pb.GetSpec().GetTemplate().GetEnvironment(), pb.GetSpec().GetEnvironment()} {
		for k, v := range m {
			if k != sandboxIDVar {
				env = append(env, k+"="+v)
			}
		}
	}
	// Last, and never the spec's: the sweep that ends a sandbox's
	// processes finds them by it (procs_linux.go).
	return append(env, sandboxIDVar+"="+pb.GetMetadata().GetId())
}

// termOf is an exec's TERM.
func termOf(tty bool) string {
	if tty {
		return "xterm-256color"
	}
	return "dumb"
}

// cutter counts bytes for the CutAfter hook, across stdin and output.
type cutter struct {
	mu     sync.Mutex
	on     bool
	left   int64
	cancel context.CancelCauseFunc
}

// take returns how many of n bytes may pass; fewer means the stream is cut.
func (c *cutter) take(n int) int {
	if !c.on {
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if int64(n) > c.left {
		n = int(c.left)
		c.left = 0
		c.cancel(errCut)
		return n
	}
	c.left -= int64(n)
	return n
}

// flipper flips the byte that follows the first at bytes of a stream.
type flipper struct {
	at, seen int64
}

func (f *flipper) pass(p []byte) {
	if f.at > 0 && f.seen <= f.at && f.at < f.seen+int64(len(p)) {
		p[f.at-f.seen] ^= 0x20
	}
	f.seen += int64(len(p))
}

type faultReader struct {
	r    io.Reader
	c    *cutter
	flip flipper
}

func (f *faultReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	f.flip.pass(p[:n])
	if m := f.c.take(n); m < n {
		return m, errCut
	}
	return n, err
}

// WriteTo passes f.r's bytes to w through the same hooks as Read, so that
// a stdin that writes itself (stdinStream) still does.
func (f *faultReader) WriteTo(w io.Writer) (int64, error) {
	return writeTo(f.r, faultStdin{f: f, w: w})
}

type faultStdin struct {
	f *faultReader
	w io.Writer
}

func (h faultStdin) Write(p []byte) (int, error) {
	h.f.flip.pass(p)
	m := h.f.c.take(len(p))
	n, err := h.w.Write(p[:m])
	if err == nil && m < len(p) {
		err = errCut
	}
	return n, err
}

type eventWriter struct {
	c    *cutter
	flip flipper
	send func(*openshellv1.ExecSandboxEvent) error
	wrap func([]byte) *openshellv1.ExecSandboxEvent
}

func (w *eventWriter) Write(p []byte) (int, error) {
	m := w.c.take(len(p))
	w.flip.pass(p[:m])
	if m > 0 {
		if err := w.send(w.wrap(p[:m])); err != nil {
			return 0, fmt.Errorf("send output: %w", err)
		}
	}
	if m < len(p) {
		return m, errCut
	}
	return len(p), nil
}
