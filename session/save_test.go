package session_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/afero"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// TestAppendDedup is issue 5's workload scaled down: 40 transcripts, then
// about 1% appended to a tenth of them. The second save stores only the
// tail chunk of each grown file and the appended bytes.
func TestAppendDedup(t *testing.T) {
	const files, size = 40, 128 << 10
	for _, reuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("reuse=%v", reuse), func(t *testing.T) {
			s, _ := memStore(t)
			src := t.TempDir()
			transcripts(t, src, 3, files, size)
			ctx := context.Background()
			first, err := s.Save(ctx, "k", session.DirSource{Dir: src, ReuseUnchanged: reuse})
			if err != nil {
				t.Fatal(err)
			}
			appended := 0
			for i := 0; i < files; i += 10 {
				appended += appendTo(t, filepath.Join(src, "sessions", "2026", fmt.Sprintf("rollout-%02d.jsonl", i)), uint64(i), size/100)
			}
			second, err := s.Save(ctx, "k", session.DirSource{Dir: src, ReuseUnchanged: reuse})
			if err != nil {
				t.Fatal(err)
			}
			// Each grown file's last chunk is rewritten: at most MaxChunkSize
			// each, about 32 KiB on average.
			limit := int64(appended + files/10*session.MaxChunkSize)
			t.Logf("%d bytes, %d appended, second save stored %d new bytes in %d chunks", first.Bytes, appended, second.NewBytes, second.NewChunks)
			if second.NewBytes < int64(appended) || second.NewBytes > limit {
				t.Errorf("second save stored %d new bytes; %d were appended, want at most %d", second.NewBytes, appended, limit)
			}
			if second.Bytes != first.Bytes+int64(appended) {
				t.Errorf("second snapshot holds %d bytes, want %d", second.Bytes, first.Bytes+int64(appended))
			}
			third, err := s.Save(ctx, "k", session.DirSource{Dir: src, ReuseUnchanged: reuse})
			if err != nil || third.NewBytes != 0 {
				t.Errorf("unchanged save: %v, %d new bytes", err, third.NewBytes)
			}
		})
	}
}

// barrier is a Source that scans Dir, then waits until n scans are done,
// so that concurrent saves all start from the same snapshot.
type barrier struct {
	session.DirSource
	wg *sync.WaitGroup
}

func (b barrier) Scan(ctx context.Context, prev *session.Parent, sink session.Sink) error {
	err := b.DirSource.Scan(ctx, prev, sink)
	b.wg.Done()
	b.wg.Wait()
	return err
}

