package archive

import (
	"math/rand/v2"
	"testing"
)

// The digest must not depend on how the data is cut into writes: the
// sender hashes as it reads files, the receiver as it writes them, and
// their pieces never line up.
func TestFileHashSplits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, segmentSize - 1, segmentSize, segmentSize + 1, 3*segmentSize + 17, 1<<20 + 5} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		want := DigestOf(data)
		h := newFileHash()
		for round := range 20 {
			h.Reset()
			for p := data; len(p) > 0; {
				n := 1 + rng.IntN(min(len(p), 3*segmentSize))
				if round%4 == 0 {
					n = min(len(p), 1+rng.IntN(7)) // many tiny writes
				}
				h.Write(p[:n])
				p = p[n:]
			}
			var got [DigestSize]byte
			sumInto(h, &got)
			if got != want {
				t.Fatalf("size %d, round %d: digest %x, want %x", size, round, got, want)
			}
		}
	}
}

// Any changed byte, and any change of length (such as a trailing zero
// byte), changes the digest.
func TestFileHashSensitive(t *testing.T) {
	data := make([]byte, 2*segmentSize+100)
	for i := range data {
		data[i] = byte(i * 31)
	}
	base := DigestOf(data)
	for _, at := range []int{0, segmentSize - 1, segmentSize, 2 * segmentSize, len(data) - 1} {
		data[at] ^= 1
		if DigestOf(data) == base {
			t.Errorf("flipping byte %d left the digest as it was", at)
		}
		data[at] ^= 1
	}
	for _, n := range []int{len(data) - 1, len(data) - segmentSize, 2 * segmentSize, 0} {
		if DigestOf(data[:n]) == base {
			t.Errorf("the first %d bytes digest like all %d", n, len(data))
		}
	}
	if DigestOf(append(data, 0)) == base {
		t.Error("a trailing zero byte left the digest as it was")
	}
}

func BenchmarkFileHash(b *testing.B) {
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	piece := 1<<20 - 512 // as the sender reads: after a tar header
	h := newFileHash()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		h.Reset()
		for o := 0; o < len(data); o += piece {
			h.Write(data[o:min(o+piece, len(data))])
		}
		var sum [DigestSize]byte
		sumInto(h, &sum)
	}
}
