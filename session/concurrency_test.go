package session_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/session/local"
	"github.com/spf13/afero"
)

var errInjected = errors.New("injected backend failure")

// slowBackend makes every chunk Stat and Put take a while, as a request to
// S3 does, so that concurrent ones overlap; it records how many were in
// flight at once, and fails the chunk Put number failPut (from 1) and
// every Stat of failStat.
type slowBackend struct {
	session.Backend
	delay    time.Duration
	failPut  int64
	failStat string

	puts           atomic.Int64
	now, maxAtOnce atomic.Int64
}

func (b *slowBackend) enter() func() {
	n := b.now.Add(1)
	for m := b.maxAtOnce.Load(); n > m && !b.maxAtOnce.CompareAndSwap(m, n); m = b.maxAtOnce.Load() {
	}
	time.Sleep(b.delay)
	return func() { b.now.Add(-1) }
}

func (b *slowBackend) Put(ctx context.Context, name string, r io.Reader, exclusive bool) error {
	if strings.HasPrefix(name, "chunks/") {
		defer b.enter()()
		if b.puts.Add(1) == b.failPut {
			return errInjected
		}
	}
	return b.Backend.Put(ctx, name, r, exclusive)
}

func (b *slowBackend) Stat(ctx context.Context, name string) (session.ObjectInfo, error) {
	if strings.HasPrefix(name, "chunks/") {
		defer b.enter()()
		if b.failStat != "" && name == b.failStat {
			return session.ObjectInfo{}, errInjected
		}
	}
	return b.Backend.Stat(ctx, name)
}

// slowStore is a memory store behind a slowBackend.
func slowStore(t *testing.T, sb *slowBackend) (*session.Store, afero.Fs) {
	t.Helper()
	fsys := afero.NewMemMapFs()
	sb.Backend = local.New(fsys)
	s, err := session.New(session.Config{Backend: sb})
	if err != nil {
		t.Fatal(err)
	}
	return s, fsys
}

// TestSaveUploadsInParallel: a save's look-ups and uploads overlap, within
// their bounds, and the snapshot restores.
func TestSaveUploadsInParallel(t *testing.T) {
	sb := &slowBackend{delay: 5 * time.Millisecond}
	s, _ := slowStore(t, sb)
	src := t.TempDir()
	transcripts(t, src, 7, 8, 200<<10)
	m := save(t, s, "k", src)
	if m.NewChunks < 20 {
		t.Fatalf("%d new chunks; the test needs more", m.NewChunks)
	}
	if n := sb.maxAtOnce.Load(); n < 2 || n > session.LookupParallel+session.UploadParallel {
		t.Errorf("%d chunk requests at once; want 2 to %d", n, session.LookupParallel+session.UploadParallel)
	}
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, s, "k", dst, session.RestoreOptions{})
}

// TestSaveUploadFailureCommitsNothing: one failed upload among many in
// flight fails the save, with that error, and commits nothing; through
// DirSource and through the agent alike.
func TestSaveUploadFailureCommitsNothing(t *testing.T) {
	ws := t.TempDir()
	src := filepath.Join(ws, "session")
	transcripts(t, src, 8, 8, 200<<10)
	sources := map[string]func(t *testing.T) session.Source{
		"dir": func(*testing.T) session.Source { return session.DirSource{Dir: src} },
		"agent": func(t *testing.T) session.Source {
			return &session.AgentSource{Client: agentIn(t, ws), Dir: "session"}
		},
	}
	for name, source := range sources {
		t.Run(name, func(t *testing.T) {
			for _, failPut := range []int64{1, 5, 20} {
				sb := &slowBackend{delay: time.Millisecond, failPut: failPut}
				s, _ := slowStore(t, sb)
				_, err := s.Save(context.Background(), "k", source(t))
				if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "write chunk") {
					t.Fatalf("upload %d failing: save returned %v, want the injected error naming the chunk", failPut, err)
				}
				if _, err := s.Load(context.Background(), "k", 0); !errors.Is(err, session.ErrNoSnapshot) {
					t.Fatalf("upload %d failing: a snapshot was committed (%v)", failPut, err)
				}
			}
		})
	}
}

// TestCheckPresentParallel: CheckPresent lists exactly the missing chunks,
// sorted, with its look-ups in flight within their bound; a failed look-up
// is the error, not an IntegrityError.
func TestCheckPresentParallel(t *testing.T) {
	sb := &slowBackend{}
	s, fsys := slowStore(t, sb)
	src := t.TempDir()
	transcripts(t, src, 9, 8, 200<<10)
	m := save(t, s, "k", src)
	var ids []session.ID
	for _, e := range m.Entries {
		for _, c := range e.Chunks {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) < 20 {
		t.Fatalf("%d chunks; the test needs more", len(ids))
	}
	// Removed in reverse order: the result must not depend on it.
	gone := []session.ID{ids[len(ids)-1], ids[len(ids)/2], ids[3]}
	for _, id := range gone {
		if err := fsys.Remove(chunkPath(id)); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortFunc(gone, func(a, b session.ID) int { return strings.Compare(a.String(), b.String()) })
	sb.delay = 2 * time.Millisecond
	sb.maxAtOnce.Store(0)
	err := s.CheckPresent(context.Background(), m)
	var ie *session.IntegrityError
	if !errors.As(err, &ie) || !slices.Equal(ie.Missing, gone) || len(ie.Corrupt) != 0 {
		t.Fatalf("CheckPresent = %v; want exactly %v missing", err, gone)
	}
	if n := sb.maxAtOnce.Load(); n < 2 || n > session.LookupParallel {
		t.Errorf("%d look-ups at once; want 2 to %d", n, session.LookupParallel)
	}

	sb.failStat = chunkPath(ids[len(ids)/3])
	err = s.CheckPresent(context.Background(), m)
	if !errors.Is(err, errInjected) || errors.As(err, &ie) || !strings.Contains(err.Error(), ids[len(ids)/3].String()) {
		t.Fatalf("CheckPresent with a failing look-up = %v; want the injected error naming the chunk", err)
	}
	if n := sb.now.Load(); n != 0 {
		t.Errorf("%d look-ups still running after CheckPresent returned", n)
	}
}

// TestSaveAsksOncePerChunk: through the agent, a chunk the store lacks
// costs one look-up and one upload, not a second look-up before the
// upload.
func TestSaveAsksOncePerChunk(t *testing.T) {
	ws := t.TempDir()
	src := filepath.Join(ws, "session")
	if err := os.MkdirAll(src, 0o700); err != nil {
		t.Fatal(err)
	}
	transcripts(t, src, 10, 4, 200<<10)
	sb := &statCounter{}
	fsys := afero.NewMemMapFs()
	sb.Backend = local.New(fsys)
	s, err := session.New(session.Config{Backend: sb})
	if err != nil {
		t.Fatal(err)
	}
	m := agentSave(t, s, "k", &session.AgentSource{Client: agentIn(t, ws), Dir: "session"})
	if got := sb.stats.Load(); got != m.NewChunks {
		t.Errorf("%d chunk look-ups for %d new chunks; want one each", got, m.NewChunks)
	}
}

// statCounter counts the chunk Stats.
type statCounter struct {
	session.Backend
	stats atomic.Int64
}

func (b *statCounter) Stat(ctx context.Context, name string) (session.ObjectInfo, error) {
	if strings.HasPrefix(name, "chunks/") {
		b.stats.Add(1)
	}
	return b.Backend.Stat(ctx, name)
}
