package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// ReadStored returns chunk id as the store keeps it (one zstd frame), in
// buf's storage when it fits, without decoding or checking it: for a
// reader that checks it elsewhere, such as the sandbox's agent during a
// restore. A missing chunk matches ErrChunkMissing; one over the stored
// size bound matches ErrChunkCorrupt.
func (s *Store) ReadStored(ctx context.Context, id ID, buf []byte) ([]byte, error) {
	r, err := s.b.Get(ctx, chunkName(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read chunk %s: %w", id, ErrChunkMissing)
	}
	if err != nil {
		return nil, fmt.Errorf("read chunk %s: %w", id, err)
	}
	defer r.Close()
	out := buf[:0]
	if cap(out) < maxStoredChunk+1 {
		out = make([]byte, 0, maxStoredChunk+1)
	}
	for len(out) < cap(out) {
		n, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read chunk %s: %w", id, err)
		}
	}
	if len(out) > maxStoredChunk {
		return nil, fmt.Errorf("read chunk %s: %w: over %d bytes stored", id, ErrChunkCorrupt, maxStoredChunk)
	}
	return out, nil
}

// CheckPresent looks up every chunk m references, without reading them,
// and returns an *IntegrityError listing the missing ones (sorted), or
// another error if the backend fails. It is the cheap half of Check, for a
// restore whose receiver checks the chunks' content itself. The look-ups
// run lookupParallel at a time; the first backend failure cancels the
// rest, and every look-up has returned when CheckPresent does.
func (s *Store) CheckPresent(ctx context.Context, m *Manifest) error {
	ids := chunkSet(m)
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
	ie := &IntegrityError{Key: m.Key, Seq: m.Seq}
	for i, id := range ids {
		if missing[i] {
			ie.Missing = append(ie.Missing, id)
		}
	}
	if len(ie.Missing) > 0 {
		return ie
	}
	return nil
}

// putStored stores z, one zstd frame known to decode to chunk id's
// plaintext, as chunk id.
func putStored(ctx context.Context, b Backend, id ID, z []byte) error {
	if err := b.Put(ctx, chunkName(id), bytes.NewReader(z), false); err != nil {
		return fmt.Errorf("write chunk %s: %w", id, err)
	}
	return nil
}
