package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/archive"
	"github.com/ferry-dev/ferry/transfer/frame"
	"github.com/ferry-dev/ferry/transfer/transfertest"
)

// dataKind is a message Codec.Unmarshal parses by hand, with its data
// field.
type dataKind struct {
	name  string
	num   protowire.Number
	field protoreflect.Name
	new   func() proto.Message
	wrap  func([]byte) proto.Message // the message with data set
	data  func(proto.Message) []byte // nil when the field is not set
}

var dataKinds = []dataKind{
	{"put", agent.PutDataField, "data", func() proto.Message { return new(agentv1.PutRequest) },
		func(b []byte) proto.Message { return &agentv1.PutRequest{Msg: &agentv1.PutRequest_Data{Data: b}} },
		func(m proto.Message) []byte { return m.(*agentv1.PutRequest).GetData() }},
	{"get", agent.GetDataField, "data", func() proto.Message { return new(agentv1.GetResponse) },
		func(b []byte) proto.Message { return &agentv1.GetResponse{Msg: &agentv1.GetResponse_Data{Data: b}} },
		func(m proto.Message) []byte { return m.(*agentv1.GetResponse).GetData() }},
	{"restore", agent.RestoreChunkField, "chunk", func() proto.Message { return new(agentv1.RestoreRequest) },
		func(b []byte) proto.Message {
			return &agentv1.RestoreRequest{Msg: &agentv1.RestoreRequest_Chunk{Chunk: b}}
		},
		func(m proto.Message) []byte { return m.(*agentv1.RestoreRequest).GetChunk() }},
}

// TestDataTags holds the hand parser's fields to the schema: each is its
// field's number, and the field is a member of the
// message's only oneof, which holds every field, so that it is the only
// field whenever it is set.
func TestDataTags(t *testing.T) {
	for _, k := range dataKinds {
		md := k.new().ProtoReflect().Descriptor()
		fd := md.Fields().ByName(k.field)
		if fd == nil || fd.Kind() != protoreflect.BytesKind || fd.ContainingOneof() == nil {
			t.Fatalf("%s: field %s is not a bytes oneof member", md.FullName(), k.field)
		}
		if md.Oneofs().Len() != 1 || fd.ContainingOneof().Fields().Len() != md.Fields().Len() {
			t.Errorf("%s: has fields outside its oneof", md.FullName())
		}
		if fd.Number() != k.num {
			t.Errorf("%s: field %d, the parser has %d", md.FullName(), fd.Number(), k.num)
		}
	}
}

// split cuts wire into a BufferSlice of fresh buffers: at the cuts in
// order, then in pieces of size each (0: the rest in one).
func split(wire []byte, cuts []int, each int) mem.BufferSlice {
	var s mem.BufferSlice
	add := func(p []byte) { s = append(s, mem.SliceBuffer(bytes.Clone(p))) }
	for _, c := range cuts {
		c = min(c, len(wire))
		add(wire[:c])
		wire = wire[c:]
	}
	for len(wire) > 0 {
		n := len(wire)
		if each > 0 {
			n = min(n, each)
		}
		add(wire[:n])
		wire = wire[n:]
	}
	return s
}

// randomSplit cuts wire into pieces of random sizes drawn from seed,
// empty ones included.
func randomSplit(wire []byte, seed uint64) mem.BufferSlice {
	rng := rand.New(rand.NewPCG(seed, 7))
	var cuts []int
	for left := len(wire); left > 0; {
		c := rng.IntN(min(left, 40) + 1)
		if rng.IntN(8) == 0 {
			c = rng.IntN(left + 1)
		}
		cuts = append(cuts, c)
		left -= c
	}
	return split(wire, cuts, 0)
}

// checkLikeProto holds Codec.Unmarshal of data, wire split up, to
// proto.Unmarshal of wire: the same error or none, the same message
// (unknown fields included), the data field set or not alike, and no
// byte of the result in data's buffers, which gRPC frees once Unmarshal
// returns. It reports whether the hand parser took the message.
func checkLikeProto(t testing.TB, k dataKind, wire []byte, data mem.BufferSlice) (fast bool) {
	t.Helper()
	want := k.new()
	werr := proto.Unmarshal(wire, want)
	payload, fast := agent.UnmarshalBytes(data, k.num)
	if fast && (werr != nil || !bytes.Equal(payload, k.data(want)) || !proto.Equal(want, k.wrap(payload))) {
		t.Fatalf("%s %x: the parser took %x, proto gives %v, %v", k.name, clip(wire), clip(payload), want, werr)
	}
	got := k.new()
	gerr := agent.Codec.Unmarshal(data, got)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("%s %x: error %v, proto's %v", k.name, clip(wire), gerr, werr)
	}
	if werr != nil {
		return fast
	}
	for _, b := range data {
		p := b.ReadOnlyData()
		for i := range p {
			p[i] ^= 0xff
		}
	}
	if !proto.Equal(got, want) || (k.data(got) == nil) != (k.data(want) == nil) {
		t.Fatalf("%s %x: got %v, proto gives %v", k.name, clip(wire), got, want)
	}
	return fast
}

