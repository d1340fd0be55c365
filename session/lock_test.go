package session_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/afero"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// duringScan is a Source that runs during after its DirSource has
// reported the whole tree, before the save commits: the save is in flight
// while during runs.
type duringScan struct {
	session.DirSource
	during func(ctx context.Context) error
}

func (d duringScan) Scan(ctx context.Context, prev *session.Parent, sink session.Sink) error {
	if err := d.DirSource.Scan(ctx, prev, sink); err != nil {
		return err
	}
	return d.during(ctx)
}

// TestPruneKeepsTheStartOfASaveInFlight is the race of issue 20: a save
// that starts from the newest snapshot of its key reuses that snapshot's
// chunks; a Prune that removes the snapshot (--older-than, Rascal's TTL)
// while the save is in flight would take those chunks too, and the save
// would commit a snapshot that cannot be restored. The Prune keeps the
// snapshot instead, and says so; the next Prune removes it.
func TestPruneKeepsTheStartOfASaveInFlight(t *testing.T) {
	ctx := context.Background()
	fsys := afero.NewMemMapFs()
	s, err := session.New(session.Config{Backend: local.New(fsys), Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	src := tree(t, 1)
	save(t, s, "k", src)
	age(t, fsys, time.Hour) // every chunk past the grace period
	var rep *session.PruneReport
	m, err := s.Save(ctx, "k", duringScan{session.DirSource{Dir: src, ReuseUnchanged: true}, func(ctx context.Context) error {
		// Every snapshot is older than this, the newest included.
		var err error
		rep, err = s.Prune(ctx, session.PruneOptions{OlderThan: time.Nanosecond})
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	if m.NewChunks != 0 {
		t.Fatalf("the save stored %d chunks; the race needs one that reuses all", m.NewChunks)
	}
	if len(rep.Snapshots) != 0 || !slices.Equal(rep.Deferred, []session.SnapshotRef{{Key: "k", Seq: 1}}) || rep.SavesInFlight != 1 || rep.Chunks != 0 {
		t.Fatalf("prune during the save: %+v; want k/1 deferred, nothing removed", rep)
	}
	verifyOK(t, s)
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, s, "k", dst, session.RestoreOptions{Seq: m.Seq})
	transfertest.EqualTrees(t, src, dst)

	// With no save in flight, the deferred snapshot goes; the chunks stay,
	// as snapshot 2 holds them.
	rep, err = s.Prune(ctx, session.PruneOptions{Keep: 1})
	if err != nil || !slices.Equal(rep.Snapshots, []session.SnapshotRef{{Key: "k", Seq: 1}}) || rep.Chunks != 0 || len(rep.Deferred) != 0 {
		t.Fatalf("prune after the save: %+v, %v; want k/1 removed, no chunk", rep, err)
	}
	verifyOK(t, s)
}

// TestPruneKeepsFreshChunksOfALongSave: a save reuses a chunk another
// writer stored shortly before it began (here: a save that crashed before
// its commit) and then takes longer than the grace period. The chunk is
// unreferenced and past the grace period when a Prune runs, but that
// Prune sees the save's lock and keeps it.
func TestPruneKeepsFreshChunksOfALongSave(t *testing.T) {
	ctx := context.Background()
	const grace = 400 * time.Millisecond
	fsys := afero.NewMemMapFs()
	b := local.New(fsys)
	s, err := session.New(session.Config{Backend: b, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	crashing, err := session.New(session.Config{Backend: failingBackend{b, "snapshots/"}, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	src := tree(t, 2)
	if _, err := crashing.Save(ctx, "k", session.DirSource{Dir: src}); err == nil {
		t.Fatal("crashing save committed")
	}
	var rep *session.PruneReport
	m, err := s.Save(ctx, "k", duringScan{session.DirSource{Dir: src}, func(ctx context.Context) error {
		time.Sleep(grace + 100*time.Millisecond)
		var err error
		rep, err = s.Prune(ctx, session.PruneOptions{})
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	if m.NewChunks != 0 {
		t.Fatalf("the save stored %d chunks; the race needs one that reuses the crashed save's", m.NewChunks)
	}
	if rep.SavesInFlight != 1 || rep.Chunks != 0 {
		t.Fatalf("prune during the save: %+v; want the save seen and no chunk removed", rep)
	}
	verifyOK(t, s)
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, s, "k", dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, src, dst)
}

// holdingBackend blocks the first call that hold matches until release
// is closed, and records the order of the calls that log matches.
type holdingBackend struct {
	session.Backend
	hold    func(op, name string) bool
	held    chan struct{} // closed when the held call arrives
	release chan struct{}
	once    sync.Once

	mu  sync.Mutex
	log []string
	rec func(op, name string) bool
}

func (h *holdingBackend) call(op, name string) {
	if h.rec != nil && h.rec(op, name) {
		h.mu.Lock()
		h.log = append(h.log, op+" "+name)
		h.mu.Unlock()
	}
	if h.hold != nil && h.hold(op, name) {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.held)
			<-h.release
		}
	}
}

func (h *holdingBackend) Delete(ctx context.Context, name string) error {
	h.call("delete", name)
	return h.Backend.Delete(ctx, name)
}

func (h *holdingBackend) List(ctx context.Context, prefix string, fn func(session.ObjectInfo) error) error {
	h.call("list", prefix)
	return h.Backend.List(ctx, prefix, fn)
}

func (h *holdingBackend) Put(ctx context.Context, name string, r io.Reader, excl bool) error {
	h.call("put", name)
	return h.Backend.Put(ctx, name, r, excl)
}

// TestSaveWaitsForAPrune: a save that begins while a Prune runs (and so
// may have missed the save's lock) does not look at the store until the
// Prune is over, so that it starts from what the Prune left; and it
// goes on soon after, not a whole poll of LockTTL/20 later (6 s with the
// default LockTTL).
func TestSaveWaitsForAPrune(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"ShortTTL", 2 * time.Second}, {"DefaultTTL", 0}} {
		t.Run(tc.name, func(t *testing.T) { testSaveWaitsForAPrune(t, tc.ttl) })
	}
}

func testSaveWaitsForAPrune(t *testing.T, ttl time.Duration) {
	ctx := context.Background()
	fsys := afero.NewMemMapFs()
	hb := &holdingBackend{Backend: local.New(fsys), held: make(chan struct{}), release: make(chan struct{})}
	s, err := session.New(session.Config{Backend: hb, Grace: time.Minute, LockTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	src := tree(t, 3)
	save(t, s, "k", src)
	age(t, fsys, time.Hour)
	hb.hold = func(op, name string) bool { return op == "delete" && strings.HasPrefix(name, "snapshots/") }
	hb.rec = func(op, name string) bool {
		return op == "list" && name == "snapshots/k/" || op == "delete" && strings.HasPrefix(name, "locks/prune/")
	}
	type result struct {
		rep *session.PruneReport
		err error
	}
	pruned := make(chan result, 1)
	go func() {
		rep, err := s.Prune(ctx, session.PruneOptions{OlderThan: time.Nanosecond})
		pruned <- result{rep, err}
	}()
	<-hb.held // the prune is about to remove k/1: it saw no save
	saved := make(chan error, 1)
	go func() {
		_, err := s.Save(ctx, "k", session.DirSource{Dir: src, ReuseUnchanged: true})
		saved <- err
	}()
	select {
	case err := <-saved:
		t.Fatalf("the save ended while the prune ran: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(hb.release)
	released := time.Now()
	r := <-pruned
	if r.err != nil || len(r.rep.Snapshots) != 1 || r.rep.Chunks == 0 {
		t.Fatalf("prune: %+v, %v; want k/1 and its chunks removed", r.rep, r.err)
	}
	if err := <-saved; err != nil {
		t.Fatal(err)
	}
	// The save's own work is milliseconds here; the bound is its wait.
	if d := time.Since(released); d > 3*time.Second {
		t.Fatalf("the save ended %v after the prune was let go", d)
	}
	hb.mu.Lock()
	order := slices.Clone(hb.log)
	hb.mu.Unlock()
	// The prune's own listing of k comes first; the save's after the
	// prune released its lock.
	i := slices.IndexFunc(order, func(s string) bool { return strings.HasPrefix(s, "delete locks/prune/") })
	if i < 0 || slices.Index(order[i:], "list snapshots/k/") < 0 || slices.Index(order[:i], "list snapshots/k/") != 0 || slices.Index(order[1:i], "list snapshots/k/") >= 0 {
		t.Fatalf("calls: %q; want the save's listing of k after the prune's lock was removed", order)
	}
	verifyOK(t, s)
	m, err := s.Load(ctx, "k", 0)
	if err != nil || m.Seq != 1 || m.NewChunks == 0 {
		t.Fatalf("the save after the prune: %+v, %v; want snapshot 1 again, its chunks stored anew", m, err)
	}
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, s, "k", dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, src, dst)
}

// lockFailing fails every Put of a lock object under prefix after the
// first, as a link that drops would.
type lockFailing struct {
	session.Backend
	prefix string
	puts   atomic.Int64
}

func (l *lockFailing) Put(ctx context.Context, name string, r io.Reader, excl bool) error {
	if strings.HasPrefix(name, l.prefix) && l.puts.Add(1) > 1 {
		return errInjected
	}
	return l.Backend.Put(ctx, name, r, excl)
}

// TestLockLost: a save whose lock cannot be renewed commits nothing, as a
// Prune may have taken it for dead; a Prune whose lock lapses removes
// nothing more.
func TestLockLost(t *testing.T) {
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	t.Run("save", func(t *testing.T) {
		b := &lockFailing{Backend: local.New(afero.NewMemMapFs()), prefix: "locks/save/"}
		s, err := session.New(session.Config{Backend: b, LockTTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Save(ctx, "k", duringScan{session.DirSource{Dir: tree(t, 4)}, func(context.Context) error {
			time.Sleep(ttl)
			return nil
		}})
		if !errors.Is(err, session.ErrLockLost) || !strings.Contains(err.Error(), "nothing committed") {
			t.Fatalf("save with a lapsed lock: %v, want ErrLockLost and nothing committed", err)
		}
		if _, err := s.Load(ctx, "k", 0); !errors.Is(err, session.ErrNoSnapshot) {
			t.Fatalf("after the lapsed save: %v, want no snapshot", err)
		}
	})
	t.Run("prune", func(t *testing.T) {
		fsys := afero.NewMemMapFs()
		lf := &lockFailing{Backend: local.New(fsys), prefix: "locks/prune/"}
		hb := &holdingBackend{Backend: lf, held: make(chan struct{}), release: make(chan struct{}),
			hold: func(op, name string) bool { return op == "list" && name == "chunks/" }}
		s, err := session.New(session.Config{Backend: hb, LockTTL: ttl, Grace: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		save(t, s, "k", tree(t, 5))
		save(t, s, "k", tree(t, 6))
		age(t, fsys, time.Hour)
		go func() {
			<-hb.held
			time.Sleep(ttl)
			close(hb.release)
		}()
		rep, err := s.Prune(ctx, session.PruneOptions{Keep: 1})
		if !errors.Is(err, session.ErrLockLost) || rep.Chunks != 0 || len(rep.Snapshots) != 1 {
			t.Fatalf("prune with a lapsed lock: %+v, %v; want ErrLockLost after k/1, no chunk removed", rep, err)
		}
		verifyOK(t, s)
	})
}

// TestSaveHealsMissingChunks: a chunk of the snapshot a save starts from
// is gone (damage, or an earlier race); the save sends it again instead
// of referencing it, so the new snapshot and those after it restore.
func TestSaveHealsMissingChunks(t *testing.T) {
	ctx := context.Background()
	for _, pack := range []bool{false, true} {
		name := "loose"
		if pack {
			name = "packs"
		}
		t.Run(name, func(t *testing.T) {
			fsys := afero.NewMemMapFs()
			s, err := session.New(session.Config{Backend: local.New(fsys), Pack: pack})
			if err != nil {
				t.Fatal(err)
			}
			src := tree(t, 7)
			m1 := save(t, s, "k", src)
			objs := names(t, fsys, "chunks/")
			if pack {
				objs = names(t, fsys, "packs/")
				for _, n := range names(t, fsys, "index/") {
					fsys.Remove(n)
				}
			}
			if len(objs) == 0 {
				t.Fatal("no chunk stored")
			}
			fsys.Remove(objs[0])
			if rep, err := s.Verify(ctx, ""); err != nil || rep.OK() {
				t.Fatalf("verify after removing %s: %+v, %v; want damage", objs[0], rep, err)
			}
			m2 := save(t, s, "k", src)
			if m2.NewChunks == 0 || m2.NewChunks > m1.NewChunks {
				t.Errorf("the save after the loss stored %d chunks of %d", m2.NewChunks, m1.NewChunks)
			}
			m3 := save(t, s, "k", src)
			if m3.NewChunks != 0 {
				t.Errorf("the save after the healing one stored %d chunks, want 0", m3.NewChunks)
			}
			// The chunk is back, so the snapshot that lost it restores too.
			for _, seq := range []int64{1, 2, 3} {
				dst := filepath.Join(t.TempDir(), "r")
				restore(t, s, "k", dst, session.RestoreOptions{Seq: seq})
				transfertest.EqualTrees(t, src, dst)
			}
			verifyOK(t, s)
		})
	}
}

// TestStaleLocks: a save that died leaves its lock, which keeps its key's
// newest snapshot from Prune until it expires; an expired one is removed;
// one that cannot be read keeps every chunk.
func TestStaleLocks(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Second
	fsys := afero.NewMemMapFs()
	s, err := session.New(session.Config{Backend: local.New(fsys), LockTTL: ttl, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	src := tree(t, 8)
	save(t, s, "k", src)
	save(t, s, "j", tree(t, 9))
	age(t, fsys, time.Hour)
	dead := `{"kind":"save","key":"k","started":"` + time.Now().UTC().Format(time.RFC3339Nano) + `","ttl":1000000000}`
	if err := afero.WriteFile(fsys, "locks/save/dead", []byte(dead), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Prune(ctx, session.PruneOptions{OlderThan: time.Nanosecond})
	if err != nil || !slices.Equal(rep.Deferred, []session.SnapshotRef{{Key: "k", Seq: 1}}) || !slices.Equal(rep.Snapshots, []session.SnapshotRef{{Key: "j", Seq: 1}}) || rep.StaleLocks != 0 {
		t.Fatalf("prune beside a live lock: %+v, %v; want k/1 deferred, j/1 removed", rep, err)
	}
	save(t, s, "j", tree(t, 10))
	age(t, fsys, time.Hour)
	if err := afero.WriteFile(fsys, "locks/save/garbled", []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err = s.Prune(ctx, session.PruneOptions{Keep: 1})
	if err != nil || rep.Chunks != 0 || !strings.Contains(rep.ChunksKept, "locks/save/garbled") || rep.StaleLocks != 1 {
		t.Fatalf("prune beside a garbled lock: %+v, %v; want no chunk removed, the lock named, the dead one removed", rep, err)
	}
	age(t, fsys, time.Hour)
	if rep, err = s.Prune(ctx, session.PruneOptions{}); err != nil || rep.StaleLocks != 1 || rep.ChunksKept != "" {
		t.Fatalf("prune once the garbled lock expired: %+v, %v; want it removed", rep, err)
	}
	if got := names(t, fsys, "locks/"); len(got) != 0 {
		t.Errorf("locks left: %q", got)
	}
	rep, err = s.Prune(ctx, session.PruneOptions{OlderThan: time.Nanosecond, Key: "k"})
	if err != nil || !slices.Equal(rep.Snapshots, []session.SnapshotRef{{Key: "k", Seq: 1}}) || rep.Chunks == 0 {
		t.Fatalf("prune once the locks are gone: %+v, %v; want k/1 removed with its chunks", rep, err)
	}
	verifyOK(t, s)
}

// TestTempFilesCleaned: the temporary files of Puts whose writer was
// killed are removed by Prune and Verify once past the grace period, and
// counted; younger ones, which may be a Put in flight, stay.
func TestTempFilesCleaned(t *testing.T) {
	ctx := context.Background()
	s, dir := diskStore(t)
	save(t, s, "k", tree(t, 11))
	old, young := filepath.Join(dir, "chunks", "ab", ".tmp-0123456789abcdef"), filepath.Join(dir, "snapshots", "k", ".tmp-fedcba9876543210")
	for _, p := range []string{old, young, old + "0"} {
		writeFileAt(t, p)
	}
	past := time.Now().Add(-2 * session.DefaultGrace)
	for _, p := range []string{old, old + "0"} {
		if err := chtimes(p, past); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := s.Prune(ctx, session.PruneOptions{})
	if err != nil || rep.TempFiles != 2 {
		t.Fatalf("prune: %+v, %v; want 2 temporary files removed", rep, err)
	}
	if !exists(t, young) || exists(t, old) {
		t.Fatalf("after prune: young kept %v, old kept %v", exists(t, young), exists(t, old))
	}
	if err := chtimes(young, past); err != nil {
		t.Fatal(err)
	}
	vrep, err := s.Verify(ctx, "")
	if err != nil || !vrep.OK() || vrep.TempFiles != 1 || exists(t, young) {
		t.Fatalf("verify: %+v, %v; want 1 temporary file removed", vrep, err)
	}
}

func verifyOK(t *testing.T, s *session.Store) {
	t.Helper()
	rep, err := s.Verify(context.Background(), "")
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

func writeFileAt(t *testing.T, p string) {
	t.Helper()
	fsys := afero.NewOsFs()
	if err := fsys.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := afero.WriteFile(fsys, p, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func chtimes(p string, at time.Time) error { return afero.NewOsFs().Chtimes(p, at, at) }

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := afero.NewOsFs().Stat(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// TestPruneKeepsWhatASaveOfLongerGraceReuses: the prune runs with a far
// shorter grace period than the save (an operator's `prune --grace 1ms`
// beside saves of the default hour). The save reuses an unreferenced
// chunk written ten minutes before it began, fresh by its own grace; the
// prune keeps it, by the grace the save's lock names.
func TestPruneKeepsWhatASaveOfLongerGraceReuses(t *testing.T) {
	ctx := context.Background()
	fsys := afero.NewMemMapFs()
	b := local.New(fsys)
	saver, err := session.New(session.Config{Backend: b, Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pruner, err := session.New(session.Config{Backend: b, Grace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	crashing, err := session.New(session.Config{Backend: failingBackend{b, "snapshots/"}})
	if err != nil {
		t.Fatal(err)
	}
	src := tree(t, 12)
	if _, err := crashing.Save(ctx, "k", session.DirSource{Dir: src}); err == nil {
		t.Fatal("crashing save committed")
	}
	age(t, fsys, 10*time.Minute)
	var rep *session.PruneReport
	m, err := saver.Save(ctx, "k", duringScan{session.DirSource{Dir: src}, func(ctx context.Context) error {
		var err error
		rep, err = pruner.Prune(ctx, session.PruneOptions{})
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	if m.NewChunks != 0 || rep.SavesInFlight != 1 || rep.Chunks != 0 {
		t.Fatalf("save stored %d chunks, prune %+v; want all reused and none removed", m.NewChunks, rep)
	}
	verifyOK(t, saver)
}

// TestSaveTellsItsWait: a Save whose ctx carries WithWaiting says when it
// starts and stops waiting for a live prune's lock, once each, and says
// nothing when there is no prune to wait for.
func TestSaveTellsItsWait(t *testing.T) {
	for _, tc := range []struct {
		name  string
		prune bool
		want  []bool
	}{
		{"no prune", false, nil},
		{"a live prune", true, []bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := afero.NewMemMapFs()
			b := local.New(fsys)
			s, err := session.New(session.Config{Backend: b, LockTTL: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if tc.prune {
				// Another node's prune, live for 300ms.
				lock := fmt.Sprintf(`{"kind":"prune","ttl":%d}`, 300*time.Millisecond)
				if err := b.Put(context.Background(), "locks/prune/0123456789abcdef01234567", strings.NewReader(lock), true); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			var told []bool
			ctx := session.WithWaiting(context.Background(), func(waiting bool) {
				mu.Lock()
				told = append(told, waiting)
				mu.Unlock()
			})
			if _, err := s.Save(ctx, "k", session.DirSource{Dir: tree(t, 1)}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(told, tc.want) {
				t.Fatalf("told %v, want %v", told, tc.want)
			}
		})
	}
}
