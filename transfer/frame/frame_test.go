package frame

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/klauspost/compress/s2"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Test data: random bytes do not compress; JSONL-like text and zeros do.
func randomData(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(b)
	return b
}

func textData(n int) []byte {
	var sb strings.Builder
	for i := 0; sb.Len() < n; i++ {
		fmt.Fprintf(&sb, `{"seq":%d,"type":"tool_call","name":"read_file","path":"src/pkg%d/file.go"}`+"\n", i, i%37)
	}
	return []byte(sb.String()[:n])
}

func zeroData(n int) []byte { return make([]byte, n) }

func encode(t testing.TB, data []byte, opts WriterOptions, chunk int) ([]byte, Stats) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, opts)
	for p := data; len(p) > 0; {
		n := min(chunk, len(p))
		if _, err := w.Write(p[:n]); err != nil {
			t.Fatalf("Write: %v", err)
		}
		p = p[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := w.Stats().Wire; got != int64(buf.Len()) {
		t.Fatalf("Stats().Wire = %d, wrote %d", got, buf.Len())
	}
	return buf.Bytes(), w.Stats()
}

func decode(wire []byte, opts ReaderOptions) ([]byte, *Reader, error) {
	r := NewReader(bytes.NewReader(wire), opts)
	out, err := io.ReadAll(r)
	return out, r, err
}

func TestRoundTrip(t *testing.T) {
	const bs = 4 << 10
	gens := map[string]func(int) []byte{"random": randomData, "text": textData, "zeros": zeroData}
	for _, mode := range []Mode{Auto, Zstd, S2, None} {
		for name, gen := range gens {
			for _, n := range []int{0, 1, bs - 1, bs, bs + 1, 7*bs + 123} {
				t.Run(fmt.Sprintf("%v/%s/%d", mode, name, n), func(t *testing.T) {
					data := gen(n)
					wire, ws := encode(t, data, WriterOptions{Compress: mode, BlockSize: bs}, 1000)
					out, r, err := decode(wire, ReaderOptions{})
					if err != nil {
						t.Fatalf("read: %v", err)
					}
					if !bytes.Equal(out, data) {
						t.Fatalf("plaintext differs: got %d bytes, want %d", len(out), len(data))
					}
					if rs := r.Stats(); rs != ws {
						t.Fatalf("reader stats %+v, writer stats %+v", rs, ws)
					}
					blocks := int64((n + bs - 1) / bs)
					compressible := name != "random" && mode != None && n > 16
					switch {
					case ws.RawBlocks+ws.ZstdBlocks+ws.S2Blocks+ws.StreamBlocks != blocks:
						t.Fatalf("stats %+v, want %d blocks", ws, blocks)
					case compressible && ws.ZstdBlocks+ws.S2Blocks+ws.StreamBlocks < int64(n/bs):
						// A short last block (a few bytes) may stay raw.
						t.Fatalf("stats %+v: want all %d full blocks compressed", ws, n/bs)
					case mode != Auto && ws.StreamBlocks != 0:
						t.Fatalf("stats %+v: stream blocks in %v mode", ws, mode)
					case mode == Zstd && ws.S2Blocks != 0, mode == S2 && ws.ZstdBlocks != 0 && name != "zeros":
						// S2 mode sends a block S2 makes denser than MaxRatio
						// as zstd, whose padding keeps it within.
						t.Fatalf("stats %+v: blocks of the other codec in %v mode", ws, mode)
					case !compressible && n > 16 && ws.ZstdBlocks+ws.S2Blocks+ws.StreamBlocks != 0:
						t.Fatalf("stats %+v: want all blocks raw", ws)
					case int64(n) > ws.Wire*DefaultMaxRatio:
						t.Fatalf("wire %d bytes for %d plaintext: over ratio cap", ws.Wire, n)
					}
					// A second read after EOF is still EOF, and a byte-at-a-time
					// reader gives the same plaintext.
					if n, err := r.Read(make([]byte, 1)); n != 0 || err != io.EOF {
						t.Fatalf("Read after EOF = %d, %v", n, err)
					}
					slow, err := io.ReadAll(NewReader(iotest.OneByteReader(bytes.NewReader(wire)), ReaderOptions{}))
					if err != nil || !bytes.Equal(slow, data) {
						t.Fatalf("one-byte reader: err %v, equal %v", err, bytes.Equal(slow, data))
					}
				})
			}
		}
	}
}

// blockCount is how many blocks a stream of n bytes is cut in at block
// size bs: 64 KiB, then each twice the last up to bs, or up to rawBlock
// when every block goes raw untried (TestBlockRamp).
func blockCount(n, bs int, raw bool) int {
	if raw {
		bs = min(bs, rawBlock)
	}
	blocks := 0
	for size := min(64<<10, bs); n > 0; size = min(2*size, bs) {
		n -= size
		blocks++
	}
	return blocks
}

// TestBlockRamp: a stream begins with a 64 KiB block and doubles the
// size of each next one up to BlockSize, or up to rawBlock while blocks
// go raw untried (None here), whether the data comes by Write in pieces,
// by Write all at once, or read into Buffer; the reader takes every
// size. (Random data: zstd's blocks go raw too, tried.)
func TestBlockRamp(t *testing.T) {
	const k = 1 << 10
	tests := []struct {
		mode  Mode
		bs, n int
		want  []int
	}{
		{Zstd, 1 << 20, 3<<20 + 5, []int{64 * k, 128 * k, 256 * k, 512 * k, 1024 * k, 1024 * k, 64*k + 5}},
		{None, 1 << 20, 2<<20 + 5, []int{64 * k, 128 * k, 256 * k, 256 * k, 256 * k, 256 * k, 256 * k, 256 * k, 256 * k, 64*k + 5}},
		{Zstd, 256 * k, 600 * k, []int{64 * k, 128 * k, 256 * k, 152 * k}},
		{None, 256 * k, 600 * k, []int{64 * k, 128 * k, 256 * k, 152 * k}},
		{None, 96 * k, 300 * k, []int{64 * k, 96 * k, 96 * k, 44 * k}},
		{None, 16 * k, 40 * k, []int{16 * k, 16 * k, 8 * k}},
		{None, 1 << 20, 10 * k, []int{10 * k}},
	}
	for _, tt := range tests {
		data := randomData(tt.n)
		for _, how := range []string{"whole", "pieces", "buffer"} {
			t.Run(fmt.Sprintf("%v/%d/%d/%s", tt.mode, tt.bs, tt.n, how), func(t *testing.T) {
				var out bytes.Buffer
				w := NewWriter(&out, WriterOptions{Compress: tt.mode, BlockSize: tt.bs})
				for off := 0; off < len(data); {
					var err error
					n := len(data) - off
					switch how {
					case "pieces":
						n = min(n, 7*k+3)
						_, err = w.Write(data[off : off+n])
					case "buffer":
						lent := w.Buffer()
						n = min(n, len(lent))
						copy(lent, data[off:off+n])
						_, err = w.Write(lent[:n])
					default:
						_, err = w.Write(data)
					}
					if err != nil {
						t.Fatal(err)
					}
					off += n
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				var got []int
				wire := out.Bytes()[headerSize:]
				for wire[0] == typeRaw {
					plain := int(binary.BigEndian.Uint32(wire[1:]))
					got = append(got, plain)
					wire = wire[blockHeaderSize+plain:]
				}
				if !slices.Equal(got, tt.want) {
					t.Errorf("block sizes %v, want %v", got, tt.want)
				}
				if n := blockCount(tt.n, tt.bs, tt.mode == None); len(got) != n {
					t.Errorf("blockCount(%d, %d) = %d, want %d", tt.n, tt.bs, n, len(got))
				}
				back, _, err := decode(out.Bytes(), ReaderOptions{MaxBlockSize: tt.bs})
				if err != nil || !bytes.Equal(back, data) {
					t.Fatalf("read: err %v, equal %v", err, bytes.Equal(back, data))
				}
			})
		}
	}
}

// blockSizes lists the plaintext size of each block of a frame stream.
func blockSizes(t *testing.T, wire []byte) []int {
	t.Helper()
	var got []int
	for wire = wire[headerSize:]; wire[0] >= typeRaw && wire[0] <= typeStream; {
		got = append(got, int(binary.BigEndian.Uint32(wire[1:])))
		wire = wire[blockHeaderSize+int(binary.BigEndian.Uint32(wire[5:])):]
	}
	return got
}

// TestRawRunBlocks: Auto cuts a raw run (data its sample finds does not
// compress) in blocks of rawBlock, and goes back to BlockSize once the
// data compresses again; Buffer never lends past the block's limit,
// though the buffer it lends from held a larger block before.
func TestRawRunBlocks(t *testing.T) {
	const bs, k = 1 << 20, 1 << 10
	text, random := textData(3*bs), randomData(3*bs)
	var out bytes.Buffer
	w := NewWriter(&out, WriterOptions{BlockSize: bs, Concurrency: 1})
	written, maxLent := 0, 0
	// write writes p through Buffer and waits until the sender has sent
	// every block cut: whether Auto samples a block depends on whether
	// the last one sent paid.
	write := func(p []byte, raw bool) {
		for len(p) > 0 {
			lent := w.Buffer()
			if raw {
				maxLent = max(maxLent, len(lent))
			}
			n := copy(lent, p)
			if _, err := w.Write(lent[:n]); err != nil {
				t.Fatal(err)
			}
			p, written = p[n:], written+n
		}
		for i := 0; w.Stats().Plaintext != int64(written); i++ {
			if i == 5000 {
				t.Fatalf("stats %+v: blocks not sent after 5 s", w.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	write(text[:1984*k], false)   // the ramp: 64 KiB to 1 MiB
	write(random[:bs], false)     // tried (the last block paid): raw
	write(random[bs:2*bs], false) // sampled: raw
	write(random[2*bs:], true)    // the raw run
	if _, err := w.Write(text[1984*k : 3008*k]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := []int{64 * k, 128 * k, 256 * k, 512 * k, 1024 * k, 1024 * k, 1024 * k, 256 * k, 256 * k, 256 * k, 256 * k, 256 * k, 768 * k}
	if got := blockSizes(t, out.Bytes()); !slices.Equal(got, want) {
		t.Errorf("block sizes %v, want %v", got, want)
	}
	if maxLent != rawBlock {
		t.Errorf("Buffer lent up to %d bytes in the raw run, want %d", maxLent, rawBlock)
	}
	data := slices.Concat(text[:1984*k], random, text[1984*k:3008*k])
	back, _, err := decode(out.Bytes(), ReaderOptions{})
	if err != nil || !bytes.Equal(back, data) {
		t.Fatalf("read: err %v, equal %v", err, bytes.Equal(back, data))
	}
}

func TestDefaultBlockSize(t *testing.T) {
	data := textData(3*DefaultBlockSize + 5)
	wire, ws := encode(t, data, WriterOptions{}, 1<<20)
	if int(ws.ZstdBlocks+ws.S2Blocks+ws.StreamBlocks) != blockCount(len(data), DefaultBlockSize, false) || ws.Wire > int64(len(data))/4 {
		t.Fatalf("stats %+v for %d bytes of text", ws, len(data))
	}
	out, _, err := decode(wire, ReaderOptions{})
	if err != nil || !bytes.Equal(out, data) {
		t.Fatalf("read: %v, equal %v", err, bytes.Equal(out, data))
	}
}

// TestAutoSkip: after a run of incompressible blocks Auto tries only every
// skipEvery-th block, and resumes compressing once they pay.
func TestAutoSkip(t *testing.T) {
	const bs, n = 4 << 10, 64
	data := append(randomData(n*bs), textData(n*bs)...)
	// A slow link, so that Auto wants to compress (see TestAutoSlowLink).
	w := NewWriter(&slowLink{rate: 1e6}, WriterOptions{BlockSize: bs})
	for p := data; len(p) > 0; p = p[bs:] {
		if _, err := w.Write(p[:bs]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ws := w.Stats()
	// On the text Auto has to measure that compression pays again: with
	// blocks this small (zstd's fixed cost per block weighs) that may
	// take a second probe.
	if ws.RawBlocks > n+2*skipEvery || ws.ZstdBlocks+ws.S2Blocks+ws.StreamBlocks < n-2*skipEvery {
		t.Fatalf("stats %+v: want about %d raw then %d zstd blocks", ws, n, n)
	}
}

func TestTrailingBytesUnread(t *testing.T) {
	wire, _ := encode(t, textData(10000), WriterOptions{BlockSize: 4096}, 10000)
	src := bytes.NewReader(append(wire, "tail"...))
	if _, err := io.ReadAll(NewReader(src, ReaderOptions{})); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(src); string(rest) != "tail" {
		t.Fatalf("after the trailer the underlying reader has %q, want \"tail\"", rest)
	}
}

// mixed is a stream with raw and zstd blocks, small enough to mutate at
// every byte.
func mixed(t testing.TB) ([]byte, []byte) {
	data := append(append(textData(1024), randomData(512)...), zeroData(1024)...)
	wire, ws := encode(t, data, WriterOptions{BlockSize: 512}, 300)
	if ws.RawBlocks == 0 || ws.ZstdBlocks == 0 {
		t.Fatalf("stats %+v: want both block types", ws)
	}
	return data, wire
}

func TestTruncatedEverywhere(t *testing.T) {
	_, wire := mixed(t)
	for n := range len(wire) {
		_, _, err := decode(wire[:n], ReaderOptions{})
		if !errors.Is(err, ErrTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d of %d: err %v, want ErrTruncated", n, len(wire), err)
		}
	}
}

// TestFlippedByteEverywhere: every flipped byte is an error, including
// flips in a zstd frame header that change no decoded byte (the trailer's
// wire crc32c catches those).
func TestFlippedByteEverywhere(t *testing.T) {
	_, wire := mixed(t)
	for i := range wire {
		for _, x := range []byte{0x01, 0x80, 0xFF} {
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
}

func TestStickyError(t *testing.T) {
	_, wire := mixed(t)
	r := NewReader(bytes.NewReader(wire[:len(wire)-1]), ReaderOptions{})
	_, err := io.ReadAll(r)
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("err %v", err)
	}
	if _, err2 := r.Read(make([]byte, 10)); err2 != err {
		t.Fatalf("second Read: %v, want sticky %v", err2, err)
	}

	w := NewWriter(failWriter{}, WriterOptions{BlockSize: 16})
	_, err = w.Write(make([]byte, 100))
	if err == nil {
		t.Fatal("Write to a failing writer succeeded")
	}
	if _, err2 := w.Write([]byte{1}); err2 != err {
		t.Fatalf("second Write: %v, want sticky %v", err2, err)
	}
	if err2 := w.Close(); err2 != err {
		t.Fatalf("Close: %v, want sticky %v", err2, err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestWriteAfterClose(t *testing.T) {
	w := NewWriter(io.Discard, WriterOptions{})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, errClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []WriterOptions{{BlockSize: -1}, {BlockSize: MaxBlockSizeLimit + 1}, {MaxRatio: 1}, {Compress: 7}} {
		if err := NewWriter(io.Discard, o).Close(); err == nil {
			t.Errorf("NewWriter(%+v): no error", o)
		}
	}
	for _, o := range []ReaderOptions{{MaxBlockSize: -1}, {MaxRatio: 1}, {MaxTotal: -1}} {
		if _, err := NewReader(bytes.NewReader(nil), o).Read(make([]byte, 1)); err == nil || err == io.EOF {
			t.Errorf("NewReader(%+v): err %v", o, err)
		}
	}
	for _, s := range []string{"auto", "zstd", "s2", "none"} {
		if m, err := ParseMode(s); err != nil || m.String() != s {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseMode("gzip"); err == nil {
		t.Error("ParseMode(gzip): no error")
	}
}

// stream frames hand-made blocks and a correct trailer for want.
func stream(want []byte, blocks ...[]byte) []byte {
	out := []byte(magic)
	for _, b := range blocks {
		out = append(out, b...)
	}
	out = append(out, typeTrailer)
	out = binary.BigEndian.AppendUint64(out, uint64(len(want)))
	out = binary.BigEndian.AppendUint64(out, uint64(len(blocks)))
	sum := sha256.Sum256(want)
	out = append(out, sum[:]...)
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// patchTrailer sets the u64 at trailer offset off to v (or, at offset 49,
// the crc to 0 without fixing it) and recomputes the crc otherwise.
func patchTrailer(wire []byte, off int, v uint64) []byte {
	t := len(wire) - trailerSize
	if off == 49 {
		binary.BigEndian.PutUint32(wire[t+49:], 0)
		return wire
	}
	binary.BigEndian.PutUint64(wire[t+off:], v)
	binary.BigEndian.PutUint32(wire[t+49:], crc32.Checksum(wire[:t+49], castagnoli))
	return wire
}

func block(typ byte, plain int, payload []byte) []byte {
	b := []byte{typ}
	b = binary.BigEndian.AppendUint32(b, uint32(plain))
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

func TestHostileHeaders(t *testing.T) {
	text := textData(4096)
	z := zstdFrame(t, text, true)
	sz := s2.Encode(nil, text)
	zeros4k := make([]byte, 4096)
	sZeros := s2.Encode(nil, zeros4k)
	tests := []struct {
		name string
		wire []byte
		opts ReaderOptions
		want error
	}{
		{"bad magic", append([]byte("FRRYFRX\x01"), stream(nil)[8:]...), ReaderOptions{}, ErrCorrupt},
		{"bad version", append([]byte("FRRYFRM\x02"), stream(nil)[8:]...), ReaderOptions{}, ErrCorrupt},
		{"unknown type", stream(text, block(0x05, len(text), text)), ReaderOptions{}, ErrCorrupt},
		{"s2 not smaller", stream(text, block(typeS2, len(sz), sz)), ReaderOptions{}, ErrCorrupt},
		{"s2 declares less", stream(text, block(typeS2, len(text)-1, sz)), ReaderOptions{}, ErrCorrupt},
		{"s2 declares more", stream(text, block(typeS2, len(text)+1, sz)), ReaderOptions{}, ErrCorrupt},
		{"s2 garbage", stream(text, block(typeS2, len(text), []byte("not s2 at all"))), ReaderOptions{}, ErrCorrupt},
		{"s2 truncated", stream(text, block(typeS2, len(text), sz[:len(sz)-3])), ReaderOptions{}, ErrCorrupt},
		{"s2 over ratio", stream(zeros4k, block(typeS2, len(zeros4k), sZeros)), ReaderOptions{MaxRatio: 2}, ErrLimit},
		{"empty block", stream(nil, block(typeRaw, 0, nil)), ReaderOptions{}, ErrCorrupt},
		{"raw lengths differ", stream(text, block(typeRaw, len(text)+1, text)), ReaderOptions{}, ErrCorrupt},
		{"zstd not smaller", stream(text, block(typeZstd, len(z), z)), ReaderOptions{}, ErrCorrupt},
		{"zstd decodes longer", stream(text, block(typeZstd, len(text)-1, z)), ReaderOptions{}, ErrCorrupt},
		{"zstd decodes far longer", stream(text, block(typeZstd, len(text), zstdFrame(t, textData(64<<10), true))), ReaderOptions{}, ErrLimit},
		{"zstd decodes long", stream(text, block(typeZstd, len(text)+1, z)), ReaderOptions{}, ErrCorrupt},
		{"zstd garbage", stream(text, block(typeZstd, len(text), []byte("not zstd at all"))), ReaderOptions{}, ErrCorrupt},
		{"block over max", stream(text, block(typeRaw, len(text), text)), ReaderOptions{MaxBlockSize: 4095}, ErrLimit},
		{"total over max", stream(append(text, text...), block(typeRaw, len(text), text), block(typeRaw, len(text), text)), ReaderOptions{MaxTotal: 8191}, ErrLimit},
		{"wrong block count", patchTrailer(stream(text, block(typeRaw, len(text), text)), 9, 2), ReaderOptions{}, ErrCorrupt},
		{"wrong total", patchTrailer(stream(text, block(typeRaw, len(text), text)), 1, 4095), ReaderOptions{}, ErrCorrupt},
		{"wrong crc", patchTrailer(stream(text, block(typeRaw, len(text), text)), 49, 0), ReaderOptions{}, ErrCorrupt},
		{"wrong digest", stream([]byte("other"), block(typeRaw, 5, []byte("hello"))), ReaderOptions{}, ErrCorrupt},
		{"no trailer", append([]byte(magic), block(typeRaw, 5, []byte("hello"))...), ReaderOptions{}, ErrTruncated},
		{"empty input", nil, ReaderOptions{}, ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := decode(tt.wire, tt.opts)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err %v (after %d bytes), want %v", err, len(out), tt.want)
			}
		})
	}
}

func zstdFrame(t testing.TB, p []byte, withSize bool) []byte {
	t.Helper()
	enc := mustEncoder(t)
	if withSize {
		return enc.EncodeAll(p, nil)
	}
	var buf bytes.Buffer
	enc.Reset(&buf)
	enc.Write(p)
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReadSizes reads every mode's stream with buffers smaller than,
// equal to and larger than a block: a raw or S2 block that fits the
// buffer is decoded straight into it, the rest go through the Reader's
// own buffer, and both must give the same plaintext and catch the same
// damage.
func TestReadSizes(t *testing.T) {
	const bs = 4 << 10
	for _, mode := range []Mode{Auto, Zstd, S2, None} {
		for name, gen := range map[string]func(int) []byte{"random": randomData, "text": textData} {
			data := gen(7*bs + 123)
			wire, _ := encode(t, data, WriterOptions{Compress: mode, BlockSize: bs}, 1000)
			for _, size := range []int{1, 100, bs - 1, bs, bs + 1, 3 * bs} {
				t.Run(fmt.Sprintf("%v/%s/%d", mode, name, size), func(t *testing.T) {
					got, err := readWith(NewReader(bytes.NewReader(wire), ReaderOptions{}), size)
					if err != nil || !bytes.Equal(got, data) {
						t.Fatalf("read: err %v, %d bytes, equal %v", err, len(got), bytes.Equal(got, data))
					}
					// A flipped byte in the third block's payload.
					bad := bytes.Clone(wire)
					off := headerSize
					for range 2 {
						off += blockHeaderSize + int(binary.BigEndian.Uint32(wire[off+5:]))
					}
					bad[off+blockHeaderSize+int(binary.BigEndian.Uint32(wire[off+5:]))/2] ^= 0x40
					if _, err := readWith(NewReader(bytes.NewReader(bad), ReaderOptions{}), size); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("flipped byte: err %v, want ErrCorrupt", err)
					}
				})
			}
		}
	}
}

// readWith reads r to EOF with a buffer of size bytes.
func readWith(r io.Reader, size int) ([]byte, error) {
	var out []byte
	p := make([]byte, size)
	for {
		n, err := r.Read(p)
		out = append(out, p[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// TestWriteDoesNotRetain: the Writer keeps no reference to a slice
// passed to Write, whether it buffered part of it or framed a whole
// block straight from it.
func TestWriteDoesNotRetain(t *testing.T) {
	const bs = 4 << 10
	data := textData(9*bs + 77)
	for _, chunk := range []int{100, bs, 2*bs + 1} {
		var buf bytes.Buffer
		w := NewWriter(&buf, WriterOptions{Compress: S2, BlockSize: bs})
		p := make([]byte, chunk)
		for off := 0; off < len(data); off += chunk {
			n := copy(p, data[off:])
			if _, err := w.Write(p[:n]); err != nil {
				t.Fatal(err)
			}
			for i := range p {
				p[i] = 'X'
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, _, err := decode(buf.Bytes(), ReaderOptions{})
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("chunk %d: err %v, equal %v", chunk, err, bytes.Equal(got, data))
		}
	}
}

// TestBufferWrites: data read into Buffer's slice and written from it
// (in place, no copy), mixed with ordinary writes, frames the same
// plaintext as ordinary writes alone, in whole blocks, also while the
// buffer a block gathers in grows towards a block size above minBuffer.
func TestBufferWrites(t *testing.T) {
	for _, bs := range []int{4 << 10, 1 << 20} {
		for _, mode := range []Mode{Auto, S2, None} {
			t.Run(fmt.Sprintf("%d/%v", bs, mode), func(t *testing.T) { testBufferWrites(t, bs, mode) })
		}
	}
}

func testBufferWrites(t *testing.T, bs int, mode Mode) {
	data := textData(13*bs + 321)
	var buf bytes.Buffer
	w := NewWriter(&buf, WriterOptions{Compress: mode, BlockSize: bs})
	rng := rand.New(rand.NewPCG(1, 2))
	for off := 0; off < len(data); {
		n := min(1+rng.IntN(bs/4+bs/(1+rng.IntN(4))), len(data)-off)
		if rng.IntN(3) == 0 {
			if _, err := w.Write(data[off : off+n]); err != nil {
				t.Fatal(err)
			}
		} else {
			lent := w.Buffer()
			if len(lent) == 0 {
				t.Fatal("Buffer returned an empty slice")
			}
			n = min(n, len(lent))
			copy(lent, data[off:off+n])
			if _, err := w.Write(lent[:n]); err != nil {
				t.Fatal(err)
			}
		}
		off += n
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, _, err := decode(buf.Bytes(), ReaderOptions{})
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%v: err %v, equal %v", mode, err, bytes.Equal(got, data))
	}
	st := w.Stats()
	if n, want := int(st.RawBlocks+st.ZstdBlocks+st.S2Blocks+st.StreamBlocks), blockCount(len(data), bs, mode == None); n != want {
		t.Errorf("stats %+v: %d blocks, want %d", st, n, want)
	}
}
