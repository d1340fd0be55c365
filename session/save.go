package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// Source is a tree to save. The local directory ([DirSource]) is one; a
// sandbox with ferry's agent, which chunks and hashes next to the data and
// sends every chunk but its parent's, is another ([AgentSource]).
type Source interface {
	// Scan reports the tree to sink: every entry, and through Put the
	// contents of every chunk the entries reference that sink.Has does not
	// confirm. prev is the snapshot the save starts from (nil if none):
	// a file unchanged since prev may reuse prev's chunk list, which
	// prev.Files finds. Scan returns when it is done; it must not use
	// sink or prev after that.
	Scan(ctx context.Context, prev *Parent, sink Sink) error
}

// Sink receives a Source's tree during Save. Its methods are safe for
// concurrent use.
type Sink interface {
	// Has reports whether the store holds chunk id, so that an entry may
	// reference it without the Source sending it. The chunks of the
	// snapshot the save started from are always held. The answer is the
	// store's, of every key: a Source that reads the bytes itself
	// (DirSource) may use it, one whose chunk IDs are a sandbox's claims
	// must not (see AgentSource), lest a claimed ID read another key's
	// chunk or tell the sandbox that it exists.
	Has(ctx context.Context, id ID) (bool, error)
	// Put stores data (at most MaxChunkSize bytes) as a chunk and returns
	// its ID, the SHA-256 of data. data may be reused when Put returns.
	// The chunk may still be on its way to the store then: entries may
	// reference it at once, and Save commits only once it is durable. An
	// error storing it fails the save; this Put, or a later call, may
	// return it.
	Put(ctx context.Context, data []byte) (ID, error)
	// Add records one entry of the tree. Every chunk it references must
	// have been Put or confirmed by Has first. Entries come in any order;
	// Save sorts and validates them before the commit.
	Add(e Entry) error
}

// Save stores what src reports as the next snapshot of key and returns its
// manifest. Chunks are written first (uploadParallel at a time, while the
// scan goes on), the manifest last, once every chunk is durable, by
// exclusive creation of the sequence number after the newest one that
// existed when the save began: if another save has committed that number
// meanwhile, Save fails with a *ConflictError (matching ErrConflict) and
// commits nothing. So does a failed upload. The chunks it stored stay
// behind, unreferenced, until Prune removes them after the grace period;
// a retry reuses them.
//
// With Config.Pack the chunks go into packs instead (see packer), and the
// look-ups behind Sink.Has are the listings and pack indexes Save loads
// when it begins, not a request per chunk; the write order is packs,
// their index objects, then the manifest.
//
// The manifest returned has no Entries (Load reads them): a save holds
// its entries as records in a bounded buffer and a temp file (see spill),
// and streams the manifest from there into the commit, so that its memory
// does not grow with the tree.
func (s *Store) Save(ctx context.Context, key string, src Source) (*Manifest, error) {
	if err := ValidKey(key); err != nil {
		return nil, err
	}
	// The lock comes before the first look at the store: a Prune that
	// lists locks after it keeps what this save may reuse, and one that
	// listed them before still holds its own lock, which waitPrunes sees.
	lk, err := s.takeLock(ctx, saveLockPrefix, "save", key)
	if err != nil {
		return nil, fmt.Errorf("save %s: %w", key, err)
	}
	defer lk.release(ctx)
	if err := s.waitPrunes(ctx); err != nil {
		return nil, fmt.Errorf("save %s: %w", key, err)
	}
	prev, parent, last, err := s.parent(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("save %s: %w", key, err)
	}
	defer prev.close()
	if s.cfg.Pack {
		if err := s.refreshView(ctx, true); err != nil {
			return nil, fmt.Errorf("save %s: %w", key, err)
		}
	}
	up := newGroup(ctx, uploadParallel)
	sk := &sink{s: s, up: up, since: lk.body.reuseSince(s.cfg.Grace), confirmed: map[ID]bool{}, found: map[ID]bool{}, absent: map[ID]bool{}}
	defer sk.close()
	if s.cfg.Pack {
		// Pack uploads run under ctx, not up's context: up is done (and
		// its context cancelled) when the last chunk is in a pack, before
		// the last pack is sealed.
		sk.pk = newPacker(ctx, s, up.fail)
	}
	if err := prev.eachChunk(func(id ID) { sk.confirmed[id] = true }); err != nil {
		return nil, fmt.Errorf("save %s: %w", key, err)
	}
	if len(sk.confirmed) > 0 {
		// Only the chunks of prev the store still holds: a chunk lost
		// since (damage, or a store written before locks) is sent again
		// rather than referenced once more, so that one broken snapshot
		// does not make every later one broken too.
		ids := slices.Collect(maps.Keys(sk.confirmed))
		missing, err := s.missingChunks(ctx, key, parent, ids, false)
		if err != nil {
			return nil, fmt.Errorf("save %s: %w", key, err)
		}
		if len(missing) > 0 {
			slog.Warn("session: the snapshot a save starts from lacks chunks; they are stored again", "key", key, "snapshot", parent, "missing", len(missing))
		}
		for id := range missing {
			delete(sk.confirmed, id)
		}
	}
	// The scan runs under the uploads' context, so that a failed upload,
	// which loses the save, stops it too; a failed scan stops the uploads.
	// Either way the first error is the save's, and every upload has
	// returned before Save goes on.
	if err := src.Scan(up.ctx, prev, sk); err != nil {
		up.fail(err)
	}
	err = up.Wait()
	if sk.pk != nil {
		if err != nil {
			sk.pk.g.fail(err)
		} else {
			err = sk.pk.flush(ctx)
		}
		if werr := sk.pk.g.Wait(); err == nil {
			err = werr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("save %s: %w", key, err)
	}
	m, err := sk.manifest(key, last+1, parent)
	if err != nil {
		return nil, fmt.Errorf("save %s: %w", key, err)
	}
	m.Time = s.cfg.Now().UTC()
	// A lock that lapsed may have let a Prune miss this save and remove
	// a chunk it reuses: commit nothing then.
	if err := lk.valid(); err != nil {
		return nil, fmt.Errorf("save %s: nothing committed: %w", key, err)
	}
	body := sk.body(m)
	defer body.Close()
	if err := s.b.Put(ctx, manifestName(key, m.Seq), body, true); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, &ConflictError{Key: key, Seq: m.Seq}
		}
		return nil, fmt.Errorf("save %s: commit snapshot %d: %w", key, m.Seq, err)
	}
	return m, nil
}

