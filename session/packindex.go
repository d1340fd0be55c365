package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"time"
)

// view is what a Store knows of where chunks are without asking per
// chunk: the index objects (each loaded once: they never change), the
// packs listed, and, for a store that packs, the loose chunks listed. It
// is refreshed by listing at the start of each operation that relies on
// it (Save, CheckPresent, Check, Verify, Prune), so it costs a few LISTs
// and one GET per index object not seen before, whatever the number of
// chunks.
//
// Limitation: what other writers store after a refresh is not seen until
// the next one: a save may then store a chunk again (harmless, the copy
// is only unreferenced garbage later), and a read of a chunk the view
// lacks lists once more (at most once a second) before it reports it
// missing.
type view struct {
	refreshMu sync.Mutex // one refresh at a time

	mu        sync.Mutex
	loaded    bool
	at        time.Time          // of the last refresh
	entries   map[ID][]packEntry // per pack, from its index object
	indexTime map[ID]time.Time   // per pack: its index object's last Put
	badIndex  map[ID]error       // index objects that do not parse
	loadedAt  map[ID]time.Time   // each index object's last Put when it was loaded
	packs     map[ID]ObjectInfo  // packs listed
	loose     map[ID]time.Time   // loose chunks listed (packing stores)
	where     map[ID]packLoc     // chunk → the pack with the newest index holding it
}

// packLoc is where the view finds a chunk.
type packLoc struct {
	pack  ID
	entry packEntry
	time  time.Time // the index object's last Put
}

