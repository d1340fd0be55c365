//go:build unix

package fdfile_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-dev/ferry/internal/fdfile"
)

// TestFile: a File reads, reads at offsets, writes, sets its mode and
// mtime, stats and closes as an *os.File would, its errors naming it; a
// closed one refuses all.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })

	w, err := fdfile.OpenAt(d, "f", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.Write([]byte("hello, world")); n != 12 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if err := w.Chmod(0o604); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	setMtime := w.SetMtime(mtime)
	if setMtime != nil && !errors.Is(setMtime, errors.ErrUnsupported) {
		t.Fatalf("SetMtime: %v", setMtime)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Write after Close: %v, want os.ErrClosed", err)
	}
	if err := w.Close(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("second Close: %v, want os.ErrClosed", err)
	}
	fi, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil || fi.Mode().Perm() != 0o604 {
		t.Fatalf("after Chmod: %v, %v; want mode 0604", fi.Mode(), err)
	}
	if setMtime == nil && !fi.ModTime().Equal(mtime) {
		t.Fatalf("after SetMtime: mtime %v, want %v", fi.ModTime(), mtime)
	}

	r, err := fdfile.Open(filepath.Join(dir, "f"), unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil || st.Size != 12 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Fatalf("Stat = size %d mode %o, %v", st.Size, st.Mode, err)
	}
	buf := make([]byte, 5)
	if n, err := r.ReadAt(buf, 7); n != 5 || err != nil || string(buf) != "world" {
		t.Fatalf("ReadAt(7) = %d, %v, %q", n, err, buf)
	}
	if n, err := r.ReadAt(buf, 10); n != 2 || err != io.EOF {
		t.Fatalf("ReadAt past the end = %d, %v; want 2, io.EOF", n, err)
	}
	all, err := io.ReadAll(r)
	if err != nil || string(all) != "hello, world" {
		t.Fatalf("ReadAll = %q, %v", all, err)
	}

	if err := os.Symlink("f", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	_, err = fdfile.OpenAt(d, "link", unix.O_RDONLY|unix.O_NOFOLLOW, 0)
	var pe *fs.PathError
	if !errors.Is(err, syscall.ELOOP) || !errors.As(err, &pe) || pe.Path != "link" {
		t.Fatalf("OpenAt of a symlink, O_NOFOLLOW: %v, want ELOOP naming link", err)
	}
	if _, err := fdfile.Open(filepath.Join(dir, "missing"), unix.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of nothing: %v, want fs.ErrNotExist", err)
	}
}

// TestHeldDir: the directory held is opened once for a run of its
// files, opened anew for another, and never outside the root.
func TestHeldDir(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("..", filepath.Join(dir, "a", "up")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	h := &fdfile.HeldDir{Root: root}
	defer h.Close()
	a1, err := h.Open("a")
	if err != nil {
		t.Fatal(err)
	}
	if a2, err := h.Open("a"); err != nil || a2 != a1 {
		t.Fatalf("second Open(a) = %p, %v; want the held %p", a2, err, a1)
	}
	b, err := h.Open("b")
	if err != nil || b == a1 || filepath.Base(b.Name()) != "b" {
		t.Fatalf("Open(b) = %v, %v; want b opened anew", b, err)
	}
	if _, err := a1.Stat(); err == nil {
		t.Fatal("the directory held before b is still open")
	}
	for _, name := range []string{"..", "a/up/..", "/"} {
		if _, err := h.Open(name); err == nil {
			t.Errorf("Open(%q) opened a directory outside the root", name)
		}
	}
}
