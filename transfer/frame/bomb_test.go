package frame

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func mustEncoder(t testing.TB) *zstd.Encoder {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// TestZipBomb: a zstd block that declares 64 KiB but decodes to 256 MiB is
// refused with ErrLimit, and the Reader allocates nowhere near 256 MiB.
func TestZipBomb(t *testing.T) {
	const declared, real = 64 << 10, 256 << 20
	huge := make([]byte, real)
	for _, withSize := range []bool{true, false} {
		payload := zstdFrame(t, huge, withSize)
		if int64(declared) > int64(len(payload))*DefaultMaxRatio {
			t.Fatalf("payload %d bytes: the ratio check alone would refuse it", len(payload))
		}
		wire := stream(huge[:declared], block(typeZstd, declared, payload))
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, _, err := decode(wire, ReaderOptions{MaxBlockSize: 1 << 20})
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrLimit) {
			t.Fatalf("frame content size present %v: err %v, want ErrLimit", withSize, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
			t.Fatalf("frame content size present %v: allocated %d bytes decoding a bomb", withSize, alloc)
		}
	}
}

// TestRatioCheckedBeforeReading: a block whose declared ratio is over the
// cap is refused from its header alone, before its payload arrives.
func TestRatioCheckedBeforeReading(t *testing.T) {
	hdr := []byte(magic + "\x02")
	hdr = binary.BigEndian.AppendUint32(hdr, 1<<20)
	hdr = binary.BigEndian.AppendUint32(hdr, 100) // ratio 10485 > 1000; no payload follows
	_, r, err := decode(hdr, ReaderOptions{})
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("err %v, want ErrLimit", err)
	}
	if r.Stats().Wire != int64(len(hdr)) {
		t.Fatalf("read %d wire bytes, want only the %d header bytes", r.Stats().Wire, len(hdr))
	}
	// Same block under a generous cap: now it is read, and the missing
	// payload is a truncation.
	if _, _, err := decode(hdr, ReaderOptions{MaxRatio: 20000}); !errors.Is(err, ErrTruncated) {
		t.Fatalf("with MaxRatio 20000: err %v, want ErrTruncated", err)
	}
}

// TestWriterPadsToRatio: zeros compress far better than 1000:1; the
// Writer pads them so a Reader with a tighter cap still accepts the stream.
func TestWriterPadsToRatio(t *testing.T) {
	data := zeroData(1 << 20)
	for _, ratio := range []int{2, 10, 1000, 100000} {
		wire, ws := encode(t, data, WriterOptions{BlockSize: 64 << 10, MaxRatio: ratio}, 1<<20)
		if ws.ZstdBlocks == 0 && ratio > 2 {
			t.Fatalf("ratio %d: stats %+v, want zstd blocks", ratio, ws)
		}
		if _, _, err := decode(wire, ReaderOptions{MaxRatio: ratio}); err != nil {
			t.Fatalf("ratio %d: %v", ratio, err)
		}
	}
}
