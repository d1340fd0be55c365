package session_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/spf13/afero"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/session"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/cdc"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// claimAgent is a hostile agent: it answers Scan with entries and each
// read of ReadChunks with frames[path] as zstd if there is one, else with
// data[path] sliced as asked, else with as many zero bytes as asked
// (silent: with nothing at all). It records the reads it is asked for.
type claimAgent struct {
	agentv1.UnimplementedAgentServer
	entries []*agentv1.ScanEntry
	data    map[string][]byte
	frames  map[string][]byte
	silent  bool

	mu    sync.Mutex
	reads []*agentv1.ChunkRead
}

func (a *claimAgent) ScanStream(s agentv1.Agent_ScanStreamServer) error {
	return s.Send(&agentv1.ScanResponse{Entries: a.entries})
}

func (a *claimAgent) ReadChunks(req *agentv1.ReadChunksRequest, s agentv1.Agent_ReadChunksServer) error {
	a.mu.Lock()
	a.reads = append(a.reads, req.GetReads()...)
	a.mu.Unlock()
	if a.silent {
		return nil
	}
	for i, r := range req.GetReads() {
		resp := &agentv1.ReadChunksResponse{Index: uint32(i)}
		if f, ok := a.frames[r.GetPath()]; ok {
			resp.Data, resp.Zstd = f, true
		} else if d, ok := a.data[r.GetPath()]; ok {
			end := min(int64(len(d)), r.GetOffset()+r.GetSize())
			resp.Data = d[min(r.GetOffset(), end):end]
		} else {
			resp.Data = make([]byte, r.GetSize())
		}
		if err := s.Send(resp); err != nil {
			return err
		}
	}
	return nil
}

// recorded returns the reads asked for so far, as (path, offset, size,
// id) strings in the order asked.
func (a *claimAgent) recorded() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, r := range a.reads {
		out = append(out, readKey(r))
	}
	return out
}

func readKey(r *agentv1.ChunkRead) string {
	return fmt.Sprintf("%s@%d+%d#%x", r.GetPath(), r.GetOffset(), r.GetSize(), r.GetId())
}

// claimOf is a file entry at path whose chunk list is refs: the agent
// claims to hold those chunks.
func claimOf(path string, refs []session.ChunkRef) *agentv1.ScanEntry {
	e := &agentv1.ScanEntry{Path: path, Kind: agentv1.Kind_KIND_FILE, Mode: 0o600}
	for _, c := range refs {
		e.Chunks = append(e.Chunks, &agentv1.ChunkInfo{Id: c.ID[:], Offset: e.Size, Size: c.Size})
		e.Size += c.Size
	}
	return e
}

