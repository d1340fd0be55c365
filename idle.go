package ferry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/session"
)

// ErrIdle means a transfer was ended because next to nothing moved on its
// exec channel, in either direction, for Sandbox.IdleTimeout: fewer bytes
// than minIdleRate a second, so a sandbox that dribbles a byte at a time
// is idle too. The error names the sandbox and the timeout.
var ErrIdle = errors.New("ferry: transfer idle")

// DefaultIdleTimeout is what a zero Sandbox.IdleTimeout means.
const DefaultIdleTimeout = 5 * time.Minute

// minIdleRate is the slowest a transfer may move, in bytes a second over
// one timeout, and still be making progress: far below any link a user
// has (a 5-minute timeout asks for 19 KiB in 5 minutes), and far above a
// sandbox that holds a transfer open with a byte now and then.
const minIdleRate = 64

// idleWatch ends one transfer that stops moving: it counts the bytes on
// the exec channel of every exec the transfer makes (both modes pass
// through Sandbox.X: POSIX mode's execs, agent mode's one long exec and
// its install) and cancels the transfer's context, with an ErrIdle cause,
// once none has moved for the timeout, and with it every exec in flight
// (agent mode's, whose context outlives the transfer's, would otherwise
// wait out its close's grace for an agent that cannot exit).
//
// Only time with an exec running counts: between execs the host is at
// work (reading a store, placing a tree), not waiting on the sandbox; nor
// does time a session save spends waiting for a prune of its store
// (hold, through session.WithWaiting).
//
// Progress is minIdleRate×timeout bytes (at least one) since the last
// progress, or an exec starting or ending: a sandbox that sends a byte a
// second does not keep a transfer alive for ever.
//
// Limitations: time the host itself spends while an exec runs (placing a
// large tree after its stream, agent mode's one exec lasting the whole
// transfer) counts as idle, which is why the default is minutes.
type idleWatch struct {
	op      string
	timeout time.Duration
	base    time.Time
	last    atomic.Int64 // time.Since(base) at the last progress, in ns
	pending atomic.Int64 // bytes moved since then
	floor   int64        // bytes that are progress
	running atomic.Int32 // execs in flight
	held    atomic.Int32 // waits of the host in progress (hold)
	cancel  context.CancelCauseFunc
	// stall ends the execs in flight through the watch's handoff, once
	// the watch has found the transfer idle.
	stall func(cause error)
	stopc chan struct{}
	done  chan struct{}
	once  sync.Once
	cause error // set by the watchdog before it cancels; read after done
}

// watchIdle starts the idle watch of one transfer, op naming it for the
// error ("download box:src"). The transfer runs with the returned ctx and
// Sandbox, and ends with w.end, which stops the watchdog (its goroutine
// has returned when end does) and turns the error of a transfer that the
// watchdog cancelled into the ErrIdle one.
func (s Sandbox) watchIdle(ctx context.Context, op string) (context.Context, Sandbox, *idleWatch) {
	return s.watchIdleVia(ctx, op, &idleHandoff{})
}

func (w *idleWatch) run(ctx context.Context, sandbox string) {
	defer close(w.done)
	t := time.NewTimer(w.timeout)
	defer t.Stop()
	for {
		select {
		case <-w.stopc:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		idle := time.Since(w.base) - time.Duration(w.last.Load())
		if w.running.Load() == 0 || w.held.Load() > 0 {
			idle = 0
		}
		if idle >= w.timeout {
			w.cause = fmt.Errorf("%w: next to nothing moved to or from sandbox %s for %v", ErrIdle, sandbox, w.timeout)
			w.cancel(w.cause)
			// An exec that outlives the transfer's context (agent
			// mode's connection) is ended too: its close would give a
			// stalled agent time to exit by itself, which it cannot.
			w.stall(w.cause)
			return
		}
		t.Reset(w.timeout - idle)
	}
}

// hold is told when the host starts and stops waiting on something other
// than the sandbox (session.WithWaiting: a prune's lock): no time is idle
// meanwhile, and the count starts again when the wait ends. A nil watch
// is a no-op.
func (w *idleWatch) hold(waiting bool) {
	if w == nil {
		return
	}
	if waiting {
		w.held.Add(1)
		return
	}
	w.touch()
	w.held.Add(-1)
}

// withHold is ctx telling w's hold of a session save's waits.
func (w *idleWatch) withHold(ctx context.Context) context.Context {
	if w == nil {
		return ctx
	}
	return session.WithWaiting(ctx, w.hold)
}

// touch records progress.
func (w *idleWatch) touch() {
	w.pending.Store(0)
	w.last.Store(int64(time.Since(w.base)))
}

// moved counts n bytes, which are progress once they add up to the floor.
func (w *idleWatch) moved(n int) {
	if w.pending.Add(int64(n)) >= w.floor {
		w.touch()
	}
}

// end stops the watch and returns err, or the idle error when the
// watchdog ended the transfer: whatever the cancellation made of the
// transfer's error (a context error, a closed pipe), the cause is that.
func (w *idleWatch) end(err error) error {
	if w == nil {
		return err
	}
	w.once.Do(func() {
		close(w.stopc)
		<-w.done
		w.cancel(nil)
	})
	if w.cause != nil && err != nil {
		return fmt.Errorf("%s: %w", w.op, w.cause)
	}
	return err
}

// progressReader is an exec's stdin: the relay reads it only as fast as it
// forwards it, so a read is a byte moved.
type progressReader struct {
	r io.Reader
	w *idleHandoff
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.w.moved(n)
	}
	return n, err
}

