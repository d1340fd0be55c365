package ferry_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer"

	"github.com/ferry-dev/ferry"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// newStore is a store on a fresh directory, and that directory.
func newStore(t *testing.T, wrap func(session.Backend) session.Backend) (*session.Store, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := local.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var be session.Backend = b
	if wrap != nil {
		be = wrap(be)
	}
	st, err := session.New(session.Config{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	return st, dir
}

// leftovers fails t if a restore's hidden siblings remain in dir.
func leftovers(t *testing.T, dir string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ".ferry") {
			t.Errorf("left behind in the sandbox: %s", de.Name())
		}
	}
}

// TestSessionRoundTrip saves a directory from a sandbox and restores it
// into a missing, an empty and a non-empty directory of the same sandbox
// and into another sandbox: every copy is identical to what was saved,
// modes, nanosecond mtimes, symlinks and empty directories included.
func TestSessionRoundTrip(t *testing.T) { forModes(t, testSessionRoundTrip) }

func testSessionRoundTrip(t *testing.T, mode variant) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	g.Sandbox(t, c, "other")
	sb := sandboxVia(t, c, mode)
	other := sb
	other.Name = "other"
	boxRoot, otherRoot := filepath.Join(g.Root, "box"), filepath.Join(g.Root, "other")

	src := filepath.Join(boxRoot, "sess")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	tr := transfertest.RandomTree(t, src, 5, transfertest.TreeOptions{BigFiles: 1, BigFileSize: 1 << 20})
	st, _ := newStore(t, nil)

	res, err := ferry.SaveSession(ctx(t), sb, st, session.SaveSpec{Dir: "sess", Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Snapshot != 1 || res.Files != tr.Files || res.Bytes != tr.Bytes || res.NewChunks == 0 || res.WireBytes == 0 || res.Key != "k1" || res.Mode != mode.String() {
		t.Errorf("save result %+v, tree %+v", res, tr)
	}

	rr, err := ferry.RestoreSession(ctx(t), sb, st, session.RestoreSpec{Key: "k1", Dir: "deep/restored"})
	if err != nil {
		t.Fatal(err)
	}
	if rr.Snapshot != 1 || rr.Files != tr.Files || rr.Dirs != tr.Dirs || rr.Symlinks != tr.Symlinks || rr.Bytes != tr.Bytes || rr.WireBytes == 0 {
		t.Errorf("restore result %+v, tree %+v", rr, tr)
	}
	restored := filepath.Join(boxRoot, "deep", "restored")
	transfertest.EqualTrees(t, src, restored)
	if fi, err := os.Stat(restored); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("restored directory: %v, %v; want mode 0700", fi.Mode(), err)
	}

	if err := os.Mkdir(filepath.Join(otherRoot, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ferry.RestoreSession(ctx(t), other, st, session.RestoreSpec{Key: "k1", Dir: "empty"}); err != nil {
		t.Fatal(err)
	}
	transfertest.EqualTrees(t, src, filepath.Join(otherRoot, "empty"))

	// Non-empty: refused, untouched; replaced whole with Replace.
	extra := filepath.Join(restored, "extra.txt")
	if err := os.WriteFile(extra, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ferry.RestoreSession(ctx(t), sb, st, session.RestoreSpec{Key: "k1", Dir: "deep/restored"})
	if !errors.Is(err, session.ErrNotEmpty) || !strings.Contains(err.Error(), "deep/restored") {
		t.Fatalf("restore into a non-empty dir: err = %v, want ErrNotEmpty naming it", err)
	}
	if _, err := os.Stat(extra); err != nil {
		t.Fatalf("refused restore touched the target: %v", err)
	}
	if _, err := ferry.RestoreSession(ctx(t), sb, st, session.RestoreSpec{Key: "k1", Dir: "deep/restored", Replace: true}); err != nil {
		t.Fatal(err)
	}
	transfertest.EqualTrees(t, src, restored)
	leftovers(t, filepath.Join(boxRoot, "deep"))
	leftovers(t, boxRoot)

	// A second save of the restored, unchanged tree stores nothing new.
	res2, err := ferry.SaveSession(ctx(t), sb, st, session.SaveSpec{Dir: "deep/restored", Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Snapshot != 2 || res2.NewChunks != 0 || res2.NewBytes != 0 {
		t.Errorf("second save %+v, want snapshot 2 with nothing new", res2)
	}
}

func TestSessionRestoreMissing(t *testing.T) { forModes(t, testSessionRestoreMissing) }

func testSessionRestoreMissing(t *testing.T, mode variant) {
	e := newEnvVia(t, mode)
	st, _ := newStore(t, nil)
	_, err := ferry.RestoreSession(ctx(t), e.sb, st, session.RestoreSpec{Key: "nokey", Dir: "s"})
	if !errors.Is(err, session.ErrNoSnapshot) {
		t.Fatalf("unknown key: err = %v, want ErrNoSnapshot", err)
	}
	res, err := ferry.RestoreSession(ctx(t), e.sb, st, session.RestoreSpec{Key: "nokey", Dir: "s", AllowMissing: true})
	if err != nil || !res.Missing || res.Snapshot != 0 {
		t.Fatalf("AllowMissing: %+v, %v; want a no-op saying Missing", res, err)
	}
	if _, err := os.Lstat(filepath.Join(e.root, "s")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("AllowMissing wrote the target: %v", err)
	}
}

// TestSessionRestoreCorruptChunk damages one chunk on disk: the restore
// fails naming it, before anything reaches the sandbox.
func TestSessionRestoreCorruptChunk(t *testing.T) { forModes(t, testSessionRestoreCorruptChunk) }

func testSessionRestoreCorruptChunk(t *testing.T, mode variant) {
	e := newEnvVia(t, mode)
	src := filepath.Join(e.root, "sess")
	write(t, src, map[string]string{"a.jsonl": strings.Repeat("line\n", 1000), "b/c": "C", "e/": ""})
	st, dir := newStore(t, nil)
	if _, err := ferry.SaveSession(ctx(t), e.sb, st, session.SaveSpec{Dir: "sess", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	chunks, err := filepath.Glob(filepath.Join(dir, "chunks", "*", "*"))
	if err != nil || len(chunks) == 0 {
		t.Fatalf("chunks on disk: %v, %v", chunks, err)
	}
	if err := os.WriteFile(chunks[0], []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ferry.RestoreSession(ctx(t), e.sb, st, session.RestoreSpec{Key: "k", Dir: "dst"})
	if !errors.Is(err, session.ErrChunkCorrupt) || !strings.Contains(err.Error(), filepath.Base(chunks[0])) {
		t.Fatalf("err = %v, want ErrChunkCorrupt naming %s", err, filepath.Base(chunks[0]))
	}
	if _, err := os.Lstat(filepath.Join(e.root, "dst")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed restore wrote the target: %v", err)
	}
	leftovers(t, e.root)
}

// barrier holds exclusive Puts (commits) until n of them have arrived, so
// that concurrent saves all list the key before any of them commits.
type barrier struct {
	session.Backend
	wg *sync.WaitGroup
}

func (b barrier) Put(ctx context.Context, name string, r io.Reader, exclusive bool) error {
	if exclusive {
		b.wg.Done()
		done := make(chan struct{})
		go func() { b.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
		}
	}
	return b.Backend.Put(ctx, name, r, exclusive)
}

func TestSessionConcurrentSaves(t *testing.T) { forModes(t, testSessionConcurrentSaves) }

func testSessionConcurrentSaves(t *testing.T, mode variant) {
	e := newEnvVia(t, mode)
	write(t, e.root, map[string]string{"s1/a": "A", "s2/b": "B"})
	var wg sync.WaitGroup
	wg.Add(2)
	st, _ := newStore(t, func(b session.Backend) session.Backend { return barrier{b, &wg} })
	errs := make([]error, 2)
	var run sync.WaitGroup
	for i, dir := range []string{"s1", "s2"} {
		run.Go(func() { _, errs[i] = ferry.SaveSession(ctx(t), e.sb, st, session.SaveSpec{Dir: dir, Key: "racy-key"}) })
	}
	run.Wait()
	var won, lost int
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, session.ErrConflict) && strings.Contains(err.Error(), "racy-key"):
			lost++
		default:
			t.Errorf("save: %v", err)
		}
	}
	if won != 1 || lost != 1 {
		t.Fatalf("%d saves committed and %d lost (%v), want 1 and 1", won, lost, errs)
	}
	list, err := st.List(ctx(t), "racy-key")
	if err != nil || len(list) != 1 {
		t.Fatalf("snapshots %+v, %v; want exactly one", list, err)
	}
}

// TestSessionSaveWireBytes: through the agent in a sandbox, a second save
// of a key after a small append fetches little (the parent's chunks are
// the key's own, taken on the agent's word), while a save of the same
// tree under another key fetches every chunk again, though the store
// holds them all and writes none: a chunk ID is no proof across keys.
func TestSessionSaveWireBytes(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	sb := sandboxVia(t, c, variant{Mode: transfer.ModeAgent})
	src := filepath.Join(g.Root, "box", "sess")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	tr := transfertest.RandomTree(t, src, 9, transfertest.TreeOptions{BigFiles: 2, BigFileSize: 1 << 20})
	st, _ := newStore(t, nil)

	first, err := ferry.SaveSession(ctx(t), sb, st, session.SaveSpec{Dir: "sess", Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if first.NewBytes == 0 || first.WireBytes < tr.Bytes/2 {
		t.Fatalf("first save %+v of %d bytes", first, tr.Bytes)
	}
	var grown string
	filepath.WalkDir(src, func(p string, de os.DirEntry, err error) error {
		if fi, ierr := de.Info(); err == nil && ierr == nil && fi.Mode().IsRegular() && fi.Mode()&0o200 != 0 && fi.Size() >= 1<<20 && grown == "" {
			grown = p
		}
		return err
	})
	f, err := os.OpenFile(grown, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(strings.Repeat("appended\n", 100))); err != nil {
		t.Fatal(err)
	}
	f.Close()
	second, err := ferry.SaveSession(ctx(t), sb, st, session.SaveSpec{Dir: "sess", Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if second.Snapshot != 2 || second.WireBytes > first.WireBytes/20 || second.NewChunks == 0 || second.NewChunks > 3 {
		t.Errorf("second save after a 900-byte append: %+v; first %d wire bytes", second, first.WireBytes)
	}

	other, err := ferry.SaveSession(ctx(t), sb, st, session.SaveSpec{Dir: "sess", Key: "k2"})
	if err != nil {
		t.Fatal(err)
	}
	if other.NewChunks != 0 || other.WireBytes < first.WireBytes*9/10 {
		t.Errorf("save of the same tree under another key: %+v; want every chunk fetched (%d wire bytes at first), none stored", other, first.WireBytes)
	}
	t.Logf("wire bytes: first save %d, second %d, another key's %d", first.WireBytes, second.WireBytes, other.WireBytes)
	rr, err := ferry.RestoreSession(ctx(t), sb, st, session.RestoreSpec{Key: "k2", Dir: "restored"})
	if err != nil {
		t.Fatal(err)
	}
	if rr.Files != tr.Files {
		t.Errorf("restore of k2: %+v", rr)
	}
	transfertest.EqualTrees(t, src, filepath.Join(g.Root, "box", "restored"))
}

// TestSessionSaveSource: a save of a directory that is missing or is not
// one fails with transfer.ErrNoSource or ErrNotDir, naming it, in both
// modes (the agent's save learns it from its scan, and stats only then),
// and a symlink to a directory saves the directory.
func TestSessionSaveSource(t *testing.T) { forModes(t, testSessionSaveSource) }

func testSessionSaveSource(t *testing.T, mode variant) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	sb := sandboxVia(t, c, mode)
	root := filepath.Join(g.Root, "box")
	if err := os.MkdirAll(filepath.Join(root, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "real", "a"), []byte("A"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "file"), []byte("F"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	st, _ := newStore(t, nil)
	for _, tc := range []struct {
		dir  string
		want error
	}{
		{"absent", transfer.ErrNoSource},
		{"real/absent/deeper", transfer.ErrNoSource},
		{"file", transfer.ErrNotDir},
		// As a download finds it: no such source.
		{"file/below", transfer.ErrNoSource},
		{"link", nil},
	} {
		res, err := ferry.SaveSession(ctx(t), sb, st, session.SaveSpec{Dir: tc.dir, Key: "k"})
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("save %s: %v", tc.dir, err)
		case tc.want == nil && res.Files != 1:
			t.Errorf("save %s: %d files, want 1", tc.dir, res.Files)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("save %s: %v, want %v", tc.dir, err, tc.want)
		case tc.want != nil && !strings.Contains(err.Error(), tc.dir):
			t.Errorf("save %s: %v does not name the directory", tc.dir, err)
		}
	}
}
