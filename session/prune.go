package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// PruneOptions say which snapshots Prune removes. With both zero it
// removes no snapshot, only unreferenced chunks past the grace period.
type PruneOptions struct {
	// Keep, if positive, keeps the Keep newest snapshots of each key and
	// removes older ones.
	Keep int
	// OlderThan, if positive, removes snapshots whose Time is older than
	// it. This may remove every snapshot of a key, as Rascal does with
	// sessions idle past their TTL.
	OlderThan time.Duration
	// Key, if set, limits the removal of snapshots to that key. Chunks
	// are collected across all keys either way.
	Key string
}

// PruneReport is the result of Prune.
type PruneReport struct {
	Snapshots   []SnapshotRef `json:"snapshots"`    // removed
	Chunks      int           `json:"chunks"`       // loose chunks removed
	Packs       int           `json:"packs"`        // packs removed
	StoredBytes int64         `json:"stored_bytes"` // of the removed chunks and packs
}

// Prune removes snapshots as opts say, then every chunk that no remaining
// snapshot references and whose last Put is older than the grace period
// (Config.Grace), so that chunks a save in flight has just written or
// refreshed survive. If a remaining manifest cannot be read, Prune
// removes no chunk (it cannot know what that snapshot needs) and returns
// an error after the snapshots it removed.
//
// Packs: a pack is removed only when no remaining snapshot references any
// of its chunks and both it and its index object are older than the grace
// period, the index object first (a pack whose index object is missing is
// read from its trailer; one whose content cannot be known stays). A pack
// some of whose chunks are still used stays whole: Prune does not repack.
//
// Limitation: a save that started from a snapshot which Prune then removes
// through OlderThan may reference chunks of it that Prune removes too; the
// newest snapshot of a key is removed only through OlderThan.
func (s *Store) Prune(ctx context.Context, opts PruneOptions) (*PruneReport, error) {
	if opts.Keep < 0 || opts.OlderThan < 0 {
		return nil, fmt.Errorf("session: prune: negative keep %d or age %v", opts.Keep, opts.OlderThan)
	}
	keys, err := s.Keys(ctx)
	if err != nil {
		return nil, err
	}
	if opts.Key != "" {
		if err := ValidKey(opts.Key); err != nil {
			return nil, err
		}
	}
	// The cut-off for chunks is taken before the manifests are read: a
	// chunk written after it is younger than the grace period in any case.
	now := s.cfg.Now()
	chunkCutoff := now.Add(-s.cfg.Grace)
	rep := &PruneReport{}
	for _, k := range keys {
		if opts.Key != "" && k != opts.Key {
			continue
		}
		seqs, err := s.sequences(ctx, k)
		if err != nil {
			return rep, err
		}
		for i, seq := range seqs {
			drop := opts.Keep > 0 && i < len(seqs)-opts.Keep
			if !drop && opts.OlderThan > 0 {
				m, err := s.load(ctx, k, seq)
				if err != nil {
					return rep, fmt.Errorf("prune: %w", err)
				}
				drop = now.Sub(m.Time) > opts.OlderThan
			}
			if !drop {
				continue
			}
			if err := s.b.Delete(ctx, manifestName(k, seq)); err != nil {
				return rep, fmt.Errorf("prune: remove snapshot %d of %s: %w", seq, k, err)
			}
			rep.Snapshots = append(rep.Snapshots, SnapshotRef{k, seq})
		}
	}
	used := map[ID]bool{}
	if keys, err = s.Keys(ctx); err != nil {
		return rep, err
	}
	for _, k := range keys {
		seqs, err := s.sequences(ctx, k)
		if err != nil {
			return rep, err
		}
		for _, seq := range seqs {
			m, err := s.load(ctx, k, seq)
			if err != nil {
				return rep, fmt.Errorf("prune: no chunk removed: %w", err)
			}
			for _, e := range m.Entries {
				for _, c := range e.Chunks {
					used[c.ID] = true
				}
			}
		}
	}
	var drop []ObjectInfo
	err = s.b.List(ctx, chunkPrefix, func(o ObjectInfo) error {
		if id, ok := parseChunkName(o.Name); ok && !used[id] && o.ModTime.Before(chunkCutoff) {
			drop = append(drop, o)
		}
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("prune: list chunks: %w", err)
	}
	for _, o := range drop {
		if err := s.b.Delete(ctx, o.Name); err != nil {
			return rep, fmt.Errorf("prune: remove %s: %w", o.Name, err)
		}
		rep.Chunks++
		rep.StoredBytes += o.Size
	}
	if err := s.prunePacks(ctx, used, chunkCutoff, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// prunePacks removes the packs none of whose chunks is in used and whose
// pack and index objects were both last Put before cutoff: the index
// object first, so that no reader is sent to a pack that is gone. A pack
// some of whose chunks are used stays whole (Prune does not repack). The
// chunks of a pack without a readable index object are read from its
// trailer; a pack whose content cannot be known at all stays.
func (s *Store) prunePacks(ctx context.Context, used map[ID]bool, cutoff time.Time, rep *PruneReport) error {
	if err := s.refreshView(ctx, false); err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	type victim struct {
		id      ID
		size    int64
		indexed bool
	}
	var drop []victim
	s.view.mu.Lock()
	packs := maps.Clone(s.view.packs)
	entries := maps.Clone(s.view.entries)
	indexTime := maps.Clone(s.view.indexTime)
	s.view.mu.Unlock()
	for id, o := range packs {
		it, indexed := indexTime[id]
		if !o.ModTime.Before(cutoff) || (indexed && !it.Before(cutoff)) {
			continue
		}
		es, ok := entries[id]
		if !ok {
			var err error
			if es, err = s.packTrailer(ctx, id, o.Size); err != nil {
				var pe *PackError
				if errors.As(err, &pe) {
					continue // unknowable: kept, and Verify reports it
				}
				return fmt.Errorf("prune: %w", err)
			}
		}
		if !slices.ContainsFunc(es, func(e packEntry) bool { return used[e.ID] }) {
			drop = append(drop, victim{id, o.Size, indexed})
		}
	}
	// An index object whose pack is gone, and which no snapshot needs.
	for id, it := range indexTime {
		if _, ok := packs[id]; ok || !it.Before(cutoff) {
			continue
		}
		if es, ok := entries[id]; ok && !slices.ContainsFunc(es, func(e packEntry) bool { return used[e.ID] }) {
			if err := s.b.Delete(ctx, indexName(id)); err != nil {
				return fmt.Errorf("prune: remove %s: %w", indexName(id), err)
			}
		}
	}
	for _, v := range drop {
		if v.indexed {
			if err := s.b.Delete(ctx, indexName(v.id)); err != nil {
				return fmt.Errorf("prune: remove %s: %w", indexName(v.id), err)
			}
		}
		if err := s.b.Delete(ctx, packName(v.id)); err != nil {
			return fmt.Errorf("prune: remove %s: %w", packName(v.id), err)
		}
		rep.Packs++
		rep.StoredBytes += v.size
	}
	if len(drop) > 0 {
		s.packs.forget(true)
		return s.refreshView(ctx, s.cfg.Pack)
	}
	return nil
}
