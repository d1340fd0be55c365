package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferry-dev/ferry/relay"
)

// Config says how to start processes. The zero value runs argv directly in
// the current directory with this process's environment.
type Config struct {
	// Dir is the workspace root: where a command without Workdir starts and
	// what a relative Workdir is relative to. Empty is the current directory.
	Dir string
	// Env, when non-nil, replaces this process's environment as the base
	// that Command.Env is added to. An empty non-nil slice clears it.
	Env []string
	// Shell, when set, runs every command as Shell + [one string], the
	// string built by relay.ShellCommand (`cd W && K=v argv...`), started in
	// Dir: how an OpenShell gateway runs exec (["/bin/bash", "-lc"]).
	Shell []string
	// KilledExitCode is reported for a process killed by a signal. Zero
	// means 128+signal, as shells report it.
	KilledExitCode int
	// OutputGrace bounds how long Exec waits, after the process has exited,
	// for its output pipes to close (a background child may hold them).
	// Past it the process group is killed. Default 1s. With Abandon,
	// upstream's waits apply instead (see SettleOutput).
	OutputGrace time.Duration
	// ChunkSize is the largest piece of output handed to Stdout or Stderr
	// in one Write. Default 32 KiB.
	ChunkSize int
	// Logger, when set, is told of a process killed by a signal, which
	// KilledExitCode may otherwise make look like a plain failure.
	Logger *slog.Logger
	// Cgroup, when set, is an open cgroup v2 directory each process is
	// cloned into (CLONE_INTO_CGROUP), so that its owner can end all that
	// it starts, including what leaves the process group. The caller keeps
	// it open until Exec returns.
	Cgroup *os.File
	// Started, when set, is called with the pid of each process once it
	// has started, before Exec waits for it (the embedded gateway's
	// process-launch event).
	Started func(pid int)
	// Abandon leaves the process running where Exec would kill it (a
	// cancel, the timeout, a failed stdin or output, output still open
	// once upstream's waits after the exit are spent): its output is read
	// on and dropped until it ends by itself, and its stdin is closed, or
	// on a terminal left without input (a terminal's process gets no
	// hangup: the master stays open while anything holds the terminal).
	// It is how upstream's sandbox treats an exec whose client went away
	// or timed out, or whose background child holds its output, and what
	// ferry's clients must stop themselves (relay/openshell). Exec still
	// returns at once, as it would have.
	Abandon bool
}

// Runner runs processes on this machine.
type Runner struct {
	cfg Config
}

var _ relay.Execer = (*Runner)(nil)

// New returns a Runner for cfg.
func New(cfg Config) (*Runner, error) {
	if cfg.OutputGrace == 0 {
		cfg.OutputGrace = time.Second
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = chunk
	}
	if cfg.ChunkSize < 0 {
		return nil, errors.New("local: negative ChunkSize")
	}
	if cfg.OutputGrace < 0 {
		return nil, errors.New("local: negative OutputGrace")
	}
	if cfg.Dir != "" {
		abs, err := filepath.Abs(cfg.Dir)
		if err != nil {
			return nil, fmt.Errorf("resolve dir: %w", err)
		}
		cfg.Dir = abs
	}
	return &Runner{cfg: cfg}, nil
}

const chunk = 32 << 10

