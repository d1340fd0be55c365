package transfertest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// CheckSafe fails t if the tree under dir holds anything an extractor of
// untrusted archives must never create: a device, FIFO or socket, a setuid,
// setgid or sticky bit, or a symlink that resolves (or, through a missing
// component, could come to resolve) outside dir. Its resolver is written
// independently of package transfer's, to check it.
func CheckSafe(t testing.TB, dir string) {
	t.Helper()
	all, err := list(dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	for name, fi := range all {
		m := fi.Mode()
		switch {
		case m&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeIrregular) != 0:
			t.Errorf("%q: special file %v", name, m)
		case m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0:
			t.Errorf("%q: mode %v", name, m)
		case m&fs.ModeSymlink != 0:
			if escapes(dir, name) {
				t.Errorf("%q: symlink resolves outside %s", name, dir)
			}
		}
	}
}

// escapes resolves the symlink name (relative to dir) component by
// component on the real filesystem, up to 64 links.
func escapes(dir, name string) bool {
	cur := strings.Split(filepath.ToSlash(filepath.Dir(name)), "/")
	if cur[0] == "." {
		cur = nil
	}
	t, err := os.Readlink(filepath.Join(dir, name))
	if err != nil || filepath.IsAbs(t) {
		return true
	}
	todo := strings.Split(t, "/")
	real, hops := true, 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			if len(cur) == 0 {
				return true
			}
			cur = cur[:len(cur)-1]
			continue
		}
		cur = append(cur, c)
		if !real {
			continue
		}
		p := filepath.Join(append([]string{dir}, cur...)...)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			real = false
			continue
		}
		if err != nil {
			return true
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if hops++; hops > 64 {
				return true
			}
			nt, err := os.Readlink(p)
			if err != nil || filepath.IsAbs(nt) {
				return true
			}
			cur = cur[:len(cur)-1]
			todo = append(strings.Split(nt, "/"), todo...)
		} else if !fi.IsDir() {
			real = false
		}
	}
	return false
}