// refreshView lists the index objects and the packs (and, with loose,
// the loose chunks), and loads the index objects not loaded yet,
// lookupParallel at a time. Index objects are listed before packs, so
// that every pack an index listed names is in the pack listing unless it
// was removed meanwhile.
func (s *Store) refreshView(ctx context.Context, loose bool) error {
	v := &s.view
	v.refreshMu.Lock()
	defer v.refreshMu.Unlock()
	start := s.cfg.Now()
	idx := map[ID]ObjectInfo{}
	err := s.b.List(ctx, indexPrefix, func(o ObjectInfo) error {
		if id, ok := parseIndexName(o.Name); ok {
			idx[id] = o
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list pack indexes: %w", err)
	}
	packs := map[ID]ObjectInfo{}
	err = s.b.List(ctx, packPrefix, func(o ObjectInfo) error {
		if id, ok := parsePackName(o.Name); ok {
			packs[id] = o
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list packs: %w", err)
	}
	var looseSet map[ID]time.Time
	if loose {
		looseSet = map[ID]time.Time{}
		err = s.b.List(ctx, chunkPrefix, func(o ObjectInfo) error {
			if id, ok := parseChunkName(o.Name); ok {
				looseSet[id] = o.ModTime
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("list chunks: %w", err)
		}
	}

	v.mu.Lock()
	if v.entries == nil {
		v.entries, v.indexTime, v.badIndex, v.loadedAt = map[ID][]packEntry{}, map[ID]time.Time{}, map[ID]error{}, map[ID]time.Time{}
	}
	// An index object is loaded once, and again only if it was rewritten
	// (RepairIndexes, here or on another node).
	var todo []ID
	for id, o := range idx {
		if t, ok := v.loadedAt[id]; !ok || !t.Equal(o.ModTime) {
			todo = append(todo, id)
		}
	}
	v.mu.Unlock()

	loaded := make([][]packEntry, len(todo))
	fails := make([]error, len(todo))
	g := newGroup(ctx, lookupParallel)
	for i, id := range todo {
		if err := g.Go(ctx, func(ctx context.Context) error {
			es, err := s.loadIndex(ctx, id)
			var pe *PackError
			if errors.As(err, &pe) {
				fails[i] = err
				return nil
			}
			loaded[i] = es
			return err
		}); err != nil {
			break
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}

	v.mu.Lock()
	defer v.mu.Unlock()
	for i, id := range todo {
		v.loadedAt[id] = idx[id].ModTime
		if fails[i] != nil {
			v.badIndex[id] = fails[i]
			delete(v.entries, id)
		} else {
			v.entries[id] = loaded[i]
			delete(v.badIndex, id)
		}
	}
	for id := range v.loadedAt {
		if _, ok := idx[id]; !ok { // pruned
			delete(v.entries, id)
			delete(v.badIndex, id)
			delete(v.loadedAt, id)
		}
	}
	clear(v.indexTime)
	for id, o := range idx {
		v.indexTime[id] = o.ModTime
	}
	// A chunk in several packs is read from a listed one, the newest
	// index first: a pack lost and its chunks stored again in another
	// (RepairChunks) may have index objects of the same second.
	v.where = make(map[ID]packLoc, len(v.where))
	for pack, es := range v.entries {
		t := v.indexTime[pack]
		_, listed := packs[pack]
		for _, e := range es {
			old, ok := v.where[e.ID]
			_, oldListed := packs[old.pack]
			if !ok || listed && !oldListed || listed == oldListed && t.After(old.time) {
				v.where[e.ID] = packLoc{pack: pack, entry: e, time: t}
			}
		}
	}
	v.packs = packs
	if loose {
		v.loose = looseSet
	}
	v.loaded, v.at = true, start
	s.packs.forget(false)
	return nil
}

// refreshIfOlder refreshes the view unless a refresh started within d.
func (s *Store) refreshIfOlder(ctx context.Context, d time.Duration) error {
	s.view.mu.Lock()
	fresh := s.view.loaded && s.cfg.Now().Sub(s.view.at) < d
	s.view.mu.Unlock()
	if fresh {
		return nil
	}
	return s.refreshView(ctx, s.cfg.Pack)
}

// loadIndex reads and parses the index object of pack id. A damaged one
// is a *PackError naming it.
func (s *Store) loadIndex(ctx context.Context, id ID) ([]packEntry, error) {
	name := indexName(id)
	r, err := s.b.Get(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &PackError{Object: name, Missing: true}
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer r.Close()
	body, err := io.ReadAll(io.LimitReader(r, maxIndexSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	es, err := parseIndex(body, MaxPackSize)
	if err != nil {
		return nil, &PackError{Object: name, Reason: err.Error()}
	}
	return es, nil
}

// isPackFault reports an error that is a pack's or index object's fault.
func isPackFault(err error) bool {
	var pe *PackError
	return errors.As(err, &pe)
}

// packed reports where the view finds chunk id in a pack, and whether
// that pack was listed.
func (s *Store) packed(id ID) (loc packLoc, ok, listed bool) {
	v := &s.view
	v.mu.Lock()
	defer v.mu.Unlock()
	loc, ok = v.where[id]
	if ok {
		_, listed = v.packs[loc.pack]
	}
	return loc, ok, listed
}

// looseTime reports whether the view lists chunk id as a loose object,
// and its last Put.
func (s *Store) looseTime(id ID) (time.Time, bool) {
	s.view.mu.Lock()
	defer s.view.mu.Unlock()
	t, ok := s.view.loose[id]
	return t, ok
}

// packTrailer reads the entries of pack id, of size bytes, from its
// trailer with two ranged reads, without fetching the whole pack: for a
// pack whose index object is missing or damaged.
func (s *Store) packTrailer(ctx context.Context, id ID, size int64) ([]packEntry, error) {
	name := packName(id)
	if size < packFooterSize || size > MaxPackSize {
		return nil, &PackError{Object: name, Reason: fmt.Sprintf("trailer: pack of %d bytes", size)}
	}
	footer, err := getRange(ctx, s.b, name, size-packFooterSize, packFooterSize)
	if err != nil {
		return nil, err
	}
	n, err := packTrailerSize(footer, size)
	if err != nil {
		return nil, &PackError{Object: name, Reason: err.Error()}
	}
	body, err := getRange(ctx, s.b, name, size-packFooterSize-n, n)
	if err != nil {
		return nil, err
	}
	es, err := parseIndex(body, size-packFooterSize-n)
	if err != nil {
		return nil, &PackError{Object: name, Reason: "trailer: " + err.Error()}
	}
	return es, nil
}

// getRange reads length bytes of the object name from off: through
// RangeGetter when b has it, else by skipping. A short object is a
// *PackError (the only ranged reads are of packs).
func getRange(ctx context.Context, b Backend, name string, off, length int64) ([]byte, error) {
	var r io.ReadCloser
	var err error
	if rg, ok := b.(RangeGetter); ok {
		r, err = rg.GetRange(ctx, name, off, length)
	} else if r, err = b.Get(ctx, name); err == nil {
		if _, err = io.CopyN(io.Discard, r, off); err != nil {
			r.Close()
			r, err = nil, fmt.Errorf("read %s: %w", name, err)
			if errors.Is(err, io.EOF) {
				return nil, &PackError{Object: name, Reason: "shorter than its listing"}
			}
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &PackError{Object: name, Missing: true}
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer r.Close()
	buf := make([]byte, length)
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, &PackError{Object: name, Reason: "shorter than its listing"}
		}
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return buf, nil
}

// packCache holds whole packs fetched for reading, verified against their
// names, with their trailers parsed: a restore reads a pack once, not
// once per chunk. Concurrent reads of one pack share one fetch. It is
// bounded by bytes (packCacheBytes), least recently used out; a failed
// fetch that is the pack's fault (*PackError) is remembered until the
// next refresh of the view, so that a damaged pack is not fetched once
// per chunk.
type packCache struct {
	mu    sync.Mutex
	ents  map[ID]*cachedPack
	size  int64
	clock uint64
	// trailers are the checked trailers of the packs fetched whole,
	// kept after their data is evicted (40 bytes a chunk), so that a
	// LocalRanger backend can serve single chunks of them.
	trailers map[ID]map[ID]packEntry
}

// maxTrailers bounds packCache.trailers: past it they are forgotten, and
// packs fetched whole again when needed.
const maxTrailers = 4096

// trailer returns the checked trailer of pack id if it was fetched whole.
func (c *packCache) trailer(id ID) (map[ID]packEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.trailers[id]
	return at, ok
}

// cached returns pack id's data if it is in memory.
func (c *packCache) cached(id ID) (*cachedPack, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.ents[id]
	if !ok || e.data == nil {
		return nil, false
	}
	c.clock++
	e.used = c.clock
	return e, true
}

// packCacheBytes bounds packCache: four default packs, as a restore
// reads packs nearly in order (a save fills them in the order it scans)
// with aheadPacks fetched ahead, and the CLI runs under a soft heap limit
// of 40 MiB. The pack just fetched is kept even past the bound.
var packCacheBytes int64 = 16 << 20 // a variable for the tests

type cachedPack struct {
	done chan struct{} // closed when the fetch is over
	data []byte
	at   map[ID]packEntry
	err  error
	used uint64
}

// pack returns pack id, fetched whole and checked, from the cache or the
// backend.
func (s *Store) pack(ctx context.Context, id ID) (*cachedPack, error) {
	c := &s.packs
	for {
		c.mu.Lock()
		if c.ents == nil {
			c.ents = map[ID]*cachedPack{}
		}
		c.clock++
		e, ok := c.ents[id]
		if ok {
			e.used = c.clock
			c.mu.Unlock()
			select {
			case <-e.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			var pe *PackError
			if e.err == nil || errors.As(e.err, &pe) {
				return e, e.err
			}
			// The fetch failed for its own reasons (its context): try
			// again with this one.
			continue
		}
		e = &cachedPack{done: make(chan struct{}), used: c.clock}
		c.ents[id] = e
		c.mu.Unlock()

		data, at, err := s.fetchPack(ctx, id)
		c.mu.Lock()
		// Set under the lock: evictLocked reads data of pending entries.
		e.data, e.at, e.err = data, at, err
		if err == nil {
			if c.trailers == nil || len(c.trailers) >= maxTrailers {
				c.trailers = map[ID]map[ID]packEntry{}
			}
			c.trailers[id] = at
		}
		var pe *PackError
		if e.err != nil && !errors.As(e.err, &pe) {
			delete(c.ents, id)
		}
		c.size += int64(len(e.data))
		c.evictLocked(id)
		c.mu.Unlock()
		close(e.done)
		return e, e.err
	}
}

// evictLocked drops the least recently used packs, but keep, until the
// cache is within its bound.
func (c *packCache) evictLocked(keep ID) {
	for c.size > packCacheBytes {
		var victim ID
		var oldest *cachedPack
		for id, e := range c.ents {
			if id == keep || e.data == nil {
				continue
			}
			if oldest == nil || e.used < oldest.used {
				victim, oldest = id, e
			}
		}
		if oldest == nil {
			return
		}
		c.size -= int64(len(oldest.data))
		delete(c.ents, victim)
	}
}

// forget drops remembered failed fetches, and with all every pack.
func (c *packCache) forget(all bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, e := range c.ents {
		select {
		case <-e.done:
			if e.err != nil || all {
				c.size -= int64(len(e.data))
				delete(c.ents, id)
			}
		default:
		}
	}
	if all {
		c.trailers = nil
	}
}

// fetchPack reads pack id whole and checks it.
func (s *Store) fetchPack(ctx context.Context, id ID) ([]byte, map[ID]packEntry, error) {
	name := packName(id)
	r, err := s.b.Get(ctx, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, &PackError{Object: name, Missing: true}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer r.Close()
	var data []byte
	if b, ok := r.(interface{ Bytes() []byte }); ok {
		// Already whole in memory (a cache's copy): not copied again.
		data = b.Bytes()
	} else {
		var buf bytes.Buffer
		presize(&buf, r, MaxPackSize)
		if _, err := buf.ReadFrom(io.LimitReader(r, MaxPackSize+1)); err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", name, err)
		}
		data = buf.Bytes()
	}
	es, err := checkPack(id, data)
	if err != nil {
		return nil, nil, &PackError{Object: name, Reason: err.Error()}
	}
	at := make(map[ID]packEntry, len(es))
	for _, e := range es {
		at[e.ID] = e
	}
	return data, at, nil
}

// presize grows buf to hold r whole when r announces its size (Size, as
// s3store's bodies do) within max, so that reading it allocates once.
func presize(buf *bytes.Buffer, r io.Reader, max int64) {
	if sz, ok := r.(interface{ Size() int64 }); ok && sz.Size() >= 0 && sz.Size() <= max {
		buf.Grow(int(sz.Size()) + bytes.MinRead)
	}
}

// readPacked returns chunk id as stored in the pack loc names. The result
// may alias the cached pack: the caller copies what it keeps.
//
// A pack is fetched whole, checked against its name, and kept in memory
// (packCache) while the bound allows. A chunk of a pack fetched before
// whose data has been evicted since (a restore comes back to a pack when
// files share chunks) is read alone with GetRange, placed by the trailer
// checked then: locally when the backend holds the pack (LocalRanger: the
// node's cache, which the whole fetch filled), else one ranged request;
// a LocalRanger that no longer holds the pack has it fetched whole again,
// which caches it again.
func (s *Store) readPacked(ctx context.Context, id ID, loc packLoc) ([]byte, error) {
	if p, ok := s.packs.cached(loc.pack); ok {
		return sliceChunk(p, id, loc)
	}
	name := packName(loc.pack)
	if at, ok := s.packs.trailer(loc.pack); ok {
		_, ranged := s.b.(RangeGetter)
		if lr, ok := s.b.(LocalRanger); ok {
			ranged = lr.Local(name)
		}
		if ranged {
			e, ok := at[id]
			if !ok {
				return nil, &PackError{Object: indexName(loc.pack), Chunk: id, Reason: "lists the chunk, which its pack does not hold"}
			}
			data, err := getRange(ctx, s.b, name, int64(e.Off), int64(e.Len))
			if err == nil {
				return data, nil
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("read chunk %s: %w", id, err)
			}
			// Gone or damaged there: fetch it whole, which says which.
		}
	}
	p, err := s.pack(ctx, loc.pack)
	if err != nil {
		var pe *PackError
		if errors.As(err, &pe) {
			c := *pe
			c.Chunk = id
			return nil, &c
		}
		return nil, fmt.Errorf("read chunk %s: %w", id, err)
	}
	return sliceChunk(p, id, loc)
}

// sliceChunk returns chunk id's bytes in pack p, fetched for loc.
func sliceChunk(p *cachedPack, id ID, loc packLoc) ([]byte, error) {
	e, ok := p.at[id]
	if !ok {
		return nil, &PackError{Object: indexName(loc.pack), Chunk: id, Reason: "lists the chunk, which its pack does not hold"}
	}
	return p.data[e.Off : e.Off+e.Len], nil
}
