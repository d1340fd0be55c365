package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// RepairReport is the result of RepairChunks. Restored and Missing are
// sorted and together hold every chunk asked for, once.
type RepairReport struct {
	Restored []ID  `json:"restored"` // stored again from the source
	Missing  []ID  `json:"missing"`  // not found in the source, or not stored
	Bytes    int64 `json:"bytes"`    // plaintext of the chunks restored
	// RemovedIndexes are the index objects whose pack is gone that
	// RepairChunks removed, once every chunk of theirs it was asked for
	// had been stored again elsewhere.
	RemovedIndexes []string `json:"removed_indexes,omitempty"`
}

// RepairChunks stores again, from src, the chunks missing lists (those
// Verify reports missing, usually): it runs src.Scan with a Sink that
// confirms every chunk but those through Has, so that a Source that sends
// only what the store lacks (AgentSource) sends only them, and that keeps
// only the Puts of data hashing to one of them. Whatever else src sends
// is dropped unstored, and the entries it adds are ignored: no manifest is
// written. The chunks go to the store as Save writes them (loose, or with
// Config.Pack in packs with their index objects), all of them durable
// before RepairChunks returns.
//
// A chunk is named by the SHA-256 of its content, so a hostile source can
// only fail to supply a chunk, never store a wrong one: data that does not
// hash to a wanted chunk is never stored. src is scanned with no previous
// snapshot, so that a source that could reuse chunk lists by size and
// mtime (ReuseUnchanged) reads every file.
//
// An index object whose pack is missing is what a lost pack leaves, and
// Verify reports it; once every chunk of it that missing lists has been
// stored again, RepairChunks removes it, as it sends readers to a pack
// that is gone. Chunks it lists that were not asked for were lost with
// the pack already; a snapshot that needs one still reports it missing.
//
// A failed scan or write is returned with the report so far: Restored
// holds the chunks known durable. Memory is bounded by missing, the
// uploads in flight and one pack.
func (s *Store) RepairChunks(ctx context.Context, missing []ID, src Source) (*RepairReport, error) {
	if src == nil {
		return nil, errNoSource
	}
	want := make(map[ID]bool, len(missing))
	for _, id := range missing {
		want[id] = true
	}
	rep := &RepairReport{}
	if len(want) == 0 {
		return rep, nil
	}
	if s.cfg.Pack {
		// addToView records the packs written only in a loaded view.
		if err := s.refreshView(ctx, true); err != nil {
			return nil, fmt.Errorf("repair chunks: %w", err)
		}
	}
	up := newGroup(ctx, uploadParallel)
	k := &refetchSink{s: s, up: up, want: maps.Clone(want), done: map[ID]bool{}}
	if s.cfg.Pack {
		// Under ctx, not up's context, as in Save: up is done before the
		// last pack is sealed.
		k.pk = newPacker(ctx, s, up.fail)
	}
	if err := src.Scan(up.ctx, nil, k); err != nil {
		up.fail(err)
	}
	err := up.Wait()
	if k.pk != nil {
		if err != nil {
			k.pk.g.fail(err)
		} else {
			err = k.pk.flush(ctx)
		}
		if werr := k.pk.g.Wait(); err == nil {
			err = werr
		}
		if err == nil {
			// Every pack is stored, its index object too.
			for id, n := range k.packed {
				k.done[id] = true
				k.bytes += n
			}
		}
	}
	for id := range want {
		if k.done[id] {
			rep.Restored = append(rep.Restored, id)
		} else {
			rep.Missing = append(rep.Missing, id)
		}
	}
	slices.SortFunc(rep.Restored, CompareIDs)
	slices.SortFunc(rep.Missing, CompareIDs)
	rep.Bytes = k.bytes
	if err != nil {
		return rep, fmt.Errorf("repair chunks: %w", err)
	}
	if len(rep.Restored) > 0 {
		if rep.RemovedIndexes, err = s.dropLostIndexes(ctx, want, k.done); err != nil {
			return rep, fmt.Errorf("repair chunks: %w", err)
		}
	}
	return rep, nil
}

