package session

import (
	"bytes"
	"context"
	"fmt"
	"sync"
)

// packParallel bounds the packs one Save has on their way to the store:
// each is PackSize bytes held until its Put returns, and two in flight
// already keep a link busy while the next one fills.
const packParallel = 2

// packer fills a Save's packs. Chunks are appended, as stored, to the
// current pack; once it reaches Config.PackSize it is sealed and uploaded
// on g, the pack first and then its index object, so that a reader that
// finds the index finds the pack. Save waits for g before the commit; a
// failed upload also calls fail, which stops the save's scan.
type packer struct {
	s    *Store
	g    *group
	fail func(error)

	mu    sync.Mutex
	blobs []byte
	es    []packEntry
}

func newPacker(ctx context.Context, s *Store, fail func(error)) *packer {
	return &packer{s: s, g: newGroup(ctx, packParallel), fail: fail}
}

// add appends z, chunk id as stored, to the current pack; it returns once
// z is copied, or once the pack it sealed has an upload slot.
func (p *packer) add(ctx context.Context, id ID, z []byte) error {
	p.mu.Lock()
	if p.blobs == nil {
		p.blobs = make([]byte, 0, p.s.cfg.PackSize+maxStoredChunk+p.s.cfg.PackSize/64)
	}
	p.es = append(p.es, packEntry{ID: id, Off: uint32(len(p.blobs)), Len: uint32(len(z))})
	p.blobs = append(p.blobs, z...)
	if len(p.blobs) < p.s.cfg.PackSize {
		p.mu.Unlock()
		return nil
	}
	blobs, es := p.blobs, p.es
	p.blobs, p.es = nil, nil
	p.mu.Unlock()
	return p.upload(ctx, blobs, es)
}

// flush seals and uploads the current pack, if it holds any chunk.
func (p *packer) flush(ctx context.Context) error {
	p.mu.Lock()
	blobs, es := p.blobs, p.es
	p.blobs, p.es = nil, nil
	p.mu.Unlock()
	if len(es) == 0 {
		return nil
	}
	return p.upload(ctx, blobs, es)
}

// upload seals a pack and stores it, then its index object.
func (p *packer) upload(ctx context.Context, blobs []byte, es []packEntry) error {
	dataEnd := len(blobs)
	pack, id := sealPack(blobs, es)
	return p.g.Go(ctx, func(ctx context.Context) error {
		err := p.s.b.Put(ctx, packName(id), bytes.NewReader(pack), false)
		if err == nil {
			err = p.s.b.Put(ctx, indexName(id), bytes.NewReader(pack[dataEnd:len(pack)-packFooterSize]), false)
		}
		if err != nil {
			err = fmt.Errorf("write pack %s of %d chunks: %w", packName(id), len(es), err)
			p.fail(err)
			return err
		}
		p.s.addToView(id, es, int64(len(pack)))
		return nil
	})
}

// addToView records a pack this Store has just stored, so that its reads
// and saves see it before the next refresh.
func (s *Store) addToView(id ID, es []packEntry, size int64) {
	now := s.cfg.Now()
	v := &s.view
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.loaded {
		return // the first refresh lists it
	}
	v.entries[id] = es
	v.indexTime[id] = now
	// loadedAt is left unset: the next refresh reads the index object
	// back, once, and records its ModTime.
	v.packs[id] = ObjectInfo{Name: packName(id), Size: size, ModTime: now}
	for _, e := range es {
		v.where[e.ID] = packLoc{pack: id, entry: e, time: now}
	}
}
