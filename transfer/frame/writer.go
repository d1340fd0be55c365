package frame

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"runtime"

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
	// Concurrency is how many blocks are compressed at once, each in a
	// goroutine of its own; blocks still go out in order. It bounds the
	// memory: about Concurrency × (2 × BlockSize + a zstd encoder's ~1 MiB).
	// Default min(GOMAXPROCS, 4); 1 compresses in the calling goroutine.
	// Goroutines live only while a block is being compressed; Close, or
	// the first error, waits for them.
	Concurrency int
	// NoDigest leaves the plaintext's SHA-256 out of the trailer (a
	// trailer of type 0xFE, its digest field zero), for a caller that
	// checks the plaintext by other means, as agent mode does with every
	// file's SHA-256. The wire CRC-32C stays. Only a Reader with NoDigest
	// accepts such a stream.
	NoDigest bool
}

// Writer frames a byte stream into blocks, compressing each block per
// Compress, and ends it with a trailer on Close. It does not close the
// underlying writer. Errors are sticky: after the first failure every
// method returns it. A Writer is not safe for concurrent use.
type Writer struct {
	w    io.Writer
	opts WriterOptions
	enc  *zstd.Encoder // Concurrency 1: nil until the first block is tried
	sum  hash.Hash     // nil with NoDigest
	crc  uint32        // crc32c of the wire bytes so far
	buf  []byte        // pending plaintext, len < BlockSize between calls
	out  []byte        // scratch for one framed block
	err  error

	// With Concurrency > 1: blocks being compressed or waiting to go out,
	// in stream order, and the slots free for the next ones.
	pending []*slot
	free    []*slot

	started bool // stream header written
	closed  bool
	miss    int // consecutive blocks that did not pay (Auto)
	skipped int // blocks sent raw untried since the last try (Auto)
	blocks  uint64
	stats   Stats
}

// slot is one block in flight: its plaintext, its framed form and the
// encoder that makes it. A slot's goroutine owns it until done is closed.
type slot struct {
	plain []byte
	out   []byte // block header and payload
	enc   *zstd.Encoder
	zstd  bool          // out holds a zstd payload
	done  chan struct{} // nil when out was built in the calling goroutine
}

// NewWriter returns a Writer framing onto w. Invalid options are reported
// by the first Write or Close.
func NewWriter(w io.Writer, opts WriterOptions) *Writer {
	fw := &Writer{w: w}
	if opts.BlockSize == 0 {
		opts.BlockSize = DefaultBlockSize
	}
	if opts.MaxRatio == 0 {
		opts.MaxRatio = DefaultMaxRatio
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = min(runtime.GOMAXPROCS(0), 4)
	}
	switch {
	case opts.BlockSize < 1 || opts.BlockSize > MaxBlockSizeLimit:
		fw.err = fmt.Errorf("new frame writer: block size %d out of range 1..%d", opts.BlockSize, MaxBlockSizeLimit)
	case opts.MaxRatio < 2:
		fw.err = fmt.Errorf("new frame writer: max ratio %d under 2", opts.MaxRatio)
	case opts.Compress != Auto && opts.Compress != Zstd && opts.Compress != None:
		fw.err = fmt.Errorf("new frame writer: unknown compress mode %v", opts.Compress)
	case opts.Concurrency < 1:
		fw.err = fmt.Errorf("new frame writer: concurrency %d under 1", opts.Concurrency)
	}
	if opts.Compress == None {
		opts.Concurrency = 1 // nothing to do in parallel
	}
	if !opts.NoDigest {
		fw.sum = sha256.New()
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
	for len(w.pending) > 0 {
		if err := w.flushOne(); err != nil {
			return err
		}
	}
	out := w.begin(w.out[:0])
	if w.sum != nil {
		out = append(out, typeTrailer)
	} else {
		out = append(out, typeTrailerNoDigest)
	}
	out = binary.BigEndian.AppendUint64(out, uint64(w.stats.Plaintext))
	out = binary.BigEndian.AppendUint64(out, w.blocks)
	if w.sum != nil {
		out = w.sum.Sum(out)
	} else {
		out = append(out, make([]byte, sha256.Size)...)
	}
	out = binary.BigEndian.AppendUint32(out, crc32.Update(w.crc, castagnoli, out))
	w.out = out
	if err := w.emit(out); err != nil {
		return err
	}
	w.enc, w.free = nil, nil
	return nil
}

// Stats reports what was framed so far: blocks still being compressed
// are not counted yet.
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

// newEncoder is the zstd encoder of every block.
func newEncoder(blockSize int) (*zstd.Encoder, error) {
	window := zstd.MinWindowSize
	for window < blockSize && window < zstd.MaxWindowSize {
		window <<= 1
	}
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1),
		// A block is one frame: no window beyond the block.
		zstd.WithWindowSize(window),
		// The trailer's checksums cover every byte; a per-frame
		// xxhash would only add work.
		zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("create zstd encoder: %w", err)
	}
	return enc, nil
}

