package session

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// DefaultLockTTL is Config.LockTTL's default. A holder renews its lock
// every LockTTL/6 and trusts it for LockTTL*3/4 after the start of its
// last renewal, so a lock survives a few failed renewals, and the last
// quarter is the margin for clock skew between the node that reads a
// lock's age and the backend that stamps its ModTime.
const DefaultLockTTL = 2 * time.Minute

const (
	lockPrefix      = "locks/"
	saveLockPrefix  = lockPrefix + "save/"
	pruneLockPrefix = lockPrefix + "prune/"
	maxLockBody     = 4 << 10
)

// ErrLockLost matches the error of a Save or Prune whose lock expired
// while it ran (its renewals failed or came too late): a Prune may then
// have missed the Save, or a Save the Prune, so the operation stops
// before it commits or deletes anything more.
var ErrLockLost = errors.New("session: lock lost")

// lockBody is the content of a lock object. A save's lock names its key
// and when it began by the backend's clock (Started: the ModTime of the
// lock's first Put), the two facts a Prune needs to keep what the save
// may reuse. Host and PID are for the operator who finds a lock.
type lockBody struct {
	Kind    string    `json:"kind"` // "save" or "prune"
	Key     string    `json:"key,omitempty"`
	Started time.Time `json:"started,omitzero"`
	// Grace is the saver's Config.Grace: it reuses chunks last written
	// after Started - Grace/2, so that is what a Prune keeps, whatever
	// grace the Prune itself was given.
	Grace time.Duration `json:"grace,omitempty"`
	TTL   time.Duration `json:"ttl"`
	Host  string        `json:"host,omitempty"`
	PID   int           `json:"pid,omitempty"`
}

// lock is a lock object this Store holds: written at once, renewed on a
// goroutine of its own until release, and deleted then.
type lock struct {
	s    *Store
	name string
	body lockBody

	mu      sync.Mutex
	renewed time.Time // start of the last successful Put, by this node's clock
	lapsed  bool      // a renewal came too late: the lock may have expired
	err     error     // the renewal's last error

	stop chan struct{}
	done chan struct{}
}

// takeLock writes a new lock object under prefix and starts renewing it.
// The caller releases it. For a save's lock (key not empty) it reads back
// the lock's ModTime, the backend's clock at the save's start.
func (s *Store) takeLock(ctx context.Context, prefix, kind, key string) (*lock, error) {
	var rnd [12]byte
	rand.Read(rnd[:])
	host, _ := os.Hostname()
	l := &lock{
		s:    s,
		name: prefix + hex.EncodeToString(rnd[:]),
		body: lockBody{Kind: kind, Key: key, TTL: s.cfg.LockTTL, Host: host, PID: os.Getpid()},
	}
	if kind == "save" {
		l.body.Grace = s.cfg.Grace
	}
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	start := time.Now()
	if err := l.put(ctx); err != nil {
		return nil, fmt.Errorf("take %s lock: %w", kind, err)
	}
	l.renewed = start
	if kind == "save" {
		o, err := s.b.Stat(ctx, l.name)
		if err != nil {
			s.b.Delete(context.WithoutCancel(ctx), l.name)
			return nil, fmt.Errorf("take %s lock: %w", kind, err)
		}
		l.body.Started = o.ModTime.UTC()
	}
	go l.renew(context.WithoutCancel(ctx))
	return l, nil
}

func (l *lock) put(ctx context.Context) error {
	data, err := json.Marshal(l.body)
	if err != nil {
		return err
	}
	return l.s.b.Put(ctx, l.name, bytes.NewReader(data), false)
}

// renew re-Puts the lock every LockTTL/6 until release. It runs under a
// context release's stop ends, so that a save cancelled by its caller
// still deletes its lock.
func (l *lock) renew(ctx context.Context) {
	defer close(l.done)
	every := l.s.cfg.LockTTL / 6
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, l.s.cfg.LockTTL/2)
		err := l.put(rctx)
		cancel()
		l.mu.Lock()
		if err != nil {
			l.err = err
		} else {
			if start.Sub(l.renewed) > l.trust() {
				l.lapsed = true
			}
			l.renewed = start
		}
		l.mu.Unlock()
		if err != nil {
			slog.Warn("session: cannot renew lock", "lock", l.name, "err", err)
		}
	}
}

// trust is how long after the start of its last renewal a holder relies
// on its lock.
func (l *lock) trust() time.Duration { return l.s.cfg.LockTTL * 3 / 4 }

// valid returns nil while the lock has held without a gap, else an error
// matching ErrLockLost. The holder asks it before every step that relies
// on the lock: a commit, a deletion.
func (l *lock) valid() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	age := time.Since(l.renewed)
	if l.lapsed || age > l.trust() {
		why := fmt.Sprintf("last renewed %v ago", age.Round(time.Millisecond))
		if l.err != nil {
			why += ": " + l.err.Error()
		}
		return fmt.Errorf("%w: %s (%s)", ErrLockLost, l.name, why)
	}
	return nil
}

