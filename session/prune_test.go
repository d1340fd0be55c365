package session_test

import (
	"context"
	"path/filepath"
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

// pruneDuring is a Source that runs a Prune between sending its chunks
// and the commit: the save is in flight while Prune runs.
type pruneDuring struct {
	session.DirSource
	s *session.Store
}

func (p pruneDuring) Scan(ctx context.Context, prev *session.Parent, sink session.Sink) error {
	if err := p.DirSource.Scan(ctx, prev, sink); err != nil {
		return err
	}
	_, err := p.s.Prune(ctx, session.PruneOptions{Keep: 1})
	return err
}

func TestPrune(t *testing.T) {
	ctx := context.Background()
	fsys := afero.NewMemMapFs()
	b := local.New(fsys)
	s, _ := session.New(session.Config{Backend: b, Grace: time.Hour})
	crashing, _ := session.New(session.Config{Backend: failingBackend{b, "snapshots/"}, Grace: time.Hour})
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
	m, err := s.Save(ctx, "k", pruneDuring{session.DirSource{Dir: orphan}, s})
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
