package cdc

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/restic/chunker"
)

// The workload that matters (issue 5): 40 JSONL transcripts, 128 MiB in
// all (FERRY_CDC_BENCH_MIB scales it; 16 MiB by default), then about 1%
// appended to a tenth of them. The metrics are throughput (chunking and
// SHA-256 of every chunk) and new/appended: the bytes of chunks not seen
// in the first pass, over the bytes appended.

var words = strings.Fields(`the a to of and in is it you that for on with as
be this are not can file error func return value test build run agent tool
call result output input session ferry sandbox chunk store manifest commit
diff patch line go package import struct string int bool nil err ctx`)

// transcript appends JSONL lines to b until it holds n bytes.
func transcript(b []byte, rnd *rand.Rand, n int) []byte {
	for seq := 0; len(b) < n; seq++ {
		var text strings.Builder
		for range 5 + rnd.IntN(120) {
			text.WriteString(words[rnd.IntN(len(words))])
			text.WriteByte(' ')
		}
		b = fmt.Appendf(b, `{"seq":%d,"ts":"2026-08-%02dT%02d:%02d:%02d.%06dZ","role":%q,"id":"%016x","content":%q}`+"\n",
			seq, 1+rnd.IntN(28), rnd.IntN(24), rnd.IntN(60), rnd.IntN(60), rnd.IntN(1e6),
			[]string{"user", "assistant", "tool"}[rnd.IntN(3)], rnd.Uint64(), text.String())
	}
	return b
}

type workload struct {
	before, after [][]byte
	appended      int
	total         int64
}

func newWorkload(total int) workload {
	rnd := rand.New(rand.NewPCG(1, 2))
	var w workload
	for i := range 40 {
		f := transcript(nil, rnd, total/40)
		w.before = append(w.before, f)
		g := f
		if i%10 == 0 {
			g = transcript(bytes.Clone(f), rnd, len(f)+len(f)/100)
			w.appended += len(g) - len(f)
		}
		w.after = append(w.after, g)
		w.total += int64(len(f))
	}
	return w
}

type cutter func(r io.Reader, emit func([]byte))

func fastcdc(p Params) cutter {
	return func(r io.Reader, emit func([]byte)) {
		c := New(r, p)
		for {
			b, err := c.Next()
			if err != nil {
				return
			}
			emit(b)
		}
	}
}

func restic(min, avgBits, max uint) cutter {
	buf := make([]byte, max)
	return func(r io.Reader, emit func([]byte)) {
		c := chunker.NewWithBoundaries(r, chunker.Pol(0x3DA3358B4DC173), min, max)
		c.SetAverageBits(int(avgBits))
		for {
			ch, err := c.Next(buf)
			if err != nil {
				return
			}
			emit(ch.Data)
		}
	}
}

func BenchmarkChunkers(b *testing.B) {
	mib := 16
	if s := os.Getenv("FERRY_CDC_BENCH_MIB"); s != "" {
		mib, _ = strconv.Atoi(s)
	}
	w := newWorkload(mib << 20)
	for _, c := range []struct {
		name string
		cut  cutter
	}{
		{"fastcdc-8k", fastcdc(Params{2 << 10, 8 << 10, 32 << 10})},
		{"fastcdc-16k", fastcdc(Params{4 << 10, 16 << 10, 64 << 10})},
		{"fastcdc-32k", fastcdc(Params{8 << 10, 32 << 10, 128 << 10})},
		{"fastcdc-64k", fastcdc(Params{16 << 10, 64 << 10, 256 << 10})},
		{"restic-16k", restic(4<<10, 14, 64<<10)},
		{"restic-32k", restic(8<<10, 15, 128<<10)},
		{"restic-64k", restic(16<<10, 16, 256<<10)},
	} {
		b.Run(c.name, func(b *testing.B) {
			seen := map[[32]byte]bool{}
			chunks := 0
			for _, f := range w.before {
				c.cut(bytes.NewReader(f), func(d []byte) { seen[sha256.Sum256(d)] = true; chunks++ })
			}
			newBytes := 0
			for _, f := range w.after {
				c.cut(bytes.NewReader(f), func(d []byte) {
					if !seen[sha256.Sum256(d)] {
						newBytes += len(d)
					}
				})
			}
			b.SetBytes(w.total)
			b.ResetTimer()
			for b.Loop() {
				for _, f := range w.before {
					c.cut(bytes.NewReader(f), func(d []byte) { sha256.Sum256(d) })
				}
			}
			b.ReportMetric(float64(newBytes)/float64(w.appended), "new/appended")
			b.ReportMetric(float64(w.total)/float64(chunks), "B/chunk")
		})
	}
}

// BenchmarkCut is the chunkers alone, without hashing.
func BenchmarkCut(b *testing.B) {
	data := newWorkload(16 << 20).before
	for _, c := range []struct {
		name string
		cut  cutter
	}{
		{"fastcdc-32k", fastcdc(Default())},
		{"restic-32k", restic(8<<10, 15, 128<<10)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(16 << 20)
			for b.Loop() {
				for _, f := range data {
					c.cut(bytes.NewReader(f), func([]byte) {})
				}
			}
		})
	}
}