// progressWriter is an exec's stdout or stderr; nil discards, as for
// relay.Command.
type progressWriter struct {
	w  io.Writer
	iw *idleHandoff
}

func (p progressWriter) Write(b []byte) (int, error) {
	if len(b) > 0 {
		p.iw.moved(len(b))
	}
	if p.w == nil {
		return len(b), nil
	}
	return p.w.Write(b)
}

// idleHandoff carries execs that outlive one transfer's idle watch into
// the next one's: a run's agent connection, opened under the watch of
// its inputs, is kept while the command runs and serves the artifacts
// and sessions after it, under their own watch. Between watches (while
// the command runs, which may be silent for long) no watch sees those
// execs, so none can end them as idle. The zero value is ready to use;
// it is safe for concurrent use.
type idleHandoff struct {
	mu sync.Mutex // over w's changes and ends
	w  atomic.Pointer[idleWatch]
	// ends holds the cancel of each exec in flight through the handoff.
	ends map[*context.CancelCauseFunc]struct{}
}

// watchIdleVia is watchIdle with the transfer's execs going through h:
// those in flight already (a kept connection) count for the new watch as
// if they had started with it. The caller detaches h (h.detach) when the
// transfer ends, before h is attached to another watch.
func (s Sandbox) watchIdleVia(ctx context.Context, op string, h *idleHandoff) (context.Context, Sandbox, *idleWatch) {
	timeout := s.IdleTimeout
	if timeout == 0 {
		timeout = DefaultIdleTimeout
	}
	if timeout < 0 {
		return ctx, s, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	w := &idleWatch{op: op, timeout: timeout, base: time.Now(), cancel: cancel, stall: h.stall,
		floor: max(1, int64(timeout.Seconds()*minIdleRate)),
		stopc: make(chan struct{}), done: make(chan struct{})}
	s.X = handoffExecer{x: s.X, h: h}
	h.attach(w)
	go w.run(ctx, s.Name)
	return ctx, s, w
}

// attach makes w the watch of h's execs.
func (h *idleHandoff) attach(w *idleWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.w.Store(w)
	w.running.Add(int32(len(h.ends)))
	w.touch()
}

// detach leaves h's execs unwatched. A nil handoff is a no-op.
func (h *idleHandoff) detach() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.w.Swap(nil); w != nil {
		w.running.Add(-int32(len(h.ends)))
	}
}

// started and ended count an exec in and out of h and its watch, each
// the progress of an exec starting or ending; end cancels the exec
// (stall).
func (h *idleHandoff) started(end *context.CancelCauseFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ends == nil {
		h.ends = map[*context.CancelCauseFunc]struct{}{}
	}
	h.ends[end] = struct{}{}
	if w := h.w.Load(); w != nil {
		w.touch()
		w.running.Add(1)
	}
}

func (h *idleHandoff) ended(end *context.CancelCauseFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.ends, end)
	if w := h.w.Load(); w != nil {
		w.touch()
		w.running.Add(-1)
	}
}

// stall cancels every exec in flight through h.
func (h *idleHandoff) stall(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for end := range h.ends {
		(*end)(cause)
	}
}

// moved counts n bytes for the current watch, if any: on every read and
// write of an exec's streams, so without h's lock.
func (h *idleHandoff) moved(n int) {
	if w := h.w.Load(); w != nil {
		w.moved(n)
	}
}

// handoffExecer counts what moves through each exec for whichever watch
// its handoff is attached to at the time.
type handoffExecer struct {
	x relay.Execer
	h *idleHandoff
}

func (e handoffExecer) Exec(ctx context.Context, cmd *relay.Command) (int, error) {
	c := *cmd
	if c.Stdin != nil {
		c.Stdin = progressReader{r: c.Stdin, w: e.h}
	}
	c.Stdout = progressWriter{w: c.Stdout, iw: e.h}
	c.Stderr = progressWriter{w: c.Stderr, iw: e.h}
	// An exec starting or ending is progress: idle time is counted
	// from the last byte or the start of an exec, whichever is later.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e.h.started(&cancel)
	defer e.h.ended(&cancel)
	return e.x.Exec(ctx, &c)
}
