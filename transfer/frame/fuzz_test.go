package frame

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
)

// FuzzReader feeds arbitrary bytes to a Reader with tight limits. It must
// never panic, and it may succeed only on a stream whose plaintext a
// Writer would re-frame to the same trailer digest within the limits. The
// seeds in testdata/fuzz/FuzzReader are Writer output of each block type.
func FuzzReader(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		opts := ReaderOptions{MaxBlockSize: 64 << 10, MaxRatio: 100, MaxTotal: 1 << 20}
		r := NewReader(bytes.NewReader(wire), opts)
		out, err := io.ReadAll(r)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrLimit) && !errors.Is(err, ErrTruncated) {
				t.Fatalf("err %v is not a frame sentinel", err)
			}
			if _, err2 := r.Read(make([]byte, 1)); err2 != err {
				t.Fatalf("error not sticky: %v then %v", err, err2)
			}
			return
		}
		st := r.Stats()
		if int64(len(out)) != st.Plaintext || st.Plaintext > opts.MaxTotal || st.Wire > int64(len(wire)) {
			t.Fatalf("success with stats %+v, %d bytes out of %d wire bytes", st, len(out), len(wire))
		}
		sum := sha256.Sum256(out)
		if t0 := int(st.Wire) - trailerSize; !bytes.Equal(wire[t0+17:t0+49], sum[:]) {
			t.Fatalf("success but the trailer's digest is not the plaintext's")
		}
	})
}

func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, d := range [][]byte{nil, []byte("x"), textData(3000), randomData(1500), zeroData(2048)} {
		for _, m := range []Mode{Auto, S2, None} {
			wire, _ := encode(t, d, WriterOptions{Compress: m, BlockSize: 1024}, 4096)
			seeds = append(seeds, wire)
		}
	}
	_, wire := mixedStream(t)
	seeds = append(seeds, wire)
	return seeds
}
