package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-dev/ferry/session"
)

// DefaultMaxBytes is Config.MaxBytes's default.
const DefaultMaxBytes = 2 << 30

const (
	dirMode = 0o700
	// tmpMark starts the names of entries being written.
	tmpMark = ".tmp-"
	// maxEntry bounds what is read of a chunk object: a stored chunk is
	// a little over MaxChunkSize at worst, and a larger one is corrupt.
	maxEntry = 2 * session.MaxChunkSize
	// staleTmp is the age past which eviction removes a temporary file
	// that a killed process left.
	staleTmp = time.Hour
)

// Config configures a Backend. It is not changed after New.
type Config struct {
	// Backend is the store's backend the cache is in front of. Required.
	Backend session.Backend
	// Dir holds the cached chunk objects. Created 0700 if missing; an
	// existing one that others may enter is refused (chunks can hold a
	// session's credentials). Required; see DefaultDir.
	Dir string
	// MaxBytes bounds the cache: past it, the least recently used
	// entries (by mtime, which a hit renews) are removed until 3/4 of
	// it is left. DefaultMaxBytes if zero.
	MaxBytes int64
}

// DefaultDir is the usual cache directory: $FERRY_CACHE_DIR if set, else
// "ferry/chunks" under the user cache directory ($XDG_CACHE_HOME, else
// ~/.cache).
func DefaultDir() (string, error) {
	if d := os.Getenv("FERRY_CACHE_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cache: default directory: %w", err)
	}
	return filepath.Join(d, "ferry", "chunks"), nil
}

// Backend is a session.Backend that keeps the chunk objects it reads and
// writes through in a local directory.
type Backend struct {
	b   session.Backend
	dir string
	max int64

	mu      sync.Mutex
	size    int64 // bytes cached, once counted
	counted bool

	// packs are cached packs this process has checked whole, kept open so
	// that ranges of them are read without checking them again: a file
	// of the cache is only ever replaced by a rename, never written in
	// place, so an open one keeps the content that was checked. At most
	// maxOpenPacks, the least recently used closed first.
	fdMu  sync.Mutex
	packs map[string]*openPack
	clock uint64
}

// maxOpenPacks bounds the checked packs a Backend keeps open.
const maxOpenPacks = 64

type openPack struct {
	f    *os.File
	used uint64
}

var (
	_ session.Backend     = (*Backend)(nil)
	_ session.LocalRanger = (*Backend)(nil)
)

// New returns a cache in front of cfg.Backend in cfg.Dir.
func New(cfg Config) (*Backend, error) {
	if cfg.Backend == nil {
		return nil, errors.New("cache: nil backend")
	}
	if cfg.Dir == "" {
		return nil, errors.New("cache: no directory")
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("cache: negative size bound %d", cfg.MaxBytes)
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("cache: open %s: %w", cfg.Dir, err)
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("cache: open %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("cache: open %s: %w", dir, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("cache: open %s: mode %o lets others in; want 0700", dir, fi.Mode().Perm())
	}
	return &Backend{b: cfg.Backend, dir: dir, max: cfg.MaxBytes}, nil
}

// path is where chunk id's object is cached: <dir>/<2 hex>/<64 hex>.
func (c *Backend) path(id session.ID) string {
	s := id.String()
	return filepath.Join(c.dir, s[:2], s)
}

// packPath is where pack id is cached: <dir>/packs/<2 hex>/<64 hex>.
func (c *Backend) packPath(id session.ID) string {
	s := id.String()
	return filepath.Join(c.dir, "packs", s[:2], s)
}

// object is a cacheable object: a chunk or a pack, where it is cached,
// the bound of what is read of it, and the check a cached copy must pass.
type object struct {
	path  string
	max   int64
	check func([]byte) error
	pack  bool
}

// cacheable reports whether name is a chunk or a pack object, and how it
// is cached.
func (c *Backend) cacheable(name string) (object, bool) {
	if id, ok := session.ChunkObjectID(name); ok {
		return object{c.path(id), maxEntry, func(b []byte) error { return session.CheckChunkObject(id, b) }, false}, true
	}
	if id, ok := session.PackObjectID(name); ok {
		return object{c.packPath(id), session.MaxPackSize, func(b []byte) error { return session.CheckPackObject(id, b) }, true}, true
	}
	return object{}, false
}

// Get implements session.Backend. A chunk or pack object comes from the
// cache if it is there and intact (see session.CheckChunkObject and
// session.CheckPackObject); a damaged entry is removed. Otherwise it is
// read from the backend whole and cached, intact or not: the reader
// checks it, and a damaged one is dropped at its next read.
func (c *Backend) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	o, ok := c.cacheable(name)
	if !ok {
		return c.b.Get(ctx, name)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if data, ok := c.load(o); ok {
		return whole(data), nil
	}
	r, err := c.b.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := readBounded(r, announced(r), o.max)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(data)) <= o.max {
		c.store(o.path, data)
	}
	return whole(data), nil
}

