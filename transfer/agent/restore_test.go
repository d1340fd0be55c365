package agent_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
)

// chunkStore is a content-addressed store of zstd frames, as the session
// store keeps chunks.
type chunkStore map[[32]byte][]byte

var testEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))

// add stores data and returns its reference.
func (s chunkStore) add(data string) agent.ChunkRef {
	id := sha256.Sum256([]byte(data))
	s[id] = testEncoder.EncodeAll([]byte(data), nil)
	return agent.ChunkRef{ID: id, Size: int64(len(data))}
}

func (s chunkStore) get(_ context.Context, id [32]byte, buf []byte) ([]byte, error) {
	z, ok := s[id]
	if !ok {
		return nil, fmt.Errorf("chunk %x: %w", id, fs.ErrNotExist)
	}
	return append(buf[:0], z...), nil
}

func file(path string, mode fs.FileMode, mtime time.Time, refs ...agent.ChunkRef) agent.RestoreEntry {
	e := agent.RestoreEntry{Path: path, Kind: archive.File, Mode: mode, MTime: mtime, Chunks: refs}
	for _, r := range refs {
		e.Size += r.Size
	}
	return e
}

func TestRestoreRoundTrip(t *testing.T) {
	wire := map[bool]int64{}
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "stored", true: "stream"}[stream], func(t *testing.T) {
			wire[stream] = testRestoreRoundTrip(t, stream)
		})
	}
	// The stream's window spans the chunks: the second a costs next to
	// nothing.
	if wire[true] >= wire[false]*3/4 {
		t.Errorf("wire bytes: stream %d, stored %d; want the stream well under", wire[true], wire[false])
	}
}

func testRestoreRoundTrip(t *testing.T, stream bool) int64 {
	c, ws := inProcess(t)
	st := chunkStore{}
	// Lines that do not compress to nothing, so that a chunk sent twice
	// shows in the wire bytes.
	var lines strings.Builder
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		fmt.Fprintf(&lines, `{"type":"assistant","n":%d,"id":"%016x"}`+"\n", i, rng.Uint64())
	}
	line := lines.String()
	a, b := st.add(line), st.add("tail\n")
	mt := time.Unix(1700000000, 123456789)
	entries := []agent.RestoreEntry{
		{Path: ".", Kind: archive.Dir, Mode: 0o700, MTime: mt},
		{Path: "d", Kind: archive.Dir, Mode: 0o750, MTime: mt.Add(time.Second)},
		// a twice: a chunk two places share is sent for each.
		file("d/log.jsonl", 0o640, mt.Add(2*time.Second), a, b, a),
		file("empty", 0o600, mt),
		{Path: "e", Kind: archive.Dir, Mode: 0o700, MTime: mt},
		{Path: "link", Kind: archive.Symlink, Mode: 0o777, MTime: mt, Target: "d/log.jsonl"},
	}
	res, err := c.Restore(context.Background(), agent.RestoreSpec{Dest: "out", Place: archive.PlaceNew, Stream: stream}, entries, st.get)
	if err != nil {
		t.Fatal(err)
	}
	want := archive.Stats{Files: 2, Dirs: 2, Symlinks: 1, Bytes: int64(2*len(line) + 5)}
	if res.Stats != want || res.Entries != 5 {
		t.Errorf("result %+v, want %+v and 5 entries", res, want)
	}
	if res.WireBytes <= 0 || res.WireBytes > res.Bytes/2 {
		t.Errorf("wire bytes %d for %d bytes of JSONL: the stored zstd should travel", res.WireBytes, res.Bytes)
	}
	out := filepath.Join(ws, "out")
	got, err := os.ReadFile(filepath.Join(out, "d", "log.jsonl"))
	if err != nil || string(got) != line+"tail\n"+line {
		t.Fatalf("log.jsonl: %d bytes, %v", len(got), err)
	}
	for _, tc := range []struct {
		path  string
		mode  fs.FileMode
		mtime time.Time
	}{
		{".", fs.ModeDir | 0o700, mt},
		{"d", fs.ModeDir | 0o750, mt.Add(time.Second)},
		{"d/log.jsonl", 0o640, mt.Add(2 * time.Second)},
		{"empty", 0o600, mt},
		{"e", fs.ModeDir | 0o700, mt},
	} {
		fi, err := os.Lstat(filepath.Join(out, tc.path))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != tc.mode || !fi.ModTime().Equal(tc.mtime) {
			t.Errorf("%s: mode %v mtime %v, want %v %v", tc.path, fi.Mode(), fi.ModTime(), tc.mode, tc.mtime)
		}
	}
	if target, err := os.Readlink(filepath.Join(out, "link")); err != nil || target != "d/log.jsonl" {
		t.Errorf("link: %q, %v", target, err)
	}
	return res.WireBytes
}

