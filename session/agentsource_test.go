package session_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
	"github.com/ferry-dev/ferry/transfer/agent/server"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// agentIn is an agent serving workspace ws in this process.
func agentIn(t *testing.T, ws string) *agent.Client {
	t.Helper()
	c := agenttest.InProcess(t, server.Config{Workspace: ws})
	// A client that never made a call cannot be closed.
	if _, err := c.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

func agentSave(t *testing.T, s *session.Store, key string, src *session.AgentSource) *session.Manifest {
	t.Helper()
	m, err := s.Save(context.Background(), key, src)
	if err != nil {
		t.Fatalf("save %s through the agent: %v", src.Dir, err)
	}
	return loaded(t, s, m)
}

// sameManifest fails t unless a and b describe the same tree with the
// same chunks and the same new bytes.
func sameManifest(t *testing.T, a, b *session.Manifest) {
	t.Helper()
	if a.Files != b.Files || a.Dirs != b.Dirs || a.Symlinks != b.Symlinks || a.Bytes != b.Bytes || a.NewBytes != b.NewBytes || a.NewChunks != b.NewChunks {
		t.Errorf("totals differ: %+v and %+v", a.Info(), b.Info())
	}
	if len(a.Entries) != len(b.Entries) {
		t.Fatalf("%d entries and %d", len(a.Entries), len(b.Entries))
	}
	for i := range a.Entries {
		if !reflect.DeepEqual(a.Entries[i], b.Entries[i]) {
			t.Fatalf("entry %d differs:\n%+v\n%+v", i, a.Entries[i], b.Entries[i])
		}
	}
}

// TestAgentSourceRoundTrip: a save through the agent restores
// byte-identical, and its manifest is the one DirSource makes of the same
// tree, first save and incremental one alike.
func TestAgentSourceRoundTrip(t *testing.T) {
	ws := t.TempDir()
	src := filepath.Join(ws, "session")
	if err := os.Mkdir(src, 0o700); err != nil {
		t.Fatal(err)
	}
	transfertest.RandomTree(t, src, 11, transfertest.TreeOptions{Entries: 120, BigFiles: 2, BigFileSize: 1 << 20})
	if err := os.WriteFile(filepath.Join(src, "setuid"), []byte("x"), 0o4755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(src, "setuid"), 0o4755)
	c := agentIn(t, ws)
	viaAgent, _ := memStore(t)
	viaDir, _ := memStore(t)
	const key = "agent-roundtrip"
	as := &session.AgentSource{Client: c, Dir: "session", ReuseUnchanged: true}
	m := agentSave(t, viaAgent, key, as)
	sameManifest(t, m, save(t, viaDir, key, src))
	if as.FetchedBytes != m.NewBytes || as.FetchedChunks != m.NewChunks || as.WireBytes == 0 {
		t.Errorf("fetched %d bytes in %d chunks (%d on the wire), stored %d in %d", as.FetchedBytes, as.FetchedChunks, as.WireBytes, m.NewBytes, m.NewChunks)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	restore(t, viaAgent, key, dst, session.RestoreOptions{})
	os.Remove(filepath.Join(src, "setuid")) // saved without setuid, as DirSource saves it
	os.Remove(filepath.Join(dst, "setuid"))
	transfertest.EqualTrees(t, src, dst)

	// Change the tree; both sources agree again.
	var big session.Entry
	for _, e := range m.Entries {
		if e.Size > big.Size {
			big = e
		}
	}
	appendTo(t, filepath.Join(src, filepath.FromSlash(big.Path)), 1, 1000)
	if err := os.WriteFile(filepath.Join(src, "new.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m2 := agentSave(t, viaAgent, key, &session.AgentSource{Client: c, Dir: src, ReuseUnchanged: true})
	sameManifest(t, m2, save(t, viaDir, key, src))
}

// recorder stands between the host and a real agent and records what the
// scan reported unchanged and which chunks the host asked for.
type recorder struct {
	agentv1.UnimplementedAgentServer
	up        agentv1.AgentClient
	mu        sync.Mutex
	unchanged map[string]bool
	known     int // files the host told the agent it knows
	reads     []*agentv1.ChunkRead
}

// ScanStream passes the host's requests on as they come (in a test, the
// known files fit the stream's window: the agent need not read them for
// the host to send them all), then the agent's answers.
func (r *recorder) ScanStream(s agentv1.Agent_ScanStreamServer) error {
	up, err := r.up.ScanStream(s.Context())
	if err != nil {
		return err
	}
	for {
		req, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.known += len(req.GetKnown())
		r.mu.Unlock()
		if err := up.Send(req); err != nil {
			return err
		}
	}
	if err := up.CloseSend(); err != nil {
		return err
	}
	for {
		m, err := up.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		for _, e := range m.GetEntries() {
			if e.GetUnchanged() {
				r.unchanged[e.GetPath()] = true
			}
		}
		r.mu.Unlock()
		if err := s.Send(m); err != nil {
			return err
		}
	}
}

func (r *recorder) ReadChunks(req *agentv1.ReadChunksRequest, s agentv1.Agent_ReadChunksServer) error {
	r.mu.Lock()
	r.reads = append(r.reads, req.GetReads()...)
	r.mu.Unlock()
	up, err := r.up.ReadChunks(s.Context(), req)
	if err != nil {
		return err
	}
	for {
		m, err := up.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(m); err != nil {
			return err
		}
	}
}

// TestAgentSourceIncremental: after appending to a few files, the second
// save fetches only new chunks, of those files only, and the untouched
// files are reported unchanged and never read. The new chunks come with
// the scan's entries: no chunk is read apart.
func TestAgentSourceIncremental(t *testing.T) {
	ws := t.TempDir()
	src := filepath.Join(ws, "sessions-root")
	transcripts(t, src, 3, 12, 256<<10)
	rec := &recorder{up: agenttest.RawInProcess(t, server.Config{Workspace: ws}), unchanged: map[string]bool{}}
	c := fakeAgent(t, rec)
	s, _ := memStore(t)
	const key = "incremental"
	m1 := agentSave(t, s, key, &session.AgentSource{Client: c, Dir: "sessions-root", ReuseUnchanged: true})
	if len(rec.unchanged) != 0 || m1.NewBytes != m1.Bytes {
		t.Fatalf("first save: %d unchanged, %d new bytes of %d", len(rec.unchanged), m1.NewBytes, m1.Bytes)
	}

	var files []string
	for _, e := range m1.Entries {
		if e.Kind == session.KindFile {
			files = append(files, e.Path)
		}
	}
	grown := map[string]bool{}
	appended := 0
	for i, p := range files[:3] {
		grown[p] = true
		appended += appendTo(t, filepath.Join(src, filepath.FromSlash(p)), uint64(i), 2000)
	}
	rec.reads, rec.unchanged = nil, map[string]bool{}
	as := &session.AgentSource{Client: c, Dir: "sessions-root", ReuseUnchanged: true}
	m2 := agentSave(t, s, key, as)
	var asked int64
	for _, r := range rec.reads {
		if !grown[r.GetPath()] {
			t.Errorf("asked for a chunk of untouched %s", r.GetPath())
		}
		asked += r.GetSize()
	}
	for _, p := range files {
		if rec.unchanged[p] == grown[p] {
			t.Errorf("%s: reported unchanged %v, grown %v", p, rec.unchanged[p], grown[p])
		}
	}
	if asked != 0 || as.FetchedBytes != m2.NewBytes {
		t.Errorf("asked for %d bytes apart, fetched %d, stored %d; want it all inline", asked, as.FetchedBytes, m2.NewBytes)
	}
	// Each grown file stores its old tail chunk again, with what was
	// appended.
	if limit := int64(appended) + 3*session.MaxChunkSize; m2.NewBytes > limit || m2.NewBytes < int64(appended) {
		t.Errorf("second save stored %d new bytes for %d appended", m2.NewBytes, appended)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	restore(t, s, key, dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, src, dst)

	// A restored, untouched tree saves with nothing read.
	rec.reads = nil
	m3 := agentSave(t, s, key, &session.AgentSource{Client: c, Dir: src, ReuseUnchanged: true})
	if m3.NewBytes != 0 || len(rec.reads) != 0 {
		t.Errorf("unchanged save: %d new bytes, %d reads", m3.NewBytes, len(rec.reads))
	}
}

// fakeAgent serves impl as the agent; see agenttest.Fake.
func fakeAgent(t *testing.T, impl agentv1.AgentServer) *agent.Client {
	return agenttest.Fake(t, impl)
}

// liarAgent answers Scan with entries and ReadChunks with data[path],
// sliced as asked.
type liarAgent struct {
	agentv1.UnimplementedAgentServer
	entries []*agentv1.ScanEntry
	data    map[string][]byte
}

func (l *liarAgent) ScanStream(s agentv1.Agent_ScanStreamServer) error {
	return s.Send(&agentv1.ScanResponse{Entries: l.entries})
}

func (l *liarAgent) ReadChunks(req *agentv1.ReadChunksRequest, s agentv1.Agent_ReadChunksServer) error {
	for i, r := range req.GetReads() {
		d := l.data[r.GetPath()]
		end := min(int64(len(d)), r.GetOffset()+r.GetSize())
		if err := s.Send(&agentv1.ReadChunksResponse{Index: uint32(i), Data: d[min(r.GetOffset(), end):end]}); err != nil {
			return err
		}
	}
	return nil
}

// file is an honest entry for a one-chunk file holding data.
func file(path string, data []byte) *agentv1.ScanEntry {
	sum := sha256.Sum256(data)
	return &agentv1.ScanEntry{Path: path, Kind: agentv1.Kind_KIND_FILE, Mode: 0o644, Size: int64(len(data)),
		Chunks: []*agentv1.ChunkInfo{{Id: sum[:], Size: int64(len(data))}}}
}

// inlined is e with b sent inline as its first chunk (a zstd frame when z).
func inlined(e *agentv1.ScanEntry, b []byte, z bool) *agentv1.ScanEntry {
	e.Chunks[0].Data, e.Chunks[0].Zstd = b, z
	return e
}

func zstdOf(b []byte) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		panic(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

func dirEntry(path string) *agentv1.ScanEntry {
	return &agentv1.ScanEntry{Path: path, Kind: agentv1.Kind_KIND_DIR, Mode: 0o755}
}

// TestAgentSourceHostile: whatever a hostile agent answers fails the save
// with an error naming the entry, and commits nothing.
func TestAgentSourceHostile(t *testing.T) {
	data := []byte("file content")
	honest := map[string][]byte{"a": data, "d/b": data}
	two := func(e *agentv1.ScanEntry) *agentv1.ScanEntry {
		e.Chunks = []*agentv1.ChunkInfo{
			{Id: e.Chunks[0].Id, Size: 4},
			{Id: e.Chunks[0].Id, Offset: 4, Size: e.Size - 4},
		}
		return e
	}
	cases := []struct {
		name    string
		entries []*agentv1.ScanEntry
		data    map[string][]byte
		want    error // also matched: the entry's name in the message
		entry   string
	}{
		{"dot dot", []*agentv1.ScanEntry{file("../x", data)}, honest, session.ErrAgent, "../x"},
		{"dot dot inside", []*agentv1.ScanEntry{dirEntry("d"), file("d/../../x", data)}, honest, session.ErrAgent, "d/../../x"},
		{"absolute", []*agentv1.ScanEntry{file("/etc/passwd", data)}, honest, session.ErrAgent, "/etc/passwd"},
		{"unclean", []*agentv1.ScanEntry{dirEntry("d"), file("d//b", data)}, honest, session.ErrAgent, "d//b"},
		{"dot", []*agentv1.ScanEntry{dirEntry(".")}, honest, session.ErrAgent, `"."`},
		{"duplicate", []*agentv1.ScanEntry{file("a", data), file("a", data)}, honest, session.ErrAgent, `"a"`},
		{"duplicate kinds", []*agentv1.ScanEntry{dirEntry("a"), file("a", data)}, honest, session.ErrAgent, `"a"`},
		{"out of order", []*agentv1.ScanEntry{file("b", data), file("a", data)}, honest, session.ErrAgent, `"a": out of walk order`},
		// Byte order, not walk order: "a-b" sorts before "a/x" by bytes.
		{"byte order", []*agentv1.ScanEntry{dirEntry("a"), file("a-b", data), file("a/x", data)}, honest, session.ErrAgent, `"a/x": out of walk order`},
		{"sizes do not sum", []*agentv1.ScanEntry{func() *agentv1.ScanEntry { e := file("a", data); e.Size++; return e }()}, honest, session.ErrAgent, `"a"`},
		{"gap", []*agentv1.ScanEntry{func() *agentv1.ScanEntry { e := two(file("a", data)); e.Chunks[1].Offset++; return e }()}, honest, session.ErrAgent, `"a"`},
		{"chunk too big", []*agentv1.ScanEntry{func() *agentv1.ScanEntry {
			e := file("a", data)
			e.Size, e.Chunks[0].Size = session.MaxChunkSize+1, session.MaxChunkSize+1
			return e
		}()}, honest, session.ErrAgent, `"a"`},
		{"empty chunk", []*agentv1.ScanEntry{func() *agentv1.ScanEntry {
			e := file("a", data)
			e.Chunks = append(e.Chunks, &agentv1.ChunkInfo{Id: e.Chunks[0].Id, Offset: e.Size})
			return e
		}()}, honest, session.ErrAgent, `"a"`},
		{"short id", []*agentv1.ScanEntry{func() *agentv1.ScanEntry { e := file("a", data); e.Chunks[0].Id = e.Chunks[0].Id[:8]; return e }()}, honest, session.ErrAgent, `"a"`},
		{"unknown kind", []*agentv1.ScanEntry{{Path: "a", Kind: 99}}, honest, session.ErrAgent, `"a"`},
		{"missing kind", []*agentv1.ScanEntry{{Path: "a", Kind: agentv1.Kind_KIND_MISSING}}, honest, session.ErrAgent, `"a"`},
		{"other kind", []*agentv1.ScanEntry{{Path: "a", Kind: agentv1.Kind_KIND_OTHER}}, honest, session.ErrAgent, `"a"`},
		{"dir with chunks", []*agentv1.ScanEntry{func() *agentv1.ScanEntry { e := file("a", data); e.Kind = agentv1.Kind_KIND_DIR; return e }()}, honest, session.ErrAgent, `"a"`},
		{"symlink without target", []*agentv1.ScanEntry{{Path: "a", Kind: agentv1.Kind_KIND_SYMLINK}}, honest, session.ErrAgent, `"a"`},
		{"file with target", []*agentv1.ScanEntry{func() *agentv1.ScanEntry { e := file("a", data); e.Target = "/etc"; return e }()}, honest, session.ErrAgent, `"a"`},
		{"mode bits", []*agentv1.ScanEntry{func() *agentv1.ScanEntry { e := file("a", data); e.Mode = 1 << 20; return e }()}, honest, session.ErrAgent, `"a"`},
		{"unknown unchanged", []*agentv1.ScanEntry{{Path: "a", Kind: agentv1.Kind_KIND_FILE, Size: 3, Unchanged: true}}, honest, session.ErrAgent, `"a"`},
		{"wrong chunk bytes", []*agentv1.ScanEntry{file("a", data)}, map[string][]byte{"a": []byte("file CONTENT")}, archive.ErrDigest, "a at 0"},
		{"wrong second chunk", []*agentv1.ScanEntry{file("a", data), dirEntry("d"), file("d/b", []byte("other"))}, map[string][]byte{"a": data, "d/b": []byte("OTHER")}, archive.ErrDigest, "d/b at 0"},
		{"parent not a dir", []*agentv1.ScanEntry{file("d/b", data)}, honest, session.ErrManifest, `"d/b"`},
		// Chunks sent inline with their entries are checked as fetched ones.
		{"wrong inline bytes", []*agentv1.ScanEntry{inlined(file("a", data), []byte("file CONTENT"), false)}, honest, archive.ErrDigest, "a at 0"},
		{"inline longer than the chunk", []*agentv1.ScanEntry{inlined(file("a", data), bytes.Repeat(data, 100), false)}, honest, archive.ErrDigest, "a at 0"},
		{"inline not zstd", []*agentv1.ScanEntry{inlined(file("a", data), []byte("not a zstd frame"), true)}, honest, archive.ErrDigest, "a at 0"},
		{"inline zstd bomb", []*agentv1.ScanEntry{inlined(file("a", data), zstdOf(make([]byte, 64<<20)), true)}, honest, archive.ErrDigest, "a at 0"},
		{"inline zstd of other bytes", []*agentv1.ScanEntry{inlined(file("a", data), zstdOf([]byte("file CONTENT")), true)}, honest, archive.ErrDigest, "a at 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := memStore(t)
			const key = "hostile"
			c := fakeAgent(t, &liarAgent{entries: tc.entries, data: tc.data})
			_, err := s.Save(context.Background(), key, &session.AgentSource{Client: c, Dir: "x", ReuseUnchanged: true})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.entry) {
				t.Fatalf("got %v, want %v naming %s", err, tc.want, tc.entry)
			}
			if _, err := s.Load(context.Background(), key, 0); !errors.Is(err, session.ErrNoSnapshot) {
				t.Fatalf("after the failed save: %v, want no snapshot", err)
			}
		})
	}

	// An unchanged file whose size differs from the previous snapshot's.
	s, _ := memStore(t)
	const key = "hostile-unchanged"
	c := fakeAgent(t, &liarAgent{entries: []*agentv1.ScanEntry{file("a", data)}, data: honest})
	m1, err := s.Save(context.Background(), key, &session.AgentSource{Client: c, Dir: "x", ReuseUnchanged: true})
	if err != nil {
		t.Fatal(err)
	}
	c = fakeAgent(t, &liarAgent{entries: []*agentv1.ScanEntry{{Path: "a", Kind: agentv1.Kind_KIND_FILE, Mode: 0o644, Size: 99, Unchanged: true}}})
	_, err = s.Save(context.Background(), key, &session.AgentSource{Client: c, Dir: "x", ReuseUnchanged: true})
	if !errors.Is(err, session.ErrAgent) || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("unchanged with another size: %v", err)
	}
	if m, err := s.Load(context.Background(), key, 0); err != nil || m.Seq != m1.Seq {
		t.Fatalf("after the failed save: %v, %v; want snapshot %d still the newest", m, err, m1.Seq)
	}

	// Inline bytes for a chunk the key's parent holds are not read: they
	// cannot stand in for it, right or wrong.
	c = fakeAgent(t, &liarAgent{entries: []*agentv1.ScanEntry{inlined(file("a", data), []byte("file CONTENT"), false)}})
	as := &session.AgentSource{Client: c, Dir: "x", ReuseUnchanged: true}
	if _, err := s.Save(context.Background(), key, as); err != nil {
		t.Fatalf("save with inline bytes for a held chunk: %v", err)
	}
	if as.FetchedChunks != 0 {
		t.Fatalf("%d chunks taken from the agent, want none", as.FetchedChunks)
	}
	dst := filepath.Join(t.TempDir(), "back")
	restore(t, s, key, dst, session.RestoreOptions{})
	if got, err := os.ReadFile(filepath.Join(dst, "a")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("restored a = %q, %v; want %q", got, err, data)
	}
}