// sink is Save's Sink. Its uploads run on up, which Save waits for
// before the commit; up's error is sticky: once an upload has failed,
// Has and Put return that error.
type sink struct {
	s  *Store
	up *group
	pk *packer // with Config.Pack: chunks go into packs
	// since is the oldest last Put of a chunk the store holds that the
	// save may reuse without writing it again, by the backend's clock.
	since time.Time

	mu sync.Mutex
	// confirmed are the chunks of the parent the store holds, and those
	// Put since (being uploaded: durable before the commit, or the save
	// fails). Entries may reference them, and a source that does not
	// send a chunk's bytes may claim only them (claimable).
	confirmed map[ID]bool
	// found are the other chunks Has found fresh in the store, perhaps
	// another key's: entries may reference them too, but they are no
	// claim a sandbox may make.
	found map[ID]bool
	// absent are chunks Has found missing or stale: Put uploads them
	// without asking the store a second time.
	absent map[ID]bool
	// entries are those Add took, as records in memory or spilled to a
	// temp file (see spill), with their totals.
	entries   spill
	totals    Manifest
	json      int64 // at least the manifest's JSON of entries: see minEntryJSON
	newBytes  int64
	newChunks int64
	sealed    bool
}

var _ Sink = (*sink)(nil)

func (k *sink) Has(ctx context.Context, id ID) (bool, error) {
	if err := k.up.Err(); err != nil {
		return false, err
	}
	k.mu.Lock()
	ok := k.confirmed[id] || k.found[id]
	k.mu.Unlock()
	if ok {
		return true, nil
	}
	fresh, err := k.fresh(ctx, id)
	if err != nil {
		return false, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.confirmed[id] {
		return true, nil
	}
	if fresh {
		k.found[id] = true
	} else {
		k.absent[id] = true
	}
	return fresh, nil
}

// claimable reports whether chunk id is one of the parent's the store
// holds, or one this save has Put: the only chunks an entry of a source
// in a sandbox may reference without their bytes (see AgentSource). It
// asks the store nothing, so its answer says nothing of other keys.
func (k *sink) claimable(id ID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.confirmed[id]
}

// fresh reports whether chunk id exists and was last written after
// k.since, half the grace period before this save's lock was taken: a
// Prune keeps every such chunk while the lock lives (see the package
// doc), however long the save takes. An older one is written again.
func (k *sink) fresh(ctx context.Context, id ID) (bool, error) {
	if k.pk != nil {
		// From the listings Save began with: no request per chunk. A
		// chunk stored since then by another writer is stored again.
		if t, ok := k.s.looseTime(id); ok && t.After(k.since) {
			return true, nil
		}
		loc, ok, listed := k.s.packed(id)
		return ok && listed && loc.time.After(k.since), nil
	}
	o, err := k.s.b.Stat(ctx, chunkName(id))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat chunk %s: %w", id, err)
	}
	return o.ModTime.After(k.since), nil
}

