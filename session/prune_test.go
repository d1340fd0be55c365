package session_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/afero"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

func tree(t *testing.T, seed int64) string {
	dir := t.TempDir()
	transfertest.RandomTree(t, dir, seed, transfertest.TreeOptions{Entries: 30})
	return dir
}

// pruneDuring is a Source that sends dir's chunks, then runs a Prune of
// s before the commit: the save is in flight while Prune runs.
func pruneDuring(dir string, s *session.Store) duringScan {
	return duringScan{session.DirSource{Dir: dir}, func(ctx context.Context) error {
		_, err := s.Prune(ctx, session.PruneOptions{Keep: 1})
		return err
	}}
}

// pruneStores is a store on a fresh in-memory filesystem with a grace
// of an hour, and a second one on it whose saves fail at the commit:
// they leave their chunks behind, unreferenced.
func pruneStores(t *testing.T) (fsys afero.Fs, s, crashing *session.Store) {
	t.Helper()
	fsys = afero.NewMemMapFs()
	b := local.New(fsys)
	s, _ = session.New(session.Config{Backend: b, Grace: time.Hour})
	crashing, _ = session.New(session.Config{Backend: failingBackend{b, "snapshots/"}, Grace: time.Hour})
	return fsys, s, crashing
}

func TestPrune(t *testing.T) {
	ctx := context.Background()
	fsys, s, crashing := pruneStores(t)
	verify := func() *session.VerifyReport {
		t.Helper()
		rep, err := s.Verify(ctx, "")
		if err != nil || !rep.OK() {
			t.Fatalf("verify: %+v, %v", rep, err)
		}
		return rep
	}
	a, bb, c := tree(t, 1), tree(t, 2), tree(t, 3)
	save(t, s, "k", a)
	save(t, s, "k", bb)
	save(t, s, "k", c)
	save(t, s, "other", tree(t, 4))
	if _, err := crashing.Save(ctx, "k", session.DirSource{Dir: tree(t, 5)}); err == nil {
		t.Fatal("crashing save committed")
	}
	before := verify().Chunks

	// Snapshots go, young chunks stay: the crashed save's too.
	rep, err := s.Prune(ctx, session.PruneOptions{Keep: 1})
	if err != nil || len(rep.Snapshots) != 2 || rep.Chunks != 0 {
		t.Fatalf("prune: %+v, %v; want k/1 and k/2 removed and no chunk", rep, err)
	}
	if got := verify().Chunks; got != before {
		t.Fatalf("%d chunks after prune, %d before", got, before)
	}

	// Past the grace period, unreferenced chunks go, except those of a
	// save in flight, written just now.
	age(t, fsys, 2*time.Hour)
	inFlight := tree(t, 6)
	if _, err := crashing.Save(ctx, "k", session.DirSource{Dir: inFlight}); err == nil {
		t.Fatal("crashing save committed")
	}
	rep, err = s.Prune(ctx, session.PruneOptions{Keep: 1})
	if err != nil || len(rep.Snapshots) != 0 || rep.Chunks == 0 {
		t.Fatalf("prune: %+v, %v; want chunks removed", rep, err)
	}
	verify()
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, s, "k", dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, c, dst)
	if m := save(t, s, "k", inFlight); m.NewBytes != 0 {
		t.Errorf("the in-flight save's chunks were pruned: its retry stored %d new bytes", m.NewBytes)
	}

	// A save that reuses old unreferenced chunks refreshes them, so a
	// Prune while it is in flight keeps them.
	orphan := tree(t, 7)
	if _, err := crashing.Save(ctx, "k", session.DirSource{Dir: orphan}); err == nil {
		t.Fatal("crashing save committed")
	}
	age(t, fsys, 2*time.Hour)
	m, err := s.Save(ctx, "k", pruneDuring(orphan, s))
	if err != nil {
		t.Fatal(err)
	}
	verify()
	dst = filepath.Join(t.TempDir(), "r")
	restore(t, s, "k", dst, session.RestoreOptions{Seq: m.Seq})
	transfertest.EqualTrees(t, orphan, dst)
}

func TestPruneOlderThan(t *testing.T) {
	ctx := context.Background()
	clock := time.Now()
	s, _ := session.New(session.Config{Backend: local.New(afero.NewMemMapFs()), Now: func() time.Time { return clock }})
	save(t, s, "old", tree(t, 1))
	save(t, s, "old", tree(t, 2))
	clock = clock.Add(3 * time.Hour)
	save(t, s, "new", tree(t, 3))
	rep, err := s.Prune(ctx, session.PruneOptions{OlderThan: 2 * time.Hour})
	if err != nil || len(rep.Snapshots) != 2 {
		t.Fatalf("prune: %+v, %v; want both snapshots of old removed", rep, err)
	}
	if keys, err := s.Keys(ctx); err != nil || len(keys) != 1 || keys[0] != "new" {
		t.Fatalf("keys after prune: %q, %v", keys, err)
	}
	if _, err := s.Prune(ctx, session.PruneOptions{Keep: -1}); err == nil {
		t.Error("prune with Keep -1 succeeded")
	}
}

