package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/klauspost/compress/zstd"
)

// rttOf is a WriterOptions.RTT that returns d.
func rttOf(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

// TestStreamRoundTrip: on a WAN's round trip Auto sends what compresses
// as stream blocks, which decode across block boundaries to the
// plaintext, whatever the Reader's buffer; what does not compress still
// goes raw.
func TestStreamRoundTrip(t *testing.T) {
	const bs = 16 << 10
	text := textData(40 * bs)
	random := randomData(12 * bs)
	tests := []struct {
		name       string
		data       []byte
		rtt        func() time.Duration
		wantStream bool
	}{
		{"text wan", text, rttOf(40 * time.Millisecond), true},
		{"text rtt unknown yet", text, rttOf(0), true},
		{"random wan", random, rttOf(40 * time.Millisecond), false},
		{"random then text wan", append(bytes.Clone(random), text...), rttOf(40 * time.Millisecond), true},
		{"text random text wan", append(append(bytes.Clone(text[:20*bs]), random...), text[20*bs:]...), rttOf(40 * time.Millisecond), true},
		{"zeros wan", zeroData(20 * bs), rttOf(40 * time.Millisecond), true},
		{"text lan", text, rttOf(time.Millisecond), false},
		{"text rtt not given", text, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := WriterOptions{BlockSize: bs, Concurrency: 2, RTT: tt.rtt}
			if !tt.wantStream {
				// The link is never measured: a Write into the buffer
				// that the scheduler stalls (a loaded machine, the race
				// detector) reads as a slow link, on which zstd pays.
				opts.Buffered = 1 << 40
			}
			wire, ws := encode(t, tt.data, opts, 5000)
			if got := ws.StreamBlocks > 0; got != tt.wantStream && tt.name != "random wan" {
				t.Fatalf("stats %+v: stream blocks %v, want %v", ws, got, tt.wantStream)
			}
			// Random data goes raw once a block has shown it does
			// not pay; the blocks cut before that was known are
			// zstd's tries, never the stream's (a sample of each
			// says it would not pay).
			if n := int64(len(tt.data)); tt.name == "random wan" && (ws.RawBlocks < n/bs-int64(queueExtra+2) || ws.Wire > n+1024 || ws.StreamBlocks > 0) {
				t.Fatalf("stats %+v: want nearly every block raw, none in the stream", ws)
			}
			for _, size := range []int{1, 4095, bs, 3 * bs} {
				out, err := readWith(NewReader(bytes.NewReader(wire), ReaderOptions{}), size)
				if err != nil || !bytes.Equal(out, tt.data) {
					t.Fatalf("read %d at a time: err %v, equal %v", size, err, bytes.Equal(out, tt.data))
				}
			}
			out, r, err := decode(wire, ReaderOptions{NoDigest: false})
			if err != nil || !bytes.Equal(out, tt.data) {
				t.Fatalf("read: err %v, equal %v", err, bytes.Equal(out, tt.data))
			}
			if rs := r.Stats(); rs != ws {
				t.Fatalf("reader stats %+v, writer stats %+v", rs, ws)
			}
			slow, err := readWith(NewReader(iotest.OneByteReader(bytes.NewReader(wire)), ReaderOptions{}), 777)
			if err != nil || !bytes.Equal(slow, tt.data) {
				t.Fatalf("one-byte reader: err %v, equal %v", err, bytes.Equal(slow, tt.data))
			}
		})
	}
}

// TestStreamSaves: the stream refers across blocks, so it sends less
// than frames of their own, at the same block size.
func TestStreamSaves(t *testing.T) {
	data := textData(2 << 20)
	_, frames := encode(t, data, WriterOptions{BlockSize: 64 << 10, Compress: Zstd}, 1<<20)
	_, stream := encode(t, data, WriterOptions{BlockSize: 64 << 10, RTT: rttOf(time.Second)}, 1<<20)
	if stream.StreamBlocks < 28 || stream.Wire >= frames.Wire {
		t.Fatalf("stream %+v against frames of their own %+v: want nearly all stream blocks, fewer wire bytes", stream, frames)
	}
	t.Logf("stream %d bytes, frames %d", stream.Wire, frames.Wire)
}