// Exec implements relay.Execer. The process is the leader of its own
// process group, and cancellation, a timeout or a failed output writer
// kill the whole group.
func (r *Runner) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	if err := cmd.Validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c, err := r.command(cmd)
	if err != nil {
		return 0, err
	}
	if cmd.TTY {
		return r.execTTY(ctx, cmd, c)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("create stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return 0, fmt.Errorf("create stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return 0, fmt.Errorf("create stderr pipe: %w", err)
	}
	// Bigger pipes mean fewer, larger reads on a bulk stream.
	growPipe(outW, r.cfg.ChunkSize)
	growPipe(inW, r.cfg.ChunkSize)
	c.Stdin, c.Stdout, c.Stderr = inR, outW, errW
	setGroup(c)
	intoCgroup(c, r.cfg.Cgroup)
	if err := c.Start(); err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		// A shell reports a program it cannot run as 127 or 126 on the
		// child's stderr; do the same so that direct and shell mode agree.
		if code, ok := startFailureCode(err); ok {
			fmt.Fprintf(orDiscard(cmd.Stderr), "%s: %v\n", cmd.Argv[0], err)
			return code, nil
		}
		return 0, fmt.Errorf("start %s: %w", cmd.Argv[0], err)
	}
	if r.cfg.Started != nil {
		r.cfg.Started(c.Process.Pid)
	}
	// The child holds its own copies now; ours would keep EOF from coming.
	closeAll(inR, outW, errW)

	// The stdin pump is not waited for: it may be blocked in the caller's
	// Read, which nothing can interrupt. Closing inW makes its next write
	// fail, so it ends as soon as that Read returns.
	stdinErr := make(chan error, 1)
	go pump(cmd.Stdin, inW, r.cfg.ChunkSize, stdinErr)

	var wg sync.WaitGroup
	copyErr := make(chan error, 2)
	streamDone := make(chan struct{}, 2)
	var outs []*Gate
	for _, p := range []struct {
		w io.Writer
		r *os.File
	}{{cmd.Stdout, outR}, {cmd.Stderr, errR}} {
		g := NewGate(orDiscard(p.w), copyErr)
		outs = append(outs, g)
		wg.Add(1)
		go func() {
			defer wg.Done()
			copyOut(g, p.r, r.cfg.ChunkSize)
			streamDone <- struct{}{}
		}()
	}
	outputDone := make(chan struct{})
	go func() { wg.Wait(); close(outputDone) }()

	s := supervised{
		stdinErr: stdinErr, copyErr: copyErr, outputDone: outputDone,
		streamDone: streamDone, streams: 2,
		// Once the process has exited, its stdin is of no more use.
		closeIn:  func() { inW.Close() },
		closeOut: func() { closeAll(outR, errR) },
	}
	if r.cfg.Abandon {
		s.abandon = func() {
			for _, g := range outs {
				g.Drop()
			}
		}
	}
	return r.supervise(ctx, cmd, c, s)
}

// Gate is a process's output writer that can be cut off: once dropped,
// or once its writer has failed (which it reports on failed, once, when
// failed is not nil), what comes is taken and discarded, so that the
// process never blocks on a full pipe and its output is read to its end,
// as upstream's sandbox reads an output nobody takes. The embedded
// gateway's SSH sessions use it too.
type Gate struct {
	mu      sync.Mutex
	w       io.Writer
	failed  chan<- error
	dropped bool
}

// NewGate returns a Gate to w.
func NewGate(w io.Writer, failed chan<- error) *Gate {
	return &Gate{w: w, failed: failed}
}

func (g *Gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dropped {
		return len(p), nil
	}
	if _, err := g.w.Write(p); err != nil {
		g.dropped = true
		if g.failed != nil {
			g.failed <- err
		}
	}
	return len(p), nil
}

// Drop cuts the output off w. It returns only once no Write to w is in
// progress, and none follows.
func (g *Gate) Drop() {
	g.mu.Lock()
	g.dropped = true
	g.mu.Unlock()
}

// supervised is what Exec's pipe and terminal paths hand supervise: the
// channels their pumps report on, and how to close each side.
type supervised struct {
	stdinErr, copyErr <-chan error
	outputDone        <-chan struct{}
	// streamDone has a value as each of the `streams` output streams ends
	// (upstream's waits after the exit count them).
	streamDone <-chan struct{}
	streams    int
	closeIn    func() // the stdin the process reads, nil when closeOut covers it
	closeOut   func() // the output side; it ends the copiers
	// abandon, when set, stops the output reaching the caller, and every
	// early way out leaves the process running (Config.Abandon).
	abandon func()
}

