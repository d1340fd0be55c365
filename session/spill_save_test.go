package session_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/agent/server"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// TestSaveSpilled: a save whose entries overflow the in-memory budget many
// times over commits the manifest a save in memory commits, which
// restores the tree, and leaves nothing in the temp dir.
func TestSaveSpilled(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	src := t.TempDir()
	transfertest.RandomTree(t, src, 21, transfertest.TreeOptions{Entries: 600, MaxFileSize: 2 << 10})
	inMemory, _ := memStore(t)
	want := save(t, inMemory, "k", src)

	session.SetSpillBudget(t, 1<<10)
	spilled, _ := memStore(t)
	got := save(t, spilled, "k", src)
	if !reflect.DeepEqual(got.Entries, want.Entries) || got.Info().Files != want.Files || got.Dirs != want.Dirs {
		t.Fatalf("spilled save: %+v, in memory: %+v", got.Info(), want.Info())
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the save left %v in its temp dir", left)
	}
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, spilled, "k", dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, src, dst)
	// Unchanged, from the spilled snapshot: nothing new.
	if again := save(t, spilled, "k", src); again.NewBytes != 0 || !reflect.DeepEqual(again.Entries, want.Entries) {
		t.Errorf("unchanged save: %d new bytes, entries equal %v", again.NewBytes, reflect.DeepEqual(again.Entries, want.Entries))
	}
}

// twice is a Source that adds one path twice.
type twice struct{ kinds [2]session.Kind }

func (tw twice) Scan(_ context.Context, _ *session.Parent, sink session.Sink) error {
	for _, k := range tw.kinds {
		e := session.Entry{Path: "x", Kind: k, Mode: 0o700}
		if k == session.KindSymlink {
			e.Target = "y"
		}
		if err := sink.Add(e); err != nil {
			return err
		}
	}
	return nil
}

// TestSaveRefusesDuplicates: a path added twice fails the save naming it,
// also when the two lie in different spilled runs, and commits nothing.
func TestSaveRefusesDuplicates(t *testing.T) {
	for _, budget := range []int{1 << 20, 1} {
		session.SetSpillBudget(t, budget)
		s, _ := memStore(t)
		_, err := s.Save(context.Background(), "k", twice{[2]session.Kind{session.KindDir, session.KindSymlink}})
		if !errors.Is(err, session.ErrManifest) || !strings.Contains(err.Error(), `"x": out of order or duplicate`) || strings.Count(err.Error(), "invalid manifest") != 1 {
			t.Fatalf("budget %d: %v, want ErrManifest naming the duplicate", budget, err)
		}
		if _, err := s.Load(context.Background(), "k", 0); !errors.Is(err, session.ErrNoSnapshot) {
			t.Fatalf("a snapshot was committed: %v", err)
		}
	}
}

// TestAgentSourceSpilled: with the parent's files spilled over many runs,
// a save through the agent of the tree unchanged finds every file in the
// parent as it walks: all are reported unchanged and none is read.
func TestAgentSourceSpilled(t *testing.T) {
	session.SetSpillBudget(t, 1<<10)
	ws := t.TempDir()
	src := filepath.Join(ws, "s")
	if err := os.Mkdir(src, 0o700); err != nil {
		t.Fatal(err)
	}
	tree := transfertest.RandomTree(t, src, 22, transfertest.TreeOptions{Entries: 600, MaxFileSize: 2 << 10})
	rec := &recorder{up: agenttest.RawInProcess(t, server.Config{Workspace: ws}), unchanged: map[string]bool{}}
	c := fakeAgent(t, rec)
	s, _ := memStore(t)
	m1 := agentSave(t, s, "k", &session.AgentSource{Client: c, Dir: "s", ReuseUnchanged: true})
	rec.reads, rec.known = nil, 0
	m2 := agentSave(t, s, "k", &session.AgentSource{Client: c, Dir: "s", ReuseUnchanged: true})
	if int64(len(rec.unchanged)) != tree.Files || int64(rec.known) != tree.Files || len(rec.reads) != 0 || m2.NewBytes != 0 {
		t.Fatalf("unchanged save: %d known, %d of %d files reported unchanged, %d chunks read, %d new bytes",
			rec.known, len(rec.unchanged), tree.Files, len(rec.reads), m2.NewBytes)
	}
	if !reflect.DeepEqual(m1.Entries, m2.Entries) {
		t.Fatal("the unchanged save's entries differ from the first's")
	}
}
