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
	// Idle, if positive, removes every snapshot of each key last used
	// longer ago than it, as Rascal deletes a task's session directory
	// once RASCAL_TASK_SESSION_TTL_DAYS have passed since it was last
	// written: a key's last use is the Time of its newest snapshot (a
	// resumed run saves a new one; a restore alone is no use). A key a
	// save is writing is in use, and keeps all its snapshots.
	Idle time.Duration
	// DryRun removes nothing and reports what a Prune with the same
	// options would remove now (leftover temporary files aside, which it
	// does not count).
	DryRun bool
}

// PruneReport is the result of Prune.
type PruneReport struct {
	Snapshots []SnapshotRef `json:"snapshots"` // removed
	// IdleKeys are the keys Idle removed whole, each with its last use.
	IdleKeys    []IdleKey `json:"idle_keys,omitempty"`
	Chunks      int       `json:"chunks"`       // loose chunks removed
	Packs       int       `json:"packs"`        // packs removed
	StoredBytes int64     `json:"stored_bytes"` // of the removed chunks and packs
	// Deferred are snapshots the options would have removed that are
	// kept because a save of their key is in flight and may start from
	// them; a later Prune removes them.
	Deferred []SnapshotRef `json:"deferred,omitempty"`
	// SavesInFlight counts the live save locks Prune found and kept
	// what they may reuse for.
	SavesInFlight int `json:"saves_in_flight,omitempty"`
	// Unreadable are the snapshots whose manifests cannot be read. They
	// are never counted as kept, never used as a save's start, and are
	// removed only by OlderThan (by the age of their object).
	Unreadable []BrokenSnapshot `json:"unreadable,omitempty"`
	// TempFiles counts leftover temporary files of writers that died
	// mid-Put (local stores), removed once older than the grace period.
	TempFiles int `json:"temp_files,omitempty"`
	// StaleLocks counts lock objects of saves and prunes that died
	// without removing them, removed once expired.
	StaleLocks int `json:"stale_locks,omitempty"`
	// ChunksKept says why no chunk was removed, when none could be.
	ChunksKept string `json:"chunks_kept,omitempty"`
}

// IdleKey is a key removed for being idle.
type IdleKey struct {
	Key string `json:"key"`
	// LastUsed is the Time of its newest snapshot.
	LastUsed time.Time `json:"last_used"`
}

