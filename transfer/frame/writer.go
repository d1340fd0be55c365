package frame

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/klauspost/compress/zstd"
)

// WriterOptions configures a Writer. Zero fields take the documented
// defaults; the struct is copied by NewWriter.
type WriterOptions struct {
	// Compress selects the compression mode; the zero value is Auto.
	Compress Mode
	// BlockSize is the plaintext size of every block but the last.
	// Default DefaultBlockSize; at most MaxBlockSizeLimit, and it must not
	// exceed the reader's MaxBlockSize.
	BlockSize int
	// MaxRatio is the largest plaintext/encoded ratio a zstd block may
	// have. A block that compresses better is padded with a skippable zstd
	// frame, so that a reader with the same MaxRatio accepts it (a 256 KiB
	// block of zeros costs 263 bytes instead of about 30). Default
	// DefaultMaxRatio; at least 2; it must not exceed the reader's.
	MaxRatio int
}

// Writer frames a byte stream into blocks, compressing each block per
// Compress, and ends it with a trailer on Close. It does not close the
// underlying writer. Errors are sticky: after the first failure every
// method returns it. A Writer is not safe for concurrent use.
type Writer struct {
	w    io.Writer
	opts WriterOptions
	enc  *zstd.Encoder // nil until the first block is tried
	sum  hash.Hash
	crc  uint32 // crc32c of the wire bytes so far
	buf  []byte // pending plaintext, len < BlockSize between calls
	out  []byte // scratch for one framed block
	err  error

	started bool // stream header written
	closed  bool
	miss    int // consecutive blocks that did not pay (Auto)
	skipped int // blocks sent raw untried since the last try (Auto)
	blocks  uint64
	stats   Stats
}

// NewWriter returns a Writer framing onto w. Invalid options are reported
// by the first Write or Close.
func NewWriter(w io.Writer, opts WriterOptions) *Writer {
	fw := &Writer{w: w, sum: sha256.New()}
	if opts.BlockSize == 0 {
		opts.BlockSize = DefaultBlockSize
	}
	if opts.MaxRatio == 0 {
		opts.MaxRatio = DefaultMaxRatio
	}
	switch {
	case opts.BlockSize < 1 || opts.BlockSize > MaxBlockSizeLimit:
		fw.err = fmt.Errorf("new frame writer: block size %d out of range 1..%d", opts.BlockSize, MaxBlockSizeLimit)
	case opts.MaxRatio < 2:
		fw.err = fmt.Errorf("new frame writer: max ratio %d under 2", opts.MaxRatio)
	case opts.Compress != Auto && opts.Compress != Zstd && opts.Compress != None:
		fw.err = fmt.Errorf("new frame writer: unknown compress mode %v", opts.Compress)
	}
	fw.opts = opts
	return fw
}

// Write buffers p and frames every full block.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.closed {
		return 0, errClosed
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, w.opts.BlockSize)
	}
	n := 0
	for len(p) > 0 {
		if len(w.buf) == 0 && len(p) >= w.opts.BlockSize {
			// A whole block straight from p, without copying into buf.
			if err := w.block(p[:w.opts.BlockSize]); err != nil {
				return n, err
			}
			n += w.opts.BlockSize
			p = p[w.opts.BlockSize:]
			continue
		}
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+k]
		n += k
		p = p[k:]
		if len(w.buf) == cap(w.buf) {
			if err := w.block(w.buf); err != nil {
				return n, err
			}
			w.buf = w.buf[:0]
		}
	}
	return n, nil
}

// Close frames any pending plaintext and writes the trailer. It does not
// close the underlying writer. Calling Close again returns the first
// Close's result.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return nil
	}
	w.closed = true
	if len(w.buf) > 0 {
		if err := w.block(w.buf); err != nil {
			return err
		}
		w.buf = w.buf[:0]
	}
	out := w.begin(w.out[:0])
	out = append(out, typeTrailer)
	out = binary.BigEndian.AppendUint64(out, uint64(w.stats.Plaintext))
	out = binary.BigEndian.AppendUint64(out, w.blocks)
	out = w.sum.Sum(out)
	out = binary.BigEndian.AppendUint32(out, crc32.Update(w.crc, castagnoli, out))
	w.out = out
	if err := w.emit(out); err != nil {
		return err
	}
	w.enc = nil
	return nil
}

// Stats reports what was framed so far.
func (w *Writer) Stats() Stats { return w.stats }

// begin prepends the stream header to the first thing written.
func (w *Writer) begin(out []byte) []byte {
	if w.started {
		return out
	}
	w.started = true
	return append(out, magic...)
}

var (
	zeroHeader [blockHeaderSize]byte
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// block frames one non-empty block of plaintext p.
func (w *Writer) block(p []byte) error {
	w.sum.Write(p)
	out := w.begin(w.out[:0])
	h := len(out)
	out = append(out, zeroHeader[:]...)
	typ := byte(typeRaw)
	if w.try() {
		if w.enc == nil {
			enc, err := zstd.NewWriter(nil,
				zstd.WithEncoderLevel(zstd.SpeedFastest),
				zstd.WithEncoderConcurrency(1),
				// The trailer's sha256 covers every byte; a per-frame
				// xxhash would only add work.
				zstd.WithEncoderCRC(false))
			if err != nil {
				w.err = fmt.Errorf("create zstd encoder: %w", err)
				return w.err
			}
			w.enc = enc
		}
		out = w.enc.EncodeAll(p, out)
		out = pad(out, h+blockHeaderSize, len(p), w.opts.MaxRatio)
		n := len(out) - h - blockHeaderSize
		if w.pays(n, len(p)) {
			typ = typeZstd
			w.miss = 0
		} else {
			out = out[:h+blockHeaderSize]
			w.miss++
		}
	}
	if typ == typeRaw {
		out = append(out, p...)
		w.stats.RawBlocks++
	} else {
		w.stats.ZstdBlocks++
	}
	out[h] = typ
	binary.BigEndian.PutUint32(out[h+1:], uint32(len(p)))
	binary.BigEndian.PutUint32(out[h+5:], uint32(len(out)-h-blockHeaderSize))
	w.out = out
	w.blocks++
	w.stats.Plaintext += int64(len(p))
	return w.emit(out)
}

// try reports whether the next block is worth compressing.
func (w *Writer) try() bool {
	switch w.opts.Compress {
	case None:
		return false
	case Zstd:
		return true
	}
	if w.miss < skipAfter {
		return true
	}
	w.skipped++
	if w.skipped < skipEvery {
		return false
	}
	w.skipped = 0
	return true
}

// pays reports whether n encoded bytes are worth sending for plain bytes.
func (w *Writer) pays(n, plain int) bool {
	if w.opts.Compress == Zstd {
		return n < plain
	}
	return n*100 <= plain*97
}

// pad appends a skippable zstd frame to the payload that starts at
// out[start:] when the payload is shorter than ceil(plain/maxRatio).
func pad(out []byte, start, plain, maxRatio int) []byte {
	floor := (plain + maxRatio - 1) / maxRatio
	n := len(out) - start
	if n >= floor {
		return out
	}
	size := max(0, floor-n-skippableHeaderSize)
	out = binary.LittleEndian.AppendUint32(out, 0x184D2A50)
	out = binary.LittleEndian.AppendUint32(out, uint32(size))
	return append(out, make([]byte, size)...)
}

func (w *Writer) emit(b []byte) error {
	n, err := w.w.Write(b)
	w.stats.Wire += int64(n)
	w.crc = crc32.Update(w.crc, castagnoli, b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("write frame: %w", err)
		return w.err
	}
	return nil
}
