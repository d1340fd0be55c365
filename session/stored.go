package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"
)

// ReadStored returns chunk id as the store keeps it (one zstd frame), in
// buf's storage when it fits, without decoding or checking it: for a
// reader that checks it elsewhere, such as the sandbox's agent during a
// restore. A missing chunk matches ErrChunkMissing; one over the stored
// size bound matches ErrChunkCorrupt.
func (s *Store) ReadStored(ctx context.Context, id ID, buf []byte) ([]byte, error) {
	data, pack, err := s.storedChunk(ctx, id, buf)
	if err != nil || pack == "" {
		return data, err
	}
	return append(buf[:0], data...), nil
}

// CheckPresent looks up every chunk m references, without reading them,
// and returns an *IntegrityError listing the missing ones (sorted), or
// another error if the backend fails. It is the cheap half of Check, for a
// restore whose receiver checks the chunks' content itself. The look-ups
// run lookupParallel at a time; the first backend failure cancels the
// rest, and every look-up has returned when CheckPresent does.
func (s *Store) CheckPresent(ctx context.Context, m *Manifest) error {
	return s.checkPresent(ctx, m.Key, m.Seq, chunkSet(m), true)
}

// missingChunks is the set of ids, chunks of snapshot seq of key, that
// the store lacks, by CheckPresent's look-ups; with Config.Pack, from the
// view as it is (refreshed by the caller unless refresh).
func (s *Store) missingChunks(ctx context.Context, key string, seq int64, ids []ID, refresh bool) (map[ID]bool, error) {
	err := s.checkPresent(ctx, key, seq, ids, refresh)
	var ie *IntegrityError
	if !errors.As(err, &ie) {
		return nil, err
	}
	missing := make(map[ID]bool, len(ie.Missing))
	for _, id := range ie.Missing {
		missing[id] = true
	}
	return missing, nil
}

func (s *Store) checkPresent(ctx context.Context, key string, seq int64, ids []ID, refresh bool) error {
	ie := &IntegrityError{Key: key, Seq: seq}
	if s.cfg.Pack {
		if refresh {
			if err := s.refreshView(ctx, true); err != nil {
				return err
			}
		}
		for _, id := range ids {
			if _, ok := s.looseTime(id); ok {
				continue
			}
			loc, ok, listed := s.packed(id)
			switch {
			case ok && listed:
				continue
			case ok:
				ie.addPack(packName(loc.pack))
			}
			ie.Missing = append(ie.Missing, id)
		}
		ie.blameIndexes(s)
		return ie.orNil()
	}
	// Each look-up writes only its own element, so that the missing ones
	// come out in ids' order without a lock.
	missing := make([]bool, len(ids))
	g := newGroup(ctx, lookupParallel)
	for i, id := range ids {
		err := g.Go(ctx, func(ctx context.Context) error {
			_, err := s.b.Stat(ctx, chunkName(id))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				missing[i] = true
			case err != nil:
				return fmt.Errorf("look up chunk %s: %w", id, err)
			}
			return nil
		})
		if err != nil {
			break
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i, id := range ids {
		if !missing[i] {
			continue
		}
		// Not loose: perhaps in a pack (a store may hold both).
		if err := s.refreshIfOlder(ctx, time.Second); err != nil {
			return err
		}
		loc, ok, listed := s.packed(id)
		if ok && listed {
			continue
		}
		if ok {
			ie.addPack(packName(loc.pack))
		}
		ie.Missing = append(ie.Missing, id)
	}
	ie.blameIndexes(s)
	return ie.orNil()
}

// putStored stores z, one zstd frame known to decode to chunk id's
// plaintext, as chunk id.
func putStored(ctx context.Context, b Backend, id ID, z []byte) error {
	if err := b.Put(ctx, chunkName(id), bytes.NewReader(z), false); err != nil {
		return fmt.Errorf("write chunk %s: %w", id, err)
	}
	return nil
}
