package wire_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// TestChunkWriter: small writes are gathered into messages of up to
// ChunkSize; a write of a frame block, even the stream's first (64 KiB),
// goes out at once, after what was gathered, cut at ChunkSize; Flush
// sends the rest; the bytes arrive whole and in order.
func TestChunkWriter(t *testing.T) {
	const k = 1 << 10
	tests := []struct {
		name   string
		writes []int
		want   []int // message sizes, Flush's included
	}{
		{"small writes gathered", []int{8, 100, 2 * k}, []int{8 + 100 + 2*k}},
		{"first block at once", []int{8, 64*k + 9}, []int{8, 64*k + 9}},
		{"block then trailer", []int{64*k + 9, 57}, []int{64*k + 9, 57}},
		{"big block cut", []int{1<<20 + 9}, []int{wire.ChunkSize, wire.ChunkSize, wire.ChunkSize, wire.ChunkSize, 1<<20 + 9 - 4*wire.ChunkSize}},
		{"gathered up to a message", []int{20 * k, 20 * k, 20 * k, 20 * k, 20 * k, 20 * k, 20 * k, 20 * k, 20 * k, 20 * k, 20 * k, 20 * k, 20 * k}, []int{wire.ChunkSize, 13*20*k - wire.ChunkSize}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sent [][]byte
			c := wire.NewChunkWriter(func(b []byte) error {
				sent = append(sent, bytes.Clone(b))
				return nil
			})
			var all []byte
			for i, n := range tt.writes {
				p := bytes.Repeat([]byte{byte(i + 1)}, n)
				all = append(all, p...)
				if m, err := c.Write(p); m != n || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", n, m, err)
				}
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, m := range sent {
				got = append(got, len(m))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("messages %v, want %v", got, tt.want)
			}
			if !bytes.Equal(bytes.Join(sent, nil), all) || c.Wire != int64(len(all)) {
				t.Errorf("%d bytes arrived (Wire %d), want the %d written, in order", len(bytes.Join(sent, nil)), c.Wire, len(all))
			}
		})
	}
}
