package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/afero"

	"github.com/ferry-dev/ferry/session"
)

const (
	dirMode  = 0o700
	fileMode = 0o600
	tmpMark  = ".tmp-"
)

// Backend is a session.Backend on an afero.Fs.
type Backend struct {
	fs   afero.Fs
	link func(oldname, newname string) error // nil without hard links
	mu   sync.Mutex                          // exclusive Puts when link is nil
}

var (
	_ session.Backend     = (*Backend)(nil)
	_ session.RangeGetter = (*Backend)(nil)
)

// New returns a Backend on fsys, with the limits of exclusive Puts that
// the package doc describes. Tests use it with afero.NewMemMapFs().
func New(fsys afero.Fs) *Backend {
	return &Backend{fs: fsys}
}

// NewDir returns a Backend on the OS directory dir, created 0700 if
// missing. Its exclusive Puts use link(2) and hold across processes.
func NewDir(dir string) (*Backend, error) {
	if dir == "" {
		return nil, errors.New("local: empty store directory")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	return onDir(dir), nil
}

// OpenDir is NewDir on a directory that must exist: a missing dir is an
// error matching session.ErrNoStore that names it. It is for users that
// only read or clean a store, which must not create one where a path was
// mistyped.
func OpenDir(dir string) (*Backend, error) {
	if dir == "" {
		return nil, errors.New("local: empty store directory")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("open store %s: %w", dir, session.ErrNoStore)
	case err != nil:
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("open store %s: not a directory", dir)
	}
	return onDir(dir), nil
}

// onDir is a Backend on the absolute OS directory dir.
func onDir(dir string) *Backend {
	return &Backend{
		fs: afero.NewBasePathFs(afero.NewOsFs(), dir),
		link: func(oldname, newname string) error {
			return os.Link(filepath.Join(dir, filepath.FromSlash(oldname)), filepath.Join(dir, filepath.FromSlash(newname)))
		},
	}
}

// check refuses names that are not clean relative slash paths.
func check(op, name string) error {
	if !fs.ValidPath(name) || name == "." || strings.HasPrefix(path.Base(name), tmpMark) || strings.ContainsRune(name, '\\') {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return nil
}

// Get implements session.Backend.
func (b *Backend) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := check("get", name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := b.fs.Open(name)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, &fs.PathError{Op: "get", Path: name, Err: fs.ErrNotExist}
	}
	return f, nil
}

// GetRange implements session.RangeGetter.
func (b *Backend) GetRange(ctx context.Context, name string, off, length int64) (io.ReadCloser, error) {
	if off < 0 || length < 0 {
		return nil, &fs.PathError{Op: "get", Path: name, Err: fs.ErrInvalid}
	}
	r, err := b.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	f := r.(afero.File)
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(f, length), f}, nil
}

// Put implements session.Backend.
func (b *Backend) Put(ctx context.Context, name string, r io.Reader, exclusive bool) (err error) {
	if err := check("put", name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := path.Dir(name)
	if err := b.fs.MkdirAll(dir, dirMode); err != nil {
		return err
	}
	if exclusive && b.link == nil {
		return b.putExcl(ctx, name, r)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := path.Join(dir, tmpMark+hex.EncodeToString(rnd[:]))
	if err := b.write(ctx, tmp, r, os.O_EXCL); err != nil {
		b.fs.Remove(tmp)
		return err
	}
	defer func() {
		if err != nil || exclusive {
			b.fs.Remove(tmp)
		}
	}()
	if exclusive {
		return b.link(tmp, name)
	}
	return b.fs.Rename(tmp, name)
}

// putExcl is an exclusive Put without hard links: O_EXCL under b.mu.
func (b *Backend) putExcl(ctx context.Context, name string, r io.Reader) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.write(ctx, name, r, os.O_EXCL); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			b.fs.Remove(name)
		}
		return err
	}
	return nil
}

// write creates name with flag added and copies r into it, synced.
func (b *Backend) write(ctx context.Context, name string, r io.Reader, flag int) error {
	f, err := b.fs.OpenFile(name, os.O_WRONLY|os.O_CREATE|flag, fileMode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, ctxReader{ctx, r}); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Stat implements session.Backend.
func (b *Backend) Stat(ctx context.Context, name string) (session.ObjectInfo, error) {
	if err := check("stat", name); err != nil {
		return session.ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return session.ObjectInfo{}, err
	}
	fi, err := b.fs.Stat(name)
	if err != nil {
		return session.ObjectInfo{}, err
	}
	if !fi.Mode().IsRegular() {
		return session.ObjectInfo{}, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return session.ObjectInfo{Name: name, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// List implements session.Backend.
func (b *Backend) List(ctx context.Context, prefix string, fn func(session.ObjectInfo) error) error {
	root := "."
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		root = prefix[:i]
	}
	if root != "." && !fs.ValidPath(root) {
		return &fs.PathError{Op: "list", Path: prefix, Err: fs.ErrInvalid}
	}
	err := afero.Walk(b.fs, root, func(p string, fi fs.FileInfo, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while listing, or no such prefix
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		p = filepath.ToSlash(p)
		if fi.IsDir() {
			// Skip directories that cannot hold a match.
			if p != root && !strings.HasPrefix(p+"/", prefix) && !strings.HasPrefix(prefix, p+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !fi.Mode().IsRegular() || strings.HasPrefix(fi.Name(), tmpMark) || !strings.HasPrefix(p, prefix) {
			return nil
		}
		return fn(session.ObjectInfo{Name: p, Size: fi.Size(), ModTime: fi.ModTime()})
	})
	return err
}

// Delete implements session.Backend.
func (b *Backend) Delete(ctx context.Context, name string) error {
	if err := check("delete", name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := b.fs.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// ctxReader fails reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

var _ session.TempCleaner = (*Backend)(nil)

// CleanTemp implements session.TempCleaner: it removes the temporary
// files of Puts (".tmp-" and random hex, beside the object they were to
// become) last written before before, which only a writer killed mid-Put
// leaves behind, and returns how many it removed.
func (b *Backend) CleanTemp(ctx context.Context, before time.Time) (int, error) {
	n := 0
	err := afero.Walk(b.fs, ".", func(p string, fi fs.FileInfo, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if fi.IsDir() || !fi.Mode().IsRegular() || !strings.HasPrefix(fi.Name(), tmpMark) || !fi.ModTime().Before(before) {
			return nil
		}
		if err := b.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove temporary file %s: %w", filepath.ToSlash(p), err)
		}
		n++
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("clean temporary files: %w", err)
	}
	return n, nil
}
