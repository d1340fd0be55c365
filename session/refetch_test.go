package session_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spf13/afero"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// lossy is a store in memory, counting its requests, with one snapshot
// of a tree in a workspace an agent serves.
type lossy struct {
	s    *session.Store
	fsys afero.Fs
	rq   *requests
	ws   string // the workspace; the tree is ws/sess
	m    *session.Manifest
}

func newLossy(t *testing.T, pack bool) *lossy {
	t.Helper()
	l := &lossy{fsys: afero.NewMemMapFs(), ws: t.TempDir()}
	l.rq = &requests{Backend: local.New(l.fsys)}
	var err error
	if l.s, err = session.New(session.Config{Backend: l.rq, Pack: pack, PackSize: packSize}); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(l.ws, "sess")
	if err := os.Mkdir(src, 0o700); err != nil {
		t.Fatal(err)
	}
	transfertest.RandomTree(t, src, 71, transfertest.TreeOptions{Entries: 40})
	transcripts(t, src, 72, 4, 150<<10)
	l.m = save(t, l.s, "k", src)
	return l
}

// verify returns what Verify of the whole store reports missing.
func (l *lossy) verify(t *testing.T) *session.VerifyReport {
	t.Helper()
	rep, err := l.s.Verify(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// fileChunks returns the chunks of the n-th largest file of the snapshot
// and its path.
func (l *lossy) fileChunks(n int) (string, []session.ID) {
	files := slices.Clone(l.m.Entries)
	slices.SortFunc(files, func(a, b session.Entry) int { return int(b.Size - a.Size) })
	var ids []session.ID
	for _, c := range files[n].Chunks {
		ids = append(ids, c.ID)
	}
	return files[n].Path, ids
}

func sortedIDs(ids []session.ID) []session.ID {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(a, b session.ID) int { return bytes.Compare(a[:], b[:]) })
	return slices.Compact(ids)
}

// TestRepairChunks: chunks lost from a loose store, or a pack lost from a
// packing one, are stored again from the directory the snapshot was saved
// from, locally (DirSource) or through the agent, which sends only them;
// nothing else is written, and the store verifies and restores clean.
func TestRepairChunks(t *testing.T) {
	for _, pack := range []bool{false, true} {
		for _, via := range []string{"dir", "agent"} {
			name := via
			if pack {
				name += "-packed"
			}
			t.Run(name, func(t *testing.T) { testRepairChunks(t, pack, via) })
		}
	}
}

func testRepairChunks(t *testing.T, pack bool, via string) {
	ctx := context.Background()
	l := newLossy(t, pack)
	packs := names(t, l.fsys, "packs/")
	var lostIndexes []string
	rs := l.s // the store that repairs
	if pack {
		if len(packs) < 3 || len(names(t, l.fsys, "chunks/")) != 0 {
			t.Fatalf("packs %v and loose chunks: want several packs, no chunk", packs)
		}
		for _, p := range packs[:2] {
			lostIndexes = append(lostIndexes, "index/"+filepath.Base(p))
			if err := l.fsys.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
		// Packs larger than the lost ones: the chunks of both go into one
		// new pack, which is neither of them (a pack is named by its
		// content).
		var err error
		if rs, err = session.New(session.Config{Backend: l.rq, Pack: true, PackSize: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	} else {
		_, a := l.fileChunks(0)
		_, b := l.fileChunks(1)
		for _, id := range append(a[:2], b[0]) {
			if err := l.fsys.Remove(chunkPath(id)); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := l.verify(t)
	if len(before.Missing) == 0 || before.OK() {
		t.Fatalf("verify after the loss: %+v", before)
	}

	var src session.Source = session.DirSource{Dir: filepath.Join(l.ws, "sess"), ReuseUnchanged: true}
	as := &session.AgentSource{Client: agentIn(t, l.ws), Dir: "sess", ReuseUnchanged: true}
	if via == "agent" {
		src = as
	}
	l.rq.reset()
	rep, err := rs.RepairChunks(ctx, before.Missing, src)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Restored, before.Missing) || len(rep.Missing) != 0 || rep.Bytes == 0 {
		t.Fatalf("repair of %d chunks: restored %d, still missing %d, %d bytes", len(before.Missing), len(rep.Restored), len(rep.Missing), rep.Bytes)
	}
	if via == "agent" && as.FetchedChunks != int64(len(before.Missing)) {
		t.Errorf("the agent sent %d chunks, want the %d missing", as.FetchedChunks, len(before.Missing))
	}
	if pack {
		now := names(t, l.fsys, "packs/")
		if len(now) != len(packs)-1 || l.rq.puts.Load() != 2 || len(names(t, l.fsys, "chunks/")) != 0 {
			t.Errorf("packs %v after the repair of %v, %d puts: want one new pack and its index object only", now, packs, l.rq.puts.Load())
		}
		if !slices.Equal(rep.RemovedIndexes, lostIndexes) {
			t.Errorf("removed index objects %v, want %v", rep.RemovedIndexes, lostIndexes)
		}
	} else if l.rq.puts.Load() != int64(len(before.Missing)) {
		t.Errorf("%d puts to repair %d chunks: others were stored again", l.rq.puts.Load(), len(before.Missing))
	}
	if after := l.verify(t); !after.OK() {
		t.Fatalf("verify after the repair: %+v", after)
	}
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, l.s, "k", dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, filepath.Join(l.ws, "sess"), dst)
}

// TestRepairChunksChanged: a chunk the source no longer holds (its file
// was rewritten since the save) is reported still missing; the others
// are restored.
func TestRepairChunksChanged(t *testing.T) {
	for _, via := range []string{"dir", "agent"} {
		t.Run(via, func(t *testing.T) {
			ctx := context.Background()
			l := newLossy(t, false)
			gone, lostA := l.fileChunks(0)
			_, lostB := l.fileChunks(1)
			lost := append(slices.Clone(lostA), lostB[0])
			for _, id := range lost {
				if err := l.fsys.Remove(chunkPath(id)); err != nil {
					t.Fatal(err)
				}
			}
			p := filepath.Join(l.ws, "sess", filepath.FromSlash(gone))
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, bytes.ToUpper(data), 0o600); err != nil {
				t.Fatal(err)
			}
			var src session.Source = session.DirSource{Dir: filepath.Join(l.ws, "sess")}
			if via == "agent" {
				src = &session.AgentSource{Client: agentIn(t, l.ws), Dir: "sess"}
			}
			rep, err := l.s.RepairChunks(ctx, l.verify(t).Missing, src)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rep.Restored, lostB[:1]) || !slices.Equal(rep.Missing, sortedIDs(lostA)) {
				t.Fatalf("restored %v, missing %v; want %v restored, %v missing", rep.Restored, rep.Missing, lostB[:1], sortedIDs(lostA))
			}
			if after := l.verify(t); !slices.Equal(after.Missing, sortedIDs(lostA)) {
				t.Errorf("verify after the repair: missing %v, want %v", after.Missing, sortedIDs(lostA))
			}
		})
	}
}

// forger is a hostile Source: it says it has every chunk asked for, puts
// other bytes, and adds an entry that references the chunks.
type forger struct{ want []session.ID }

func (f forger) Scan(ctx context.Context, _ *session.Parent, sink session.Sink) error {
	var refs []session.ChunkRef
	for i, id := range f.want {
		if ok, err := sink.Has(ctx, id); err != nil || ok {
			return errors.New("the sink holds a chunk it was asked for")
		}
		forged := []byte{byte(i), 'f', 'o', 'r', 'g', 'e', 'd'}
		got, err := sink.Put(ctx, forged)
		if err != nil {
			return err
		}
		if got != session.Hash(forged) {
			return errors.New("the sink named forged bytes after another chunk")
		}
		refs = append(refs, session.ChunkRef{ID: id, Size: int64(len(forged))})
	}
	return sink.Add(session.Entry{Path: "f", Kind: session.KindFile, Mode: 0o600, Size: int64(7 * len(refs)), Chunks: refs})
}

// TestRepairChunksHostile: bytes that do not hash to a chunk asked for
// are never stored, from a Source or through a lying agent (whose wrong
// bytes fail the repair with archive.ErrDigest naming the file).
func TestRepairChunksHostile(t *testing.T) {
	ctx := context.Background()
	l := newLossy(t, false)
	_, lost := l.fileChunks(0)
	for _, id := range lost {
		if err := l.fsys.Remove(chunkPath(id)); err != nil {
			t.Fatal(err)
		}
	}
	want := l.verify(t).Missing

	l.rq.reset()
	rep, err := l.s.RepairChunks(ctx, want, forger{want})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Restored) != 0 || !slices.Equal(rep.Missing, want) || l.rq.puts.Load() != 0 {
		t.Fatalf("forged bytes: restored %v, missing %v, %d puts", rep.Restored, rep.Missing, l.rq.puts.Load())
	}

	forged := []byte("not the chunk")
	c := fakeAgent(t, &liarAgent{
		entries: []*agentv1.ScanEntry{{Path: "lie", Kind: agentv1.Kind_KIND_FILE, Mode: 0o600, Size: int64(len(forged)),
			Chunks: []*agentv1.ChunkInfo{{Id: want[0][:], Size: int64(len(forged))}}}},
		data: map[string][]byte{"lie": forged},
	})
	rep, err = l.s.RepairChunks(ctx, want, &session.AgentSource{Client: c, Dir: "x"})
	if !errors.Is(err, archive.ErrDigest) || !bytes.Contains([]byte(err.Error()), []byte("lie")) {
		t.Fatalf("a lying agent: %v, want %v naming the file", err, archive.ErrDigest)
	}
	if rep == nil || len(rep.Restored) != 0 || !slices.Equal(rep.Missing, want) || l.rq.puts.Load() != 0 {
		t.Fatalf("a lying agent: report %+v, %d puts", rep, l.rq.puts.Load())
	}
	if after := l.verify(t); !slices.Equal(after.Missing, want) {
		t.Errorf("verify after the hostile repairs: missing %v, want %v", after.Missing, want)
	}
}

// coarse is a backend whose clock counts whole seconds, as S3's
// Last-Modified does.
type coarse struct{ session.Backend }

func (c coarse) Stat(ctx context.Context, name string) (session.ObjectInfo, error) {
	o, err := c.Backend.Stat(ctx, name)
	o.ModTime = o.ModTime.Truncate(time.Second)
	return o, err
}

func (c coarse) List(ctx context.Context, prefix string, fn func(session.ObjectInfo) error) error {
	return c.Backend.List(ctx, prefix, func(o session.ObjectInfo) error {
		o.ModTime = o.ModTime.Truncate(time.Second)
		return fn(o)
	})
}

// withholding is a Source that never sends one chunk.
type withholding struct {
	session.Source
	id session.ID
}

func (w withholding) Scan(ctx context.Context, prev *session.Parent, sink session.Sink) error {
	return w.Source.Scan(ctx, prev, withholdingSink{sink, w.id})
}

type withholdingSink struct {
	session.Sink
	id session.ID
}

func (w withholdingSink) Put(ctx context.Context, data []byte) (session.ID, error) {
	if id := session.Hash(data); id == w.id {
		return id, nil
	}
	return w.Sink.Put(ctx, data)
}

// TestRepairChunksPartialPack: a lost pack one of whose chunks the source
// no longer has keeps its index object, and the chunks stored again are
// read from their new pack even when both index objects bear the same
// second.
func TestRepairChunksPartialPack(t *testing.T) {
	ctx := context.Background()
	fsys := afero.NewMemMapFs()
	s, err := session.New(session.Config{Backend: coarse{local.New(fsys)}, Pack: true, PackSize: packSize})
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	transcripts(t, src, 81, 4, 150<<10)
	save(t, s, "k", src)
	packs := names(t, fsys, "packs/")
	if err := fsys.Remove(packs[0]); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Verify(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Missing) < 2 {
		t.Fatalf("a lost pack of %d chunks: want 2 or more", len(rep.Missing))
	}
	kept := rep.Missing[0]
	fixed, err := s.RepairChunks(ctx, rep.Missing, withholding{session.DirSource{Dir: src}, kept})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fixed.Missing, []session.ID{kept}) || !slices.Equal(fixed.Restored, rep.Missing[1:]) || len(fixed.RemovedIndexes) != 0 {
		t.Fatalf("repair without %s: %+v", kept, fixed)
	}
	// A new Store, as the next command would open.
	s2, err := session.New(session.Config{Backend: coarse{local.New(fsys)}, Pack: true, PackSize: packSize})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []*session.Store{s, s2} {
		after, err := st.Verify(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(after.Missing, []session.ID{kept}) {
			t.Errorf("verify after the repair: missing %v, want only %s", after.Missing, kept)
		}
	}
}
