package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// RestoreOptions shape a Restore.
type RestoreOptions struct {
	// Seq is the snapshot to restore; 0 is the newest.
	Seq int64
	// Replace allows a non-empty target, whose content is replaced whole.
	Replace bool
}

// Check reads every chunk m references and checks it against its ID. It
// returns an *IntegrityError listing the missing and corrupt chunks, or
// another error if the backend fails.
func (s *Store) Check(ctx context.Context, m *Manifest) error {
	ie := &IntegrityError{Key: m.Key, Seq: m.Seq}
	if s.cfg.Pack {
		if err := s.refreshView(ctx, true); err != nil {
			return err
		}
	}
	buf := make([]byte, MaxChunkSize)
	for _, id := range s.inPackOrder(chunkSet(m)) {
		if _, err := s.readChunk(ctx, id, buf); err != nil && !ie.note(id, err) {
			return err
		}
	}
	ie.blameIndexes(s)
	return ie.orNil()
}

// chunkSet is the distinct chunks of m, sorted.
func chunkSet(m *Manifest) []ID {
	seen := map[ID]bool{}
	var ids []ID
	for _, e := range m.Entries {
		for _, c := range e.Chunks {
			if !seen[c.ID] {
				seen[c.ID] = true
				ids = append(ids, c.ID)
			}
		}
	}
	slices.SortFunc(ids, CompareIDs)
	return ids
}

// Restore writes a snapshot of key to the local directory dir and returns
// its manifest. It first checks every chunk the snapshot needs (see Check)
// and fails, having written nothing, if one is missing or corrupt. It then
// builds the tree in a private staging directory beside dir (every chunk
// checked again as it is written) and renames it into place: dir ends up
// holding exactly the snapshot, with its modes, nanosecond mtimes,
// symlinks and empty directories; dir itself is 0700. A non-empty dir is
// refused with ErrNotEmpty unless opts.Replace.
//
// Limitations: with Replace, the old content is moved aside and the new
// tree renamed in, two renames, not one atomic swap. Symlink targets are
// written as saved, wherever they point.
func (s *Store) Restore(ctx context.Context, key, dir string, opts RestoreOptions) (*Manifest, error) {
	m, err := s.Load(ctx, key, opts.Seq)
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", key, err)
	}
	exists, err := checkTarget(dir, opts.Replace)
	if err != nil {
		return nil, fmt.Errorf("restore %s to %s: %w", key, dir, err)
	}
	if err := s.Check(ctx, m); err != nil {
		return nil, fmt.Errorf("restore %s to %s: %w", key, dir, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("restore %s to %s: %w", key, dir, err)
	}
	stage, err := os.MkdirTemp(filepath.Dir(dir), ".ferry-restore-*")
	if err != nil {
		return nil, fmt.Errorf("restore %s to %s: %w", key, dir, err)
	}
	defer removeAll(stage)
	tree := filepath.Join(stage, "tree")
	if err := s.build(ctx, m, tree); err != nil {
		return nil, fmt.Errorf("restore %s to %s: %w", key, dir, err)
	}
	if err := place(tree, dir, filepath.Join(stage, "old"), exists); err != nil {
		return nil, fmt.Errorf("restore %s to %s: %w", key, dir, err)
	}
	return m, nil
}

// checkTarget reports whether dir exists, and refuses one that is not a
// directory, or not empty without replace.
func checkTarget(dir string, replace bool) (bool, error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("%w: not a directory", fs.ErrExist)
	}
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if err == io.EOF || replace {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return true, ErrNotEmpty
}

// build writes m's tree into the new directory tree, through an os.Root.
// Directories get their modes and mtimes last, deepest first, so that
// writing their content does not change them.
func (s *Store) build(ctx context.Context, m *Manifest, tree string) error {
	if err := os.Mkdir(tree, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(tree)
	if err != nil {
		return err
	}
	defer root.Close()
	buf := make([]byte, MaxChunkSize)
	for i := range m.Entries {
		e := &m.Entries[i]
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		switch e.Kind {
		case KindDir:
			err = root.Mkdir(e.Path, 0o700)
		case KindSymlink:
			if err = root.Symlink(e.Target, e.Path); err == nil {
				err = lchtimes(filepath.Join(tree, filepath.FromSlash(e.Path)), e.ModTime())
			}
		case KindFile:
			err = s.writeFile(ctx, root, e, buf)
		}
		if err != nil {
			return fmt.Errorf("write %q: %w", e.Path, err)
		}
	}
	for i := len(m.Entries) - 1; i >= 0; i-- {
		e := &m.Entries[i]
		if e.Kind != KindDir {
			continue
		}
		if err := root.Chmod(e.Path, e.Mode); err != nil {
			return fmt.Errorf("write %q: %w", e.Path, err)
		}
		if err := root.Chtimes(e.Path, time.Time{}, e.ModTime()); err != nil {
			return fmt.Errorf("write %q: %w", e.Path, err)
		}
	}
	return nil
}

func (s *Store) writeFile(ctx context.Context, root *os.Root, e *Entry, buf []byte) error {
	f, err := root.OpenFile(e.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	for _, c := range e.Chunks {
		data, err := s.readChunk(ctx, c.ID, buf)
		if err == nil && int64(len(data)) != c.Size {
			err = fmt.Errorf("chunk %s: %d bytes, the manifest says %d", c.ID, len(data), c.Size)
		}
		if err == nil {
			_, err = f.Write(data)
		}
		if err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Chmod(e.Mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return root.Chtimes(e.Path, time.Time{}, e.ModTime())
}

// place renames tree to dir. An existing dir is moved to old first (an
// empty one could be replaced by rename(2) directly, but not on every
// system); if the second rename fails, it is moved back.
func place(tree, dir, old string, exists bool) error {
	if !exists {
		return os.Rename(tree, dir)
	}
	if err := os.Rename(dir, old); err != nil {
		return err
	}
	if err := os.Rename(tree, dir); err != nil {
		return errors.Join(err, os.Rename(old, dir))
	}
	return nil
}

// removeAll removes a staging directory, making read-only directories in
// it writable first.
func removeAll(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}