// TestRestoreRefusals: a damaged chunk, a bad entry or a failing store
// fails the call, and nothing is placed or left behind.
func TestRestoreRefusals(t *testing.T) {
	mt := time.Unix(1700000000, 0)
	root := agent.RestoreEntry{Path: ".", Kind: archive.Dir, Mode: 0o700, MTime: mt}
	for _, tc := range []struct {
		name     string
		entries  func(st chunkStore) []agent.RestoreEntry
		sentinel error
		chunk    int // the index a *ChunkError names, or -1
		entry    string
	}{
		{
			name: "chunk with other content",
			entries: func(st chunkStore) []agent.RestoreEntry {
				good, bad := st.add("good"), st.add("bad!")
				st[bad.ID] = st[st.add("evil").ID]
				return []agent.RestoreEntry{root, file("a", 0o600, mt, good), file("b", 0o600, mt, good, bad)}
			},
			sentinel: agent.ErrChunk, chunk: 2, entry: "b",
		},
		{
			name: "chunk that does not decode",
			entries: func(st chunkStore) []agent.RestoreEntry {
				r := st.add("data")
				st[r.ID] = []byte("garbage")
				return []agent.RestoreEntry{root, file("a", 0o600, mt, r)}
			},
			sentinel: agent.ErrChunk, chunk: 0, entry: "a",
		},
		{
			name: "chunk of another size",
			entries: func(st chunkStore) []agent.RestoreEntry {
				r := st.add("data")
				r.Size = 3
				return []agent.RestoreEntry{root, file("a", 0o600, mt, r)}
			},
			sentinel: agent.ErrChunk, chunk: 0, entry: "a",
		},
		{
			name: "parent traversal",
			entries: func(st chunkStore) []agent.RestoreEntry {
				return []agent.RestoreEntry{root, file("../x", 0o600, mt, st.add("x"))}
			},
			sentinel: archive.ErrUnsafePath, chunk: -1,
		},
		{
			name: "symlink out of the tree",
			entries: func(st chunkStore) []agent.RestoreEntry {
				return []agent.RestoreEntry{root, {Path: "esc", Kind: archive.Symlink, MTime: mt, Target: "../../etc"}}
			},
			sentinel: archive.ErrLinkEscape, chunk: -1, entry: "esc",
		},
		{
			name: "store fails",
			entries: func(st chunkStore) []agent.RestoreEntry {
				r := st.add("x")
				delete(st, r.ID)
				return []agent.RestoreEntry{root, file("a", 0o600, mt, r)}
			},
			sentinel: fs.ErrNotExist, chunk: -1,
		},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: " (stored)", true: " (stream)"}[stream], func(t *testing.T) {
				t.Parallel()
				c, ws := inProcess(t)
				st := chunkStore{}
				entries := tc.entries(st)
				_, err := c.Restore(context.Background(), agent.RestoreSpec{Dest: "out", Place: archive.PlaceNew, Stream: stream}, entries, st.get)
				if !errors.Is(err, tc.sentinel) {
					t.Fatalf("err = %v, want %v", err, tc.sentinel)
				}
				var ce *agent.ChunkError
				if tc.chunk >= 0 {
					if !errors.As(err, &ce) || ce.Index != tc.chunk || ce.Path != tc.entry {
						t.Fatalf("err = %v (%+v), want chunk %d of %q", err, ce, tc.chunk, tc.entry)
					}
					var want [32]byte
					n := 0
					for _, e := range entries {
						for _, r := range e.Chunks {
							if n == tc.chunk {
								want = r.ID
							}
							n++
						}
					}
					if ce.ID != want {
						t.Errorf("chunk id %x, want %x", ce.ID, want)
					}
				}
				if tc.entry != "" && !strings.Contains(err.Error(), tc.entry) {
					t.Errorf("err = %v, does not name %q", err, tc.entry)
				}
				left, _ := os.ReadDir(ws)
				if len(left) != 0 {
					t.Errorf("left in the workspace: %v", left)
				}
			})
		}
	}
}

