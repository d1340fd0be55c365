package grpcbuf

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// split cuts b into a BufferSlice at the given offsets (clamped, in any
// order), as gRPC hands a message over in frames.
func split(b []byte, at ...int) mem.BufferSlice {
	var out mem.BufferSlice
	prev := 0
	for _, a := range at {
		a = min(max(a, prev), len(b))
		out = append(out, mem.SliceBuffer(b[prev:a]))
		prev = a
	}
	return append(out, mem.SliceBuffer(b[prev:]))
}

func cat(b ...[]byte) []byte { return bytes.Join(b, nil) }

func tag(n protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, n, typ) }

func vint(v uint64) []byte { return protowire.AppendVarint(nil, v) }

// TestField checks which messages Field takes: only the one bytes field
// (nested as the path says), whose value runs to the end of the message.
func TestField(t *testing.T) {
	abc := []byte("abc")
	for _, tc := range []struct {
		name string
		wire []byte
		path []protowire.Number
		want []byte // nil: not taken
	}{
		{"field", cat(tag(2, protowire.BytesType), vint(3), abc), []protowire.Number{2}, abc},
		{"empty field", cat(tag(2, protowire.BytesType), vint(0)), []protowire.Number{2}, []byte{}},
		{"non-minimal length", cat(tag(2, protowire.BytesType), []byte{0x83, 0x00}, abc), []protowire.Number{2}, abc},
		{"non-minimal tag", cat([]byte{0x92, 0x00}, vint(3), abc), []protowire.Number{2}, abc},
		{"other field", cat(tag(1, protowire.BytesType), vint(3), abc), []protowire.Number{2}, nil},
		{"wire type varint", cat(tag(2, protowire.VarintType), vint(3)), []protowire.Number{2}, nil},
		{"short", cat(tag(2, protowire.BytesType), vint(4), abc), []protowire.Number{2}, nil},
		{"long", cat(tag(2, protowire.BytesType), vint(2), abc), []protowire.Number{2}, nil},
		{"trailing field", cat(tag(2, protowire.BytesType), vint(1), []byte("a"), tag(2, protowire.BytesType), vint(1), []byte("b")), []protowire.Number{2}, nil},
		{"leading unknown field", cat(tag(9, protowire.VarintType), vint(1), tag(2, protowire.BytesType), vint(3), abc), []protowire.Number{2}, nil},
		{"empty message", nil, []protowire.Number{2}, nil},
		{"tag alone", tag(2, protowire.BytesType), []protowire.Number{2}, nil},
		{"truncated varint", cat(tag(2, protowire.BytesType), []byte{0x80}), []protowire.Number{2}, nil},
		{"overlong varint", cat(tag(2, protowire.BytesType), bytes.Repeat([]byte{0xff}, 10), []byte{0x01}), []protowire.Number{2}, nil},
		{"nested", cat(tag(1, protowire.BytesType), vint(5), tag(1, protowire.BytesType), vint(3), abc), []protowire.Number{1, 1}, abc},
		{"nested, empty outer", cat(tag(1, protowire.BytesType), vint(0)), []protowire.Number{1, 1}, nil},
		{"nested, other inner field", cat(tag(1, protowire.BytesType), vint(5), tag(2, protowire.BytesType), vint(3), abc), []protowire.Number{1, 1}, nil},
		{"nested, inner short", cat(tag(1, protowire.BytesType), vint(5), tag(1, protowire.BytesType), vint(2), abc), []protowire.Number{1, 1}, nil},
		{"no path", cat(tag(2, protowire.BytesType), vint(3), abc), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for at := range len(tc.wire) + 1 {
				got, ok := Field(&Pool{}, split(tc.wire, at, at+1), tc.path...)
				if ok != (tc.want != nil) || !bytes.Equal(got, tc.want) {
					t.Fatalf("cut at %d: Field = %q, %v; want %q", at, got, ok, tc.want)
				}
			}
		})
	}
}

// TestFieldSizes: payloads around the varint and frame boundaries, in
// 16 KiB frames (as HTTP/2 delivers them) and in odd cuts, come out whole
// and in a buffer of their own (not aliasing the frames).
func TestFieldSizes(t *testing.T) {
	for _, n := range []int{1, 127, 128, 16383, 16384, 16385, 256 << 10, 1<<20 + 7} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + i>>8)
		}
		wire := cat(tag(2, protowire.BytesType), vint(uint64(n)), data)
		var frames []int
		for a := 16 << 10; a < len(wire); a += 16 << 10 {
			frames = append(frames, a)
		}
		for _, cuts := range [][]int{nil, frames, {1}, {2, 3}, {len(wire) / 2}} {
			got, ok := Field(&Pool{}, split(wire, cuts...), 2)
			if !ok || !bytes.Equal(got, data) {
				t.Fatalf("%d bytes, cuts %v: ok %v, equal %v", n, cuts, ok, bytes.Equal(got, data))
			}
			if &got[0] == &wire[len(wire)-n] {
				t.Fatalf("%d bytes: the payload aliases the frames", n)
			}
		}
	}
}

// FuzzField checks Field against a reading of the message with protowire:
// whatever Field takes is a message of exactly one field, of the path's
// number and bytes type (the inner one likewise), whose value is what
// Field gives; and whatever is such a message Field takes.
func FuzzField(f *testing.F) {
	f.Add(cat(tag(2, protowire.BytesType), vint(3), []byte("abc")), uint16(1), false)
	f.Add(cat(tag(1, protowire.BytesType), vint(5), tag(1, protowire.BytesType), vint(3), []byte("abc")), uint16(2), true)
	f.Add([]byte{0x12, 0x83, 0x00, 'a', 'b', 'c'}, uint16(2), false)
	f.Fuzz(func(t *testing.T, wire []byte, at uint16, nested bool) {
		path := []protowire.Number{2}
		if nested {
			path = []protowire.Number{1, 1}
		}
		got, ok := Field(&Pool{}, split(wire, int(at)), path...)
		want, wok := only(wire, path[0])
		if nested && wok {
			if len(want) == 0 {
				wok = false // an empty enclosing message is left to proto
			} else {
				want, wok = only(want, path[1])
			}
		}
		if ok != wok || ok && !bytes.Equal(got, want) {
			t.Fatalf("Field = %q, %v; protowire reads %q, %v", got, ok, want, wok)
		}
	})
}

// only returns the value of b's one field when b is exactly one
// length-delimited field numbered n.
func only(b []byte, n protowire.Number) ([]byte, bool) {
	num, typ, k := protowire.ConsumeTag(b)
	if k < 0 || num != n || typ != protowire.BytesType {
		return nil, false
	}
	v, m := protowire.ConsumeBytes(b[k:])
	if m < 0 || k+m != len(b) {
		return nil, false
	}
	return v, true
}