// TestStreamChoice: the round trip decides, and the link can overrule
// it: a WAN that turns out faster than the stream's encoder gets frames
// of their own; a round trip learnt late (a LAN's) ends the stream.
func TestStreamChoice(t *testing.T) {
	const bs = 64 << 10
	t.Run("slow wan", func(t *testing.T) {
		st := writeAll(t, NewWriter(&slowLink{rate: 4e6}, WriterOptions{BlockSize: bs, Concurrency: 2, RTT: rttOf(40 * time.Millisecond)}), textData(64*bs))
		if st.StreamBlocks < 60 {
			t.Fatalf("stats %+v: want the stream after the first blocks", st)
		}
	})
	t.Run("fast wan", func(t *testing.T) {
		// Past 4 MiB of wire (the least fastWAN asks, no Buffered) a
		// link that takes everything at once is faster than the stream.
		// At the agent's 1 MiB blocks, and on four threads: zstd's one
		// measured block, its encoder's first (tables and history
		// faulted in), can cost about what the stream's default level
		// does per byte, which two threads do not beat by the 25% a
		// switch needs (at 64 KiB blocks, it can cost more).
		st := writeAll(t, NewWriter(&countWriter{}, WriterOptions{BlockSize: 1 << 20, Concurrency: 4, RTT: rttOf(40 * time.Millisecond)}), randomText(32<<20))
		if st.StreamBlocks == 0 || st.ZstdBlocks+st.S2Blocks < 6 {
			t.Fatalf("stats %+v: want the stream first, then frames of their own", st)
		}
	})
	t.Run("rtt learnt late", func(t *testing.T) {
		var rtt atomic.Int64
		w := NewWriter(&countWriter{}, WriterOptions{BlockSize: bs, Concurrency: 2, RTT: func() time.Duration { return time.Duration(rtt.Load()) }})
		data := textData(64 * bs)
		if _, err := w.Write(data[:32*bs]); err != nil {
			t.Fatal(err)
		}
		before := w.Stats().StreamBlocks
		rtt.Store(int64(time.Millisecond))
		st := writeAll(t, w, data[32*bs:])
		if before == 0 || st.StreamBlocks > before+int64(w.maxSlots()) || st.ZstdBlocks+st.S2Blocks < 28 {
			t.Fatalf("stats %+v (%d stream blocks before the round trip): want stream blocks until a LAN's round trip is known, none after", st, before)
		}
	})
}

// randomText is text that compresses about as agent logs do: words
// drawn at random, so that neither the stream nor frames find it all
// repeated.
func randomText(n int) []byte {
	words := bytes.Fields([]byte("the quick brown fox jumps over a lazy dog while tool_call read_file path src main.go returns content tokens input output model session uuid"))
	r := randomData(n / 4)
	out := make([]byte, 0, n+16)
	for i := 0; len(out) < n; i++ {
		out = append(out, words[int(r[i%len(r)])%len(words)]...)
		out = append(out, ' ')
	}
	return out[:n]
}

// pieces encodes parts as one zstd stream with window, flushed after
// each part: the payloads of consecutive stream blocks, before their
// inner length.
func pieces(t *testing.T, window int, parts ...[]byte) [][]byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(window), zstd.WithEncoderCRC(false))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, p := range parts {
		if _, err := enc.Write(p); err != nil {
			t.Fatal(err)
		}
		if err := enc.Flush(); err != nil {
			t.Fatal(err)
		}
		out = append(out, bytes.Clone(buf.Bytes()))
		buf.Reset()
	}
	return out
}

// streamPayload is a stream block's payload: the inner length, z, pad.
func streamPayload(z []byte, pad ...byte) []byte {
	return append(append(binary.BigEndian.AppendUint32(nil, uint32(len(z))), z...), pad...)
}