// wholeObject is an object read whole into memory. Its Bytes lets a
// reader that wants all of it (the session store, reading a pack) take
// the bytes without a second copy; they are the reader's, not the cache's.
type wholeObject struct {
	*bytes.Reader
	data []byte
}

func whole(data []byte) wholeObject { return wholeObject{bytes.NewReader(data), data} }
func (w wholeObject) Bytes() []byte { return w.data }
func (w wholeObject) Close() error  { return nil }

// GetRange implements session.RangeGetter. A range of a pack comes from
// the cached pack when it is there and intact; otherwise it is read from
// the backend, and not cached (a range is no whole object to check).
func (c *Backend) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	if o, ok := c.cacheable(name); ok && off >= 0 && length >= 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if o.pack {
			if f := c.openPack(o); f != nil {
				return io.NopCloser(io.NewSectionReader(f, off, length)), nil
			}
		} else if data, ok := c.load(o); ok {
			off = min(off, int64(len(data)))
			return io.NopCloser(bytes.NewReader(data[off:min(off+length, int64(len(data)))])), nil
		}
	}
	if rg, ok := c.b.(session.RangeGetter); ok {
		return rg.GetRange(ctx, name, off, length)
	}
	r, err := c.b.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, r, off); err != nil && err != io.EOF {
		r.Close()
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(r, length), r}, nil
}

// Put implements session.Backend. A chunk or pack object written through
// is cached once the backend has it.
func (c *Backend) Put(ctx context.Context, name string, r io.Reader, exclusive bool) error {
	o, ok := c.cacheable(name)
	if !ok || exclusive {
		return c.b.Put(ctx, name, r, exclusive)
	}
	data, err := readBounded(r, announced(r), o.max) // a *bytes.Reader, as the store's packs come
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	if int64(len(data)) > o.max {
		return c.b.Put(ctx, name, io.MultiReader(bytes.NewReader(data), r), false)
	}
	if err := c.b.Put(ctx, name, bytes.NewReader(data), false); err != nil {
		return err
	}
	c.store(o.path, data)
	return nil
}

// Stat implements session.Backend. It always asks the backend: a chunk in
// the cache is no proof that the store still holds it, and a save must
// not reference a chunk the store lacks.
func (c *Backend) Stat(ctx context.Context, name string) (session.ObjectInfo, error) {
	return c.b.Stat(ctx, name)
}

// List implements session.Backend; it lists the backend.
func (c *Backend) List(ctx context.Context, prefix string, fn func(session.ObjectInfo) error) error {
	return c.b.List(ctx, prefix, fn)
}

// Delete implements session.Backend. A deleted chunk leaves the cache too.
func (c *Backend) Delete(ctx context.Context, name string) error {
	if err := c.b.Delete(ctx, name); err != nil {
		return err
	}
	if o, ok := c.cacheable(name); ok {
		c.drop(o.path)
	}
	return nil
}

// load returns o's cached copy if it is there and intact, and renews
// its mtime for the LRU. A damaged entry is removed.
func (c *Backend) load(o object) ([]byte, bool) {
	f, data, ok := c.readChecked(o, c.drop)
	if !ok {
		return nil, false
	}
	if o.pack {
		c.keepOpen(o.path, f)
	} else {
		f.Close()
	}
	now := time.Now()
	os.Chtimes(o.path, now, now)
	return data, true
}

