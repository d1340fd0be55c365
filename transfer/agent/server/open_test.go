package server

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/internal/fdfile"
)

// TestFileOpener: the opener reads the files it is asked for, in and out
// of the directory it holds, with the mode and mtime an lstat gives; and
// it refuses what the root's own OpenFile with O_NOFOLLOW refused: a path
// out of the root, a symlink as the last name (ELOOP), a FIFO (opened at
// once, and not a regular file).
func TestFileOpener(t *testing.T) {
	dir := t.TempDir()
	write := func(p, data string, mode fs.FileMode) {
		t.Helper()
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("top", "top file", 0o644)
	write("a/one", "one", 0o600)
	write("a/b/two", "two", 0o755|fs.ModeSetgid)
	write("a/three", "three", 0o640|fs.ModeSticky)
	write("secret-outside/x", "not in the root", 0o644)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "a/one"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("one", filepath.Join(dir, "a", "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../secret-outside", filepath.Join(dir, "a", "up")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "a", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	op := &fileOpener{dir: fdfile.HeldDir{Root: root}}
	t.Cleanup(op.close)

	// Back and forth between directories: the held one changes.
	for _, p := range []string{"one", "b/two", "three", "b/two", "one"} {
		f, err := op.open(p)
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		data, err := io.ReadAll(f)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		want, _ := os.ReadFile(filepath.Join(dir, "a", p))
		if string(data) != string(want) {
			t.Fatalf("%s: read %q, want %q", p, data, want)
		}
		regular, mode, mt, err := f.stat()
		fi, lerr := os.Lstat(filepath.Join(dir, "a", p))
		if err != nil || lerr != nil {
			t.Fatalf("stat %s: %v, %v", p, err, lerr)
		}
		if !regular || mode != unixMode(fi.Mode()) || !mt.Equal(fi.ModTime()) {
			t.Fatalf("%s: regular %v, mode %o, mtime %v; lstat says %o, %v", p, regular, mode, mt, unixMode(fi.Mode()), fi.ModTime())
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}

	f, err := op.open("b/two")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if n, err := f.ReadAt(buf, 1); n != 2 || err != nil || string(buf) != "wo" {
		t.Fatalf("ReadAt(1) = %d, %v, %q; want 2, nil, \"wo\"", n, err, buf)
	}
	if n, err := f.ReadAt(buf, 2); n != 1 || err != io.EOF {
		t.Fatalf("ReadAt past the end = %d, %v; want 1, io.EOF", n, err)
	}
	f.Close()

	f, err = op.open("fifo")
	if err != nil {
		t.Fatalf("open a FIFO: %v, want it open at once (O_NONBLOCK)", err)
	}
	if regular, _, _, err := f.stat(); regular || err != nil {
		t.Fatalf("FIFO: regular %v, %v; want not regular", regular, err)
	}
	f.Close()

	for _, tc := range []struct {
		path string
		want error // nil: any error
	}{
		{"link", syscall.ELOOP},
		{"up/x", nil},
		{"../top", fs.ErrInvalid},
		{filepath.Join(dir, "top"), fs.ErrInvalid},
		{"b/../one", fs.ErrInvalid},
		{"", fs.ErrInvalid},
		{".", fs.ErrInvalid},
		{"b/", fs.ErrInvalid},
		{"missing/one", fs.ErrNotExist},
	} {
		f, err := op.open(tc.path)
		if err == nil {
			f.Close()
			t.Errorf("open %q: opened, want an error", tc.path)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("open %q: %v, want %v", tc.path, err, tc.want)
		}
	}
}
