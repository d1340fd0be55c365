package ferry_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
)

// vanishing is a backend whose chunk gone is still there for Stat but
// missing for Get: Prune removing it between a restore's look-up and its
// read, or a store that lost it.
type vanishing struct {
	session.Backend
	gone string
}

func (v *vanishing) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if v.gone != "" && name == v.gone {
		return nil, &fs.PathError{Op: "get", Path: name, Err: fs.ErrNotExist}
	}
	return v.Backend.Get(ctx, name)
}

// TestSessionRestoreChunkVanishes: in agent mode a chunk found missing
// while the restore reads ahead of its stream (after the look-up found it)
// fails the restore with an IntegrityError naming it, and nothing is
// placed in the sandbox, whichever chunk of the stream it is.
func TestSessionRestoreChunkVanishes(t *testing.T) {
	e := newEnv(t, transfer.ModeAgent)
	src := filepath.Join(e.root, "sess")
	// Enough chunks that the window is full when the first, a middle and
	// the last one go missing.
	files := map[string]string{"e/": ""}
	for i := range 6 {
		files[filepath.Join("d", string(rune('a'+i))+".jsonl")] = jsonlLines(i, 150<<10)
	}
	write(t, src, files)
	v := &vanishing{}
	st, _ := newStore(t, func(b session.Backend) session.Backend { v.Backend = b; return v })
	if _, err := ferry.SaveSession(ctx(t), e.sb, st, session.SaveSpec{Dir: "sess", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Load(ctx(t), "k", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []session.ID
	for _, en := range m.Entries {
		for _, c := range en.Chunks {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) < 20 {
		t.Fatalf("%d chunks; the test needs more than the window", len(ids))
	}
	for _, id := range []session.ID{ids[0], ids[len(ids)/2], ids[len(ids)-1]} {
		s := id.String()
		v.gone = "chunks/" + s[:2] + "/" + s
		_, err := ferry.RestoreSession(ctx(t), e.sb, st, session.RestoreSpec{Key: "k", Dir: "dst"})
		var ie *session.IntegrityError
		if !errors.Is(err, session.ErrChunkMissing) || !errors.As(err, &ie) || len(ie.Missing) != 1 || ie.Missing[0] != id || !strings.Contains(err.Error(), s) {
			t.Fatalf("chunk %s vanished: err = %v, want an IntegrityError naming it missing", s, err)
		}
		if _, err := os.Lstat(filepath.Join(e.root, "dst")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("chunk %s vanished: the failed restore placed the target: %v", s, err)
		}
		t.Logf("chunk %d of %d vanished: %v", slices.Index(ids, id), len(ids), err)
		// The agent removes its staging directory when the stream
		// breaks, which may be just after the host has returned.
		noLeftovers(t, e.root, 10*time.Second)
	}
	v.gone = ""
	if _, err := ferry.RestoreSession(ctx(t), e.sb, st, session.RestoreSpec{Key: "k", Dir: "dst"}); err != nil {
		t.Fatalf("restore with every chunk back: %v", err)
	}
}

// noLeftovers waits up to d for a restore's hidden siblings in dir to go,
// then fails t naming those left.
func noLeftovers(t *testing.T, dir string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		des, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, de := range des {
			if strings.HasPrefix(de.Name(), ".ferry") {
				left = append(left, de.Name())
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind in the sandbox: %v", left)
		}
	}
}

// jsonlLines is about n bytes of distinct JSONL lines, different for each
// seed, so that its chunks are not shared.
func jsonlLines(seed, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(`{"seed":` + strconv.Itoa(seed) + `,"line":` + strconv.Itoa(i) + `,"text":"reading the file and thinking about it"}` + "\n")
	}
	return b.String()
}

// damagingPacks is a backend that serves its packs missing (gone) or with
// a byte flipped (flip), and counts the packs read.
type damagingPacks struct {
	session.Backend
	gone, flip string
	gets       atomic.Int64
}

func (d *damagingPacks) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if _, ok := session.PackObjectID(name); !ok {
		return d.Backend.Get(ctx, name)
	}
	d.gets.Add(1)
	if name == d.gone {
		return nil, &fs.PathError{Op: "get", Path: name, Err: fs.ErrNotExist}
	}
	r, err := d.Backend.Get(ctx, name)
	if err != nil || name != d.flip {
		return r, err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	data[len(data)/2] ^= 1
	return io.NopCloser(bytes.NewReader(data)), nil
}

// TestSessionRestorePacks: in agent mode, a restore from a store that
// packs reads each pack once, not each chunk; a pack that vanishes after
// the look-up, or reads damaged, fails the restore with an IntegrityError
// naming the pack, and nothing is placed in the sandbox.
func TestSessionRestorePacks(t *testing.T) {
	e := newEnv(t, transfer.ModeAgent)
	src := filepath.Join(e.root, "sess")
	files := map[string]string{}
	for i := range 6 {
		files[filepath.Join("d", string(rune('a'+i))+".jsonl")] = jsonlLines(100+i, 150<<10)
	}
	write(t, src, files)
	dir := t.TempDir()
	b, err := local.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := &damagingPacks{Backend: b}
	st, err := session.New(session.Config{Backend: d, Pack: true, PackSize: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ferry.SaveSession(ctx(t), e.sb, st, session.SaveSpec{Dir: "sess", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	var packs []string
	b.List(ctx(t), "packs/", func(o session.ObjectInfo) error { packs = append(packs, o.Name); return nil })
	if len(packs) < 3 {
		t.Fatalf("%d packs; the test needs several", len(packs))
	}
	fresh := func() *session.Store {
		st, err := session.New(session.Config{Backend: d, Pack: true})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	d.gets.Store(0)
	if _, err := ferry.RestoreSession(ctx(t), e.sb, fresh(), session.RestoreSpec{Key: "k", Dir: "ok"}); err != nil {
		t.Fatal(err)
	}
	if n := d.gets.Load(); n != int64(len(packs)) {
		t.Errorf("the restore read %d packs; the store has %d, each to be read once", n, len(packs))
	}
	for _, tc := range []struct {
		name string
		set  func(p string)
		want error
	}{
		{"vanished", func(p string) { d.gone, d.flip = p, "" }, session.ErrChunkMissing},
		{"damaged", func(p string) { d.gone, d.flip = "", p }, session.ErrChunkCorrupt},
	} {
		for _, p := range []string{packs[0], packs[len(packs)-1]} {
			tc.set(p)
			_, err := ferry.RestoreSession(ctx(t), e.sb, fresh(), session.RestoreSpec{Key: "k", Dir: "dst"})
			var ie *session.IntegrityError
			if !errors.Is(err, tc.want) || !errors.As(err, &ie) || !slices.Contains(ie.Packs, p) || !strings.Contains(err.Error(), p) {
				t.Fatalf("pack %s %s: err = %v, want an IntegrityError (%v) naming it", p, tc.name, err, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(e.root, "dst")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("pack %s %s: the failed restore placed the target: %v", p, tc.name, err)
			}
			noLeftovers(t, e.root, 10*time.Second)
		}
	}
}
