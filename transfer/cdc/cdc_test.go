package cdc

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed)}).Read(b)
	return b
}

func chunks(t testing.TB, r io.Reader, p Params) [][]byte {
	t.Helper()
	c := New(r, p)
	var out [][]byte
	for {
		b, err := c.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(b))
	}
}

func TestChunkerBounds(t *testing.T) {
	small := Params{Min: 64, Avg: 256, Max: 1024}
	cases := []struct {
		name string
		data []byte
		p    Params
	}{
		{"empty", nil, Default()},
		{"one byte", []byte{1}, Default()},
		{"under min", randomBytes(1, Default().Min-1), Default()},
		{"exactly max", randomBytes(2, Default().Max), Default()},
		{"random 1 MiB", randomBytes(3, 1<<20), Default()},
		{"zeros", make([]byte, 1<<20), Default()},
		{"small params", randomBytes(4, 100_000), small},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// OneByteReader: boundaries must not depend on read sizes.
			got := chunks(t, iotest.OneByteReader(bytes.NewReader(tc.data)), tc.p)
			again := chunks(t, bytes.NewReader(tc.data), tc.p)
			if len(got) != len(again) {
				t.Fatalf("%d chunks with one-byte reads, %d with whole reads", len(got), len(again))
			}
			var all []byte
			for i, c := range got {
				if !bytes.Equal(c, again[i]) {
					t.Fatalf("chunk %d differs between read sizes", i)
				}
				if len(c) > tc.p.Max || len(c) == 0 || (len(c) < tc.p.Min && i != len(got)-1) {
					t.Errorf("chunk %d: %d bytes, outside [%d, %d]", i, len(c), tc.p.Min, tc.p.Max)
				}
				all = append(all, c...)
			}
			if !bytes.Equal(all, tc.data) {
				t.Fatal("chunks do not add up to the input")
			}
		})
	}
}

// TestBoundariesPinned fails if the gear table or the cut rule changes:
// either would make every stored chunk stop deduplicating.
func TestBoundariesPinned(t *testing.T) {
	h := sha256.New()
	for _, c := range chunks(t, bytes.NewReader(randomBytes(7, 1<<20)), Default()) {
		fmt.Fprintf(h, "%d,", len(c))
	}
	const want = "3db8520a338ed665"
	if got := hex.EncodeToString(h.Sum(nil))[:16]; got != want {
		t.Errorf("boundaries of the pinned input hash to %s, want %s", got, want)
	}
}

func TestAverage(t *testing.T) {
	cs := chunks(t, bytes.NewReader(randomBytes(9, 4<<20)), Default())
	avg := (4 << 20) / len(cs)
	if avg < Default().Avg/2 || avg > Default().Avg*2 {
		t.Errorf("average chunk %d bytes over %d chunks, want near %d", avg, len(cs), Default().Avg)
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{{}, {Min: 8, Avg: 8, Max: 16}, {Min: 8, Avg: 24, Max: 64}, {Min: 8, Avg: 16, Max: 16}} {
		if p.Validate() == nil {
			t.Errorf("Validate(%+v) = nil", p)
		}
	}
	if err := Default().Validate(); err != nil {
		t.Error(err)
	}
}