// victimStore is a store holding one snapshot of key "victim" (saved from
// a local directory) with a secret file of several chunks, the directory,
// and the secret file's entry.
func victimStore(t *testing.T) (*session.Store, afero.Fs, string, session.Entry) {
	t.Helper()
	s, fsys := memStore(t)
	dir := t.TempDir()
	secret := make([]byte, 400<<10)
	crand.Read(secret)
	if err := os.WriteFile(filepath.Join(dir, "secret"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	m := save(t, s, "victim", dir)
	for _, e := range m.Entries {
		if e.Path == "secret" && len(e.Chunks) >= 3 {
			return s, fsys, dir, e
		}
	}
	t.Fatalf("victim snapshot %+v: no secret file of several chunks", m.Entries)
	return nil, nil, "", session.Entry{}
}

// objects lists the store's objects but its locks, which a save writes
// and removes.
func objects(t *testing.T, fsys afero.Fs) []string {
	t.Helper()
	var out []string
	for _, prefix := range []string{"chunks/", "packs/", "index/", "snapshots/"} {
		out = append(out, names(t, fsys, prefix)...)
	}
	if len(out) == 0 {
		t.Fatal("no objects in the store")
	}
	return out
}

// victimIntact fails t unless key victim still restores as dir and the
// store verifies clean.
func victimIntact(t *testing.T, s *session.Store, dir string) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "r")
	restore(t, s, "victim", dst, session.RestoreOptions{})
	transfertest.EqualTrees(t, dir, dst)
	rep, err := s.Verify(context.Background(), "")
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

// TestAgentSourceClaimedChunks: an agent that lists a file whose chunks
// are another key's, which the store holds, is asked for their bytes all
// the same; without them the save fails naming the file, commits nothing
// and writes nothing, and the other key restores as it was. An agent that
// does hold the bytes proves it by sending them, and its save stores no
// chunk again.
func TestAgentSourceClaimedChunks(t *testing.T) {
	ctx := context.Background()
	own := []byte("the attacker's own earlier file, one chunk")
	ownRef := session.ChunkRef{ID: sha256.Sum256(own), Size: int64(len(own))}
	cases := []struct {
		name   string
		parent bool // the attacker key has a snapshot holding own first
		claim  func(victim []session.ChunkRef) []*agentv1.ScanEntry
		agent  func(a *claimAgent, secret []byte)
		want   error // nil: the save succeeds
		entry  string
	}{
		{"victim's chunks, zero bytes sent", false,
			func(v []session.ChunkRef) []*agentv1.ScanEntry { return []*agentv1.ScanEntry{claimOf("stolen", v)} },
			func(*claimAgent, []byte) {}, archive.ErrDigest, "stolen at 0"},
		{"victim's chunks, nothing sent", false,
			func(v []session.ChunkRef) []*agentv1.ScanEntry { return []*agentv1.ScanEntry{claimOf("stolen", v)} },
			func(a *claimAgent, _ []byte) { a.silent = true }, archive.ErrDigest, "stolen at 0"},
		{"one victim chunk among the key's own", true,
			func(v []session.ChunkRef) []*agentv1.ScanEntry {
				return []*agentv1.ScanEntry{claimOf("own", []session.ChunkRef{ownRef}), claimOf("stolen", []session.ChunkRef{v[0], ownRef})}
			},
			func(a *claimAgent, _ []byte) { a.data = map[string][]byte{"own": own} }, archive.ErrDigest, "stolen at"},
		{"victim's chunks reported unchanged", true,
			func(v []session.ChunkRef) []*agentv1.ScanEntry {
				e := claimOf("own", v)
				e.Chunks, e.Unchanged = nil, true
				return []*agentv1.ScanEntry{e}
			},
			func(*claimAgent, []byte) {}, session.ErrAgent, `"own"`},
		{"the bytes sent: proof of possession", false,
			func(v []session.ChunkRef) []*agentv1.ScanEntry { return []*agentv1.ScanEntry{claimOf("copy", v)} },
			func(a *claimAgent, secret []byte) { a.data = map[string][]byte{"copy": secret} }, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, fsys, dir, victim := victimStore(t)
			secret, err := os.ReadFile(filepath.Join(dir, "secret"))
			if err != nil {
				t.Fatal(err)
			}
			const key = "attacker"
			var seq int64
			if tc.parent {
				a := &claimAgent{entries: []*agentv1.ScanEntry{claimOf("own", []session.ChunkRef{ownRef})}, data: map[string][]byte{"own": own}}
				seq = agentSave(t, s, key, &session.AgentSource{Client: fakeAgent(t, a), Dir: "x", ReuseUnchanged: true}).Seq
			}
			before := objects(t, fsys)
			a := &claimAgent{entries: tc.claim(victim.Chunks)}
			tc.agent(a, secret)
			as := &session.AgentSource{Client: fakeAgent(t, a), Dir: "x", ReuseUnchanged: true}
			m, err := s.Save(ctx, key, as)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if m.NewChunks != 0 || as.FetchedChunks != int64(len(victim.Chunks)) || len(a.recorded()) != len(victim.Chunks) {
					t.Errorf("%d new chunks, %d fetched, %d read: want every chunk fetched, none stored again", m.NewChunks, as.FetchedChunks, len(a.recorded()))
				}
				victimIntact(t, s, dir)
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.entry) {
				t.Fatalf("got %v, want %v naming %s", err, tc.want, tc.entry)
			}
			for _, r := range a.recorded() {
				if tc.parent && strings.HasSuffix(r, fmt.Sprintf("#%x", ownRef.ID[:])) {
					t.Errorf("asked for the parent's own chunk: %q", r)
				}
			}
			if m, err := s.Load(ctx, key, 0); tc.parent && (err != nil || m.Seq != seq) || !tc.parent && !errors.Is(err, session.ErrNoSnapshot) {
				t.Fatalf("after the failed save: %v, %v; want the attacker's snapshot %d newest", m, err, seq)
			}
			if after := objects(t, fsys); !slices.Equal(after, before) {
				t.Errorf("store objects changed:\n%v\n%v", before, after)
			}
			victimIntact(t, s, dir)
		})
	}
}