// TestStreamHostile: a stream block's payload must decode to exactly its
// plaintext, given the blocks before, within StreamWindow: whatever else
// a peer sends is an error that names the sentinel, and nothing is
// decoded past a block's declared length.
func TestStreamHostile(t *testing.T) {
	a, b := textData(4096), randomText(4096)
	ab := append(bytes.Clone(a), b...)
	p := pieces(t, 1<<20, a, b)
	wide := pieces(t, 2*StreamWindow, a)
	zeros := make([]byte, 64<<10)
	pz := pieces(t, 1<<20, zeros)
	// A Writer ends the stream's frame when the stream goes unused and
	// begins another: a second frame is held to StreamWindow too.
	// The end of a's frame goes ahead of the next frame, in the next
	// block, as the Writer sends it.
	flushedA, endA := ended(t, 1<<20, a)
	wideB := append(bytes.Clone(endA), pieces(t, 2*StreamWindow, b)[0]...)
	fb, _ := ended(t, 1<<20, b)
	nextB := append(bytes.Clone(endA), fb...)
	tests := []struct {
		name string
		wire []byte
		opts ReaderOptions
		want error
	}{
		{"window over StreamWindow", stream(a, block(typeStream, len(a), streamPayload(wide[0]))), ReaderOptions{}, ErrLimit},
		{"decodes past its block, next block", stream(ab, block(typeStream, len(a)-100, streamPayload(p[0])), block(typeStream, len(b)+100, streamPayload(p[1]))), ReaderOptions{}, ErrCorrupt},
		{"decodes past the last block", stream(a[:len(a)-100], block(typeStream, len(a)-100, streamPayload(p[0]))), ReaderOptions{}, ErrCorrupt},
		{"decodes short", stream(append(bytes.Clone(a), 'x'), block(typeStream, len(a)+1, streamPayload(p[0]))), ReaderOptions{}, ErrCorrupt},
		{"ends inside a zstd block", stream(a, block(typeStream, len(a), streamPayload(p[0][:len(p[0])-10]))), ReaderOptions{}, ErrCorrupt},
		{"bytes left over", stream(a, block(typeStream, len(a), streamPayload(append(bytes.Clone(p[0]), p[1]...)))), ReaderOptions{}, ErrCorrupt},
		{"nonzero padding", stream(a, block(typeStream, len(a), streamPayload(p[0], 0, 1))), ReaderOptions{}, ErrCorrupt},
		{"inner length zero", stream(a, block(typeStream, len(a), append([]byte{0, 0, 0, 0}, p[0]...))), ReaderOptions{}, ErrCorrupt},
		{"inner length past payload", stream(a, block(typeStream, len(a), append([]byte{0, 0, 0x10, 0}, p[0]...))), ReaderOptions{}, ErrCorrupt},
		{"no inner length", stream(a, block(typeStream, len(a), []byte{0, 0, 1})), ReaderOptions{}, ErrCorrupt},
		{"over its slack", stream(a[:10], block(typeStream, 10, streamPayload(p[0]))), ReaderOptions{}, ErrCorrupt},
		{"over ratio", stream(zeros, block(typeStream, len(zeros), streamPayload(pz[0]))), ReaderOptions{MaxRatio: 2}, ErrLimit},
		{"garbage", stream(a, block(typeStream, len(a), streamPayload([]byte("not zstd at all")))), ReaderOptions{}, ErrCorrupt},
		{"second block without the first", stream(b, block(typeStream, len(b), streamPayload(p[1]))), ReaderOptions{}, ErrCorrupt},
		{"second frame over StreamWindow", stream(ab, block(typeStream, len(a), streamPayload(flushedA)), block(typeStream, len(b), streamPayload(wideB))), ReaderOptions{}, ErrLimit},
		{"second frame decodes past its block", stream(ab[:len(ab)-100], block(typeStream, len(a), streamPayload(flushedA)), block(typeStream, len(b)-100, streamPayload(nextB))), ReaderOptions{}, ErrCorrupt},
		{"frame's end in its own block", stream(ab, block(typeStream, len(a), streamPayload(append(bytes.Clone(flushedA), endA...))), block(typeStream, len(b), streamPayload(fb))), ReaderOptions{}, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := decode(tt.wire, tt.opts)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err %v (after %d bytes), want %v", err, len(out), tt.want)
			}
		})
	}
	// The well-formed stream the cases above bend decodes.
	out, _, err := decode(stream(ab, block(typeStream, len(a), streamPayload(p[0])), block(typeStream, len(b), streamPayload(p[1]))), ReaderOptions{})
	if err != nil || !bytes.Equal(out, ab) {
		t.Fatalf("well-formed: err %v, equal %v", err, bytes.Equal(out, ab))
	}
	out, _, err = decode(stream(ab, block(typeStream, len(a), streamPayload(flushedA)), block(typeStream, len(b), streamPayload(nextB))), ReaderOptions{})
	if err != nil || !bytes.Equal(out, ab) {
		t.Fatalf("well-formed, two frames: err %v, equal %v", err, bytes.Equal(out, ab))
	}
}

