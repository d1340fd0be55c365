package frame

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"
)

// slowLink is a writer that drains at rate bytes per second, like a link
// whose buffers are full: each Write returns when the link would have
// sent its bytes.
type slowLink struct {
	rate  float64
	start time.Time
	n     int64
	buf   bytes.Buffer
}

func (l *slowLink) Write(p []byte) (int, error) {
	if l.start.IsZero() {
		l.start = time.Now()
	}
	l.n += int64(len(p))
	time.Sleep(time.Until(l.start.Add(time.Duration(float64(l.n) / l.rate * float64(time.Second)))))
	return l.buf.Write(p)
}

// countWriter is a link faster than any compressor.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

func writeAll(t *testing.T, w *Writer, data []byte) Stats {
	t.Helper()
	if _, err := w.Write(data); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return w.Stats()
}

// TestAutoSlowLink: on a link slower than the compressor Auto compresses
// compressible data, and still sends incompressible data raw.
func TestAutoSlowLink(t *testing.T) {
	const bs = 32 << 10
	for _, c := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("text/%d", c), func(t *testing.T) {
			data := textData(4 << 20)
			link := &slowLink{rate: 2e6}
			st := writeAll(t, NewWriter(link, WriterOptions{BlockSize: bs, Concurrency: c}), data)
			if ratio := float64(st.Wire) / float64(st.Plaintext); ratio > 0.3 {
				t.Errorf("stats %+v: wire/plain %.3f, want at most 0.3", st, ratio)
			}
			out, _, err := decode(link.buf.Bytes(), ReaderOptions{})
			if err != nil || !bytes.Equal(out, data) {
				t.Fatalf("read: err %v, equal %v", err, bytes.Equal(out, data))
			}
			t.Logf("stats %+v, wire/plain %.3f", st, float64(st.Wire)/float64(st.Plaintext))
		})
	}
	t.Run("random", func(t *testing.T) {
		data := randomData(4 << 20)
		link := &slowLink{rate: 16e6}
		st := writeAll(t, NewWriter(link, WriterOptions{BlockSize: bs, Concurrency: 2}), data)
		if st.ZstdBlocks+st.S2Blocks+st.StreamBlocks != 0 {
			t.Errorf("stats %+v: want every block raw", st)
		}
	})
}

// TestAutoFastLink: on a link faster than zstd Auto sends compressible
// data as S2 once past its first warmupBlocks, while Zstd still
// compresses every block with zstd.
func TestAutoFastLink(t *testing.T) {
	const bs = 64 << 10
	data := textData(32 << 20)
	blocks := int64(len(data) / bs)
	st := writeAll(t, NewWriter(&countWriter{}, WriterOptions{BlockSize: bs, Concurrency: 2, NoDigest: true}), data)
	t.Logf("auto: stats %+v", st)
	if st.S2Blocks < (blocks-warmupBlocks)*3/4 || st.RawBlocks != 0 {
		t.Errorf("auto: stats %+v, want most of the %d blocks after warmup S2, none raw", st, blocks-warmupBlocks)
	}
	// zstd cannot pay where S2's bytes cost the link nothing: past the
	// blocks compressed before the first was sent (S2 trials made with
	// zstd too, the link not measured yet), it is neither warmed up nor
	// probed.
	// (On a loaded machine a preempted sender makes the link look slow
	// for a while, so the bound is the warmup's, not the pipeline's.)
	if z := st.ZstdBlocks + st.StreamBlocks; z < 1 || z > warmupBlocks {
		t.Errorf("auto: stats %+v, want zstd only in the warmup (at most %d blocks)", st, warmupBlocks)
	}
	st = writeAll(t, NewWriter(io.Discard, WriterOptions{Compress: Zstd, BlockSize: bs, Concurrency: 2}), data)
	if st.ZstdBlocks != blocks {
		t.Errorf("zstd: stats %+v, want all %d blocks zstd", st, blocks)
	}
}

// TestAutoSmallStream: a stream of at most warmupBlocks blocks is
// compressed whatever the link, as before anything can be measured: zstd
// first, then S2, and zstd in turn with it only where zstd may pay. On a
// link faster than S2 it cannot, and zstd is not tried again once the
// link is measured.
func TestAutoSmallStream(t *testing.T) {
	const bs = 64 << 10
	st := writeAll(t, NewWriter(&countWriter{}, WriterOptions{BlockSize: bs}), textData(warmupBlocks*bs))
	if z := st.ZstdBlocks + st.StreamBlocks; z < 1 || z > 1+1+queueExtra || z+st.S2Blocks != warmupBlocks {
		t.Errorf("fast link: stats %+v, want all %d blocks compressed, zstd only before the link is measured, the rest S2", st, warmupBlocks)
	}
	link := &slowLink{rate: 1e6}
	st = writeAll(t, NewWriter(link, WriterOptions{BlockSize: bs, Concurrency: 1}), textData(warmupBlocks*bs))
	// How many blocks go zstd depends on the CPU time zstd is measured to
	// take over S2, which a loaded machine under -race inflates past the
	// link time it saves (zstd then no longer may pay): at least the first.
	if z := st.ZstdBlocks + st.StreamBlocks; z < 1 || st.RawBlocks != 0 || z+st.S2Blocks != warmupBlocks {
		t.Errorf("1 MB/s link: stats %+v, want all %d blocks compressed, zstd in turn with S2", st, warmupBlocks)
	}
}

