package ferry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/frame"
)

// SaveSession stores the directory spec.Dir of the sandbox as the next
// snapshot of spec.Key in st, under sb's idle timeout; see
// session.Store.SaveFrom for what a save does in each mode and what its
// result promises.
//
// A save that returns no error committed its snapshot, even when the
// channel failed after the commit: that failure is in the result's
// RelayLost, not an error.
func SaveSession(ctx context.Context, sb Sandbox, st *session.Store, spec session.SaveSpec) (_ session.SaveResult, err error) {
	start := time.Now()
	if st == nil {
		return session.SaveResult{}, errors.New("save session: nil store")
	}
	if err := session.ValidKey(spec.Key); err != nil {
		return session.SaveResult{}, err
	}
	ctx, sb, idle := sb.watchIdle(ctx, fmt.Sprintf("save session %s:%s", sb.Name, spec.Dir))
	defer func() { err = idle.end(err) }()
	// Waiting for a prune of the store is the host waiting, not the
	// sandbox.
	ctx = idle.withHold(ctx)
	// The sandbox is reached while the store's part of the save runs.
	o := openAsync(ctx, sb)
	defer func() { o.close() }()
	res, err := st.SaveVia(ctx, sb.Name, o.wait, spec)
	if sb.agentGone(o.remote(), err) {
		// A save that failed committed nothing: it runs again whole.
		o.close()
		o = openAsync(ctx, sb)
		res, err = st.SaveVia(ctx, sb.Name, o.wait, spec)
	}
	if err != nil {
		return res, err
	}
	if err := o.r.Close(); err != nil {
		// The snapshot is committed and complete: the channel failed
		// after. Failing the save would send a caller to retry it.
		res.RelayLost = err.Error()
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// RestoreSession writes snapshot spec.Seq (the newest if 0) of spec.Key
// into the directory spec.Dir of the sandbox, under sb's idle timeout; see
// session.Store.RestoreTo for how, and what is refused.
func RestoreSession(ctx context.Context, sb Sandbox, st *session.Store, spec session.RestoreSpec) (_ session.RestoreResult, err error) {
	start := time.Now()
	if st == nil {
		return session.RestoreResult{}, errors.New("restore session: nil store")
	}
	ctx, sb, idle := sb.watchIdle(ctx, fmt.Sprintf("restore session %s to %s:%s", spec.Key, sb.Name, spec.Dir))
	defer func() { err = idle.end(err) }()
	// The snapshot is loaded and checked, and its chunks encoded if they
	// may stream, while the sandbox is reached.
	o := openAsync(ctx, sb)
	defer func() { o.close() }()
	plan, err := st.PlanRestore(ctx, spec, sb.target())
	if err != nil {
		return session.RestoreResult{}, err
	}
	defer plan.Close()
	if plan.MayStream() {
		// With --compress zstd the chunks stream: encode them now. Auto
		// streams over a slow link, and a setup that takes slowSetup
		// tells of one (a region's takes four 40 ms round trips, a LAN's
		// a few milliseconds); starting sooner would cost a fast link's
		// restore reads it then drops.
		wait := time.Until(o.start.Add(slowSetup))
		if sb.Compress == frame.Zstd {
			wait = 0
		}
		select {
		case <-o.done:
		case <-time.After(wait):
			sb.log().Debug("restore: encoding the chunk stream while the sandbox is reached", "sandbox", sb.Name, "key", spec.Key)
			if err := plan.StartStream(ctx); err != nil {
				return session.RestoreResult{}, err
			}
		}
	}
	r, err := o.wait(ctx)
	if err != nil {
		return session.RestoreResult{}, err
	}
	res, err := plan.To(ctx, r)
	if sb.agentGone(r, err) {
		// Nothing was written; a plan runs again (a plan made for the
		// agent checks the snapshot's chunks before it runs in POSIX
		// mode).
		o.close()
		o = openAsync(ctx, sb)
		if r, err = o.wait(ctx); err != nil {
			return session.RestoreResult{}, err
		}
		res, err = plan.To(ctx, r)
	}
	if err != nil {
		return res, err
	}
	if err := r.Close(); err != nil {
		return session.RestoreResult{}, fmt.Errorf("restore session %s to %s:%s: %w", spec.Key, sb.Name, spec.Dir, err)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// RepairSession stores again in st the chunks missing lists from the
// directory remoteDir of the sandbox; see session.Store.RepairFrom. With
// missing empty, it does not reach the sandbox.
func RepairSession(ctx context.Context, sb Sandbox, st *session.Store, remoteDir string, missing []session.ID) (session.RepairResult, error) {
	start := time.Now()
	if st == nil {
		return session.RepairResult{}, errors.New("repair session: nil store")
	}
	if len(missing) == 0 {
		return st.RepairFrom(ctx, nil, remoteDir, nil)
	}
	r, err := sb.open(ctx)
	if err != nil {
		return session.RepairResult{Wanted: len(missing), Restored: []session.ID{}, Missing: missing}, err
	}
	defer r.Close()
	res, err := st.RepairFrom(ctx, r, remoteDir, missing)
	if err != nil {
		return res, err
	}
	if err := r.Close(); err != nil {
		// The chunks are stored: the channel failed after.
		return res, fmt.Errorf("repair session from %s:%s: %d chunk(s) stored, then: %w", sb.Name, remoteDir, len(res.Restored), err)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// opening is a sandbox's remote being reached on a goroutine of its own,
// while the caller does the store's part of its work.
type opening struct {
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}
	r      transfer.Remote // once done, and err is nil
	err    error
}

func openAsync(ctx context.Context, sb Sandbox) *opening {
	ctx, cancel := context.WithCancel(ctx)
	o := &opening{start: time.Now(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		o.r, o.err = sb.open(ctx)
	}()
	return o
}

// wait returns the remote once it is reached.
func (o *opening) wait(ctx context.Context) (transfer.Remote, error) {
	select {
	case <-o.done:
		return o.r, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// remote is the remote once it is reached, else nil.
func (o *opening) remote() transfer.Remote {
	select {
	case <-o.done:
		if o.err == nil {
			return o.r
		}
	default:
	}
	return nil
}

// close stops a setup still under way, waits for it, and closes the
// remote if it was reached. The remote's context ends only after that.
func (o *opening) close() {
	select {
	case <-o.done:
	default:
		o.cancel()
		<-o.done
	}
	if o.err == nil {
		o.r.Close()
	}
	o.cancel()
}

// slowSetup is how long reaching a sandbox takes before RestoreSession
// counts the link as slow enough to stream a restore's chunks: about the
// setup's four round trips at session.streamRTT.
const slowSetup = 40 * time.Millisecond