func (k *sink) Put(ctx context.Context, data []byte) (ID, error) {
	id := Hash(data)
	return id, k.putChecked(ctx, id, data, nil)
}

// putChecked is Put for a caller that has checked that data hashes to id
// and, when zstd is not nil, that zstd is one zstd frame that decodes to
// data: then zstd is stored as it is, which spares compressing a chunk that
// arrived compressed a second time.
//
// The chunk is uploaded on k.up, from a copy (the caller may reuse data and
// zstd once putChecked returns); putChecked waits only for a free upload.
// A chunk already confirmed, or being uploaded, is not uploaded again.
func (k *sink) putChecked(ctx context.Context, id ID, data, zstd []byte) error {
	if len(data) == 0 || len(data) > MaxChunkSize {
		return fmt.Errorf("put chunk: %d bytes, want 1 to %d", len(data), MaxChunkSize)
	}
	if err := k.up.Err(); err != nil {
		return err
	}
	k.mu.Lock()
	if k.sealed {
		k.mu.Unlock()
		return errors.New("put chunk: the save is over")
	}
	if k.confirmed[id] {
		k.mu.Unlock()
		return nil
	}
	// Confirmed now, uploaded below: an entry may reference the chunk at
	// once, as Save commits only after every upload has succeeded. One
	// Has found fresh is not uploaded again.
	absent, found := k.absent[id], k.found[id]
	k.confirmed[id] = true
	delete(k.absent, id)
	delete(k.found, id)
	k.mu.Unlock()
	if found {
		return nil
	}

	stored := zstd != nil && len(zstd) <= maxStoredChunk
	if k.pk != nil {
		return k.putPacked(ctx, id, data, zstd, stored, absent)
	}
	body := slices.Clone(data)
	if stored {
		body = slices.Clone(zstd)
	}
	size := int64(len(data))
	err := k.up.Go(ctx, func(ctx context.Context) error {
		if !absent {
			// No Has has asked: the store may hold it already.
			fresh, err := k.fresh(ctx, id)
			if err != nil || fresh {
				return err
			}
		}
		var err error
		if stored {
			err = putStored(ctx, k.s.b, id, body)
		} else {
			_, err = writeChunk(ctx, k.s.b, id, body, nil)
		}
		if err != nil {
			return err
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		k.newBytes += size
		k.newChunks++
		return nil
	})
	if err != nil {
		// The chunk is confirmed but will not be stored: the save must not
		// commit, even if the source ignores this error.
		k.up.fail(err)
	}
	return err
}

// putPacked is putChecked's upload into a pack. A chunk that arrived
// compressed is appended at once (the fresh look-up is a map's); one to
// compress is compressed on up, uploadParallel at a time.
func (k *sink) putPacked(ctx context.Context, id ID, data, zstd []byte, stored, absent bool) error {
	add := func(ctx context.Context, z []byte) error {
		if !absent {
			fresh, err := k.fresh(ctx, id)
			if err != nil || fresh {
				return err
			}
		}
		if err := k.pk.add(ctx, id, z); err != nil {
			return err
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		k.newBytes += int64(len(data))
		k.newChunks++
		return nil
	}
	var err error
	if stored {
		err = add(ctx, zstd)
	} else {
		body := slices.Clone(data)
		err = k.up.Go(ctx, func(ctx context.Context) error {
			return add(ctx, encoder.EncodeAll(body, nil))
		})
	}
	if err != nil {
		k.up.fail(err)
	}
	return err
}

func (k *sink) Add(e Entry) error {
	if err := e.validate(); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sealed {
		return errors.New("add entry: the save is over")
	}
	for _, c := range e.Chunks {
		if !k.confirmed[c.ID] && !k.found[c.ID] {
			return fmt.Errorf("entry %q: chunk %s neither stored nor confirmed", e.Path, c.ID)
		}
	}
	return k.addEntry(&e)
}

// manifest seals the sink and builds the manifest, validated as a reader
// would, duplicates included: all but its entries, which stay in the sink
// for its body.
func (k *sink) manifest(key string, seq, parent int64) (*Manifest, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sealed = true
	m := k.totals
	m.Format, m.Key, m.Seq, m.Parent, m.NewBytes, m.NewChunks = manifestFormat, key, seq, parent, k.newBytes, k.newChunks
	if err := k.checkEntries(&m); err != nil {
		return nil, err
	}
	return &m, nil
}
