package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	Snapshots int `json:"snapshots"` // manifests read
	Chunks    int `json:"chunks"`    // chunks re-hashed
	Packs     int `json:"packs"`     // packs read whole and checked against their names
	// PackFaults are the pack and index objects found damaged, missing
	// or disagreeing with each other, sorted by object.
	PackFaults []PackFault `json:"pack_faults,omitempty"`
	// TempFiles counts the leftover temporary files of writers killed
	// mid-Put (local stores) that Verify removed, past the grace period.
	TempFiles int              `json:"temp_files,omitempty"`
	Missing   []ID             `json:"missing"` // referenced, not in the store
	Corrupt   []ID             `json:"corrupt"` // in the store, not matching their ID
	Broken    []BrokenSnapshot `json:"broken"`
}

// PackFault is one pack or index object at fault.
type PackFault struct {
	Object string `json:"object"`
	Err    string `json:"error"`
}

// OK reports whether nothing is missing, corrupt or broken.
func (r *VerifyReport) OK() bool {
	return len(r.Missing) == 0 && len(r.Corrupt) == 0 && len(r.Broken) == 0 && len(r.PackFaults) == 0
}

// Verify reads every snapshot of key (every key if key is "") and
// re-hashes every chunk they reference; with key "" it also re-hashes the
// chunks no snapshot references, and reads every pack whole: it must hash
// to its name and agree with its index object. Pack and index objects at
// fault are named in PackFaults; RepairIndexes rebuilds index objects.
// With key "" it also removes the temporary files a writer killed mid-Put
// left behind, once past the grace period (TempFiles). Damage is reported
// in the result, not as an error: the error is for a backend that fails.
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
	// The store's copies, not those an earlier read cached.
	s.packs.forget(true)
	if err := s.refreshView(ctx, s.cfg.Pack); err != nil {
		return nil, err
	}
	faults := map[string]string{}
	fault := func(err error) {
		var pe *PackError
		if errors.As(err, &pe) {
			if _, ok := faults[pe.Object]; !ok {
				faults[pe.Object] = err.Error()
			}
		}
	}
	buf := make([]byte, 0, MaxChunkSize)
	check := func(id ID) error {
		rep.Chunks++
		_, err := s.readChunk(ctx, id, buf)
		fault(err)
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
	ids := make([]ID, 0, len(users))
	for id := range users {
		ids = append(ids, id)
	}
	for _, id := range s.inPackOrder(ids) {
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
		if err := s.verifyPacks(ctx, rep, users, fault); err != nil {
			return nil, err
		}
		if tc, ok := s.b.(TempCleaner); ok {
			n, err := tc.CleanTemp(ctx, s.cfg.Now().Add(-s.tempAge()))
			rep.TempFiles = n
			if err != nil {
				return nil, err
			}
		}
	}
	s.view.mu.Lock()
	for _, err := range s.view.badIndex {
		fault(err)
	}
	s.view.mu.Unlock()
	for obj, msg := range faults {
		rep.PackFaults = append(rep.PackFaults, PackFault{Object: obj, Err: msg})
	}
	slices.SortFunc(rep.PackFaults, func(a, b PackFault) int { return strings.Compare(a.Object, b.Object) })
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
	slices.SortFunc(rep.Missing, CompareIDs)
	slices.SortFunc(rep.Corrupt, CompareIDs)
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

// verifyPacks reads every listed pack whole: it must hash to its name and
// its trailer must parse and agree with its index object; every chunk in
// it that no snapshot references (users) is re-hashed too. An index
// object without its pack is a fault; a pack without an index object is
// one only if a snapshot needs a chunk it holds (else it is what a
// crashed save leaves, for Prune).
func (s *Store) verifyPacks(ctx context.Context, rep *VerifyReport, users map[ID][]SnapshotRef, fault func(error)) error {
	s.view.mu.Lock()
	packs := make([]ID, 0, len(s.view.packs))
	for id := range s.view.packs {
		packs = append(packs, id)
	}
	var orphans []ID
	for id := range s.view.indexTime {
		if _, ok := s.view.packs[id]; !ok {
			orphans = append(orphans, id)
		}
	}
	s.view.mu.Unlock()
	for _, id := range orphans {
		fault(&PackError{Object: indexName(id), Reason: "its pack " + packName(id) + " is missing"})
	}
	slices.SortFunc(packs, CompareIDs)
	buf := make([]byte, 0, MaxChunkSize)
	for _, id := range packs {
		p, err := s.pack(ctx, id)
		if err != nil {
			var pe *PackError
			if !errors.As(err, &pe) {
				return err
			}
			fault(err)
			continue
		}
		rep.Packs++
		s.view.mu.Lock()
		idx, indexed := s.view.entries[id]
		_, badIndex := s.view.badIndex[id]
		s.view.mu.Unlock()
		switch {
		case indexed && !sameEntries(idx, p.at):
			fault(&PackError{Object: indexName(id), Reason: "disagrees with the trailer of its pack"})
		case !indexed && !badIndex:
			for cid := range p.at {
				if users[cid] != nil {
					fault(&PackError{Object: packName(id), Chunk: cid, Reason: "has no index object: readers cannot find the chunk"})
					break
				}
			}
		}
		for cid, e := range p.at {
			if users[cid] != nil {
				continue
			}
			rep.Chunks++
			plain, err := chunkDecoder.DecodeAll(p.data[e.Off:e.Off+e.Len], buf[:0])
			if err != nil || len(plain) > MaxChunkSize || Hash(plain) != cid {
				fault(&PackError{Object: packName(id), Chunk: cid, Reason: "stored chunk does not decode to content matching its id"})
				rep.Corrupt = append(rep.Corrupt, cid)
			}
		}
	}
	return nil
}

// sameEntries reports whether an index object lists exactly a trailer's
// entries.
func sameEntries(idx []packEntry, at map[ID]packEntry) bool {
	if len(idx) != len(at) {
		return false
	}
	for _, e := range idx {
		if at[e.ID] != e {
			return false
		}
	}
	return true
}

// inPackOrder sorts ids by where they are: packed chunks by pack and
// offset (so that a pass over them fetches each pack once), then loose
// ones by id.
func (s *Store) inPackOrder(ids []ID) []ID {
	type at struct {
		id     ID
		packed bool
		loc    packLoc
	}
	ats := make([]at, len(ids))
	for i, id := range ids {
		loc, ok, _ := s.packed(id)
		ats[i] = at{id, ok, loc}
	}
	slices.SortFunc(ats, func(a, b at) int {
		switch {
		case a.packed != b.packed:
			if a.packed {
				return -1
			}
			return 1
		case a.packed:
			if c := bytes.Compare(a.loc.pack[:], b.loc.pack[:]); c != 0 {
				return c
			}
			return int(a.loc.entry.Off) - int(b.loc.entry.Off)
		}
		return bytes.Compare(a.id[:], b.id[:])
	})
	out := make([]ID, len(ats))
	for i, a := range ats {
		out[i] = a.id
	}
	return out
}
