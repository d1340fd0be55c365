package frame

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzWriter drives a Writer with a sequence of writes the input
// describes: their sizes, their data (random, text or zeros, so that Auto
// moves between raw runs, trials and compressed blocks), whether each is
// read into Buffer's slice or written from the caller's, and the round
// trip Auto is told as it goes. The stream must read back as exactly the
// plaintext written, with the writer's stats. Every caller's slice is
// overwritten once its Write returns: a writer that kept it (a block
// framed from it after Write returned) frames the garbage instead.
//
// The input: a byte of mode, a byte of block size, then 4 bytes per
// write: kind, size (two bytes, scaled by the block size), round trip.
func FuzzWriter(f *testing.F) {
	f.Add([]byte{0, 2, 1, 0x10, 0, 0, 0, 0xff, 0xff, 1, 1, 0x10, 0, 0})
	f.Add([]byte{0, 2, 1, 0x40, 0, 0, 0, 0x80, 0, 0, 3, 0x40, 0, 0, 1, 0x10, 0, 2})
	f.Add([]byte{3, 2, 3, 0xff, 0xff, 0, 5, 0x20, 0, 0, 2, 0x01, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 3, 0, 4, 0, 9, 0, 2, 0, 0x30, 1})
	f.Add([]byte{2, 1, 5, 0x7f, 0, 2, 0, 0x7f, 0, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 {
			return
		}
		modes := []Mode{Auto, Zstd, S2, None}
		mode := modes[int(in[0])%len(modes)]
		// 512 KiB blocks are above rawBlock, where a raw run's blocks are
		// cut shorter than the block size.
		bs := []int{4 << 10, 64 << 10, 512 << 10}[int(in[1])%3]
		var rtt atomic.Int64
		opts := WriterOptions{Compress: mode, BlockSize: bs, Concurrency: 2,
			RTT: func() time.Duration { return time.Duration(rtt.Load()) }}
		var wire bytes.Buffer
		w := NewWriter(&wire, opts)
		var want []byte
		random := rand.NewChaCha8([32]byte{7})
		rng := rand.New(random)
		text := textData(4 * bs)
		scratch := make([]byte, 0, 4*bs)
		const maxTotal = 3 << 20 // bounds one input's work
		for ops := in[2:]; len(ops) >= 4 && len(want) < maxTotal; ops = ops[4:] {
			kind := ops[0]
			n := int(binary.BigEndian.Uint16(ops[1:3])) * 4 * bs >> 16
			n = min(n, maxTotal-len(want))
			rtt.Store(int64([]time.Duration{0, time.Millisecond, 40 * time.Millisecond}[int(ops[3])%3]))
			data := scratch[:n]
			switch kind % 3 {
			case 0:
				random.Read(data)
			case 1:
				off := rng.IntN(len(text) - n + 1)
				copy(data, text[off:off+n])
			default:
				clear(data)
			}
			want = append(want, data...)
			if kind&4 == 0 {
				if k, err := w.Write(data); k != n || err != nil {
					t.Fatalf("Write = %d, %v; want %d, nil", k, err, n)
				}
				// The slice is the caller's again.
				for i := range data {
					data[i] = 0xa5
				}
				continue
			}
			for len(data) > 0 {
				lent := w.Buffer()
				if len(lent) == 0 {
					t.Fatal("Buffer lent an empty slice")
				}
				k := copy(lent, data)
				if m, err := w.Write(lent[:k]); m != k || err != nil {
					t.Fatalf("Write of Buffer's slice = %d, %v; want %d, nil", m, err, k)
				}
				data = data[k:]
			}
		}
		if err := w.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		ws := w.Stats()
		r := NewReader(bytes.NewReader(wire.Bytes()), ReaderOptions{})
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("read back: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read back %d bytes, wrote %d; first difference at %d", len(got), len(want), firstDiff(got, want))
		}
		if rs := r.Stats(); rs != ws {
			t.Fatalf("reader stats %+v, writer stats %+v", rs, ws)
		}
		if ws.Wire != int64(wire.Len()) {
			t.Fatalf("stats count %d wire bytes, wrote %d", ws.Wire, wire.Len())
		}
	})
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
