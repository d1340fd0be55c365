package session_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/afero"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// packSize is small in tests, so that a few hundred KiB make several packs.
const packSize = 64 << 10

// packStore is a packing store in memory over b (a new one if nil).
func packStore(t *testing.T, b session.Backend) *session.Store {
	t.Helper()
	s, err := session.New(session.Config{Backend: b, Pack: true, PackSize: packSize})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// names lists the objects under prefix in fsys.
func names(t *testing.T, fsys afero.Fs, prefix string) []string {
	t.Helper()
	var out []string
	afero.Walk(fsys, strings.TrimSuffix(prefix, "/"), func(p string, fi fs.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			out = append(out, filepath.ToSlash(p))
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// requests counts a backend's requests by kind and name prefix.
//
// Requests for lock objects ("locks/") are not counted: every save and
// prune makes the same few, whatever the number of chunks.
type requests struct {
	session.Backend
	stats, gets, puts, lists atomic.Int64
	chunkGets                atomic.Int64
}

func isLock(name string) bool { return strings.HasPrefix(name, "locks/") }

func (r *requests) Stat(ctx context.Context, name string) (session.ObjectInfo, error) {
	if !isLock(name) {
		r.stats.Add(1)
	}
	return r.Backend.Stat(ctx, name)
}

func (r *requests) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if !isLock(name) {
		r.gets.Add(1)
	}
	if strings.HasPrefix(name, "chunks/") {
		r.chunkGets.Add(1)
	}
	return r.Backend.Get(ctx, name)
}

func (r *requests) Put(ctx context.Context, name string, rd io.Reader, excl bool) error {
	if !isLock(name) {
		r.puts.Add(1)
	}
	return r.Backend.Put(ctx, name, rd, excl)
}

func (r *requests) List(ctx context.Context, prefix string, fn func(session.ObjectInfo) error) error {
	if !isLock(prefix) {
		r.lists.Add(1)
	}
	return r.Backend.List(ctx, prefix, fn)
}

func (r *requests) reset() {
	r.stats.Store(0)
	r.gets.Store(0)
	r.puts.Store(0)
	r.lists.Store(0)
	r.chunkGets.Store(0)
}

// TestPackRoundTrip: a packing store saves in packs (no loose chunk), a
// save after an append stores little, and the snapshots restore through
// the store that wrote them, a new one, and one that does not pack; a save
// and a CheckPresent ask nothing per chunk.
func TestPackRoundTrip(t *testing.T) {
	ctx := context.Background()
	fsys := afero.NewMemMapFs()
	rq := &requests{Backend: local.New(fsys)}
	s := packStore(t, rq)
	src := t.TempDir()
	transfertest.RandomTree(t, src, 11, transfertest.TreeOptions{Entries: 40})
	transcripts(t, src, 12, 6, 200<<10)
	m1 := save(t, s, "k", src)
	packs, idx := names(t, fsys, "packs/"), names(t, fsys, "index/")
	if len(names(t, fsys, "chunks/")) != 0 || len(packs) < 3 || len(idx) != len(packs) {
		t.Fatalf("after a save: %d loose chunks, %d packs, %d index objects; want none, several, one per pack",
			len(names(t, fsys, "chunks/")), len(packs), len(idx))
	}
	if n := rq.stats.Load(); n != 0 {
		t.Errorf("the save made %d Stat requests; want none", n)
	}
	if n := rq.puts.Load(); n != int64(2*len(packs)+1) {
		t.Errorf("the save made %d Puts for %d packs; want a pack and an index each, and the manifest", n, len(packs))
	}

	appended := appendTo(t, filepath.Join(src, "sessions", "2026", "rollout-01.jsonl"), 13, 20<<10)
	m2 := save(t, s, "k", src)
	if m2.NewBytes > int64(3*appended)+2*session.MaxChunkSize {
		t.Errorf("after appending %d bytes the save stored %d new bytes", appended, m2.NewBytes)
	}

	rq.reset()
	fresh := packStore(t, rq)
	if err := fresh.CheckPresent(ctx, m2); err != nil {
		t.Fatal(err)
	}
	if rq.stats.Load() != 0 || rq.lists.Load() > 3 || rq.gets.Load() > int64(len(names(t, fsys, "index/"))) {
		t.Errorf("CheckPresent on a new store: %d Stats, %d Lists, %d Gets; want no Stat, 3 Lists and a Get per index object",
			rq.stats.Load(), rq.lists.Load(), rq.gets.Load())
	}
	loose, err := session.New(session.Config{Backend: rq})
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]*session.Store{"writer": s, "new": fresh, "loose": loose} {
		for _, m := range []*session.Manifest{m1, m2} {
			dst := filepath.Join(t.TempDir(), "r")
			restore(t, st, "k", dst, session.RestoreOptions{Seq: m.Seq})
			if m.Seq == 2 {
				transfertest.EqualTrees(t, src, dst)
			}
			rq.reset()
			if err := st.CheckPresent(ctx, m); err != nil {
				t.Errorf("%s: CheckPresent of %d: %v", name, m.Seq, err)
			}
			buf := make([]byte, 0, session.MaxChunkSize)
			for _, e := range m.Entries {
				for _, c := range e.Chunks {
					if _, err := st.ReadStored(ctx, c.ID, buf); err != nil {
						t.Fatalf("%s: ReadStored: %v", name, err)
					}
				}
			}
			if name != "loose" && rq.gets.Load() > int64(len(names(t, fsys, "packs/"))+len(names(t, fsys, "index/"))) {
				t.Errorf("%s: CheckPresent and ReadStored of every chunk: %d Gets for %d packs", name, rq.gets.Load(), len(names(t, fsys, "packs/")))
			}
		}
	}
	rep, err := s.Verify(ctx, "")
	if err != nil || !rep.OK() || rep.Packs != len(names(t, fsys, "packs/")) {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

// TestMixedStore: a store written one object per chunk (as before packs)
// keeps restoring, verifying and pruning once packs are added to it, and
// through stores that pack or not.
func TestMixedStore(t *testing.T) {
	ctx := context.Background()
	fsys := afero.NewMemMapFs()
	b := local.New(fsys)
	old, err := session.New(session.Config{Backend: b, Grace: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	transcripts(t, src, 21, 6, 150<<10)
	m1 := save(t, old, "k", src)
	if len(names(t, fsys, "chunks/")) == 0 || len(names(t, fsys, "packs/")) != 0 {
		t.Fatal("the old-style save wrote no loose chunks, or packs")
	}
	looseBefore := len(names(t, fsys, "chunks/"))
	packing, err := session.New(session.Config{Backend: b, Grace: time.Hour, Pack: true, PackSize: packSize})
	if err != nil {
		t.Fatal(err)
	}
	appendTo(t, filepath.Join(src, "sessions", "2026", "rollout-02.jsonl"), 22, 30<<10)
	transcripts(t, filepath.Join(src, "more"), 23, 2, 150<<10)
	m2 := save(t, packing, "k", src)
	if m2.NewBytes == 0 || len(names(t, fsys, "packs/")) == 0 || len(names(t, fsys, "chunks/")) != looseBefore {
		t.Fatalf("the packing save stored %d new bytes, %d packs, %d loose chunks (before %d)",
			m2.NewBytes, len(names(t, fsys, "packs/")), len(names(t, fsys, "chunks/")), looseBefore)
	}
	for name, st := range map[string]*session.Store{"old": old, "packing": packing} {
		if err := st.CheckPresent(ctx, m2); err != nil {
			t.Errorf("%s: CheckPresent: %v", name, err)
		}
		dst := filepath.Join(t.TempDir(), "r")
		restore(t, st, "k", dst, session.RestoreOptions{})
		transfertest.EqualTrees(t, src, dst)
		if rep, err := st.Verify(ctx, ""); err != nil || !rep.OK() {
			t.Errorf("%s: verify: %+v, %v", name, rep, err)
		}
	}
	// Pruning snapshot 1 past the grace period removes the loose chunks
	// only it used, and no pack (snapshot 2 uses all of them).
	age(t, fsys, 2*time.Hour)
	rep, err := packing.Prune(ctx, session.PruneOptions{Keep: 1})
	if err != nil || len(rep.Snapshots) != 1 || rep.Chunks == 0 || rep.Packs != 0 {
		t.Fatalf("prune: %+v, %v; want snapshot 1 and some loose chunks removed, no pack", rep, err)
	}
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, old, "k", dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, src, dst)
	if _, err := old.Load(ctx, "k", m1.Seq); !errors.Is(err, session.ErrNoSnapshot) {
		t.Errorf("snapshot 1 after prune: %v", err)
	}
}

// TestPrunePacks: a pack goes only when no kept snapshot uses any of its
// chunks and it is past the grace period, its index object first; a
// crashed save's pack goes too, once old; a save in flight during a prune
// keeps what it needs.
func TestPrunePacks(t *testing.T) {
	ctx := context.Background()
	fsys := afero.NewMemMapFs()
	b := local.New(fsys)
	newStore := func(b session.Backend) *session.Store {
		s, err := session.New(session.Config{Backend: b, Grace: time.Hour, Pack: true, PackSize: packSize})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := newStore(b)
	crashing := newStore(failingBackend{b, "snapshots/"})
	a, bb := t.TempDir(), t.TempDir()
	transcripts(t, a, 31, 4, 150<<10)
	transcripts(t, bb, 32, 4, 150<<10)
	save(t, s, "k", a)
	save(t, s, "k", bb)
	before := names(t, fsys, "index/")
	if _, err := crashing.Save(ctx, "k", session.DirSource{Dir: tree(t, 33)}); err == nil {
		t.Fatal("crashing save committed")
	}
	var crashed []string // the crashed save's index objects
	for _, n := range names(t, fsys, "index/") {
		if !slices.Contains(before, n) {
			crashed = append(crashed, n)
		}
	}
	if len(crashed) == 0 {
		t.Fatal("the crashed save wrote no pack")
	}
	all := len(names(t, fsys, "packs/"))
	if rep, err := s.Prune(ctx, session.PruneOptions{Keep: 1}); err != nil || rep.Packs != 0 || len(rep.Snapshots) != 1 {
		t.Fatalf("prune within the grace period: %+v, %v; want one snapshot and no pack removed", rep, err)
	}
	age(t, fsys, 2*time.Hour)
	// A pack without its index object (a save that died between the
	// two) is read from its trailer, and goes.
	if err := fsys.Remove(crashed[0]); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Prune(ctx, session.PruneOptions{Keep: 1})
	if err != nil || rep.Packs == 0 {
		t.Fatalf("prune past the grace period: %+v, %v; want packs removed", rep, err)
	}
	if p := "packs/" + filepath.Base(crashed[0])[:2] + "/" + filepath.Base(crashed[0]); slices.Contains(names(t, fsys, "packs/"), p) {
		t.Errorf("the crashed save's pack without an index object, %s, survived the prune", p)
	}
	left := names(t, fsys, "packs/")
	if len(left) != all-rep.Packs || len(names(t, fsys, "index/")) > len(left) {
		t.Errorf("%d packs and %d index objects left of %d; prune reported %d removed", len(left), len(names(t, fsys, "index/")), all, rep.Packs)
	}
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, s, "k", dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, bb, dst)

	// A save in flight while Prune runs: it stores again the chunks it
	// finds only in old packs, so that the prune cannot take them.
	orphan := t.TempDir()
	transcripts(t, orphan, 34, 3, 100<<10)
	if _, err := crashing.Save(ctx, "k", session.DirSource{Dir: orphan}); err == nil {
		t.Fatal("crashing save committed")
	}
	age(t, fsys, 2*time.Hour)
	m, err := s.Save(ctx, "k", pruneDuring(orphan, s))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Verify(ctx, ""); err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	dst = filepath.Join(t.TempDir(), "r")
	restore(t, newStore(b), "k", dst, session.RestoreOptions{Seq: m.Seq})
	transfertest.EqualTrees(t, orphan, dst)
}

// TestHostilePacks: a pack or index object that is missing, damaged,
// truncated, or lies gives a typed error naming the object, never a wrong
// restore, and Verify names it.
func TestHostilePacks(t *testing.T) {
	type fixture struct {
		fsys        afero.Fs
		pack, other string // two packs of the snapshot
		index       string // pack's index object
		otherChunk  session.ID
		firstOfPack session.ID
		packEntries []byte // the pack's index body
	}
	indexEntry := func(id session.ID, off, n uint32) []byte {
		e := append([]byte{}, id[:]...)
		e = binary.BigEndian.AppendUint32(e, off)
		return binary.BigEndian.AppendUint32(e, n)
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, f *fixture)
		want   error // from Restore; nil: the restore must succeed
		object func(f *fixture) string
	}{
		{"missing pack", func(t *testing.T, f *fixture) { f.fsys.Remove(f.pack) }, session.ErrChunkMissing,
			func(f *fixture) string { return f.pack }},
		{"corrupt pack", func(t *testing.T, f *fixture) {
			data, _ := afero.ReadFile(f.fsys, f.pack)
			data[len(data)/2] ^= 1
			afero.WriteFile(f.fsys, f.pack, data, 0o600)
		}, session.ErrChunkCorrupt, func(f *fixture) string { return f.pack }},
		{"truncated pack", func(t *testing.T, f *fixture) {
			data, _ := afero.ReadFile(f.fsys, f.pack)
			afero.WriteFile(f.fsys, f.pack, data[:len(data)-100], 0o600)
		}, session.ErrChunkCorrupt, func(f *fixture) string { return f.pack }},
		{"index offset past the end", func(t *testing.T, f *fixture) {
			// The offsets are only the index's word: the pack's own
			// trailer places the chunks, so the restore is right, and
			// Verify names the index.
			body := slices.Clone(f.packEntries)
			binary.BigEndian.PutUint32(body[12+32:], 50<<20)
			afero.WriteFile(f.fsys, f.index, body, 0o600)
		}, nil, func(f *fixture) string { return f.index }},
		{"index names a chunk of another pack", func(t *testing.T, f *fixture) {
			body := slices.Clone(f.packEntries)
			n := binary.BigEndian.Uint32(body[8:])
			binary.BigEndian.PutUint32(body[8:], n+1)
			body = append(body, indexEntry(f.otherChunk, 0, 10)...)
			afero.WriteFile(f.fsys, f.index, body, 0o600)
		}, session.ErrChunkCorrupt, func(f *fixture) string { return f.index }},
		{"index with a wrong id", func(t *testing.T, f *fixture) {
			body := slices.Clone(f.packEntries)
			body[12] ^= 0xff // the first entry's id
			afero.WriteFile(f.fsys, f.index, body, 0o600)
		}, session.ErrChunkMissing, func(f *fixture) string { return f.index }},
		{"garbage index", func(t *testing.T, f *fixture) {
			afero.WriteFile(f.fsys, f.index, []byte("ferryix1 but not really"), 0o600)
		}, session.ErrChunkMissing, func(f *fixture) string { return f.index }},
		{"missing index", func(t *testing.T, f *fixture) { f.fsys.Remove(f.index) }, session.ErrChunkMissing,
			func(f *fixture) string { return f.pack }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			fsys := afero.NewMemMapFs()
			s := packStore(t, local.New(fsys))
			src := t.TempDir()
			transcripts(t, src, 41, 4, 150<<10)
			m := save(t, s, "k", src)
			f := &fixture{fsys: fsys}
			packs := names(t, fsys, "packs/")
			if len(packs) < 2 {
				t.Fatalf("%d packs; the test needs two", len(packs))
			}
			f.pack, f.other = packs[0], packs[1]
			f.index = "index/" + filepath.Base(f.pack)
			f.packEntries, _ = afero.ReadFile(fsys, f.index)
			copy(f.firstOfPack[:], f.packEntries[12:])
			otherIdx, _ := afero.ReadFile(fsys, "index/"+filepath.Base(f.other))
			copy(f.otherChunk[:], otherIdx[12:])
			// Index objects written later win: make the damaged one so.
			time.Sleep(10 * time.Millisecond)
			tc.damage(t, f)
			object := tc.object(f)

			st := packStore(t, local.New(fsys)) // sees the store as it is now
			parent := t.TempDir()
			_, err := st.Restore(ctx, "k", filepath.Join(parent, "r"), session.RestoreOptions{})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("restore: %v", err)
				}
				transfertest.EqualTrees(t, src, filepath.Join(parent, "r"))
			} else {
				var ie *session.IntegrityError
				if !errors.Is(err, tc.want) || !errors.As(err, &ie) {
					t.Fatalf("restore: %v, want %v", err, tc.want)
				}
				// A wrong id hides the chunk from the index: only Verify,
				// which reads the pack, can tell which object lies.
				// Nor can a missing index object be named by a restore.
				if tc.name != "index with a wrong id" && tc.name != "missing index" && !slices.Contains(ie.Packs, object) {
					t.Errorf("restore blames %q, want %s", ie.Packs, object)
				}
				if names := dirNames(t, parent); len(names) != 0 {
					t.Errorf("a failed restore wrote %q", names)
				}
				if err := st.CheckPresent(ctx, m); tc.want == session.ErrChunkMissing && !errors.Is(err, session.ErrChunkMissing) {
					t.Errorf("CheckPresent: %v, want missing chunks", err)
				}
				// The agent's path: ReadStored fails, or returns the
				// chunk's true stored bytes.
				for _, e := range m.Entries {
					for _, c := range e.Chunks {
						z, err := st.ReadStored(ctx, c.ID, nil)
						if err == nil {
							if err := session.CheckChunkObject(c.ID, z); err != nil {
								t.Fatalf("ReadStored returned a wrong chunk: %v", err)
							}
						}
					}
				}
			}
			rep, err := st.Verify(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() || !slices.ContainsFunc(rep.PackFaults, func(p session.PackFault) bool { return p.Object == object }) {
				t.Fatalf("verify: faults %+v, missing %d, corrupt %d; want %s named", rep.PackFaults, len(rep.Missing), len(rep.Corrupt), object)
			}
			// An index object that lies is rebuilt from its pack's
			// trailer; a damaged pack is beyond repair.
			wrote, err := st.RepairIndexes(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if object != f.index && tc.name != "missing index" {
				if len(wrote) != 0 {
					t.Errorf("repair wrote %q for a damaged pack", wrote)
				}
				return
			}
			if !slices.Equal(wrote, []string{f.index}) {
				t.Fatalf("repair wrote %q, want %s", wrote, f.index)
			}
			if rep, err := st.Verify(ctx, ""); err != nil || !rep.OK() {
				t.Fatalf("verify after repair: %+v, %v", rep, err)
			}
			dst := filepath.Join(t.TempDir(), "r")
			restore(t, st, "k", dst, session.RestoreOptions{})
			transfertest.EqualTrees(t, src, dst)
		})
	}
}

// TestPackSaveFailure: a failed pack upload fails the save, which commits
// nothing.
func TestPackSaveFailure(t *testing.T) {
	for _, prefix := range []string{"packs/", "index/"} {
		fsys := afero.NewMemMapFs()
		s := packStore(t, failingBackend{local.New(fsys), prefix})
		src := t.TempDir()
		transcripts(t, src, 51, 4, 150<<10)
		_, err := s.Save(context.Background(), "k", session.DirSource{Dir: src})
		if err == nil || !strings.Contains(err.Error(), "write pack") {
			t.Fatalf("%s failing: save returned %v", prefix, err)
		}
		if _, err := s.Load(context.Background(), "k", 0); !errors.Is(err, session.ErrNoSnapshot) {
			t.Fatalf("%s failing: a snapshot was committed (%v)", prefix, err)
		}
	}
}

// TestPackAgentSave: through the agent (chunks arriving compressed) a
// packing store saves what DirSource would, and restores it.
func TestPackAgentSave(t *testing.T) {
	ws := t.TempDir()
	src := filepath.Join(ws, "session")
	if err := os.MkdirAll(src, 0o700); err != nil {
		t.Fatal(err)
	}
	transcripts(t, src, 61, 4, 200<<10)
	fsys := afero.NewMemMapFs()
	s := packStore(t, local.New(fsys))
	m := agentSave(t, s, "k", &session.AgentSource{Client: agentIn(t, ws), Dir: "session"})
	if len(names(t, fsys, "chunks/")) != 0 || len(names(t, fsys, "packs/")) == 0 {
		t.Fatal("the agent's save did not pack")
	}
	d, _ := memStore(t)
	sameManifest(t, m, save(t, d, "k", src))
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, s, "k", dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, src, dst)
}

// ranges is a backend with GetRange that counts whole pack reads and
// ranged ones.
type ranges struct {
	*local.Backend
	whole, ranged atomic.Int64
}

func (r *ranges) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if strings.HasPrefix(name, "packs/") {
		r.whole.Add(1)
	}
	return r.Backend.Get(ctx, name)
}

func (r *ranges) GetRange(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	r.ranged.Add(1)
	return r.Backend.GetRange(ctx, name, off, n)
}

// TestPackRevisit: a restore that comes back to a pack whose data the
// Store no longer holds in memory (files sharing chunks) reads those
// chunks alone with GetRange, fetching no pack twice.
func TestPackRevisit(t *testing.T) {
	session.SetPackCacheBytes(t, 1) // only the pack just fetched
	fsys := afero.NewMemMapFs()
	rb := &ranges{Backend: local.New(fsys)}
	s := packStore(t, rb)
	src := t.TempDir()
	transcripts(t, src, 71, 4, 150<<10)
	// The same content again at the end of the tree: its chunks are in
	// the first packs.
	data, err := os.ReadFile(filepath.Join(src, "sessions", "2026", "rollout-00.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "zz-copy.jsonl"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	save(t, s, "k", src)
	packs := len(names(t, fsys, "packs/"))
	rb.whole.Store(0)
	st := packStore(t, rb)
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, st, "k", dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, src, dst)
	if w, r := rb.whole.Load(), rb.ranged.Load(); w != int64(packs) || r == 0 {
		t.Errorf("restore read %d packs whole (the store has %d) and %d ranges; want each pack once, and ranges for the rest", w, packs, r)
	}
}
