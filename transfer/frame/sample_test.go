package frame

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
	"time"
)

// TestAutoSampleSkipsTrials: Auto sends a block raw without compressing
// it when S2 saves nothing on a sample spread over it, and tries every
// block whose sample compresses anywhere in it, on a LAN and on a WAN
// (where the stream is in play), and the stream still decodes.
func TestAutoSampleSkipsTrials(t *testing.T) {
	const bs = 1 << 20
	random := randomData(4 * bs)
	text := textData(4 * bs)
	// Each block random but for its last eighth, text: only the spread
	// sample's last slice sees the text.
	tail := bytes.Clone(random)
	for b := 0; b < len(tail); b += bs {
		copy(tail[b+bs*7/8:b+bs], text[b:])
	}
	tests := []struct {
		name      string
		data      []byte
		wantTried bool
		maxRatio  float64 // wire/plain
	}{
		{"random", random, false, 1.001},
		{"text", text, true, 0.3},
		{"text at each block's end", tail, true, 0.99},
		{"random then text", append(bytes.Clone(random), text...), true, 0.7},
	}
	for _, rtt := range []time.Duration{time.Millisecond, 40 * time.Millisecond} {
		for _, tt := range tests {
			t.Run(rtt.String()+"/"+tt.name, func(t *testing.T) {
				var out bytes.Buffer
				w := NewWriter(&out, WriterOptions{BlockSize: bs, Concurrency: 2, RTT: func() time.Duration { return rtt }})
				st := writeAll(t, w, tt.data)
				tried := 0.0
				for _, c := range w.codecT {
					tried += c.n
				}
				if (tried > 0) != tt.wantTried {
					t.Errorf("%.0f plaintext bytes tried with a codec (stats %+v), want tried %v", tried, st, tt.wantTried)
				}
				if want := blockCount(len(tt.data), bs, true); tt.name == "random" && int(st.RawBlocks) != want {
					t.Errorf("stats %+v: want %d raw blocks", st, want)
				}
				if ratio := float64(st.Wire) / float64(st.Plaintext); ratio > tt.maxRatio {
					t.Errorf("stats %+v: wire/plain %.3f, want at most %.3f", st, ratio, tt.maxRatio)
				}
				got, _, err := decode(out.Bytes(), ReaderOptions{})
				if err != nil || !bytes.Equal(got, tt.data) {
					t.Fatalf("read: err %v, equal %v", err, bytes.Equal(got, tt.data))
				}
			})
		}
	}
}

// headed is n bytes of a tar stream as archive.Writer begins a directory
// download: a directory and a file in it, each with a PAX header, then
// the file's random bytes.
func headed(t *testing.T, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	mtime := time.Unix(1796427090, 977218792)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "src/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX},
		{Typeflag: tar.TypeReg, Name: "src/blob", Mode: 0o644, Size: int64(n), ModTime: mtime, Format: tar.FormatPAX},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	return append(b.Bytes(), randomData(n)...)[:n]
}

// TestSampleWhole: what a block's sample saves must be spread over a
// slice to count. A block that is the tar headers of a directory and a
// file (4 KiB, mostly zeros, more than 3% of the sample) and then random
// bytes goes untried, whether a whole MiB or the stream's first 64 KiB;
// text in one slice of four is enough.
func TestSampleWhole(t *testing.T) {
	const bs = 1 << 20
	zeroed := randomData(bs)
	clear(zeroed[:1536])
	quarter := randomData(bs)
	copy(quarter[bs-sampleSize/sampleParts:], textData(bs))
	first := randomData(bs)
	copy(first, textData(sampleSize/sampleParts))
	tests := []struct {
		name string
		p    []byte
		want bool
	}{
		{"random", randomData(bs), false},
		{"zeros then random", zeroed, false},
		{"tar headers then random", headed(t, bs), false},
		{"tar headers then random, 64 KiB", headed(t, 64<<10), false},
		{"text in the last slice", quarter, true},
		{"text in the first slice", first, true},
		{"text", textData(bs), true},
		{"small text", textData(4 << 10), true},
		{"small random", randomData(4 << 10), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWriter(io.Discard, WriterOptions{})
			if got := w.sampleCompresses(tt.p); got != tt.want {
				t.Errorf("sampleCompresses = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestAutoStreamSampled: on a WAN, a block that follows one that paid is
// tried without the sample that gates raw, but it still begins no stream
// frame (18 MiB of encoder, 10 ms a MiB) unless its sample compresses.
func TestAutoStreamSampled(t *testing.T) {
	const bs = 1 << 20
	// Text for the stream's first block (64 KiB, see TestBlockRamp), so
	// that the random bytes begin the next.
	text, random := textData(64<<10), randomData(3*bs)
	var out bytes.Buffer
	w := NewWriter(&out, WriterOptions{BlockSize: bs, Concurrency: 1, RTT: func() time.Duration { return 40 * time.Millisecond }})
	if _, err := w.Write(text); err != nil {
		t.Fatal(err)
	}
	// The text block is sent, and has paid, before the random ones are cut.
	deadline := time.Now().Add(10 * time.Second)
	for w.Stats().Plaintext < int64(len(text)) {
		if time.Now().After(deadline) {
			t.Fatal("the first block was not sent in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	st := writeAll(t, w, random)
	if st.ZstdBlocks == 0 {
		t.Fatalf("stats %+v: the text block did not go as zstd", st)
	}
	if w.streamFrames != 0 || st.StreamBlocks != 0 {
		t.Errorf("stats %+v, %d stream frames begun: want none for random data", st, w.streamFrames)
	}
	got, _, err := decode(out.Bytes(), ReaderOptions{})
	if want := append(bytes.Clone(text), random...); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read: err %v, equal %v", err, bytes.Equal(got, want))
	}
}
