package frame

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

// TestNoDigest: a stream without a digest round-trips to a Reader with
// NoDigest, is refused by one without, and a Reader with NoDigest still
// reads a stream with one; every flipped byte is still caught.
func TestNoDigest(t *testing.T) {
	data := append(append(textData(1024), randomData(512)...), zeroData(1024)...)
	wire, _ := encode(t, data, WriterOptions{BlockSize: 512, NoDigest: true}, 300)
	if wire[len(wire)-trailerSize] != typeTrailerNoDigest {
		t.Fatalf("trailer type %#x, want %#x", wire[len(wire)-trailerSize], typeTrailerNoDigest)
	}
	out, _, err := decode(wire, ReaderOptions{NoDigest: true})
	if err != nil || !bytes.Equal(out, data) {
		t.Fatalf("NoDigest reader: err %v, equal %v", err, bytes.Equal(out, data))
	}
	if _, _, err := decode(wire, ReaderOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("digest-checking reader of a stream without one: err %v, want ErrCorrupt", err)
	}
	with, _ := encode(t, data, WriterOptions{BlockSize: 512}, 300)
	if out, _, err := decode(with, ReaderOptions{NoDigest: true}); err != nil || !bytes.Equal(out, data) {
		t.Fatalf("NoDigest reader of a stream with a digest: err %v", err)
	}
	for i := range wire {
		bad := bytes.Clone(wire)
		bad[i] ^= 0x01
		if _, _, err := decode(bad, ReaderOptions{NoDigest: true}); err == nil {
			t.Fatalf("byte %d flipped: read succeeded", i)
		}
	}
}

// TestConcurrency: every Concurrency frames the same plaintext in order,
// with the same block types once Auto's decisions agree (Zstd and None).
func TestConcurrency(t *testing.T) {
	const bs = 4 << 10
	var data []byte
	for i := range 12 {
		if i%3 == 2 {
			data = append(data, randomData(5*bs+17)...)
		} else {
			data = append(data, textData(3*bs+5)...)
		}
	}
	for _, mode := range []Mode{Auto, Zstd, S2, None} {
		var ref Stats
		for _, c := range []int{1, 2, 3, 8} {
			t.Run(fmt.Sprintf("%v/%d", mode, c), func(t *testing.T) {
				wire, ws := encode(t, data, WriterOptions{Compress: mode, BlockSize: bs, Concurrency: c}, 7000)
				out, r, err := decode(wire, ReaderOptions{})
				if err != nil || !bytes.Equal(out, data) {
					t.Fatalf("read: err %v, equal %v", err, bytes.Equal(out, data))
				}
				if rs := r.Stats(); rs != ws {
					t.Fatalf("reader stats %+v, writer stats %+v", rs, ws)
				}
				if c == 1 {
					ref = ws
				} else if mode != Auto && ws != ref {
					t.Fatalf("stats %+v, with Concurrency 1 %+v", ws, ref)
				}
			})
		}
	}
}

// TestConcurrentWriterFails: a failing underlying writer fails Write and
// Close with Concurrency > 1, and no compressing goroutine is left behind
// (TestMain checks for leaks).
func TestConcurrentWriterFails(t *testing.T) {
	for _, after := range []int{0, 1, 3} {
		w := NewWriter(&limitWriter{n: after}, WriterOptions{Compress: Zstd, BlockSize: 1024, Concurrency: 4})
		var err error
		for i := 0; i < 64 && err == nil; i++ {
			_, err = w.Write(textData(1000))
		}
		if err == nil {
			err = w.Close()
		}
		if err == nil {
			t.Fatalf("after %d writes: no error", after)
		}
		if err2 := w.Close(); err2 != err {
			t.Fatalf("Close: %v, want sticky %v", err2, err)
		}
	}
	// A Writer dropped without Close leaves no goroutine for long either.
	w := NewWriter(io.Discard, WriterOptions{Compress: Zstd, BlockSize: 1024, Concurrency: 4})
	w.Write(textData(10000))
}

// limitWriter accepts n writes, then fails.
type limitWriter struct{ n int }

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n == 0 {
		return 0, errors.New("broken pipe")
	}
	l.n--
	return len(p), nil
}
