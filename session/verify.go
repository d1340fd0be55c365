package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
)

// SnapshotRef names one snapshot.
type SnapshotRef struct {
	Key string `json:"key"`
	Seq int64  `json:"seq"`
}

func (r SnapshotRef) String() string { return fmt.Sprintf("%s/%d", r.Key, r.Seq) }

// BrokenSnapshot is a snapshot that cannot be restored: its manifest is
// unreadable (Err), or chunks it needs are missing or corrupt.
type BrokenSnapshot struct {
	SnapshotRef
	Err              string `json:"error,omitempty"`
	Missing, Corrupt []ID   `json:",omitempty"`
}

// VerifyReport is the result of Verify. Missing, Corrupt and Broken are
// sorted.
type VerifyReport struct {
	Snapshots int              `json:"snapshots"` // manifests read
	Chunks    int              `json:"chunks"`    // chunks re-hashed
	Missing   []ID             `json:"missing"`   // referenced, not in the store
	Corrupt   []ID             `json:"corrupt"`   // in the store, not matching their ID
	Broken    []BrokenSnapshot `json:"broken"`
}

// OK reports whether nothing is missing, corrupt or broken.
func (r *VerifyReport) OK() bool {
	return len(r.Missing) == 0 && len(r.Corrupt) == 0 && len(r.Broken) == 0
}

// Verify reads every snapshot of key (every key if key is "") and
// re-hashes every chunk they reference; with key "" it also re-hashes the
// chunks no snapshot references. Damage is reported in the result, not as
// an error: the error is for a backend that fails.
func (s *Store) Verify(ctx context.Context, key string) (*VerifyReport, error) {
	keys := []string{key}
	if key == "" {
		var err error
		if keys, err = s.Keys(ctx); err != nil {
			return nil, err
		}
	} else if err := ValidKey(key); err != nil {
		return nil, err
	}
	rep := &VerifyReport{}
	users := map[ID][]SnapshotRef{}
	for _, k := range keys {
		seqs, err := s.sequences(ctx, k)
		if err != nil {
			return nil, err
		}
		for _, seq := range seqs {
			ref := SnapshotRef{k, seq}
			m, err := s.load(ctx, k, seq)
			if errors.Is(err, ErrManifest) || errors.Is(err, ErrNoSnapshot) {
				rep.Broken = append(rep.Broken, BrokenSnapshot{SnapshotRef: ref, Err: err.Error()})
				continue
			}
			if err != nil {
				return nil, err
			}
			rep.Snapshots++
			for _, id := range chunkSet(m) {
				users[id] = append(users[id], ref)
			}
		}
	}
	check := func(id ID) error {
		rep.Chunks++
		_, err := readChunk(ctx, s.b, id, make([]byte, 0, MaxChunkSize))
		switch {
		case errors.Is(err, ErrChunkMissing):
			rep.Missing = append(rep.Missing, id)
		case errors.Is(err, ErrChunkCorrupt):
			rep.Corrupt = append(rep.Corrupt, id)
		case err != nil:
			return err
		}
		return nil
	}
	for id := range users {
		if err := check(id); err != nil {
			return nil, err
		}
	}
	if key == "" {
		var extra []ID
		err := s.b.List(ctx, chunkPrefix, func(o ObjectInfo) error {
			if id, ok := parseChunkName(o.Name); ok && users[id] == nil {
				extra = append(extra, id)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list chunks: %w", err)
		}
		for _, id := range extra {
			if err := check(id); err != nil {
				return nil, err
			}
		}
	}
	broken := map[SnapshotRef]*BrokenSnapshot{}
	for _, b := range rep.Broken {
		broken[b.SnapshotRef] = &b
	}
	mark := func(ids []ID, corrupt bool) {
		for _, id := range ids {
			for _, ref := range users[id] {
				b := broken[ref]
				if b == nil {
					b = &BrokenSnapshot{SnapshotRef: ref}
					broken[ref] = b
				}
				if corrupt {
					b.Corrupt = append(b.Corrupt, id)
				} else {
					b.Missing = append(b.Missing, id)
				}
			}
		}
	}
	cmpID := func(a, b ID) int { return bytes.Compare(a[:], b[:]) }
	slices.SortFunc(rep.Missing, cmpID)
	slices.SortFunc(rep.Corrupt, cmpID)
	mark(rep.Missing, false)
	mark(rep.Corrupt, true)
	rep.Broken = rep.Broken[:0]
	for _, b := range broken {
		rep.Broken = append(rep.Broken, *b)
	}
	slices.SortFunc(rep.Broken, func(a, b BrokenSnapshot) int {
		if a.Key != b.Key {
			return bytes.Compare([]byte(a.Key), []byte(b.Key))
		}
		return int(a.Seq - b.Seq)
	})
	return rep, nil
}
