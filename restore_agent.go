package ferry

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// restoreSnapshot builds snapshot m at dest through the agent's Restore:
// the store's chunks travel as stored, and the agent decodes and checks
// each against its id before writing it. Compared with streaming the tree
// as tar (POSIX mode), the host neither decompresses nor recompresses
// anything, and the wire carries the store's zstd. The chunks are read
// from the store prefetchWindow ahead of the stream (see prefetch). A
// chunk the store lacks, or holds over the size bound, fails the restore
// with a *session.IntegrityError naming it; the agent has then placed
// nothing, as it places the tree only after the whole stream. A chunk the
// agent refuses is looked at again here, so that the error says whether
// the store or the channel damaged it.
func restoreSnapshot(ctx context.Context, sb Sandbox, c *agent.Client, st *session.Store, m *session.Manifest, dest string, place archive.Placement) (CopyStats, error) {
	entries := make([]agent.RestoreEntry, 0, len(m.Entries)+1)
	if place == archive.PlaceNew {
		entries = append(entries, agent.RestoreEntry{Path: ".", Kind: archive.Dir, Mode: 0o700, MTime: m.Time})
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		re := agent.RestoreEntry{Path: e.Path, Mode: e.Mode, MTime: e.ModTime(), Size: e.Size, Target: e.Target}
		kind, ok := snapshotKinds[e.Kind]
		if !ok {
			return CopyStats{}, fmt.Errorf("entry %q: %w: kind %q", e.Path, archive.ErrUnsupported, e.Kind)
		}
		re.Kind = kind
		if kind == archive.File {
			re.Chunks = make([]agent.ChunkRef, len(e.Chunks))
			for j, c := range e.Chunks {
				re.Chunks[j] = agent.ChunkRef{ID: c.ID, Size: c.Size}
			}
		}
		entries = append(entries, re)
	}
	staging := archive.StagingPrefix + archive.RandomTag()
	pf := startPrefetch(ctx, st, m, entries, prefetchWindow)
	defer pf.close()
	res, err := c.Restore(ctx, agent.RestoreSpec{Dest: dest, Place: place, Staging: staging}, entries, pf.next)
	transfer.LogStale(sb.log(), sb.Name, "sandbox", dest, res.StaleStaging, nil)
	if err != nil {
		stagingPath := path.Join(archive.StagingParent(dest, place), staging)
		// A stream the host broke off (a chunk it could not read) is
		// half-closed by Restore, and the agent removes its staging
		// before it answers; only a lost agent leaves one behind.
		if c.Lost() {
			transfer.RemoveStaging(ctx, sb.target(), stagingPath)
		}
		var ce *agent.ChunkError
		if errors.As(err, &ce) {
			return CopyStats{}, blameChunk(ctx, st, m, ce, err)
		}
		return CopyStats{}, err
	}
	return transfer.StatsOf(res), nil
}

// blameChunk turns the agent's refusal of a chunk into the store's
// IntegrityError when the store's copy is damaged, and into a digest error
// (the channel, or the agent) when it is intact.
func blameChunk(ctx context.Context, st *session.Store, m *session.Manifest, ce *agent.ChunkError, err error) error {
	id := session.ID(ce.ID)
	_, rerr := st.ReadChunk(ctx, id, nil)
	if errors.Is(rerr, session.ErrChunkCorrupt) || errors.Is(rerr, session.ErrChunkMissing) {
		return integrity(m, id, rerr)
	}
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	return fmt.Errorf("%w: the sandbox refused chunk %s of %q, which is intact in the store: %v", archive.ErrDigest, id, ce.Path, err)
}

// prefetchWindow bounds the chunks a restore reads ahead of its stream:
// enough requests in flight to hide a round trip to the store (about a
// millisecond to S3 on loopback, tens across a network) behind the others,
// and at most prefetchWindow+2 buffers of a stored chunk (~130 KiB) held.
const prefetchWindow = 16