// TestAutoPicksCodec: Auto sends zstd where the link is slow (the bytes
// saved are worth zstd's time) and S2 where it is fast but still slower
// than S2 (zstd's extra saving is not worth its time there).
func TestAutoPicksCodec(t *testing.T) {
	const bs = 64 << 10
	data := textData(16 << 20)
	// Slow enough that zstd wins even under the race detector, which
	// slows zstd's Go code far more than S2's assembly.
	slow := writeAll(t, NewWriter(&slowLink{rate: 1e5}, WriterOptions{BlockSize: bs, Concurrency: 2}), data[:2<<20])
	if slow.ZstdBlocks+slow.StreamBlocks <= slow.S2Blocks {
		t.Errorf("100 kB/s link: stats %+v, want mostly zstd", slow)
	}
	fast := writeAll(t, NewWriter(&slowLink{rate: 400e6}, WriterOptions{BlockSize: bs, Concurrency: 2}), data)
	if fast.S2Blocks <= fast.ZstdBlocks+fast.StreamBlocks {
		t.Errorf("400 MB/s link: stats %+v, want mostly S2", fast)
	}
}

// TestAutoTrialsCostNoWire: on a slow link (800 kbit/s: slow enough that
// zstd keeps ahead of it even under the race detector on a loaded
// machine; at 4 Mbit/s a loaded CI machine's zstd fell behind the link,
// whose Writes then returned at once, and Auto rightly took S2) the
// S2 trials of the warmup, of the blocks compressed before the link is
// measured, and of the probes beside zstd are compressed with zstd too
// and the smaller is sent, so that Auto's stream is within 25% of what
// zstd alone sends (a block or two may still go S2 while the measures
// settle), not a mix of both codecs' sizes (1.6 times, before).
func TestAutoTrialsCostNoWire(t *testing.T) {
	const bs = 512 << 10
	data := textData(4 << 20)
	zs := writeAll(t, NewWriter(&countWriter{}, WriterOptions{BlockSize: bs, Compress: Zstd}), data)
	link := &slowLink{rate: 0.1e6}
	st := writeAll(t, NewWriter(link, WriterOptions{BlockSize: bs, Concurrency: 2, WireCost: 5 * time.Millisecond}), data)
	t.Logf("auto %+v, zstd alone %d", st, zs.Wire)
	if st.Wire*4 > zs.Wire*5 {
		t.Fatalf("auto sent %d bytes (%+v), zstd alone %d: want within 25%%", st.Wire, st, zs.Wire)
	}
	if st.S2Blocks > 2 {
		t.Errorf("stats %+v: S2 sent on a slow link where zstd's block was smaller", st)
	}
}

// bufferedLink takes its first free bytes at once, as a relay's
// flow-control windows do, then drains at rate.
type bufferedLink struct {
	slowLink
	free int64
}

func (l *bufferedLink) Write(p []byte) (int, error) {
	if l.free > 0 {
		l.free -= int64(len(p))
		return l.buf.Write(p)
	}
	return l.slowLink.Write(p)
}

// TestAutoBuffered: behind a channel whose buffers take the first 4 MiB
// at once, a Writer told so (Buffered) does not take those instant
// Writes for a fast link: on a slow one it sends about what zstd alone
// sends; one not told mixes in S2 blocks.
func TestAutoBuffered(t *testing.T) {
	data := textData(16 << 20)
	zs := writeAll(t, NewWriter(&countWriter{}, WriterOptions{BlockSize: 1 << 20, Compress: Zstd}), data)
	told := writeAll(t, NewWriter(&bufferedLink{slowLink{rate: 0.5e6}, 4 << 20}, WriterOptions{BlockSize: 1 << 20, Concurrency: 2, Buffered: 4 << 20}), data)
	if told.Wire*4 > zs.Wire*5 || told.S2Blocks > 2 {
		t.Fatalf("told of the buffers: %+v, zstd alone %d bytes: want within 25%%", told, zs.Wire)
	}
	untold := writeAll(t, NewWriter(&bufferedLink{slowLink{rate: 0.5e6}, 4 << 20}, WriterOptions{BlockSize: 1 << 20, Concurrency: 2}), data)
	if untold.S2Blocks == 0 {
		t.Fatalf("not told of the buffers: %+v; want the instant Writes taken for a fast link (S2 blocks)", untold)
	}
}

// TestAutoLANStartsWithS2: until the link is measured past the channel's
// buffers, Auto compresses with zstd (and tries S2 with zstd too) where
// the round trip is a WAN's or not known yet, but with S2 alone where it
// is a LAN's: zstd's first MiBs cost a fast link's ends more CPU than
// their bytes take to send.
func TestAutoLANStartsWithS2(t *testing.T) {
	data := textData(6 << 20)
	tests := []struct {
		name     string
		rtt      func() time.Duration
		wantZstd bool
	}{
		{"lan", rttOf(time.Millisecond), false},
		{"wan", rttOf(40 * time.Millisecond), true},
		{"round trip not measured", rttOf(0), true},
		{"no round trip", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The buffers take the whole stream: the link is never measured.
			w := NewWriter(&countWriter{}, WriterOptions{BlockSize: 1 << 20, Concurrency: 2, Buffered: 64 << 20, RTT: tt.rtt})
			st := writeAll(t, w, data)
			zstdUsed := st.ZstdBlocks+st.StreamBlocks > 0 || w.codecT[codecIndex(typeZstd)].n > 0
			if zstdUsed != tt.wantZstd {
				t.Errorf("stats %+v, zstd tried on %.0f bytes: want zstd used %v", st, w.codecT[codecIndex(typeZstd)].n, tt.wantZstd)
			}
			if tt.name == "lan" && st.S2Blocks == 0 {
				t.Errorf("stats %+v: want S2 blocks", st)
			}
		})
	}
}