// TestRestoreHostileHost sends malformed streams: each is refused, and
// nothing is placed.
func TestRestoreHostileHost(t *testing.T) {
	z := testEncoder.EncodeAll([]byte("data"), nil)
	id := sha256.Sum256([]byte("data"))
	hdr := func(n int64) *agentv1.RestoreRequest {
		return &agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Header{Header: &agentv1.RestoreHeader{Dest: "out", Place: agentv1.Placement_PLACEMENT_NEW, Entries: n}}}
	}
	ents := func(es ...*agentv1.RestoreEntry) *agentv1.RestoreRequest {
		return &agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Entries{Entries: &agentv1.RestoreEntries{Entries: es}}}
	}
	chunk := &agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Chunk{Chunk: z}}
	f := func(size int64, refs ...*agentv1.ChunkInfo) *agentv1.RestoreEntry {
		return &agentv1.RestoreEntry{Path: "f", Kind: agentv1.Kind_KIND_FILE, Mode: 0o600, Size: size, Chunks: refs}
	}
	ref := &agentv1.ChunkInfo{Id: id[:], Size: 4}
	// A streamed Restore: the chunks' plaintexts in one zstd stream.
	shdr := func(n int64) *agentv1.RestoreRequest {
		h := hdr(n)
		h.GetHeader().Stream = true
		return h
	}
	piece := func(b []byte) *agentv1.RestoreRequest {
		return &agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Stream{Stream: b}}
	}
	zs := func(b []byte) []byte { return testEncoder.EncodeAll(b, nil) }
	zeros := make([]byte, 4)
	zid := sha256.Sum256(zeros)
	zref := &agentv1.ChunkInfo{Id: zid[:], Size: 4}
	// A frame that asks for a 64 MiB window (descriptor 0x80: log 26),
	// holding "data" in one raw block: encoders size the window to the
	// input, so it is written by hand.
	wide := append([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x80, 0x21, 0x00, 0x00}, "data"...)
	for _, tc := range []struct {
		name string
		msgs []*agentv1.RestoreRequest
	}{
		{"stream: a chunk message", []*agentv1.RestoreRequest{shdr(1), ents(f(4, ref)), chunk}},
		{"stream: ends before a chunk", []*agentv1.RestoreRequest{shdr(1), ents(f(8, ref, ref)), piece(zs([]byte("data")))}},
		{"stream: cut short", []*agentv1.RestoreRequest{shdr(1), ents(f(4, ref)), piece(zs([]byte("data"))[:8])}},
		{"stream: goes on after the last chunk", []*agentv1.RestoreRequest{shdr(1), ents(f(4, ref)), piece(zs([]byte("data+")))}},
		{"stream: a frame after the last chunk", []*agentv1.RestoreRequest{shdr(1), ents(f(4, ref)), piece(zs([]byte("data"))), piece(zs([]byte("x")))}},
		{"stream: a message after the stream", []*agentv1.RestoreRequest{shdr(1), ents(f(4, ref)), piece(zs([]byte("data"))), chunk}},
		{"stream: other content", []*agentv1.RestoreRequest{shdr(1), ents(f(4, ref)), piece(zs([]byte("evil")))}},
		{"stream: garbage", []*agentv1.RestoreRequest{shdr(1), ents(f(4, ref)), piece([]byte("garbage, not zstd"))}},
		{"stream: window over the limit", []*agentv1.RestoreRequest{shdr(1), ents(f(4, ref)), piece(wide)}},
		{"stream: a bomb after the last chunk", []*agentv1.RestoreRequest{shdr(1), ents(f(4, zref)), piece(zs(make([]byte, 64<<20)))}},
		{"no header", []*agentv1.RestoreRequest{ents(f(4, ref)), chunk}},
		{"ends before a chunk", []*agentv1.RestoreRequest{hdr(1), ents(f(8, ref, ref)), chunk}},
		{"chunk after the last", []*agentv1.RestoreRequest{hdr(1), ents(f(4, ref)), chunk, chunk}},
		{"more entries than announced", []*agentv1.RestoreRequest{hdr(1), ents(f(4, ref), f(4, ref)), chunk, chunk}},
		{"chunk among the entries", []*agentv1.RestoreRequest{hdr(2), ents(f(4, ref)), chunk}},
		{"sizes do not add up", []*agentv1.RestoreRequest{hdr(1), ents(f(5, ref)), chunk}},
		{"chunks on a directory", []*agentv1.RestoreRequest{hdr(1), ents(&agentv1.RestoreEntry{Path: "d", Kind: agentv1.Kind_KIND_DIR, Size: 4, Chunks: []*agentv1.ChunkInfo{ref}}), chunk}},
		{"bad chunk id", []*agentv1.RestoreRequest{hdr(1), ents(f(4, &agentv1.ChunkInfo{Id: id[:5], Size: 4})), chunk}},
		{"chunk over the limit", []*agentv1.RestoreRequest{hdr(1), ents(f(64<<20, &agentv1.ChunkInfo{Id: id[:], Size: 64 << 20})), chunk}},
		{"negative entries", []*agentv1.RestoreRequest{hdr(-1)}},
		{"too many entries", []*agentv1.RestoreRequest{hdr(1 << 30)}},
		{"unknown kind", []*agentv1.RestoreRequest{hdr(1), ents(&agentv1.RestoreEntry{Path: "x", Kind: agentv1.Kind_KIND_OTHER})}},
		{"mode with file type bits", []*agentv1.RestoreRequest{hdr(1), ents(&agentv1.RestoreEntry{Path: "d", Kind: agentv1.Kind_KIND_DIR, Mode: 0o40755})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, ws := inProcess(t)
			stream, err := agent.RawRPC(c).Restore(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tc.msgs {
				if err := stream.Send(m); err != nil {
					break // the status tells why
				}
			}
			if _, err := stream.CloseAndRecv(); err == nil {
				t.Fatal("accepted")
			}
			left, _ := os.ReadDir(ws)
			if len(left) != 0 {
				t.Errorf("left in the workspace: %v", left)
			}
		})
	}
}

// TestRestoreWireIsStored: the chunk messages carry the stored bytes as
// they are, not a re-encoding.
func TestRestoreWireIsStored(t *testing.T) {
	c, _ := inProcess(t)
	st := chunkStore{}
	r := st.add(strings.Repeat("x", 100000))
	res, err := c.Restore(context.Background(), agent.RestoreSpec{Dest: "o", Place: archive.PlaceNew},
		[]agent.RestoreEntry{file("f", 0o600, time.Unix(0, 0), r)}, st.get)
	if err != nil {
		t.Fatal(err)
	}
	if stored := int64(len(st[r.ID])); res.WireBytes < stored || res.WireBytes > stored+512 {
		t.Errorf("wire %d bytes for a chunk stored in %d", res.WireBytes, stored)
	}
}