// dropLostIndexes removes every index object whose pack is not listed,
// that lists at least one chunk of want and none of want that is not in
// restored, and returns their names, sorted. Index objects are listed
// before packs (refreshView), and a pack is written before its index
// object and removed after it (Save, Prune), so an index object listed
// without its pack is one whose pack is gone, not one on its way.
func (s *Store) dropLostIndexes(ctx context.Context, want, restored map[ID]bool) ([]string, error) {
	if err := s.refreshView(ctx, s.cfg.Pack); err != nil {
		return nil, err
	}
	s.view.mu.Lock()
	var lost []ID
	for id, es := range s.view.entries {
		if _, ok := s.view.packs[id]; ok {
			continue
		}
		asked, left := false, false
		for _, e := range es {
			if want[e.ID] {
				asked = true
				left = left || !restored[e.ID]
			}
		}
		if asked && !left {
			lost = append(lost, id)
		}
	}
	s.view.mu.Unlock()
	slices.SortFunc(lost, CompareIDs)
	var names []string
	for _, id := range lost {
		if err := s.b.Delete(ctx, indexName(id)); err != nil {
			return names, fmt.Errorf("remove %s: %w", indexName(id), err)
		}
		names = append(names, indexName(id))
	}
	if len(names) > 0 {
		if err := s.refreshView(ctx, s.cfg.Pack); err != nil {
			return names, err
		}
	}
	return names, nil
}

// refetchSink is RepairChunks' Sink. Its uploads run on up, its packs on
// pk (with Config.Pack); up's error is sticky.
type refetchSink struct {
	s  *Store
	up *group
	pk *packer

	mu     sync.Mutex
	want   map[ID]bool  // asked for, not yet taken by a Put
	done   map[ID]bool  // durable
	packed map[ID]int64 // in a pack, durable once the packer's uploads succeed; plaintext size
	bytes  int64        // plaintext of done
}

var _ Sink = (*refetchSink)(nil)

// Has confirms every chunk but those still wanted, so that a source asks
// to send only those, and each of them once.
func (k *refetchSink) Has(ctx context.Context, id ID) (bool, error) {
	if err := k.up.Err(); err != nil {
		return false, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.want[id], nil
}

// claimable takes the claim of every chunk but those still wanted, as Has
// confirms them: a repair commits nothing, so a claim leads to no
// snapshot, and the chunks it asks a sandbox for are the ones the
// operator asked to repair from it.
func (k *refetchSink) claimable(id ID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.want[id]
}

// Put stores data if it hashes to a wanted chunk not taken yet, and drops
// it otherwise.
func (k *refetchSink) Put(ctx context.Context, data []byte) (ID, error) {
	if len(data) == 0 || len(data) > MaxChunkSize {
		return ID{}, fmt.Errorf("put chunk: %d bytes, want 1 to %d", len(data), MaxChunkSize)
	}
	if err := k.up.Err(); err != nil {
		return ID{}, err
	}
	id := Hash(data)
	k.mu.Lock()
	take := k.want[id]
	delete(k.want, id)
	k.mu.Unlock()
	if !take {
		return id, nil
	}
	body := slices.Clone(data)
	err := k.up.Go(ctx, func(ctx context.Context) error {
		if k.pk != nil {
			if err := k.pk.add(ctx, id, encoder.EncodeAll(body, nil)); err != nil {
				return err
			}
			k.mu.Lock()
			defer k.mu.Unlock()
			if k.packed == nil {
				k.packed = map[ID]int64{}
			}
			k.packed[id] = int64(len(body))
			return nil
		}
		if _, err := writeChunk(ctx, k.s.b, id, body, nil); err != nil {
			return err
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		k.done[id] = true
		k.bytes += int64(len(body))
		return nil
	})
	if err != nil {
		k.up.fail(err)
	}
	return id, err
}

// Add ignores the entry: a repair commits no manifest.
func (k *refetchSink) Add(Entry) error {
	if err := k.up.Err(); err != nil {
		return err
	}
	return nil
}

// errNoSource is returned for a nil Source.
var errNoSource = errors.New("repair chunks: nil source")
