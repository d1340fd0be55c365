package local_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// TestOpenDir: OpenDir opens an existing store and creates none: a
// missing directory is session.ErrNoStore naming it, and stays missing;
// a file is refused.
func TestOpenDir(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) session.Backend {
		dir := filepath.Join(t.TempDir(), "store")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		b, err := local.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
	missing := filepath.Join(t.TempDir(), "no", "store")
	if _, err := local.OpenDir(missing); !errors.Is(err, session.ErrNoStore) || !strings.Contains(err.Error(), missing) {
		t.Errorf("OpenDir of a missing directory: %v, want session.ErrNoStore naming %s", err, missing)
	}
	if _, err := os.Lstat(filepath.Dir(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenDir created %s: %v", filepath.Dir(missing), err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := local.OpenDir(file); err == nil || errors.Is(err, session.ErrNoStore) || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("OpenDir of a file: %v, want \"not a directory\"", err)
	}
}
