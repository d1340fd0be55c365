package session_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

func TestRoundTrip(t *testing.T) {
	stores := map[string]func(t *testing.T) *session.Store{
		"memory": func(t *testing.T) *session.Store { s, _ := memStore(t); return s },
		"disk":   func(t *testing.T) *session.Store { s, _ := diskStore(t); return s },
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			src := t.TempDir()
			tree := transfertest.RandomTree(t, src, 5, transfertest.TreeOptions{Entries: 120, BigFiles: 1, BigFileSize: 1 << 20})
			m := save(t, s, "rtzll-rascal-42-0123456789", src)
			if m.Seq != 1 || m.Files != tree.Files || m.Dirs != tree.Dirs || m.Symlinks != tree.Symlinks || m.Bytes != tree.Bytes {
				t.Fatalf("manifest says seq %d, %d files, %d dirs, %d symlinks, %d bytes; tree has %+v", m.Seq, m.Files, m.Dirs, m.Symlinks, m.Bytes, tree)
			}
			if m.NewBytes != m.Bytes {
				t.Errorf("first save stored %d new bytes of %d (the random tree has no repeats)", m.NewBytes, m.Bytes)
			}
			cases := []struct {
				name  string
				setup func(dst string)
				opts  session.RestoreOptions
			}{
				{"new dir", func(string) {}, session.RestoreOptions{}},
				{"new parents", func(string) {}, session.RestoreOptions{}},
				{"empty dir", func(dst string) { os.Mkdir(dst, 0o755) }, session.RestoreOptions{}},
				{"replace", func(dst string) {
					os.Mkdir(dst, 0o755)
					os.WriteFile(filepath.Join(dst, "stale"), []byte("x"), 0o644)
				}, session.RestoreOptions{Replace: true, Seq: 1}},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					parent := t.TempDir()
					dst := filepath.Join(parent, "restored")
					if tc.name == "new parents" {
						dst = filepath.Join(parent, "a", "b", "restored")
					}
					tc.setup(dst)
					restore(t, s, m.Key, dst, tc.opts)
					transfertest.EqualTrees(t, src, dst)
					if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o700 {
						t.Errorf("restored root: %v, %v; want mode 0700", fi.Mode(), err)
					}
					if names := dirNames(t, filepath.Dir(dst)); len(names) != 1 {
						t.Errorf("beside the target: %q, want only it (staging left behind?)", names)
					}
				})
			}
		})
	}
}

func TestRestoreRefusesNonEmpty(t *testing.T) {
	s, _ := memStore(t)
	src := t.TempDir()
	transfertest.RandomTree(t, src, 1, transfertest.TreeOptions{Entries: 20})
	save(t, s, "k", src)
	dst := t.TempDir()
	os.WriteFile(filepath.Join(dst, "mine"), []byte("keep me"), 0o600)
	_, err := s.Restore(context.Background(), "k", dst, session.RestoreOptions{})
	if !errors.Is(err, session.ErrNotEmpty) {
		t.Fatalf("restore into a non-empty dir: %v, want ErrNotEmpty", err)
	}
	if names := dirNames(t, dst); len(names) != 1 || names[0] != "mine" {
		t.Errorf("target now holds %q", names)
	}
	for _, tc := range []struct {
		key  string
		seq  int64
		want error
	}{
		{"unknown", 0, session.ErrNoSnapshot},
		{"k", 2, session.ErrNoSnapshot},
		{"../k", 0, session.ErrInvalidKey},
	} {
		if _, err := s.Restore(context.Background(), tc.key, filepath.Join(t.TempDir(), "x"), session.RestoreOptions{Seq: tc.seq}); !errors.Is(err, tc.want) {
			t.Errorf("restore %s/%d: %v, want %v", tc.key, tc.seq, err, tc.want)
		}
	}
}

// TestUnchangedAfterRestore is the restic pitfall: a restored tree, new
// inodes and all, must save as unchanged, without new chunks.
func TestUnchangedAfterRestore(t *testing.T) {
	s, _ := diskStore(t)
	src := t.TempDir()
	transcripts(t, src, 1, 10, 100<<10)
	transfertest.RandomTree(t, filepath.Join(src, "sessions"), 2, transfertest.TreeOptions{Entries: 40})
	first := save(t, s, "k", src)
	dst := filepath.Join(t.TempDir(), "sandbox")
	restore(t, s, "k", dst, session.RestoreOptions{})
	second := save(t, s, "k", dst)
	if second.Seq != 2 || second.Parent != 1 || second.NewBytes != 0 || second.Bytes != first.Bytes {
		t.Errorf("saving the restored tree: seq %d parent %d, %d new bytes, %d bytes (first had %d)", second.Seq, second.Parent, second.NewBytes, second.Bytes, first.Bytes)
	}
	list, err := s.List(context.Background(), "")
	if err != nil || len(list) != 2 || list[1].Seq != 2 || list[1].Files != first.Files {
		t.Errorf("List = %+v, %v", list, err)
	}
}