// prefetch reads a restore's stored chunks ahead of the stream that sends
// them, in the order agent.Client.Restore asks for them: every chunk
// reference of the entries, in order (a chunk two files share is read
// twice, as Restore sends it twice). The first failed read stops the
// others and is what every later call of next returns. Its goroutines
// have all returned when close does.
type prefetch struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // the producer and every read
	ids    []session.ID   // Restore's calls, in order
	due    chan *fetched  // reads started, in order; closed when the producer ends
	free   chan []byte    // buffers Restore has handed back
	n      int            // calls of next so far
	// ra fetches the packs that hold the chunks, a few packs ahead of
	// the reads, from a store that packs.
	ra *session.ReadAhead
}

// fetched is one read, and its result once done is closed.
type fetched struct {
	done chan struct{}
	data []byte
	err  error
}

// startPrefetch starts reading the chunks of entries, window ahead.
func startPrefetch(ctx context.Context, st *session.Store, m *session.Manifest, entries []agent.RestoreEntry, window int) *prefetch {
	ctx, cancel := context.WithCancelCause(ctx)
	p := &prefetch{ctx: ctx, cancel: cancel, due: make(chan *fetched, window), free: make(chan []byte, window+2)}
	for _, e := range entries {
		for _, c := range e.Chunks {
			p.ids = append(p.ids, c.ID)
		}
	}
	p.ra = st.ReadAhead(ctx, p.ids)
	p.wg.Go(func() {
		defer close(p.due)
		for _, id := range p.ids {
			f := &fetched{done: make(chan struct{})}
			// due's capacity is the window: a read starts only once one
			// of the window's results has been taken.
			select {
			case p.due <- f:
			case <-ctx.Done():
				return
			}
			p.wg.Go(func() {
				defer close(f.done)
				var buf []byte
				select {
				case buf = <-p.free:
				default:
				}
				f.data, f.err = p.ra.ReadStored(ctx, id, buf)
				if f.err != nil {
					f.err = integrity(m, id, f.err)
					cancel(f.err)
				}
			})
		}
	})
	return p
}

// integrity turns a read's missing or damaged chunk into the
// *session.IntegrityError the restore reports, as the store check before
// a POSIX-mode restore does, naming the pack or index object at fault
// when the chunk is in a pack.
func integrity(m *session.Manifest, id session.ID, err error) error {
	ie := &session.IntegrityError{Key: m.Key, Seq: m.Seq}
	switch {
	case errors.Is(err, session.ErrChunkMissing):
		ie.Missing = []session.ID{id}
	case errors.Is(err, session.ErrChunkCorrupt):
		ie.Corrupt = []session.ID{id}
	default:
		return err
	}
	var pe *session.PackError
	if errors.As(err, &pe) {
		ie.Packs = []string{pe.Object}
	}
	return ie
}

// next is Restore's agent.StoredChunk: chunk id, which must be the one due.
// buf, the chunk Restore sent last, is reused for a later read.
func (p *prefetch) next(ctx context.Context, id [32]byte, buf []byte) ([]byte, error) {
	if cap(buf) > 0 {
		select {
		case p.free <- buf[:0]:
		default:
		}
	}
	if p.n >= len(p.ids) || p.ids[p.n] != id {
		return nil, fmt.Errorf("prefetch chunk %x: not the one due", id)
	}
	p.n++
	var f *fetched
	select {
	case f = <-p.due:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f == nil {
		// The producer stopped: a read failed, or the restore's context
		// is done.
		return nil, context.Cause(p.ctx)
	}
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if f.err != nil {
		// The first failure, which may be a later chunk's whose failure
		// cancelled this read: either loses the restore, and that one is
		// the cause.
		return nil, context.Cause(p.ctx)
	}
	return f.data, nil
}

// close stops the reads and waits for them.
func (p *prefetch) close() {
	p.cancel(context.Canceled)
	p.wg.Wait()
	p.ra.Close()
}
