package openshell

import (
	"context"
	"errors"
	"io"
	"sync"
)

// earlyStdin is how much of a command's stdin an Exec streams before the
// gateway's response headers say that the start was accepted. It is kept
// until then, to be replayed into the one-shot fallback or the retry on a
// fresh sandbox id; more waits for the headers. It is enough for what a
// caller sends before it hears from the command (an agent's hello and its
// first calls) and well under one-shot stdin's room.
const earlyStdin = 256 << 10

var errSuperseded = errors.New("openshell: stdin taken by a later attempt")

// replay lets the attempts of one Exec read one stdin, each from its
// start, until one of them commits: the gateway has the start, and no
// attempt can follow it. Until then every byte read is kept (at most
// limit; a reader that needs more waits for the commit).
//
// A failed attempt's reader may still sit in the caller's Read, which
// cannot be cancelled. What that Read returns is kept like any other
// bytes, for the attempt that reads on, so nothing taken from stdin is
// lost; only one Read of stdin is ever in flight.
type replay struct {
	r     io.Reader
	limit int

	mu      sync.Mutex
	kept    []byte // stdin from offset base on
	base    int64
	err     error         // stdin's error, EOF included, once read
	reading bool          // a Read of r is in flight
	owner   *replayReader // the attempt that committed; nil before
	changed chan struct{} // closed at each change of the above
	// For tests: the bytes kept before the commit, those read again by a
	// later attempt, and those a superseded attempt read for the owner.
	logged, replayed, inherited int64
	readers                     int
}

func newReplay(r io.Reader, limit int) *replay {
	return &replay{r: r, limit: limit, changed: make(chan struct{})}
}

// reader is an attempt's view of stdin, from its first byte. ctx bounds
// its waits (not a Read of stdin, which nothing can bound).
func (s *replay) reader(ctx context.Context) *replayReader {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readers++
	return &replayReader{s: s, ctx: ctx, later: s.readers > 1}
}

// counts reports what the attempts read (see replay's fields).
func (s *replay) counts() (logged, replayed, inherited int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logged, s.replayed, s.inherited
}

// replayable reports whether a new attempt would still read all of stdin.
func (s *replay) replayable() bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owner == nil
}

// commit makes r the only reader from here on and drops what it has read.
func (s *replay) commit(r *replayReader) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owner != nil {
		return
	}
	s.owner = r
	s.trim()
	s.notify()
}

// trim drops the kept bytes the owner has read.
func (s *replay) trim() {
	if n := s.owner.off - s.base; n > 0 {
		s.kept = s.kept[n:]
		s.base = s.owner.off
		if len(s.kept) == 0 {
			s.kept = nil
		}
	}
}

func (s *replay) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

type replayReader struct {
	s     *replay
	ctx   context.Context
	off   int64
	later bool // not the first attempt's
}

// superseded reports whether another attempt has committed: r's
// errors are then no failure of stdin.
func (r *replayReader) superseded() bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.s.owner != nil && r.s.owner != r
}

func (r *replayReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s := r.s
	s.mu.Lock()
	for {
		if s.owner != nil && s.owner != r {
			s.mu.Unlock()
			return 0, errSuperseded
		}
		if r.off < s.base+int64(len(s.kept)) {
			n := copy(p, s.kept[r.off-s.base:])
			if r.later && r.off < s.logged {
				s.replayed += min(int64(n), s.logged-r.off)
			}
			r.off += int64(n)
			if s.owner != nil {
				s.trim()
			}
			s.mu.Unlock()
			return n, nil
		}
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return 0, err
		}
		full := s.owner == nil && len(s.kept) >= s.limit
		if s.reading || full {
			wait := s.changed
			s.mu.Unlock()
			select {
			case <-wait:
			case <-r.ctx.Done():
				return 0, r.ctx.Err()
			}
			s.mu.Lock()
			continue
		}
		s.reading = true
		// Until the commit, a Read takes no more than may be kept.
		// After it, the committed reader reads stdin straight into p:
		// once no attempt can follow, the bytes need no copy.
		buf := p
		if room := s.limit - len(s.kept); s.owner == nil && len(buf) > room {
			buf = buf[:room]
		}
		s.mu.Unlock()
		n, err := s.r.Read(buf)

		s.mu.Lock()
		s.reading = false
		if err != nil {
			s.err = err
		}
		s.notify()
		if n == 0 {
			continue
		}
		if s.owner == r && len(s.kept) == 0 {
			// Read by the committed reader with nothing kept before it.
			r.off += int64(n)
			s.base = r.off
			s.mu.Unlock()
			return n, nil
		}
		// Kept: for the attempts that may follow, or, read by an attempt
		// that has since lost, for the one that won.
		s.kept = append(s.kept, buf[:n]...)
		switch {
		case s.owner == nil:
			s.logged += int64(n)
		case s.owner != r:
			s.inherited += int64(n)
		}
	}
}
