package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
)

// RepairIndexes rewrites, from the packs' own trailers, the index object
// of every pack whose index object is missing, does not parse, or
// disagrees with the trailer, and returns the index objects it wrote,
// sorted. Every pack is read whole and must hash to its name first: a
// damaged pack is left alone (Verify reports it), and so is its index.
//
// A pack without an index object is also what a save that died between
// the two leaves, or one still in flight: indexing it makes its chunks
// visible to saves and restores, which is harmless (they are intact), and
// Prune still removes it once no snapshot needs it.
func (s *Store) RepairIndexes(ctx context.Context) ([]string, error) {
	s.packs.forget(true)
	if err := s.refreshView(ctx, false); err != nil {
		return nil, err
	}
	s.view.mu.Lock()
	var packs []ID
	for id := range s.view.packs {
		packs = append(packs, id)
	}
	s.view.mu.Unlock()
	slices.SortFunc(packs, CompareIDs)
	var wrote []string
	for _, id := range packs {
		p, err := s.pack(ctx, id)
		var pe *PackError
		if errors.As(err, &pe) {
			continue
		}
		if err != nil {
			return wrote, err
		}
		s.view.mu.Lock()
		es, ok := s.view.entries[id]
		s.view.mu.Unlock()
		if ok && sameEntries(es, p.at) {
			continue
		}
		n, err := packTrailerSize(p.data[len(p.data)-packFooterSize:], int64(len(p.data)))
		if err != nil {
			continue // checkPack parsed it: cannot happen
		}
		body := p.data[int64(len(p.data))-packFooterSize-n : len(p.data)-packFooterSize]
		if err := s.b.Put(ctx, indexName(id), bytes.NewReader(body), false); err != nil {
			return wrote, fmt.Errorf("write %s: %w", indexName(id), err)
		}
		wrote = append(wrote, indexName(id))
	}
	if len(wrote) > 0 {
		// Index objects are loaded once: drop the ones just replaced,
		// whose ModTime a coarse clock may not have changed.
		s.view.mu.Lock()
		for _, name := range wrote {
			id, _ := parseIndexName(name)
			delete(s.view.loadedAt, id)
		}
		s.view.mu.Unlock()
		if err := s.refreshView(ctx, s.cfg.Pack); err != nil {
			return wrote, err
		}
	}
	return wrote, nil
}