// supervise waits for the started command c: its exit, its timeout, the
// caller's cancel, a failed stdin or output. Every early way out kills the
// process group, reaps the process and waits for the copiers; after the
// exit, output still arriving is taken for OutputGrace, then the group is
// killed. With Abandon, nothing is killed (see Config.Abandon).
func (r *Runner) supervise(ctx context.Context, cmd *relay.Command, c *exec.Cmd, s supervised) (int, error) {
	pid := c.Process.Pid
	closeIn := func() {
		if s.closeIn != nil {
			s.closeIn()
		}
	}
	// exited reports the exit without reaping the process (see
	// awaitExit): every killGroup below comes before c.Wait.
	exited := make(chan error, 1)
	go func() { exited <- awaitExit(pid) }()

	var timeout <-chan time.Time
	if cmd.Timeout > 0 {
		t := time.NewTimer(cmd.Timeout)
		defer t.Stop()
		timeout = t.C
	}

	// finish kills the group, waits for the process and the copiers, and
	// returns; it is every early path's way out. An abandoned process
	// gets its stdin's EOF and runs on; what reaps it, and closes its
	// output once read to the end, outlives Exec.
	finish := func() {
		if s.abandon != nil {
			s.abandon()
			closeIn()
			go func() {
				<-exited
				c.Wait()
				<-s.outputDone
				s.closeOut()
			}()
			return
		}
		killGroup(pid)
		<-exited
		c.Wait()
		closeIn()
		s.closeOut()
		<-s.outputDone
	}

	var awaitErr error
	select {
	case <-ctx.Done():
		finish()
		return 0, ctx.Err()
	case <-timeout:
		finish()
		return relay.ExitTimeout, nil
	case err := <-s.stdinErr:
		finish()
		return 0, fmt.Errorf("read stdin: %w", err)
	case err := <-s.copyErr:
		finish()
		return 0, fmt.Errorf("exec %s: %w", cmd.Argv[0], err)
	case awaitErr = <-exited:
	}
	closeIn()
	if s.abandon != nil {
		return r.settle(ctx, cmd, c, s, awaitErr)
	}
	grace := time.NewTimer(r.cfg.OutputGrace)
	defer grace.Stop()
	select {
	case <-s.outputDone:
	case <-grace.C:
		// A background child keeps the output open: what it has not
		// written by now is not the command's output.
		killGroup(pid)
		s.closeOut()
		<-s.outputDone
	case <-ctx.Done():
		killGroup(pid)
		c.Wait()
		s.closeOut()
		<-s.outputDone
		return 0, ctx.Err()
	}
	s.closeOut()
	// The group is signalled no more: reap.
	return r.reaped(cmd, c, s, awaitErr)
}

// settle is supervise after the exit of a process to abandon: its output
// is waited for as upstream's supervisor waits, and a background child
// that still holds it is left running, its output dropped.
func (r *Runner) settle(ctx context.Context, cmd *relay.Command, c *exec.Cmd, s supervised, awaitErr error) (int, error) {
	if !SettleOutput(ctx, s.streamDone, s.streams) {
		s.abandon()
		go func() {
			<-s.outputDone
			s.closeOut()
		}()
	} else {
		s.closeOut()
	}
	if err := ctx.Err(); err != nil {
		c.Wait()
		return 0, err
	}
	return r.reaped(cmd, c, s, awaitErr)
}

// reaped reaps the exited process c, which nothing signals any more, and
// reports its exit code, or the failure of its stdin or output.
func (r *Runner) reaped(cmd *relay.Command, c *exec.Cmd, s supervised, awaitErr error) (int, error) {
	waitErr := c.Wait()
	if awaitErr != nil && waitErr == nil {
		waitErr = awaitErr
	}
	select {
	case err := <-s.stdinErr:
		// The process may have finished on what it had, but its input
		// was not all there: that is no success.
		return 0, fmt.Errorf("read stdin: %w", err)
	default:
	}
	select {
	case err := <-s.copyErr:
		return 0, fmt.Errorf("exec %s: %w", cmd.Argv[0], err)
	default:
	}
	return r.exitCode(c.ProcessState, waitErr)
}