func clip(b []byte) []byte { return b[:min(len(b), 24)] }

// TestUnmarshalData: data messages of many sizes, in frames cut at every
// place that splits the header and at gRPC's frame size, come out of the
// hand parser as proto.Unmarshal gives them.
func TestUnmarshalData(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, k := range dataKinds {
		for _, size := range []int{0, 1, 2, 127, 128, 129, 255, 256, 257, 16383, 16384, 16385, 2097151, 2097152,
			agent.ChunkSize, 256 << 10, 256<<10 + 1, 1<<20 + 7} {
			payload := make([]byte, size)
			for i := range payload {
				payload[i] = byte(rng.Uint32())
			}
			wire, err := proto.Marshal(k.wrap(payload))
			if err != nil {
				t.Fatal(err)
			}
			cases := map[string]mem.BufferSlice{
				"whole":       split(wire, nil, 0),
				"16KiB":       split(wire, nil, 16<<10),
				"small":       split(wire, nil, max(1, len(wire)/300)),
				"empty first": split(wire, []int{0, 0}, 16<<10),
			}
			for c := 1; c <= 6; c++ {
				cases[fmt.Sprintf("cut at %d", c)] = split(wire, []int{c, 1}, 16<<10)
			}
			for seed := range uint64(4) {
				cases[fmt.Sprintf("random %d", seed)] = randomSplit(wire, seed)
			}
			for name, data := range cases {
				if !checkLikeProto(t, k, wire, data) {
					t.Errorf("%s %d bytes, %s: not taken by the hand parser", k.name, size, name)
				}
			}
		}
	}
}

// TestUnmarshalFallback: encodings other than the one field alone go to
// proto.Unmarshal, whose result (or error) Unmarshal gives.
func TestUnmarshalFallback(t *testing.T) {
	put := func(m *agentv1.PutRequest) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	data := put(&agentv1.PutRequest{Msg: &agentv1.PutRequest_Data{Data: []byte("abc")}})
	header := put(&agentv1.PutRequest{Msg: &agentv1.PutRequest_Header{Header: &agentv1.PutHeader{Dest: "d"}}})
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 15, protowire.VarintType), 9)
	for _, tc := range []struct {
		name string
		wire []byte
		fast bool
	}{
		{"empty", nil, false},
		{"header", header, false},
		{"data then header", cat(data, header), false},
		{"header then data", cat(header, data), false},
		{"data twice", cat(data, data), false},
		{"data then unknown", cat(data, unknown), false},
		{"unknown then data", cat(unknown, data), false},
		// Overlong but valid: proto takes them too.
		{"long tag", []byte{0x92, 0x00, 3, 'a', 'b', 'c'}, true},
		{"varint wire type", []byte{0x10, 3}, false},
		{"length past the end", []byte{0x12, 4, 'a', 'b', 'c'}, false},
		{"length short of the end", []byte{0x12, 2, 'a', 'b', 'c'}, false},
		{"unended varint", []byte{0x12, 0x83}, false},
		{"unended long varint", []byte{0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false},
		{"five-byte length", []byte{0x12, 0x83, 0x80, 0x80, 0x80, 0x00, 'a', 'b', 'c'}, true},
		{"tag alone", []byte{0x12}, false},
		{"two-byte length", []byte{0x12, 0x83, 0x00, 'a', 'b', 'c'}, true},
		{"four-byte zero length", []byte{0x12, 0x80, 0x80, 0x80, 0x00}, true},
	} {
		for seed := range uint64(3) {
			if fast := checkLikeProto(t, dataKinds[0], tc.wire, randomSplit(tc.wire, seed)); fast != tc.fast {
				t.Errorf("%s: hand parser took it: %v, want %v", tc.name, fast, tc.fast)
			}
		}
	}
}

// bufferTracker follows the buffers Unmarshal fills and release takes:
// each must be released at most once, none may be released that was not
// filled, and released bytes are poisoned so that any read after release
// shows.
type bufferTracker struct {
	mu          sync.Mutex
	out         map[*byte]bool
	taken, back int
	errs        []string
}

