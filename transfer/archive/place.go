package archive

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// stage is the staging directory of one Extract and the tree inside it.
// The tree is a child of the 0700 staging directory, not the staging
// directory itself: it is created with mkdir's usual mode (0777 less the
// umask) and can be renamed away whole, while nobody else can reach into it
// before it is placed.
type stage struct {
	dest string
	mode Placement
	dir  string   // the staging directory
	tree string   // dir/tree, the extraction root
	root *os.Root // opened on tree
	lock *os.File // dir's marker, locked while the stage is live (see stale.go)
}

// newStage makes the staging directory for dest, first removing stale
// ones from the directory it goes in (told to onStale).
func newStage(ctx context.Context, dest string, place Placement, name string, onStale func(int, error)) (*stage, error) {
	if dest == "" {
		return nil, errors.New("transfer: empty destination")
	}
	dest = filepath.Clean(dest)
	var parent string
	switch place {
	case PlaceNew:
		if _, err := os.Lstat(dest); err == nil {
			return nil, fmt.Errorf("extract to %s: %w", dest, fs.ErrExist)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("extract to %s: %w", dest, err)
		}
		parent = filepath.Dir(dest)
	case PlaceInto:
		// Stat, not Lstat: dest is the caller's choice, a symlink to a
		// directory is fine. What the archive brings is checked with Lstat.
		fi, err := os.Stat(dest)
		if err != nil {
			return nil, fmt.Errorf("extract into %s: %w", dest, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("extract into %s: not a directory", dest)
		}
		parent = dest
	case PlaceAs:
		fi, err := os.Lstat(dest)
		if err == nil && fi.IsDir() {
			return nil, fmt.Errorf("extract as %s: %w: a directory", dest, fs.ErrExist)
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("extract as %s: %w", dest, err)
		}
		parent = filepath.Dir(dest)
	default:
		return nil, fmt.Errorf("transfer: unknown placement %d", place)
	}
	if name != "" && !IsStagingName(name) {
		return nil, fmt.Errorf("create staging directory %q: %w: not a %s name with hex digits", name, ErrUnsafePath, StagingPrefix)
	}
	// A dead transfer's staging directory goes before this one is made;
	// failing to remove one costs only its space.
	if n, err := RemoveStaleStaging(ctx, parent); (n > 0 || err != nil) && onStale != nil {
		onStale(n, err)
	}
	st := &stage{dest: dest, mode: place}
	for i := 0; ; i++ {
		n := name
		if n == "" {
			n = StagingPrefix + RandomTag()
		}
		err := st.make(filepath.Join(parent, n))
		if err == nil {
			break
		}
		if name != "" || !errors.Is(err, fs.ErrExist) || i == 9 {
			return nil, fmt.Errorf("create staging directory: %w", err)
		}
	}
	if err := os.Mkdir(st.tree, 0o777); err != nil {
		return nil, errors.Join(fmt.Errorf("create staging directory: %w", err), st.cleanup())
	}
	var err error
	if st.root, err = os.OpenRoot(st.tree); err != nil {
		return nil, errors.Join(fmt.Errorf("create staging directory: %w", err), st.cleanup())
	}
	return st, nil
}

// make makes the staging directory dir, exclusively, with its marker
// locked: under its first name (dir.PID), then renamed (see stale.go).
func (st *stage) make(dir string) error {
	first := dir + "." + strconv.Itoa(os.Getpid())
	if err := os.Mkdir(first, 0o700); err != nil {
		return err
	}
	lock, err := lockStage(first)
	if err == nil {
		err = renameNoReplace(first, dir)
	}
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		return errors.Join(err, RemoveTree(first))
	}
	st.dir, st.tree, st.lock = dir, filepath.Join(dir, "tree"), lock
	return nil
}

// RandomTag is 16 random hex digits: the tail of a staging name, unique
// enough that two transfers never pick the same one.
func RandomTag() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// cleanup closes the root and removes the staging directory with whatever
// is left in it, and only then lets go of its lock: until then no sweep
// of another transfer takes it for stale. What it fails to remove, the
// next transfer staging beside it removes.
func (st *stage) cleanup() error {
	if st.root != nil {
		st.root.Close()
		st.root = nil
	}
	err := RemoveTree(st.dir)
	if st.lock != nil {
		st.lock.Close()
		st.lock = nil
	}
	if err != nil {
		return fmt.Errorf("remove staging directory: %w", err)
	}
	return nil
}

// place moves the checked tree to dest as st.mode says.
func (st *stage) place(x *extractor) error {
	switch st.mode {
	case PlaceNew:
		return st.placeNew(x)
	case PlaceInto:
		return st.placeInto(x)
	default:
		return st.placeAs(x)
	}
}

func (st *stage) placeNew(x *extractor) error {
	if err := x.applyDirMeta(nil); err != nil {
		return err
	}
	if err := renameNoReplace(st.tree, st.dest); err != nil {
		return &EntryError{Op: "place", Err: err}
	}
	if root := x.dirs[rootName]; root.explicit {
		return setDirMeta(st.dest, root)
	}
	return nil
}