func (r *Runner) exitCode(ps *os.ProcessState, waitErr error) (int, error) {
	if ps == nil {
		return 0, fmt.Errorf("wait: %w", waitErr)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if r.cfg.Logger != nil {
			r.cfg.Logger.Warn("process killed by a signal", "pid", ps.Pid(), "signal", ws.Signal().String())
		}
		if r.cfg.KilledExitCode != 0 {
			return r.cfg.KilledExitCode, nil
		}
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}

func (r *Runner) command(cmd *relay.Command) (*exec.Cmd, error) {
	env := r.cfg.Env
	if env == nil {
		env = os.Environ()
	}
	env = append([]string(nil), env...)
	if len(r.cfg.Shell) > 0 {
		s := relay.ShellCommand(cmd.Workdir, cmd.Env, cmd.Argv)
		argv := append(append([]string(nil), r.cfg.Shell...), s)
		c := exec.Command(argv[0], argv[1:]...)
		c.Dir, c.Env = r.cfg.Dir, env
		return c, nil
	}
	for k, v := range cmd.Env {
		env = append(env, k+"="+v)
	}
	c := exec.Command(cmd.Argv[0], cmd.Argv[1:]...)
	if errors.Is(c.Err, exec.ErrDot) {
		c.Err = nil
	}
	c.Dir, c.Env = r.cfg.Dir, env
	if cmd.Workdir != "" {
		if filepath.IsAbs(cmd.Workdir) {
			c.Dir = cmd.Workdir
		} else {
			c.Dir = filepath.Join(r.cfg.Dir, cmd.Workdir)
		}
	}
	return c, nil
}

func startFailureCode(err error) (int, bool) {
	var pe *os.PathError
	switch {
	case errors.As(err, &pe) && pe.Op == "chdir":
		return 1, true
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return 127, true
	case errors.Is(err, os.ErrPermission), errors.Is(err, syscall.ENOEXEC):
		return 126, true
	}
	return 0, false
}

// pump copies the caller's stdin to the process. A read error other than
// EOF is reported on failed without closing dst, so that the process never
// mistakes a broken input for a complete one; Exec then kills it.
//
// A stdin that is an io.WriterTo writes itself to the pipe: the embedded
// gateway's hands each stdin message's payload to the pipe as it came,
// without a copy into buf.
func pump(src io.Reader, dst *os.File, size int, failed chan<- error) {
	if src == nil {
		dst.Close()
		return
	}
	if wt, ok := src.(io.WriterTo); ok {
		w := &pipeWriter{f: dst}
		// WriteTo's error is the pipe's (w.err) or else the source's.
		if _, err := wt.WriteTo(w); err != nil && w.err == nil {
			failed <- err
			return
		}
		dst.Close()
		return
	}
	buf := make([]byte, size)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				dst.Close()
				return
			}
		}
		if errors.Is(err, io.EOF) {
			dst.Close()
			return
		}
		if err != nil {
			failed <- err
			return
		}
	}
}

// SettleOutput waits, once a process has exited, for its output streams
// to end as upstream's sandbox supervisor waits for its reader threads
// (openshell-supervisor-process/src/ssh.rs, v0.0.111): up to 2 s for the
// first to end, then up to 1 s for the second (a terminal has one
// stream). done has a value as each of the n (1 or 2) streams ends. It reports
// whether all of them did; what a background child writes after that is
// not the command's output. It returns early, false, once ctx is done.
func SettleOutput(ctx context.Context, done <-chan struct{}, n int) bool {
	ended := 0
	for _, d := range upstreamWaits[:min(n, len(upstreamWaits))] {
		t := time.NewTimer(d)
		select {
		case <-done:
			ended++
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		t.Stop()
	}
	return ended == n
}

var upstreamWaits = []time.Duration{2 * time.Second, time.Second}

// pipeWriter tells pump a failed write to the pipe from a failed read.
// Once abandoned, it writes no more: a terminal's master stays open for
// the process left running, and what the caller types after Exec has
// returned is not the command's.
type pipeWriter struct {
	f         *os.File
	err       error
	abandoned atomic.Bool
}

var errAbandoned = errors.New("process abandoned")

func (w *pipeWriter) Write(p []byte) (int, error) {
	if w.abandoned.Load() {
		w.err = errAbandoned
		return 0, w.err
	}
	n, err := w.f.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

// copyOut copies until EOF, that is until a read fails: a closed pipe is
// EOF to us. The gate takes care of a failed write.
func copyOut(g *Gate, r *os.File, size int) {
	buf := make([]byte, size)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			g.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