// TestConcurrentSaves: two saves to one key, from two Stores on one
// directory as two processes would be: exactly one commits, the other
// gets a conflict naming the key and commits nothing.
func TestConcurrentSaves(t *testing.T) {
	s1, dir := diskStore(t)
	s2 := diskStoreAt(t, dir)
	mem, _ := memStore(t)
	p1, err := session.New(session.Config{Backend: local.New(afero.NewMemMapFs()), Pack: true, PackSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for name, stores := range map[string][2]*session.Store{"disk": {s1, s2}, "memory": {mem, mem}, "packs": {p1, p1}} {
		t.Run(name, func(t *testing.T) {
			key := session.TaskKey("rtzll/rascal", "42")
			base := t.TempDir()
			transfertest.RandomTree(t, base, 1, transfertest.TreeOptions{Entries: 20})
			save(t, stores[0], key, base)
			srcs := [2]string{t.TempDir(), t.TempDir()}
			for i, src := range srcs {
				transfertest.RandomTree(t, src, int64(10+i), transfertest.TreeOptions{Entries: 30})
			}
			var wg, done sync.WaitGroup
			wg.Add(2)
			var ms [2]*session.Manifest
			var errs [2]error
			for i := range 2 {
				done.Go(func() {
					ms[i], errs[i] = stores[i].Save(context.Background(), key, barrier{session.DirSource{Dir: srcs[i]}, &wg})
				})
			}
			done.Wait()
			winner := 0
			if errs[0] != nil {
				winner = 1
			}
			loser := 1 - winner
			if errs[winner] != nil || ms[winner].Seq != 2 {
				t.Fatalf("saves returned %v and %v; want one to commit snapshot 2", errs[0], errs[1])
			}
			var ce *session.ConflictError
			if !errors.Is(errs[loser], session.ErrConflict) || !errors.As(errs[loser], &ce) || ce.Key != key || ce.Seq != 2 {
				t.Fatalf("losing save: %v, want a ConflictError for %s/2", errs[loser], key)
			}
			if !strings.Contains(errs[loser].Error(), key) {
				t.Errorf("conflict error %q does not name the key", errs[loser])
			}
			list, err := stores[0].List(context.Background(), key)
			if err != nil || len(list) != 2 {
				t.Fatalf("List = %+v, %v; want 2 snapshots", list, err)
			}
			dst := filepath.Join(t.TempDir(), "r")
			restore(t, stores[0], key, dst, session.RestoreOptions{})
			transfertest.EqualTrees(t, srcs[winner], dst)
		})
	}
}

// failingBackend fails every Put of a name with the given prefix: a save
// that dies after its chunks, before its manifest.
type failingBackend struct {
	session.Backend
	prefix string
}

func (f failingBackend) Put(ctx context.Context, name string, r io.Reader, excl bool) error {
	if strings.HasPrefix(name, f.prefix) {
		return errors.New("killed")
	}
	return f.Backend.Put(ctx, name, r, excl)
}

func TestCrashBeforeManifest(t *testing.T) {
	_, dir := diskStore(t)
	b, err := local.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := session.New(session.Config{Backend: b})
	crashing, _ := session.New(session.Config{Backend: failingBackend{b, "snapshots/"}})
	ctx := context.Background()
	v1 := t.TempDir()
	transcripts(t, v1, 1, 8, 200<<10)
	save(t, good, "k", v1)
	v2 := t.TempDir()
	transcripts(t, v2, 2, 8, 200<<10)
	if _, err := crashing.Save(ctx, "k", session.DirSource{Dir: v2}); err == nil {
		t.Fatal("save with a failing commit succeeded")
	}
	if list, err := good.List(ctx, "k"); err != nil || len(list) != 1 {
		t.Fatalf("after the crash: %+v, %v; want snapshot 1 only", list, err)
	}
	rep, err := good.Verify(ctx, "")
	if err != nil || !rep.OK() {
		t.Fatalf("verify after the crash: %+v, %v", rep, err)
	}
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, good, "k", dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, v1, dst)
	retry := save(t, good, "k", v2)
	if retry.Seq != 2 || retry.NewBytes != 0 {
		t.Errorf("retry: snapshot %d with %d new bytes; want 2, reusing the crashed save's chunks", retry.Seq, retry.NewBytes)
	}
}

// liar is a Source that references a chunk it never sent.
type liar struct{}

func (liar) Scan(ctx context.Context, _ *session.Parent, sink session.Sink) error {
	id := session.Hash([]byte("never sent"))
	return sink.Add(session.Entry{Path: "f", Kind: session.KindFile, Mode: 0o600, Size: 10, Chunks: []session.ChunkRef{{ID: id, Size: 10}}})
}

func TestSaveRefusesUnsentChunks(t *testing.T) {
	s, _ := memStore(t)
	if _, err := s.Save(context.Background(), "k", liar{}); err == nil || !strings.Contains(err.Error(), "neither stored nor confirmed") {
		t.Fatalf("save referencing an unsent chunk: %v", err)
	}
	if _, err := s.Load(context.Background(), "k", 0); !errors.Is(err, session.ErrNoSnapshot) {
		t.Fatalf("a snapshot was committed: %v", err)
	}
}
