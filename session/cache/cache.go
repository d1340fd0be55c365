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
}

var _ session.Backend = (*Backend)(nil)

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

// Get implements session.Backend. A chunk object comes from the cache if
// it is there and intact (see session.CheckChunkObject); a damaged entry
// is removed. Otherwise it is read from the backend whole and cached,
// intact or not: the reader checks it, and a damaged one is dropped at
// its next read.
func (c *Backend) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	id, ok := session.ChunkObjectID(name)
	if !ok {
		return c.b.Get(ctx, name)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if data, ok := c.load(id); ok {
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	r, err := c.b.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, maxEntry+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data) <= maxEntry {
		c.store(id, data)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// Put implements session.Backend. A chunk object written through is
// cached once the backend has it.
func (c *Backend) Put(ctx context.Context, name string, r io.Reader, exclusive bool) error {
	id, ok := session.ChunkObjectID(name)
	if !ok || exclusive {
		return c.b.Put(ctx, name, r, exclusive)
	}
	data, err := io.ReadAll(io.LimitReader(r, maxEntry+1))
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	if len(data) > maxEntry {
		return c.b.Put(ctx, name, io.MultiReader(bytes.NewReader(data), r), false)
	}
	if err := c.b.Put(ctx, name, bytes.NewReader(data), false); err != nil {
		return err
	}
	c.store(id, data)
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
	if id, ok := session.ChunkObjectID(name); ok {
		c.drop(c.path(id))
	}
	return nil
}

// load returns chunk id's cached object if it is there and intact, and
// renews its mtime for the LRU. A damaged entry is removed.
func (c *Backend) load(id session.ID) ([]byte, bool) {
	p := c.path(id)
	f, err := os.Open(p)
	if err != nil {
		return nil, false
	}
	data, err := io.ReadAll(io.LimitReader(f, maxEntry+1))
	f.Close()
	if err != nil || session.CheckChunkObject(id, data) != nil {
		c.drop(p)
		return nil, false
	}
	now := time.Now()
	os.Chtimes(p, now, now)
	return data, true
}

// store caches data as chunk id's object: written to a temporary file
// (0600) and renamed into place, so that a reader sees all of it or
// nothing. Failures are ignored: the cache is an optimisation.
func (c *Backend) store(id session.ID, data []byte) {
	p := c.path(id)
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

func (c *Backend) drop(p string) {
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
