package session

import (
	"context"
	"sync"
)

// aheadPacks is how many packs a ReadAhead keeps fetched beyond the one
// being read: one hides a fetch behind the stream of the current pack;
// two also absorb a pack that is slower to come.
const aheadPacks = 2

// ReadAhead reads a known sequence of chunks, as a restore does: it
// fetches the packs that hold them in the background, aheadPacks beyond
// the newest one read, so that the next pack's fetch overlaps the stream
// of the current one instead of stalling it. Loose chunks are read as
// ReadStored reads them. Its methods are safe for concurrent use; Close
// stops the background fetches and waits for them.
type ReadAhead struct {
	s      *Store
	cancel context.CancelFunc
	wg     sync.WaitGroup
	order  map[ID]int // pack → its place in the sequence
	kick   chan struct{}

	mu   sync.Mutex
	read int // the furthest place in the sequence a read has reached
}

// ReadAhead returns a ReadAhead for ids, the chunks in the order they
// will be read (repeats allowed). It looks the packs up in the view, which
// the caller has refreshed (CheckPresent does).
func (s *Store) ReadAhead(ctx context.Context, ids []ID) *ReadAhead {
	ctx, cancel := context.WithCancel(ctx)
	r := &ReadAhead{s: s, cancel: cancel, order: map[ID]int{}, kick: make(chan struct{}, 1), read: -1}
	var seq []ID
	for _, id := range ids {
		if loc, ok, listed := s.packed(id); ok && listed {
			if _, seen := r.order[loc.pack]; !seen {
				r.order[loc.pack] = len(seq)
				seq = append(seq, loc.pack)
			}
		}
	}
	if len(seq) > 0 {
		r.wg.Go(func() { r.fetch(ctx, seq) })
	}
	return r
}

// fetch fetches the packs of seq in order, each once the reads have
// reached aheadPacks places before it. A failed fetch is left for the
// read that needs the pack to report.
func (r *ReadAhead) fetch(ctx context.Context, seq []ID) {
	for k, pack := range seq {
		for {
			r.mu.Lock()
			ok := k <= r.read+aheadPacks
			r.mu.Unlock()
			if ok {
				break
			}
			select {
			case <-r.kick:
			case <-ctx.Done():
				return
			}
		}
		if _, err := r.s.pack(ctx, pack); ctx.Err() != nil || err != nil && !isPackFault(err) {
			return
		}
	}
}

// ReadStored is Store.ReadStored, noting how far the reads have come.
func (r *ReadAhead) ReadStored(ctx context.Context, id ID, buf []byte) ([]byte, error) {
	if loc, ok, _ := r.s.packed(id); ok {
		if k, ok := r.order[loc.pack]; ok {
			r.mu.Lock()
			moved := k > r.read
			if moved {
				r.read = k
			}
			r.mu.Unlock()
			if moved {
				select {
				case r.kick <- struct{}{}:
				default:
				}
			}
		}
	}
	return r.s.ReadStored(ctx, id, buf)
}

// Close stops the background fetches and waits for them.
func (r *ReadAhead) Close() {
	r.cancel()
	r.wg.Wait()
}