// idleDuring is a Source that runs an idle Prune between sending its
// chunks and the commit: the save of an idle key is in flight while the
// Prune decides which keys are idle.
type idleDuring struct {
	session.DirSource
	s   *session.Store
	rep **session.PruneReport
}

func (p idleDuring) Scan(ctx context.Context, prev *session.Parent, sink session.Sink) error {
	if err := p.DirSource.Scan(ctx, prev, sink); err != nil {
		return err
	}
	rep, err := p.s.Prune(ctx, session.PruneOptions{Idle: 14 * 24 * time.Hour})
	*p.rep = rep
	return err
}

// TestPruneIdle: a key whose newest snapshot is older than Idle goes
// whole, whatever Keep says, and its chunks with it once past the grace
// period; a key with one recent snapshot keeps all of them; a dry run
// reports the same and removes nothing.
func TestPruneIdle(t *testing.T) {
	ctx := context.Background()
	fsys := afero.NewMemMapFs()
	clock := time.Now().Add(-30 * 24 * time.Hour)
	s, _ := session.New(session.Config{Backend: local.New(fsys), Now: func() time.Time { return clock }})
	save(t, s, "idle", tree(t, 1))
	save(t, s, "idle", tree(t, 2))
	save(t, s, "busy", tree(t, 3))
	clock = clock.Add(20 * 24 * time.Hour)
	save(t, s, "busy", tree(t, 4))
	clock = clock.Add(10 * 24 * time.Hour)
	age(t, fsys, 2*time.Hour) // past the grace period
	before, err := s.Verify(ctx, "")
	if err != nil || !before.OK() {
		t.Fatalf("verify: %+v, %v", before, err)
	}

	opts := session.PruneOptions{Idle: 14 * 24 * time.Hour, Keep: 5, DryRun: true}
	dry, err := s.Prune(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.IdleKeys) != 1 || dry.IdleKeys[0].Key != "idle" || len(dry.Snapshots) != 2 || dry.Chunks+dry.Packs == 0 {
		t.Fatalf("dry run: %+v; want idle's 2 snapshots and its chunks", dry)
	}
	if after, err := s.Verify(ctx, ""); err != nil || after.Chunks != before.Chunks || after.Snapshots != before.Snapshots {
		t.Fatalf("dry run removed something: %+v before, %+v after, %v", before, after, err)
	}

	opts.DryRun = false
	rep, err := s.Prune(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.IdleKeys) != 1 || len(rep.Snapshots) != 2 || rep.Chunks != dry.Chunks || rep.Packs != dry.Packs || rep.StoredBytes != dry.StoredBytes {
		t.Fatalf("prune: %+v; want what the dry run said, %+v", rep, dry)
	}
	if keys, err := s.Keys(ctx); err != nil || len(keys) != 1 || keys[0] != "busy" {
		t.Fatalf("keys after prune: %q, %v", keys, err)
	}
	if v, err := s.Verify(ctx, ""); err != nil || !v.OK() || v.Snapshots != 2 {
		t.Fatalf("verify after prune: %+v, %v; want busy's 2 snapshots whole", v, err)
	}
	if _, err := s.Prune(ctx, session.PruneOptions{Idle: -time.Hour}); err == nil {
		t.Error("prune with a negative Idle succeeded")
	}
}

// TestPruneIdleDuringSave: an idle Prune that runs while a save of an
// idle key is in flight leaves the key whole, and the save commits on
// top of it.
func TestPruneIdleDuringSave(t *testing.T) {
	ctx := context.Background()
	fsys := afero.NewMemMapFs()
	b := local.New(fsys)
	clock := time.Now().Add(-30 * 24 * time.Hour)
	old, _ := session.New(session.Config{Backend: b, Now: func() time.Time { return clock }})
	save(t, old, "k", tree(t, 1))
	save(t, old, "other", tree(t, 2))
	age(t, fsys, 2*time.Hour)

	s, _ := session.New(session.Config{Backend: b})
	var during *session.PruneReport
	next := tree(t, 3)
	m, err := s.Save(ctx, "k", idleDuring{session.DirSource{Dir: next}, s, &during})
	if err != nil {
		t.Fatal(err)
	}
	// The race happened: the Prune saw the save in flight.
	if during == nil || during.SavesInFlight != 1 {
		t.Fatalf("prune during the save: %+v; want it to see the save in flight", during)
	}
	if len(during.IdleKeys) != 1 || during.IdleKeys[0].Key != "other" {
		t.Fatalf("prune during the save removed %+v; want other only", during.IdleKeys)
	}
	if v, err := s.Verify(ctx, ""); err != nil || !v.OK() || v.Snapshots != 2 {
		t.Fatalf("verify: %+v, %v; want k's two snapshots whole", v, err)
	}
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, s, "k", dst, session.RestoreOptions{Seq: m.Seq})
	transfertest.EqualTrees(t, next, dst)
}