func trackBuffers(t *testing.T) *bufferTracker {
	bt := &bufferTracker{out: map[*byte]bool{}}
	agent.HookBuffers(t, func(b []byte) {
		bt.mu.Lock()
		defer bt.mu.Unlock()
		p := &b[:1][0]
		if bt.out[p] {
			bt.errs = append(bt.errs, "a buffer filled while a message still holds it")
		}
		bt.out[p] = true
		bt.taken++
	}, func(b []byte) {
		bt.mu.Lock()
		defer bt.mu.Unlock()
		if cap(b) == 0 {
			return
		}
		p := &b[:1][0]
		if !bt.out[p] {
			bt.errs = append(bt.errs, "a buffer released twice, or not from Unmarshal")
		}
		delete(bt.out, p)
		bt.back++
		b = b[:cap(b)]
		for i := range b {
			b[i] = 0xa5
		}
	})
	return bt
}

// settled fails t unless every buffer filled so far has been released
// once, and some were.
func (bt *bufferTracker) settled(t *testing.T, what string) {
	t.Helper()
	bt.mu.Lock()
	defer bt.mu.Unlock()
	for _, e := range bt.errs {
		t.Errorf("%s: %s", what, e)
	}
	bt.errs = nil
	if len(bt.out) != 0 || bt.back == 0 {
		t.Errorf("%s: %d data buffers filled, %d released, %d held", what, bt.taken, bt.back, len(bt.out))
	}
}

// TestDataBuffersReleasedAfterRead runs Put, Get and Restore of
// incompressible data, many data messages each, with every released data
// buffer poisoned at once: a buffer released before its last read would
// corrupt a file (or fail a frame's or a chunk's check). Each buffer must
// be released exactly once, by the time the call returns. Not parallel:
// the hooks are global.
func TestDataBuffersReleasedAfterRead(t *testing.T) {
	bt := trackBuffers(t)
	c, ws := inProcess(t)
	ctx := context.Background()
	src := t.TempDir()
	transfertest.RandomTree(t, src, 9, transfertest.TreeOptions{BigFiles: 2, BigFileSize: 1<<20 + 12345})
	for _, m := range []frame.Mode{frame.None, frame.Auto} {
		dest := fmt.Sprintf("put-%v", m)
		if _, err := c.Put(ctx, agent.PutSpec{Dest: dest, Place: archive.PlaceNew, Compress: m}, addAll(src, ".")); err != nil {
			t.Fatalf("put %v: %v", m, err)
		}
		transfertest.EqualTrees(t, src, filepath.Join(ws, dest))
		bt.settled(t, "put "+dest)

		local := filepath.Join(t.TempDir(), "got")
		if _, err := c.Get(ctx, agent.GetSpec{Dir: dest, Names: []string{"."}, Local: local, Place: archive.PlaceNew, Compress: m}); err != nil {
			t.Fatalf("get %v: %v", m, err)
		}
		transfertest.EqualTrees(t, src, local)
		bt.settled(t, "get "+dest)
	}

	st := chunkStore{}
	rng := rand.New(rand.NewPCG(5, 6))
	var refs []agent.ChunkRef
	var want []byte
	for _, size := range []int{1, 300 << 10, 16 << 10, 1 << 20, 70001} {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		id := sha256.Sum256(b)
		st[id] = testEncoder.EncodeAll(b, nil)
		refs = append(refs, agent.ChunkRef{ID: id, Size: int64(size)})
		want = append(want, b...)
	}
	mt := time.Unix(1700000000, 0)
	entries := []agent.RestoreEntry{{Path: ".", Kind: archive.Dir, Mode: 0o700, MTime: mt}, file("f", 0o600, mt, refs...)}
	if _, err := c.Restore(ctx, agent.RestoreSpec{Dest: "restored", Place: archive.PlaceNew}, entries, st.get); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "restored", "f")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("restored file: %d bytes (want %d), equal %v, %v", len(got), len(want), bytes.Equal(got, want), err)
	}
	bt.settled(t, "restore")
}

// BenchmarkCodecUnmarshal: one full data message in gRPC's 16 KiB frames,
// its buffer released as msgReader does.
func BenchmarkCodecUnmarshal(b *testing.B) {
	wire, err := proto.Marshal(&agentv1.PutRequest{Msg: &agentv1.PutRequest_Data{Data: make([]byte, agent.ChunkSize)}})
	if err != nil {
		b.Fatal(err)
	}
	data := split(wire, nil, 16<<10)
	b.SetBytes(int64(len(wire)))
	b.ReportAllocs()
	for b.Loop() {
		m := new(agentv1.PutRequest)
		if err := agent.Codec.Unmarshal(data, m); err != nil {
			b.Fatal(err)
		}
		agent.Release(m.GetData())
	}
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