// Prune removes snapshots as opts say, then every chunk that no remaining
// snapshot references and that no save in flight may reuse. With
// opts.Idle it removes whole keys that have not been used for that long
// (Keep does not hold them back); a key saved while Prune runs is never
// among them: its save either committed before Prune read the key, is in
// flight (and the key busy), or waits for Prune to end. See the
// package doc for the protocol and why it is safe; in short:
//
//   - Prune takes a prune lock first, which makes saves that begin while
//     it runs wait for it to end, and then lists the save locks.
//   - The newest readable snapshot of a key with a save in flight is
//     kept (Deferred): the save may reference its chunks.
//   - A chunk is removed only if its last Put is older than the grace
//     period (Config.Grace), and older than Grace/2 before the start of
//     every save in flight.
//   - Every deletion first checks that Prune's own lock has held.
//
// A manifest that does not decode is reported (Unreadable), never counted
// among the Keep newest, and does not keep chunks: nothing can be restored
// from it. If a manifest cannot be read for another reason (the backend
// fails), Prune removes no chunk and returns an error after the snapshots
// it removed.
//
// Packs: a pack is removed only when no remaining snapshot references any
// of its chunks and both it and its index object are past the same
// cut-off, the index object first (a pack whose index object is missing
// is read from its trailer; one whose content cannot be known stays). A
// pack some of whose chunks are still used stays whole: Prune does not
// repack.
func (s *Store) Prune(ctx context.Context, opts PruneOptions) (*PruneReport, error) {
	if opts.Keep < 0 || opts.OlderThan < 0 || opts.Idle < 0 {
		return nil, fmt.Errorf("session: prune: negative keep %d, age %v or idle time %v", opts.Keep, opts.OlderThan, opts.Idle)
	}
	if opts.Key != "" {
		if err := ValidKey(opts.Key); err != nil {
			return nil, err
		}
	}
	lk, err := s.takeLock(ctx, pruneLockPrefix, "prune", "")
	if err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	defer lk.release(ctx)
	rep := &PruneReport{}
	// The cut-off for chunks is taken before the save locks and the
	// manifests are read: a chunk written after it is younger than the
	// grace period in any case.
	now := s.cfg.Now()
	cutoff := now.Add(-s.cfg.Grace)
	saves, err := s.locks(ctx, saveLockPrefix)
	if err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	inFlight := map[string]bool{}
	var stale []string
	unknown := ""
	for _, l := range saves {
		switch {
		case l.expired(time.Now(), s.cfg.LockTTL):
			if !l.ModTime.IsZero() {
				stale = append(stale, l.Name)
			}
		case !l.ok:
			// Its key and start are unknown: keep every key's newest
			// snapshot and every chunk.
			unknown = l.Name
			rep.SavesInFlight++
		default:
			inFlight[l.body.Key] = true
			rep.SavesInFlight++
		}
	}
	keys, err := s.Keys(ctx)
	if err != nil {
		return nil, err
	}
	p := &pruning{s: s, lk: lk, opts: opts, now: now, used: map[ID]bool{}, seen: map[string]objectStamp{}, dropped: map[string]bool{}, rep: rep}
	used, seen, dropped := p.used, p.seen, p.dropped
	for _, k := range keys {
		if opts.Key != "" && k != opts.Key {
			continue
		}
		if err := p.key(ctx, k, inFlight[k] || unknown != ""); err != nil {
			return rep, err
		}
	}
	if keys, err = s.Keys(ctx); err != nil {
		return rep, err
	}
	for _, k := range keys {
		objs, err := s.snapshots(ctx, k)
		if err != nil {
			return rep, err
		}
		for _, o := range objs {
			if st, ok := seen[o.Name]; ok && st == stampOf(o.ObjectInfo) {
				continue
			}
			if opts.DryRun && dropped[o.Name] {
				continue // still there, but counted as removed
			}
			m, err := s.load(ctx, k, o.Seq)
			if errors.Is(err, ErrManifest) {
				rep.addUnreadable(SnapshotRef{k, o.Seq}, err)
				continue
			}
			if errors.Is(err, ErrNoSnapshot) {
				continue // removed meanwhile, by another prune
			}
			if err != nil {
				return rep, fmt.Errorf("prune: no chunk removed: %w", err)
			}
			for _, id := range chunkSet(m) {
				used[id] = true
			}
		}
	}
	// A save in flight writes again each stale chunk it reuses, to renew
	// it; a prune that listed the chunk before that write would remove
	// the renewed chunk after it, under the save's snapshot. So chunks go
	// only when no save is in flight: a save that starts meanwhile waits
	// for this prune (see the package doc), and the next prune that meets
	// no save removes what this one kept.
	switch {
	case unknown != "":
		rep.ChunksKept = fmt.Sprintf("the save lock %s cannot be read", unknown)
	case rep.SavesInFlight > 0:
		rep.ChunksKept = fmt.Sprintf("%d save(s) in flight", rep.SavesInFlight)
	default:
		if err := p.chunks(ctx, cutoff); err != nil {
			return rep, err
		}
	}
	if opts.DryRun {
		rep.StaleLocks = len(stale)
		return rep, nil
	}
	if tc, ok := s.b.(TempCleaner); ok {
		n, err := tc.CleanTemp(ctx, now.Add(-s.tempAge()))
		rep.TempFiles += n
		if err != nil {
			return rep, fmt.Errorf("prune: %w", err)
		}
	}
	for _, name := range stale {
		if err := s.b.Delete(ctx, name); err != nil {
			return rep, fmt.Errorf("prune: remove %s: %w", name, err)
		}
		rep.StaleLocks++
	}
	return rep, nil
}

// objectStamp tells one version of an object from another.
type objectStamp struct {
	at   int64 // ModTime, Unix nanoseconds
	size int64
}

func stampOf(o ObjectInfo) objectStamp { return objectStamp{o.ModTime.UnixNano(), o.Size} }

func (r *PruneReport) addUnreadable(ref SnapshotRef, err error) {
	for _, u := range r.Unreadable {
		if u.SnapshotRef == ref {
			return
		}
	}
	r.Unreadable = append(r.Unreadable, BrokenSnapshot{SnapshotRef: ref, Err: err.Error()})
}

// pruning is one Prune's state, shared by its passes.
type pruning struct {
	s    *Store
	lk   *lock
	opts PruneOptions
	now  time.Time
	// used collects the chunks of the snapshots that stay; seen names
	// the manifests already in it, with their object's ModTime and size:
	// a committed manifest never changes, so Prune's second pass reads
	// only what is new (or was removed and committed again).
	used map[ID]bool
	seen map[string]objectStamp
	// dropped names the snapshot objects removed (or, in a dry run, that
	// would be).
	dropped map[string]bool
	rep     *PruneReport
}

