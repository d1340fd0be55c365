package cache_test

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/afero"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/backendtest"
	"github.com/ferry-dev/ferry/session/cache"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// counting is a Backend that counts the chunk objects and the packs read
// from it.
type counting struct {
	session.Backend
	mu          sync.Mutex
	gets, packs int
}

func (c *counting) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	_, chunk := session.ChunkObjectID(name)
	_, pack := session.PackObjectID(name)
	c.mu.Lock()
	if chunk {
		c.gets++
	}
	if pack {
		c.packs++
	}
	c.mu.Unlock()
	return c.Backend.Get(ctx, name)
}

// chunkGets returns the chunk objects read since the last call.
func (c *counting) chunkGets() int { return c.take(&c.gets) }

// packGets returns the packs read since the last call.
func (c *counting) packGets() int { return c.take(&c.packs) }

// take returns the count n and zeroes it.
func (c *counting) take(n *int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := *n
	*n = 0
	return v
}

// setup returns a store on a cache in front of a counted in-memory
// backend, the two backends, and the cache directory.
func setup(t *testing.T, max int64) (*session.Store, *cache.Backend, *counting, string) {
	t.Helper()
	remote := &counting{Backend: local.New(afero.NewMemMapFs())}
	dir := filepath.Join(t.TempDir(), "cache")
	c, err := cache.New(cache.Config{Backend: remote, Dir: dir, MaxBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	st, err := session.New(session.Config{Backend: c})
	if err != nil {
		t.Fatal(err)
	}
	return st, c, remote, dir
}

func cached(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() && fi.Mode().Perm() != 0o700 || !d.IsDir() && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %o", p, fi.Mode().Perm())
		}
		if !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestConformance: the cache keeps the Backend contract.
func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) session.Backend {
		c, err := cache.New(cache.Config{Backend: local.New(afero.NewMemMapFs()), Dir: filepath.Join(t.TempDir(), "c")})
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// TestNoRedownload: a node that saved a tree restores it without reading
// a chunk from the store, and a node that restored it once restores it
// again without reading one.
func TestNoRedownload(t *testing.T) {
	ctx := context.Background()
	st, _, remote, dir := setup(t, 0)
	src := t.TempDir()
	transfertest.RandomTree(t, src, 3, transfertest.TreeOptions{Entries: 60, BigFiles: 1, BigFileSize: 1 << 20})
	m, err := st.Save(ctx, "k", session.DirSource{Dir: src})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cached(t, dir)); n != int(m.NewChunks) {
		t.Errorf("the save cached %d chunks, stored %d", n, m.NewChunks)
	}
	if _, err := st.Restore(ctx, "k", filepath.Join(t.TempDir(), "r1"), session.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := remote.chunkGets(); n != 0 {
		t.Errorf("the saving node read %d chunks from the store to restore", n)
	}

	// Another node: a fresh cache on the same store.
	other, err := cache.New(cache.Config{Backend: remote, Dir: filepath.Join(t.TempDir(), "other")})
	if err != nil {
		t.Fatal(err)
	}
	st2, err := session.New(session.Config{Backend: other})
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "r2")
	if _, err := st2.Restore(ctx, "k", dst, session.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	transfertest.EqualTrees(t, src, dst)
	if n := remote.chunkGets(); n != int(m.NewChunks) {
		t.Errorf("a restore on a cold node read %d chunks from the store, want each of the %d once", n, m.NewChunks)
	}
	if _, err := st2.Restore(ctx, "k", filepath.Join(t.TempDir(), "r3"), session.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := remote.chunkGets(); n != 0 {
		t.Errorf("a second restore read %d chunks from the store", n)
	}
}

// TestDamagedEntry: a damaged or truncated cache entry is never served:
// it is dropped, the chunk is fetched again, and the entry rewritten.
func TestDamagedEntry(t *testing.T) {
	ctx := context.Background()
	st, _, remote, dir := setup(t, 0)
	src := t.TempDir()
	transfertest.RandomTree(t, src, 4, transfertest.TreeOptions{Entries: 20})
	if _, err := st.Save(ctx, "k", session.DirSource{Dir: src}); err != nil {
		t.Fatal(err)
	}
	files := cached(t, dir)
	if len(files) < 3 {
		t.Fatalf("only %d chunks cached", len(files))
	}
	good, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	damage := map[string][]byte{
		files[0]: append(good[:len(good)-4:len(good)-4], "XXXX"...), // wrong bytes
		files[1]: nil,                                               // empty
		files[2]: []byte(strings.Repeat("x", 1000)),
	}
	for p, b := range damage {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "r")
	if _, err := st.Restore(ctx, "k", dst, session.RestoreOptions{}); err != nil {
		t.Fatalf("restore with damaged cache entries: %v", err)
	}
	transfertest.EqualTrees(t, src, dst)
	if n := remote.chunkGets(); n != len(damage) {
		t.Errorf("read %d chunks from the store, want the %d damaged ones", n, len(damage))
	}
	if b, err := os.ReadFile(files[0]); err != nil || string(b) != string(good) {
		t.Errorf("the damaged entry was not rewritten: %v", err)
	}
}

// TestCacheIsNoProof: a chunk the store lost but the cache holds is
// stored again by the next save, so the snapshot restores on a node
// without the cache.
func TestCacheIsNoProof(t *testing.T) {
	ctx := context.Background()
	st, _, remote, _ := setup(t, 0)
	src := t.TempDir()
	transfertest.RandomTree(t, src, 5, transfertest.TreeOptions{Entries: 20})
	if _, err := st.Save(ctx, "k", session.DirSource{Dir: src}); err != nil {
		t.Fatal(err)
	}
	var lost []string
	remote.List(ctx, "chunks/", func(o session.ObjectInfo) error { lost = append(lost, o.Name); return nil })
	for _, n := range lost {
		if err := remote.Backend.Delete(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	// A save under a new key, so that no previous snapshot vouches for
	// the chunks.
	if _, err := st.Save(ctx, "k2", session.DirSource{Dir: src}); err != nil {
		t.Fatal(err)
	}
	bare, err := session.New(session.Config{Backend: remote.Backend})
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "r")
	if _, err := bare.Restore(ctx, "k2", dst, session.RestoreOptions{}); err != nil {
		t.Fatalf("restore from the store alone: %v", err)
	}
	transfertest.EqualTrees(t, src, dst)
}

// TestEvict: past MaxBytes, the least recently used entries go.
func TestEvict(t *testing.T) {
	ctx := context.Background()
	const max = 256 << 10
	st, _, remote, dir := setup(t, max)
	var srcs []string
	for i := range 6 {
		src := t.TempDir()
		// Incompressible, about 96 KiB per snapshot.
		transfertest.RandomTree(t, src, int64(10+i), transfertest.TreeOptions{Entries: 3, BigFiles: 1, BigFileSize: 96 << 10})
		if _, err := st.Save(ctx, "k", session.DirSource{Dir: src}); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, src)
		time.Sleep(10 * time.Millisecond) // distinct mtimes
	}
	var total int64
	for _, p := range cached(t, dir) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	if total > max || total == 0 {
		t.Errorf("the cache holds %d bytes, bound %d", total, max)
	}
	// The newest snapshot's chunks are the most recently used: still there.
	if _, err := st.Restore(ctx, "k", filepath.Join(t.TempDir(), "r"), session.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := remote.chunkGets(); n != 0 {
		t.Errorf("restoring the newest snapshot read %d chunks from the store", n)
	}
	// The oldest one's were evicted.
	if _, err := st.Restore(ctx, "k", filepath.Join(t.TempDir(), "r1"), session.RestoreOptions{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if n := remote.chunkGets(); n == 0 {
		t.Error("restoring the oldest snapshot read nothing from the store: nothing was evicted")
	}
}

// TestOpenRefusesSharedDir: a cache directory others can enter is refused.
func TestOpenRefusesSharedDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := cache.New(cache.Config{Backend: local.New(afero.NewMemMapFs()), Dir: dir}); err == nil || !strings.Contains(err.Error(), "0700") {
		t.Fatalf("New on a 0755 directory: %v", err)
	}
}

// TestPacks: a packing store's packs are cached whole when written and
// read: the saving node restores without reading one from the store, a
// new node reads each once, and a damaged cached pack is dropped and read
// again, never served.
func TestPacks(t *testing.T) {
	ctx := context.Background()
	remote := &counting{Backend: local.New(afero.NewMemMapFs())}
	open := func(dir string) *session.Store {
		c, err := cache.New(cache.Config{Backend: remote, Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		st, err := session.New(session.Config{Backend: c, Pack: true, PackSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	dir := filepath.Join(t.TempDir(), "cache")
	st := open(dir)
	src := t.TempDir()
	transfertest.RandomTree(t, src, 5, transfertest.TreeOptions{Entries: 60, BigFiles: 1, BigFileSize: 1 << 20})
	if _, err := st.Save(ctx, "k", session.DirSource{Dir: src}); err != nil {
		t.Fatal(err)
	}
	var packs []string
	for _, f := range cached(t, dir) {
		if strings.Contains(f, string(filepath.Separator)+"packs"+string(filepath.Separator)) {
			packs = append(packs, f)
		}
	}
	if len(packs) < 3 {
		t.Fatalf("%d packs cached; want the several the save wrote", len(packs))
	}
	restoreOK := func(st *session.Store) {
		t.Helper()
		dst := filepath.Join(t.TempDir(), "r")
		if _, err := st.Restore(ctx, "k", dst, session.RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
		transfertest.EqualTrees(t, src, dst)
	}
	restoreOK(open(dir))
	if n := remote.packGets(); n != 0 {
		t.Errorf("the saving node read %d packs from the store", n)
	}
	restoreOK(open(filepath.Join(t.TempDir(), "other")))
	if n := remote.packGets(); n != len(packs) {
		t.Errorf("a new node read %d packs from the store, want each of %d once", n, len(packs))
	}
	good, err := os.ReadFile(packs[0])
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte{}, good...)
	bad[len(bad)/3] ^= 0x40
	os.WriteFile(packs[0], bad, 0o600)
	os.WriteFile(packs[1], good[:len(good)/2], 0o600)
	restoreOK(open(dir))
	if n := remote.packGets(); n != 2 {
		t.Errorf("with 2 damaged cached packs, %d read from the store", n)
	}
	if b, _ := os.ReadFile(packs[0]); string(b) != string(good) {
		t.Error("the damaged pack was not cached again")
	}
}
