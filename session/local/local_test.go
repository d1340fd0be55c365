package local_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/afero"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/backendtest"
	"github.com/ferry-dev/ferry/session/local"
)

func TestMemory(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) session.Backend { return local.New(afero.NewMemMapFs()) })
}

func TestDir(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) session.Backend {
		b, err := local.NewDir(filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// TestDirModes checks that the store is private: 0700 directories and
// 0600 files, whatever the umask, since a session can hold a credential.
func TestDirModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	b, err := local.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, excl := range []bool{false, true} {
		name := "snapshots/key/1"
		if !excl {
			name = "chunks/ab/abcd"
		}
		if err := b.Put(ctx, name, bytes.NewReader([]byte("secret")), excl); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = fs.ModeDir | 0o700
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 7 {
		t.Errorf("walked %d paths, want 7 (a temporary file left behind?)", n)
	}
}
