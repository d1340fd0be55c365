package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ferry-dev/ferry/transfer/cdc"
)

// DirSource is a Source that reads a local directory tree, chunking and
// hashing on this host. It saves directories, regular files and symlinks
// with their permission bits and nanosecond mtimes; it skips sockets,
// FIFOs and devices, which a session cannot carry. The root's own mode and
// mtime are not saved. A symlink that resolves outside Dir fails the save,
// as it would fail a restore (see checkSaveLimits).
type DirSource struct {
	Dir string
	// ReuseUnchanged lets a regular file whose size and mtime equal its
	// entry in the previous snapshot take that entry's chunk list without
	// being read (restore keeps mtimes, so a restored and untouched file
	// qualifies). A change that keeps both size and mtime is then missed.
	ReuseUnchanged bool
}

var _ Source = DirSource{}

// Scan implements Source.
func (d DirSource) Scan(ctx context.Context, prev *Parent, sink Sink) error {
	root, err := os.OpenRoot(d.Dir)
	if err != nil {
		return fmt.Errorf("scan %s: %w", d.Dir, err)
	}
	defer root.Close()
	// fs.WalkDir's order is prev's: each file is found in one pass.
	if !d.ReuseUnchanged {
		prev = nil
	}
	files := prev.Files()
	ch := cdc.New(nil, cdc.Default())
	return fs.WalkDir(root.FS(), ".", func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("scan %s: %w", d.Dir, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		fi, err := de.Info()
		if err != nil {
			return fmt.Errorf("scan %s: %w", filepath.Join(d.Dir, p), err)
		}
		e := Entry{Path: p, Mode: fi.Mode().Perm(), MTime: fi.ModTime().UnixNano()}
		switch {
		case fi.IsDir():
			e.Kind = KindDir
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Kind = KindSymlink
			if e.Target, err = root.Readlink(p); err != nil {
				return fmt.Errorf("scan %s: %w", filepath.Join(d.Dir, p), err)
			}
		case fi.Mode().IsRegular():
			e.Kind = KindFile
			o, found, err := files.Find(p)
			if err != nil {
				return fmt.Errorf("scan %s: %w", d.Dir, err)
			}
			if found && o.Size == fi.Size() && o.MTime == e.MTime && held(ctx, sink, &o) {
				e.Size, e.Chunks = o.Size, o.Chunks
			} else if err := d.readFile(ctx, root, ch, &e, sink); err != nil {
				return fmt.Errorf("scan %s: %w", filepath.Join(d.Dir, p), err)
			}
		default:
			return nil
		}
		return sink.Add(e)
	})
}

// readFile chunks the file e.Path and stores its chunks, filling in e's
// size, chunks and (from the open file) mode and mtime.
func (d DirSource) readFile(ctx context.Context, root *os.Root, ch *cdc.Chunker, e *Entry, sink Sink) error {
	f, err := root.OpenFile(e.Path, os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return errors.New("changed type while scanning")
	}
	e.Mode, e.MTime = fi.Mode().Perm(), fi.ModTime().UnixNano()
	ch.Reset(f)
	for {
		data, err := ch.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		id, err := sink.Put(ctx, data)
		if err != nil {
			return err
		}
		e.Chunks = append(e.Chunks, ChunkRef{ID: id, Size: int64(len(data))})
		e.Size += int64(len(data))
	}
}

// held reports whether sink holds every chunk of e, so that an unchanged
// file may reuse e's chunk list: a chunk the store has lost is read from
// the file again. A failed look-up counts as not held; the read that
// follows reports any real trouble.
func held(ctx context.Context, sink Sink, e *Entry) bool {
	for _, c := range e.Chunks {
		if ok, err := sink.Has(ctx, c.ID); err != nil || !ok {
			return false
		}
	}
	return true
}
