package session_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/afero"
	"go.uber.org/goleak"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memStore is a store in memory; fsys lets a test reach behind it.
func memStore(t *testing.T) (*session.Store, afero.Fs) {
	t.Helper()
	fsys := afero.NewMemMapFs()
	s, err := session.New(session.Config{Backend: local.New(fsys)})
	if err != nil {
		t.Fatal(err)
	}
	return s, fsys
}

// diskStore is a store in a new directory on disk, returned too.
func diskStore(t *testing.T) (*session.Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "store")
	return diskStoreAt(t, dir), dir
}

func diskStoreAt(t *testing.T, dir string) *session.Store {
	t.Helper()
	b, err := local.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := session.New(session.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// save saves dir as the next snapshot of key and returns the snapshot's
// manifest as Load reads it.
func save(t *testing.T, s *session.Store, key, dir string) *session.Manifest {
	t.Helper()
	m, err := s.Save(context.Background(), key, session.DirSource{Dir: dir, ReuseUnchanged: true})
	if err != nil {
		t.Fatalf("save %s: %v", dir, err)
	}
	return loaded(t, s, m)
}

// loaded is the committed snapshot m as Load reads it, entries and all
// (Save's manifest has none); its totals must be m's.
func loaded(t *testing.T, s *session.Store, m *session.Manifest) *session.Manifest {
	t.Helper()
	if m.Entries != nil {
		t.Fatalf("Save returned %d entries, want none", len(m.Entries))
	}
	got, err := s.Load(context.Background(), m.Key, m.Seq)
	if err != nil {
		t.Fatalf("load snapshot %d of %s: %v", m.Seq, m.Key, err)
	}
	got.Entries, m.Entries = nil, got.Entries
	if got.Info() != m.Info() || got.Dirs != m.Dirs || got.Symlinks != m.Symlinks || got.Parent != m.Parent {
		t.Fatalf("snapshot %d of %s: saved %+v, loaded %+v", m.Seq, m.Key, m.Info(), got.Info())
	}
	return m
}

func restore(t *testing.T, s *session.Store, key, dir string, opts session.RestoreOptions) *session.Manifest {
	t.Helper()
	m, err := s.Restore(context.Background(), key, dir, opts)
	if err != nil {
		t.Fatalf("restore %s: %v", key, err)
	}
	return m
}

// transcripts writes n JSONL files of about size bytes each into dir, as
// an agent's session directory holds them.
func transcripts(t *testing.T, dir string, seed uint64, n, size int) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 1))
	if err := os.MkdirAll(filepath.Join(dir, "sessions", "2026"), 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := filepath.Join(dir, "sessions", "2026", fmt.Sprintf("rollout-%02d.jsonl", i))
		if err := os.WriteFile(p, jsonl(rnd, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// appendTo appends about n bytes of JSONL to the file p and returns how
// many it appended.
func appendTo(t *testing.T, p string, seed uint64, n int) int {
	t.Helper()
	data := jsonl(rand.New(rand.NewPCG(seed, 2)), n)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	return len(data)
}

var words = strings.Fields("the a to of and in is file error func return value test build run agent tool call result session chunk store")

func jsonl(rnd *rand.Rand, n int) []byte {
	var b bytes.Buffer
	for b.Len() < n {
		var text strings.Builder
		for range 5 + rnd.IntN(80) {
			text.WriteString(words[rnd.IntN(len(words))] + " ")
		}
		fmt.Fprintf(&b, `{"id":"%016x","role":"assistant","content":%q}`+"\n", rnd.Uint64(), text.String())
	}
	return b.Bytes()
}

// age sets the mtime of every object in a memory store back by d, as if
// it had been written d ago.
func age(t *testing.T, fsys afero.Fs, d time.Duration) {
	t.Helper()
	err := afero.Walk(fsys, ".", func(p string, fi fs.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		return fsys.Chtimes(p, time.Time{}, fi.ModTime().Add(-d))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// dirNames lists dir (nothing for a missing dir).
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