// store caches data at p: written to a temporary file (0600) and renamed
// into place, so that a reader sees all of it or nothing. Failures are
// ignored: the cache is an optimisation.
func (c *Backend) store(p string, data []byte) {
	if err := os.MkdirAll(filepath.Dir(p), dirMode); err != nil {
		return
	}
	f, err := os.CreateTemp(filepath.Dir(p), tmpMark+"*")
	if err != nil {
		return
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.counted {
		c.size, c.counted = c.scanLocked(nil), true
	} else {
		c.size += int64(len(data))
	}
	if c.size > c.max {
		c.evictLocked()
	}
}

// Local implements session.LocalRanger: whether name is a pack the cache
// holds (checked and open, or on disk to be checked at its first range).
func (c *Backend) Local(name string) bool {
	o, ok := c.cacheable(name)
	if !ok || !o.pack {
		return false
	}
	c.fdMu.Lock()
	_, open := c.packs[o.path]
	c.fdMu.Unlock()
	if open {
		return true
	}
	_, err := os.Stat(o.path)
	return err == nil
}

// openPack returns the cached pack o open, checked whole when it is
// opened; nil if it is not cached or fails the check (then it is removed).
// Checks are made one at a time: the reads of a restore that need a pack
// wait for its one check.
func (c *Backend) openPack(o object) *os.File {
	c.fdMu.Lock()
	defer c.fdMu.Unlock()
	if op, ok := c.packs[o.path]; ok {
		c.clock++
		op.used = c.clock
		return op.f
	}
	f, _, ok := c.readChecked(o, c.dropLocked)
	if !ok {
		return nil
	}
	c.keepOpenLocked(o.path, f)
	return f
}

// readChecked opens the cached copy of o and reads it whole. A copy that
// cannot be read or fails o's check is removed with drop (drop or
// dropLocked, as the caller holds fdMu); ok is false then, and when
// there is no copy. The file is left open for the caller.
func (c *Backend) readChecked(o object, drop func(string)) (f *os.File, data []byte, ok bool) {
	f, err := os.Open(o.path)
	if err != nil {
		return nil, nil, false
	}
	size := int64(-1)
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	data, err = readBounded(f, size, o.max)
	if err != nil || int64(len(data)) > o.max || o.check(data) != nil {
		f.Close()
		drop(o.path)
		return nil, nil, false
	}
	return f, data, true
}

// readBounded reads r to its end, or to max+1 bytes (the caller checks
// for more than max), in one allocation when size, the length r said it
// has (-1: unknown), is within max.
func readBounded(r io.Reader, size, max int64) ([]byte, error) {
	var buf bytes.Buffer
	if size >= 0 && size <= max {
		buf.Grow(int(size) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(io.LimitReader(r, max+1))
	return buf.Bytes(), err
}

// announced is the size r says it has (a *bytes.Reader, s3store's
// bodies), or -1.
func announced(r io.Reader) int64 {
	if sz, ok := r.(interface{ Size() int64 }); ok {
		return sz.Size()
	}
	return -1
}

// keepOpen records f, the open and checked cached pack at p.
func (c *Backend) keepOpen(p string, f *os.File) {
	c.fdMu.Lock()
	defer c.fdMu.Unlock()
	c.keepOpenLocked(p, f)
}

func (c *Backend) keepOpenLocked(p string, f *os.File) {
	if old, ok := c.packs[p]; ok {
		old.f.Close()
	}
	if c.packs == nil {
		c.packs = map[string]*openPack{}
	}
	for len(c.packs) >= maxOpenPacks {
		var lru string
		for q, op := range c.packs {
			if lru == "" || op.used < c.packs[lru].used {
				lru = q
			}
		}
		c.packs[lru].f.Close()
		delete(c.packs, lru)
	}
	c.clock++
	c.packs[p] = &openPack{f: f, used: c.clock}
}

// forgetOpen closes the open pack at p, if any: it is removed or replaced.
// A range being read from it then fails, and the reader fetches the pack.
func (c *Backend) forgetOpenLocked(p string) {
	if op, ok := c.packs[p]; ok {
		op.f.Close()
		delete(c.packs, p)
	}
}

// dropLocked is drop under fdMu.
func (c *Backend) dropLocked(p string) {
	c.forgetOpenLocked(p)
	c.dropFile(p)
}

func (c *Backend) drop(p string) {
	c.fdMu.Lock()
	c.forgetOpenLocked(p)
	c.fdMu.Unlock()
	c.dropFile(p)
}

// dropFile removes the cached file p and counts it out.
func (c *Backend) dropFile(p string) {
	fi, err := os.Stat(p)
	if err != nil || os.Remove(p) != nil {
		return
	}
	c.mu.Lock()
	if c.counted {
		c.size -= fi.Size()
	}
	c.mu.Unlock()
}

// entry is one cached object found by a scan.
type entry struct {
	path  string
	size  int64
	mtime time.Time
}

// scanLocked walks the cache, removing stale temporary files, and returns
// the bytes cached; with es, it appends every entry to it. Other
// processes may share the directory, so the count is refreshed from the
// disk whenever the bound is crossed.
func (c *Backend) scanLocked(es *[]entry) int64 {
	var total int64
	filepath.WalkDir(c.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if strings.HasPrefix(d.Name(), tmpMark) {
			if time.Since(fi.ModTime()) > staleTmp {
				os.Remove(p)
			}
			return nil
		}
		total += fi.Size()
		if es != nil {
			*es = append(*es, entry{p, fi.Size(), fi.ModTime()})
		}
		return nil
	})
	return total
}

// evictLocked removes the least recently used entries until 3/4 of the
// bound is left.
func (c *Backend) evictLocked() {
	var es []entry
	c.size = c.scanLocked(&es)
	slices.SortFunc(es, func(a, b entry) int { return a.mtime.Compare(b.mtime) })
	for _, e := range es {
		if c.size <= c.max/4*3 {
			break
		}
		if os.Remove(e.path) == nil {
			c.size -= e.size
		}
	}
}