// setDirMeta gives a directory that was just renamed into place the mode
// and mtime its entry asked for. It comes after the rename: moving a
// directory to a new parent rewrites its ".." entry, which needs write
// permission on it and which some filesystems count as a modification.
func setDirMeta(dst string, d *dirMeta) error {
	if err := os.Chmod(dst, d.mode); err != nil {
		return &EntryError{Entry: d.entry, Op: "place", Err: err}
	}
	if err := os.Chtimes(dst, time.Time{}, d.mtime); err != nil {
		return &EntryError{Entry: d.entry, Op: "place", Err: err}
	}
	return nil
}

// move is one rename of PlaceInto or PlaceAs.
type move struct {
	name    string // cleaned name in the staged tree
	dst     string
	replace bool     // dst exists and is replaced atomically
	dir     *dirMeta // set for a directory with an entry of its own
}

func (st *stage) placeInto(x *extractor) error {
	var moves []move
	var merges []string       // post-order: children before parents
	late := map[string]bool{} // directories whose metadata comes after the renames
	var plan func(name string) error
	plan = func(name string) error {
		dst := filepath.Join(st.dest, filepath.FromSlash(name))
		sfi, err := st.root.Lstat(name)
		if err != nil {
			return err
		}
		dfi, err := os.Lstat(dst)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			moves = append(moves, move{name: name, dst: dst, dir: x.explicitDir(name)})
			late[name] = true
			return nil
		case err != nil:
			return &EntryError{Entry: x.entryName(name), Op: "place", Err: err}
		case sfi.IsDir() && dfi.IsDir():
			children, err := st.readNames(name)
			if err != nil {
				return err
			}
			for _, c := range children {
				if err := plan(path.Join(name, c)); err != nil {
					return err
				}
			}
			merges = append(merges, name)
			late[name] = true
			return nil
		case !sfi.IsDir() && !dfi.IsDir():
			moves = append(moves, move{name: name, dst: dst, replace: true})
			return nil
		}
		return &EntryError{Entry: x.entryName(name), Op: "place", Err: fmt.Errorf("%w: a %s over the %s at %s", fs.ErrExist, describe(sfi.Mode()), describe(dfi.Mode()), dst)}
	}
	top, err := st.readNames(rootName)
	if err != nil {
		return err
	}
	stagingName := filepath.Base(st.dir)
	for _, name := range top {
		if name == stagingName {
			return &EntryError{Entry: x.entryName(name), Op: "place", Err: fmt.Errorf("%w: name of the staging directory", ErrUnsafePath)}
		}
		if err := plan(name); err != nil {
			return err
		}
	}
	if err := x.applyDirMeta(func(name string) bool { return late[name] }); err != nil {
		return err
	}
	if err := st.doMoves(x, moves); err != nil {
		return err
	}
	for _, name := range merges {
		d := x.dirs[name]
		if d == nil || !d.explicit {
			continue
		}
		if err := setDirMeta(filepath.Join(st.dest, filepath.FromSlash(name)), d); err != nil {
			return err
		}
	}
	return nil
}

func (st *stage) placeAs(x *extractor) error {
	top, err := st.readNames(rootName)
	if err != nil {
		return err
	}
	if len(top) != 1 {
		return fmt.Errorf("extract as %s: the archive holds %d top-level entries, want 1", st.dest, len(top))
	}
	name := top[0]
	sfi, err := st.root.Lstat(name)
	if err != nil {
		return err
	}
	m := move{name: name, dst: st.dest, dir: x.explicitDir(name)}
	dfi, err := os.Lstat(st.dest)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return &EntryError{Entry: x.entryName(name), Op: "place", Err: err}
	case sfi.IsDir() || dfi.IsDir():
		return &EntryError{Entry: x.entryName(name), Op: "place", Err: fmt.Errorf("%w: a %s over the %s at %s", fs.ErrExist, describe(sfi.Mode()), describe(dfi.Mode()), st.dest)}
	default:
		m.replace = true
	}
	if err := x.applyDirMeta(func(n string) bool { return n == name }); err != nil {
		return err
	}
	return st.doMoves(x, []move{m})
}

func (st *stage) doMoves(x *extractor, moves []move) error {
	for _, m := range moves {
		src := filepath.Join(st.tree, filepath.FromSlash(m.name))
		var err error
		if m.replace {
			err = os.Rename(src, m.dst)
		} else {
			err = renameNoReplace(src, m.dst)
		}
		if err != nil {
			return &EntryError{Entry: x.entryName(m.name), Op: "place", Err: err}
		}
		if m.dir != nil {
			if err := setDirMeta(m.dst, m.dir); err != nil {
				return err
			}
		}
	}
	return nil
}

// readNames lists a staged directory, sorted.
func (st *stage) readNames(name string) ([]string, error) {
	f, err := st.root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// explicitDir returns the metadata of name if a directory entry gave it.
func (x *extractor) explicitDir(name string) *dirMeta {
	if d := x.dirs[name]; d != nil && d.explicit {
		return d
	}
	return nil
}

// entryName names a staged path in an error: the raw entry name for a
// directory entry, else the cleaned name.
func (x *extractor) entryName(name string) string {
	if d := x.dirs[name]; d != nil && d.entry != "" {
		return d.entry
	}
	return name
}

// StagingParent is the directory Extract makes its staging directory in
// for dest and place.
func StagingParent(dest string, place Placement) string {
	if place == PlaceInto {
		return filepath.Clean(dest)
	}
	return filepath.Dir(filepath.Clean(dest))
}