// block frames one non-empty block of plaintext p: at once with
// Concurrency 1, else in a slot, going out once the blocks before it have.
// p is not retained.
func (w *Writer) block(p []byte) error {
	if w.sum != nil {
		w.sum.Write(p)
	}
	try := w.try()
	if w.opts.Concurrency == 1 || (!try && len(w.pending) == 0) {
		if try && w.enc == nil {
			enc, err := newEncoder(w.opts.BlockSize)
			if err != nil {
				w.err = err
				return err
			}
			w.enc = enc
		}
		var enc *zstd.Encoder
		if try {
			enc = w.enc
		}
		out, z := encodeBlock(w.out[:0], p, enc, w.opts.Compress, w.opts.MaxRatio)
		w.out = out
		return w.sent(out, len(p), try, z)
	}
	if len(w.free) == 0 && len(w.pending) < w.opts.Concurrency {
		w.free = append(w.free, &slot{})
	}
	for len(w.free) == 0 {
		if err := w.flushOne(); err != nil {
			return err
		}
	}
	s := w.free[len(w.free)-1]
	w.free = w.free[:len(w.free)-1]
	w.pending = append(w.pending, s)
	s.done, s.zstd = nil, false
	if !try {
		s.out, _ = encodeBlock(s.out[:0], p, nil, w.opts.Compress, w.opts.MaxRatio)
		return nil
	}
	if s.enc == nil {
		enc, err := newEncoder(w.opts.BlockSize)
		if err != nil {
			w.err = err
			w.wait()
			return err
		}
		s.enc = enc
	}
	s.plain = append(s.plain[:0], p...)
	s.done = make(chan struct{})
	go func(mode Mode, maxRatio int) {
		defer close(s.done)
		s.out, s.zstd = encodeBlock(s.out[:0], s.plain, s.enc, mode, maxRatio)
	}(w.opts.Compress, w.opts.MaxRatio)
	return nil
}

// flushOne sends the oldest pending block once it is framed.
func (w *Writer) flushOne() error {
	s := w.pending[0]
	if s.done != nil {
		<-s.done
	}
	w.pending[0] = nil
	w.pending = w.pending[1:]
	w.free = append(w.free, s)
	plain := binary.BigEndian.Uint32(s.out[1:])
	if err := w.sent(s.out, int(plain), s.done != nil, s.zstd); err != nil {
		w.wait()
		return err
	}
	return nil
}

// wait waits for every block being compressed, after an error: no
// goroutine outlives the Writer's failure.
func (w *Writer) wait() {
	for _, s := range w.pending {
		if s.done != nil {
			<-s.done
		}
	}
	w.pending = nil
}

// sent counts a framed block and writes it, after the stream header
// if it is the first.
func (w *Writer) sent(out []byte, plain int, tried, z bool) error {
	if !w.started {
		w.started = true
		if err := w.emit([]byte(magic)); err != nil {
			return err
		}
	}
	if tried {
		if z {
			w.miss = 0
		} else {
			w.miss++
		}
	}
	if z {
		w.stats.ZstdBlocks++
	} else {
		w.stats.RawBlocks++
	}
	w.blocks++
	w.stats.Plaintext += int64(plain)
	return w.emit(out)
}

// encodeBlock appends the framed block of plaintext p to out: a zstd
// block when enc is not nil and compressing pays for mode, else a raw
// block. It touches nothing but its arguments, so slots run it in
// goroutines.
func encodeBlock(out, p []byte, enc *zstd.Encoder, mode Mode, maxRatio int) ([]byte, bool) {
	h := len(out)
	out = append(out, zeroHeader[:]...)
	typ := byte(typeRaw)
	if enc != nil {
		out = enc.EncodeAll(p, out)
		out = pad(out, h+blockHeaderSize, len(p), maxRatio)
		if pays(mode, len(out)-h-blockHeaderSize, len(p)) {
			typ = typeZstd
		} else {
			out = out[:h+blockHeaderSize]
		}
	}
	if typ == typeRaw {
		out = append(out, p...)
	}
	out[h] = typ
	binary.BigEndian.PutUint32(out[h+1:], uint32(len(p)))
	binary.BigEndian.PutUint32(out[h+5:], uint32(len(out)-h-blockHeaderSize))
	return out, typ == typeZstd
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
func pays(mode Mode, n, plain int) bool {
	if mode == Zstd {
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