// ended is p as one zstd frame with window, as a stream block carries
// it, flushed, and the bytes that end the frame (endStream's), which the
// next stream block carries ahead of its own.
func ended(t *testing.T, window int, p []byte) (flushed, end []byte) {
	t.Helper()
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(window), zstd.WithEncoderCRC(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Write(p); err != nil {
		t.Fatal(err)
	}
	if err := enc.Flush(); err != nil {
		t.Fatal(err)
	}
	flushed = bytes.Clone(buf.Bytes())
	buf.Reset()
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return flushed, buf.Bytes()
}

// mixedStream is mixed with stream blocks among the zstd ones (and the
// random part raw, or in the stream when it was cut before a block that
// did not pay was sent).
func mixedStream(t testing.TB) ([]byte, []byte) {
	data := append(append(textData(3000), randomData(512)...), zeroData(1024)...)
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{BlockSize: 512, RTT: rttOf(time.Second)})
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if ws := w.Stats(); ws.StreamBlocks == 0 || ws.ZstdBlocks == 0 {
		t.Fatalf("stats %+v: want stream and zstd blocks", ws)
	}
	return data, buf.Bytes()
}

// TestStreamDamage: a stream with stream blocks, cut anywhere, is
// ErrTruncated, and any flipped byte is an error: a stream block's
// damage may decode (zstd has no checksum here), but the trailer's
// digests catch it.
func TestStreamDamage(t *testing.T) {
	data, wire := mixedStream(t)
	if out, _, err := decode(wire, ReaderOptions{}); err != nil || !bytes.Equal(out, data) {
		t.Fatalf("intact: err %v, equal %v", err, bytes.Equal(out, data))
	}
	for n := range len(wire) {
		if _, _, err := decode(wire[:n], ReaderOptions{}); !errors.Is(err, ErrTruncated) {
			t.Fatalf("cut at %d of %d: err %v, want ErrTruncated", n, len(wire), err)
		}
	}
	// One flip a byte, by turns (each decode makes a stream decoder
	// with its StreamWindow of history).
	for i := range wire {
		x := []byte{0x01, 0x80, 0xFF}[i%3]
		bad := bytes.Clone(wire)
		bad[i] ^= x
		_, _, err := decode(bad, ReaderOptions{})
		if err == nil {
			t.Fatalf("byte %d ^ %#x: read succeeded", i, x)
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrLimit) && !errors.Is(err, ErrTruncated) {
			t.Fatalf("byte %d ^ %#x: err %v is not a frame sentinel", i, x, err)
		}
	}
}

// TestStreamEnds: a stream unused while data does not compress is ended
// and its encoder let go; text after that begins a new frame in the
// same zstd stream, which decodes to the plaintext whatever the reads.
func TestStreamEnds(t *testing.T) {
	const bs = 16 << 10
	text := textData(24 * bs)
	tests := []struct {
		name       string
		data       []byte
		wantFrames int
	}{
		{"text random text", append(append(bytes.Clone(text[:12*bs]), randomData(16*bs)...), text[12*bs:]...), 2},
		{"text random text random text", append(append(append(append(bytes.Clone(text[:12*bs]), randomData(16*bs)...), text[:12*bs]...), randomData(16*bs)...), text[12*bs:]...), 3},
		{"text then random", append(bytes.Clone(text), randomData(16*bs)...), 1},
		// A short gap keeps the stream's frame and its history.
		{"text, a short gap, text", append(append(bytes.Clone(text[:12*bs]), randomData(2*bs)...), text[12*bs:]...), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf, WriterOptions{BlockSize: bs, Concurrency: 2, RTT: rttOf(40 * time.Millisecond)})
			st := writeAll(t, w, tt.data)
			if w.streamFrames != tt.wantFrames || st.StreamBlocks == 0 {
				t.Fatalf("stats %+v: %d stream frames, want %d", st, w.streamFrames, tt.wantFrames)
			}
			if tt.name == "text then random" && w.stream != nil {
				t.Fatal("the stream's encoder is kept after the stream went unused")
			}
			for _, size := range []int{1, 4095, bs, 3 * bs} {
				out, err := readWith(NewReader(bytes.NewReader(buf.Bytes()), ReaderOptions{}), size)
				if err != nil || !bytes.Equal(out, tt.data) {
					t.Fatalf("read %d at a time: err %v, equal %v", size, err, bytes.Equal(out, tt.data))
				}
			}
			slow, err := readWith(NewReader(iotest.OneByteReader(bytes.NewReader(buf.Bytes())), ReaderOptions{}), 777)
			if err != nil || !bytes.Equal(slow, tt.data) {
				t.Fatalf("one-byte reader: err %v, equal %v", err, bytes.Equal(slow, tt.data))
			}
		})
	}
}