// release stops the renewals and deletes the lock.
func (l *lock) release(ctx context.Context) {
	close(l.stop)
	<-l.done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := l.s.b.Delete(ctx, l.name); err != nil {
		slog.Warn("session: cannot remove lock", "lock", l.name, "err", err)
	}
}

// heldLock is a lock object as a reader finds it.
type heldLock struct {
	ObjectInfo
	body lockBody
	ok   bool // the body was read and understood
}

// expired reports whether l's holder has stopped relying on it, by this
// node's wall clock (time.Now, not Config.Now: a lock is about processes
// alive now) against the backend's ModTime.
func (l heldLock) expired(now time.Time, ttl time.Duration) bool {
	if l.ok && l.body.TTL > 0 {
		ttl = l.body.TTL
	}
	return now.Sub(l.ModTime) > ttl
}

// locks lists the lock objects under prefix and reads each.
func (s *Store) locks(ctx context.Context, prefix string) ([]heldLock, error) {
	var out []heldLock
	err := s.b.List(ctx, prefix, func(o ObjectInfo) error {
		if !strings.Contains(o.Name[len(prefix):], "/") {
			out = append(out, heldLock{ObjectInfo: o})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	for i := range out {
		r, err := s.b.Get(ctx, out[i].Name)
		if errors.Is(err, fs.ErrNotExist) {
			out[i].ModTime = time.Time{} // released meanwhile: expired
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read lock %s: %w", out[i].Name, err)
		}
		data, err := io.ReadAll(io.LimitReader(r, maxLockBody+1))
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("read lock %s: %w", out[i].Name, err)
		}
		b := &out[i].body
		out[i].ok = len(data) <= maxLockBody && json.Unmarshal(data, b) == nil &&
			(b.Kind == "prune" || b.Kind == "save" && ValidKey(b.Key) == nil)
		if out[i].ok && b.Kind == "save" && b.Started.IsZero() {
			// The lock's first Put, which its holder has not read back
			// yet: its ModTime is the start. Renewals carry Started.
			b.Started = out[i].ModTime
		}
	}
	return out, nil
}

// waitingKey carries WithWaiting's function in a context.
type waitingKey struct{}

// WithWaiting returns ctx carrying f, which a Save it runs tells when it
// starts (true) and stops (false) waiting for another process's prune of
// the store to finish. A caller that ends a save whose channel to a
// sandbox goes quiet (ferry's idle timeout) pauses that watch meanwhile:
// the host is waiting then, not the sandbox, and a save ended for it
// would lose the session it was saving.
func WithWaiting(ctx context.Context, f func(waiting bool)) context.Context {
	return context.WithValue(ctx, waitingKey{}, f)
}

// waitPrunes returns once no live prune lock is left, or with ctx's
// error. It looks again after 50 ms, then twice as long each time up to
// LockTTL/20 (at least 10 ms): most prunes are over within a second, and
// a save that met one should not sit out the whole LockTTL/20 (6 s by
// default) before it looks again.
func (s *Store) waitPrunes(ctx context.Context) error {
	limit := max(s.cfg.LockTTL/20, 10*time.Millisecond)
	poll := min(50*time.Millisecond, limit)
	tell, _ := ctx.Value(waitingKey{}).(func(bool))
	waiting := false
	defer func() {
		if waiting && tell != nil {
			tell(false)
		}
	}()
	for {
		ls, err := s.locks(ctx, pruneLockPrefix)
		if err != nil {
			return err
		}
		now := time.Now()
		var live *heldLock
		for i := range ls {
			if !ls[i].expired(now, s.cfg.LockTTL) {
				live = &ls[i]
				break
			}
		}
		if live == nil {
			return nil
		}
		if !waiting {
			slog.Info("session: waiting for a prune to finish", "lock", live.Name, "host", live.body.Host, "pid", live.body.PID)
			waiting = true
			if tell != nil {
				tell(true)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for prune %s: %w", live.Name, ctx.Err())
		case <-time.After(poll):
		}
		poll = min(2*poll, limit)
	}
}

// tempAge is the age past which a backend's temporary file is a dead
// writer's: the grace period, and never under DefaultGrace, as a Put in
// flight owns its file however short a grace the operator picked.
func (s *Store) tempAge() time.Duration { return max(s.cfg.Grace, DefaultGrace) }

// reuseSince is the oldest last Put of a chunk that the save holding a
// lock of body b may reuse without writing it again: the rule the save
// follows (Sink.Has) and the one a Prune keeps to, with grace the
// Prune's own, in case the body names none.
func (b lockBody) reuseSince(grace time.Duration) time.Time {
	return b.Started.Add(-max(b.Grace, grace) / 2)
}