// TestAgentSourceNoOracle: a save that claims guessed chunk IDs, half of
// them held by another key, asks the agent for exactly the same reads as
// the same claims against an empty store: every claimed chunk, present or
// not. The pattern of requests says nothing of the store.
func TestAgentSourceNoOracle(t *testing.T) {
	s, _, _, victim := victimStore(t)
	empty, _ := memStore(t)
	r := mathrand(7)
	var claims []*agentv1.ScanEntry
	for i, c := range victim.Chunks {
		var guess session.ID
		for j := range guess {
			guess[j] = byte(r.UintN(256))
		}
		// Interleaved, each a file of its own, in walk order.
		claims = append(claims,
			claimOf("g"+string(rune('a'+2*i)), []session.ChunkRef{c}),
			claimOf("g"+string(rune('a'+2*i+1)), []session.ChunkRef{{ID: guess, Size: c.Size}}))
	}
	var want []string
	for _, e := range claims {
		want = append(want, readKey(&agentv1.ChunkRead{Path: e.Path, Offset: 0, Size: e.Chunks[0].Size, Id: e.Chunks[0].Id}))
	}
	for _, tc := range []struct {
		name string
		s    *session.Store
	}{{"store holding half", s}, {"empty store", empty}} {
		t.Run(tc.name, func(t *testing.T) {
			a := &claimAgent{entries: claims}
			_, err := tc.s.Save(context.Background(), "attacker", &session.AgentSource{Client: fakeAgent(t, a), Dir: "x", ReuseUnchanged: true})
			if !errors.Is(err, archive.ErrDigest) || !strings.Contains(err.Error(), "ga at 0") {
				t.Fatalf("got %v, want ErrDigest naming ga", err)
			}
			if got := a.recorded(); !reflect.DeepEqual(got, want) {
				t.Errorf("reads asked:\n%q\nwant every claim, in order:\n%q", got, want)
			}
		})
	}
}

func mathrand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

// TestAgentSourceFrames: a chunk that travels as zstd is kept as it came
// only if the store's own reader accepts that frame: one the store would
// refuse (a window over MaxChunkSize) fails the save with ErrDigest naming
// the file, commits nothing, and the store verifies clean either way.
// What the save keeps and what CheckChunkObject accepts agree.
func TestAgentSourceFrames(t *testing.T) {
	data := bytes.Repeat([]byte(`{"role":"assistant","content":"ok"}`+"\n"), 100<<10/36)
	id := session.ID(sha256.Sum256(data))
	noSingle := must(zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false), zstd.WithSingleSegment(false)))
	honest := must(zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false)))
	// wide declares a window of 2^(10+exp) bytes: a window descriptor
	// follows the frame header descriptor when the frame is not single
	// segment, and bounds back references only, so the frame decodes the
	// same.
	wide := func(exp byte) []byte {
		f := noSingle.EncodeAll(data, nil)
		if f[4]&(1<<5) != 0 {
			t.Fatalf("frame header %x: single segment", f[:6])
		}
		f[5] = exp << 3
		return f
	}
	skippable := append(honest.EncodeAll(data, nil), 0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 'm', 'a', 'r', 'k')
	two := append(honest.EncodeAll(data[:len(data)/2], nil), honest.EncodeAll(data[len(data)/2:], nil)...)
	cases := []struct {
		name  string
		frame []byte
		kept  bool
	}{
		{"honest", honest.EncodeAll(data, nil), true},
		{"window of the chunk bound", wide(7), true}, // 128 KiB
		{"window of 256 KiB", wide(8), false},
		{"window of 4 MiB", wide(12), false},
		{"skippable frame after it", skippable, true},
		{"two frames", two, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := session.CheckChunkObject(id, tc.frame); (err == nil) != tc.kept {
				t.Fatalf("CheckChunkObject: %v; the case says kept %v", err, tc.kept)
			}
			s, _ := memStore(t)
			e := file("f", data)
			a := &claimAgent{entries: []*agentv1.ScanEntry{e}, frames: map[string][]byte{"f": tc.frame}}
			m, err := s.Save(context.Background(), "k", &session.AgentSource{Client: fakeAgent(t, a), Dir: "x"})
			if tc.kept {
				if err != nil {
					t.Fatal(err)
				}
				if m.NewChunks != 1 {
					t.Errorf("%d new chunks, want 1", m.NewChunks)
				}
			} else {
				if !errors.Is(err, archive.ErrDigest) || !strings.Contains(err.Error(), "f at 0") {
					t.Fatalf("got %v, want ErrDigest naming f", err)
				}
				if _, err := s.Load(context.Background(), "k", 0); !errors.Is(err, session.ErrNoSnapshot) {
					t.Fatalf("after the failed save: %v, want no snapshot", err)
				}
			}
			rep, err := s.Verify(context.Background(), "")
			if err != nil || !rep.OK() {
				t.Fatalf("verify: %+v, %v", rep, err)
			}
			if tc.kept {
				dst := filepath.Join(t.TempDir(), "r")
				restore(t, s, "k", dst, session.RestoreOptions{})
				if got, err := os.ReadFile(filepath.Join(dst, "f")); err != nil || !bytes.Equal(got, data) {
					t.Fatalf("restored f: %d bytes, %v", len(got), err)
				}
			}
		})
	}
	if len(data) > cdc.Default().Max {
		t.Fatalf("test chunk of %d bytes, over the chunk bound", len(data))
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