// TestPruneIdleRacingSaves: idle Prunes and saves of an idle key run
// side by side, from two Stores, as two nodes would; every save's
// snapshot stays restorable, and at least one Prune ran while a save was
// in flight.
func TestPruneIdleRacingSaves(t *testing.T) {
	ctx := context.Background()
	fsys := afero.NewMemMapFs()
	b := local.New(fsys)
	clock := time.Now().Add(-30 * 24 * time.Hour)
	old, _ := session.New(session.Config{Backend: b, Now: func() time.Time { return clock }})
	// A short LockTTL makes a save that waits for a Prune poll often.
	pruner, _ := session.New(session.Config{Backend: b, LockTTL: 2 * time.Second})
	saver, _ := session.New(session.Config{Backend: b, LockTTL: 2 * time.Second})
	raced := 0
	for i := 0; i < 40 && raced == 0; i++ {
		key := "k" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		save(t, old, key, tree(t, int64(i)))
		age(t, fsys, 2*time.Hour)
		dir := tree(t, int64(100+i))
		done := make(chan error, 1)
		var m *session.Manifest
		go func() {
			var err error
			m, err = saver.Save(ctx, key, session.DirSource{Dir: dir})
			done <- err
		}()
		rep, err := pruner.Prune(ctx, session.PruneOptions{Idle: 14 * 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if rep.SavesInFlight > 0 {
			raced++
		}
		dst := filepath.Join(t.TempDir(), "r")
		restore(t, saver, key, dst, session.RestoreOptions{Seq: m.Seq})
		transfertest.EqualTrees(t, dir, dst)
	}
	if raced == 0 {
		t.Fatal("no prune ran while a save was in flight in 40 tries")
	}
}

// TestPruneRemovesNoChunkDuringASave: a save writes again the stale
// chunks it reuses, to renew them, and a Prune that had listed such a
// chunk before that write would remove it after, under the save's
// snapshot (the race TestPrune's last part hit once in a few hundred
// runs). A Prune that meets a save in flight removes no chunk at all; the
// next one that meets none removes what is unreferenced.
func TestPruneRemovesNoChunkDuringASave(t *testing.T) {
	ctx := context.Background()
	fsys, s, crashing := pruneStores(t)
	save(t, s, "k", tree(t, 1))
	reused, unreferenced := tree(t, 2), tree(t, 3)
	for _, dir := range []string{reused, unreferenced} {
		if _, err := crashing.Save(ctx, "k", session.DirSource{Dir: dir}); err == nil {
			t.Fatal("crashing save committed")
		}
	}
	age(t, fsys, 2*time.Hour)
	var during *session.PruneReport
	m, err := s.Save(ctx, "k", duringScan{session.DirSource{Dir: reused}, func(ctx context.Context) error {
		var err error
		during, err = s.Prune(ctx, session.PruneOptions{Keep: 1})
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	if during.SavesInFlight != 1 || during.Chunks != 0 || !strings.Contains(during.ChunksKept, "in flight") {
		t.Fatalf("prune during the save: %+v; want the save seen and no chunk removed", during)
	}
	if v, err := s.Verify(ctx, ""); err != nil || !v.OK() {
		t.Fatalf("verify: %+v, %v", v, err)
	}
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, s, "k", dst, session.RestoreOptions{Seq: m.Seq})
	transfertest.EqualTrees(t, reused, dst)

	after, err := s.Prune(ctx, session.PruneOptions{Keep: 1})
	if err != nil || after.SavesInFlight != 0 || after.Chunks == 0 || after.ChunksKept != "" {
		t.Fatalf("prune after the save: %+v, %v; want the unreferenced chunks removed", after, err)
	}
	if v, err := s.Verify(ctx, ""); err != nil || !v.OK() {
		t.Fatalf("verify after: %+v, %v", v, err)
	}
}