// key removes the snapshots of key that the options select, but not the
// newest readable one when a save of key is in flight (busy), and adds
// the chunks of those it keeps to used, naming them in seen. It holds the
// chunk lists of one key's snapshots at a time.
func (p *pruning) key(ctx context.Context, key string, busy bool) error {
	s, lk, opts, now, rep := p.s, p.lk, p.opts, p.now, p.rep
	objs, err := s.snapshots(ctx, key)
	if err != nil {
		return err
	}
	type snap struct {
		snapshotObject
		time   time.Time // the manifest's, or its object's if unreadable
		ok     bool
		chunks []ID
	}
	snaps := make([]snap, 0, len(objs))
	for _, o := range objs {
		m, err := s.load(ctx, key, o.Seq)
		switch {
		case errors.Is(err, ErrNoSnapshot):
			continue // removed meanwhile, by another prune
		case errors.Is(err, ErrManifest):
			rep.addUnreadable(SnapshotRef{key, o.Seq}, err)
			snaps = append(snaps, snap{o, o.ModTime, false, nil})
			continue
		case err != nil:
			return fmt.Errorf("prune: %w", err)
		}
		snaps = append(snaps, snap{o, m.Time, true, chunkSet(m)})
	}
	// keepFrom is the sequence number of the oldest of the Keep newest
	// readable snapshots; the newest readable one is what a save starts
	// from.
	var keepFrom, newest int64
	good := 0
	for i := len(snaps) - 1; i >= 0; i-- {
		if !snaps[i].ok {
			continue
		}
		if newest == 0 {
			newest = snaps[i].Seq
		}
		if good++; opts.Keep > 0 && good == opts.Keep {
			keepFrom = snaps[i].Seq
		}
	}
	// The key's last use is its newest snapshot's Time; an unreadable
	// one counts by its object's, as a write all the same.
	var lastUsed time.Time
	for _, sn := range snaps {
		if sn.time.After(lastUsed) {
			lastUsed = sn.time
		}
	}
	idle := opts.Idle > 0 && len(snaps) > 0 && !busy && now.Sub(lastUsed) > opts.Idle
	if idle {
		rep.IdleKeys = append(rep.IdleKeys, IdleKey{Key: key, LastUsed: lastUsed})
	}
	keep := func(sn snap) {
		for _, id := range sn.chunks {
			p.used[id] = true
		}
		if sn.ok {
			p.seen[sn.Name] = stampOf(sn.ObjectInfo)
		}
	}
	for _, sn := range snaps {
		drop := opts.Keep > 0 && keepFrom > 0 && sn.Seq < keepFrom
		if opts.OlderThan > 0 && now.Sub(sn.time) > opts.OlderThan || idle {
			drop = true
		}
		if !drop {
			keep(sn)
			continue
		}
		ref := SnapshotRef{key, sn.Seq}
		if busy && sn.Seq == newest {
			rep.Deferred = append(rep.Deferred, ref)
			keep(sn)
			continue
		}
		if err := lk.valid(); err != nil {
			return fmt.Errorf("prune: %w", err)
		}
		if !opts.DryRun {
			if err := s.b.Delete(ctx, sn.Name); err != nil {
				return fmt.Errorf("prune: remove snapshot %d of %s: %w", sn.Seq, key, err)
			}
		}
		p.dropped[sn.Name] = true
		rep.Snapshots = append(rep.Snapshots, ref)
	}
	return nil
}

// chunks removes the loose chunks and the packs that used does not hold
// and whose objects were last written before cutoff; in a dry run, it
// only counts them.
func (p *pruning) chunks(ctx context.Context, cutoff time.Time) error {
	s, lk, used, dry, rep := p.s, p.lk, p.used, p.opts.DryRun, p.rep
	var drop []ObjectInfo
	err := s.b.List(ctx, chunkPrefix, func(o ObjectInfo) error {
		if id, ok := parseChunkName(o.Name); ok && !used[id] && o.ModTime.Before(cutoff) {
			drop = append(drop, o)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("prune: list chunks: %w", err)
	}
	for _, o := range drop {
		if err := lk.valid(); err != nil {
			return fmt.Errorf("prune: %w", err)
		}
		if !dry {
			if err := s.b.Delete(ctx, o.Name); err != nil {
				return fmt.Errorf("prune: remove %s: %w", o.Name, err)
			}
		}
		rep.Chunks++
		rep.StoredBytes += o.Size
	}
	return p.packs(ctx, cutoff)
}

// packs removes the packs none of whose chunks is in used and whose
// pack and index objects were both last Put before cutoff: the index
// object first, so that no reader is sent to a pack that is gone. A pack
// some of whose chunks are used stays whole (Prune does not repack). The
// chunks of a pack without a readable index object are read from its
// trailer; a pack whose content cannot be known at all stays.
func (p *pruning) packs(ctx context.Context, cutoff time.Time) error {
	s, lk, used, dry, rep := p.s, p.lk, p.used, p.opts.DryRun, p.rep
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
	if dry {
		for _, v := range drop {
			rep.Packs++
			rep.StoredBytes += v.size
		}
		return nil
	}
	// An index object whose pack is gone, and which no snapshot needs.
	for id, it := range indexTime {
		if _, ok := packs[id]; ok || !it.Before(cutoff) {
			continue
		}
		if es, ok := entries[id]; ok && !slices.ContainsFunc(es, func(e packEntry) bool { return used[e.ID] }) {
			if err := lk.valid(); err != nil {
				return fmt.Errorf("prune: %w", err)
			}
			if err := s.b.Delete(ctx, indexName(id)); err != nil {
				return fmt.Errorf("prune: remove %s: %w", indexName(id), err)
			}
		}
	}
	for _, v := range drop {
		if err := lk.valid(); err != nil {
			return fmt.Errorf("prune: %w", err)
		}
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
