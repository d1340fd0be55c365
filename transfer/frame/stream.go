package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Stream blocks (typeStream) are the pieces of one zstd frame: the Writer
// feeds each block's plaintext to one encoder and flushes it, so that the
// block's payload holds whole zstd blocks that decode to exactly its
// plaintext, given the history of every stream block before it. A block
// can so refer to the StreamWindow before it, across block boundaries,
// which independent frames cannot.

// streamEncoder is a Writer's encoder of stream blocks.
type streamEncoder struct {
	enc *zstd.Encoder
	out []byte // what enc has written of the block being framed
}

func newStreamEncoder() (*streamEncoder, error) {
	e := &streamEncoder{}
	enc, err := zstd.NewWriter(e,
		// The default level: the stream is for links slower than its
		// one encoder, where every byte saved is worth its time.
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		// One encoder, synchronous: the block's compressing goroutine
		// does the work, where its CPU time is measured.
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(StreamWindow),
		// The low-memory mode moves the history every few blocks: a
		// fifth of the encoder's time, for half its 18 MiB.
		zstd.WithLowerEncoderMem(false),
		// The trailer's CRC covers every byte.
		zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("create zstd stream encoder: %w", err)
	}
	e.enc = enc
	return e, nil
}

func (e *streamEncoder) Write(p []byte) (int, error) {
	e.out = append(e.out, p...)
	return len(p), nil
}

// block appends the stream block of plaintext p to out, padded to
// maxRatio, and reports whether it pays for mode. It must be sent
// whether or not it pays: the encoder's history holds p now. prefix,
// the end of the frame before (end), goes ahead of the block's zstd
// bytes when the encoder is a new one.
func (e *streamEncoder) block(out, prefix, p []byte, mode Mode, maxRatio int) (_ []byte, paid bool, err error) {
	h := len(out)
	e.out = append(append(append(out, zeroHeader[:]...), 0, 0, 0, 0), prefix...)
	if _, err := e.enc.Write(p); err != nil {
		return out[:h], false, fmt.Errorf("zstd stream: %w", err)
	}
	if err := e.enc.Flush(); err != nil {
		return out[:h], false, fmt.Errorf("zstd stream: %w", err)
	}
	out, e.out = e.out, nil
	start := h + blockHeaderSize
	n := len(out) - start - streamLenSize
	binary.BigEndian.PutUint32(out[start:], uint32(n))
	if floor := (len(p) + maxRatio - 1) / maxRatio; len(out)-start < floor {
		out = append(out, make([]byte, floor-(len(out)-start))...)
	}
	return header(out, h, typeStream, len(p)), pays(mode, n+streamLenSize, len(p)), nil
}

// end ends the encoder's frame and returns its last bytes (a last zstd
// block, empty): the encoder is done.
func (e *streamEncoder) end() ([]byte, error) {
	e.out = nil
	err := e.enc.Close()
	return e.out, err
}

// streamSlack is how far a stream block may exceed its plaintext: one
// that does not compress still goes in the stream (its encoder has it),
// as zstd raw blocks, 3 bytes each 128 KiB, with the frame header and the
// inner length on top.
func streamSlack(plain int64) int64 { return plain>>10 + 64 }

// streamFeed is the stream decoder's input: the zstd bytes of the block
// being decoded, and no more, so that the decoder never reads into the
// next block.
type streamFeed struct {
	b    []byte
	read int // bytes of the current block taken
}

// errStreamShort is what the decoder gets when it wants more of a block
// than the block holds.
var errStreamShort = errors.New("stream block ends inside a zstd block")

func (f *streamFeed) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		return 0, errStreamShort
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	f.read += n
	return n, nil
}

// decodeStream decodes r.enc, a stream block's payload, into dst, whose
// length is the declared plaintext length. The payload must decode to
// exactly that: no byte of its zstd part left over, and no byte of it
// decoded past it (which the next block, or the trailer, finds). The
// decoder's history is bounded by StreamWindow and its output by dst.
func (r *Reader) decodeStream(op string, dst []byte) error {
	payload := r.enc
	n := int64(binary.BigEndian.Uint32(payload)) // the caller checked len(payload) > streamLenSize
	if n == 0 || n > int64(len(payload)-streamLenSize) {
		return fmt.Errorf("%s: stream block's zstd length %d out of its %d bytes: %w", op, n, len(payload), ErrCorrupt)
	}
	for _, b := range payload[streamLenSize+n:] {
		if b != 0 {
			return fmt.Errorf("%s: stream block's padding is not zero: %w", op, ErrCorrupt)
		}
	}
	r.feed.b, r.feed.read = payload[streamLenSize:streamLenSize+n], 0
	if r.sdec == nil {
		dec, err := zstd.NewReader(&r.feed,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(StreamWindow),
			zstd.WithDecoderMaxMemory(StreamWindow))
		if err != nil {
			return fmt.Errorf("create zstd stream decoder: %w", err)
		}
		r.sdec = dec
	}
	for got := 0; got < len(dst); {
		k, err := r.sdec.Read(dst[got:])
		if got == 0 && k > 0 && r.feed.read == 0 {
			return fmt.Errorf("%s: the stream block before decodes past its end: %w", op, ErrCorrupt)
		}
		got += k
		switch {
		case err == nil:
		case errors.Is(err, zstd.ErrDecoderSizeExceeded), errors.Is(err, zstd.ErrWindowSizeExceeded):
			return fmt.Errorf("%s: zstd stream window over %d bytes: %w", op, StreamWindow, ErrLimit)
		case errors.Is(err, errStreamShort), err == io.EOF:
			return fmt.Errorf("%s: zstd stream decodes to %d bytes, declared %d: %w", op, got, len(dst), ErrCorrupt)
		default:
			return fmt.Errorf("%s: decode zstd stream: %v: %w", op, err, ErrCorrupt)
		}
	}
	if len(r.feed.b) > 0 {
		return fmt.Errorf("%s: %d bytes of the stream block left once its %d bytes are decoded: %w", op, len(r.feed.b), len(dst), ErrCorrupt)
	}
	return nil
}

// streamEnded checks, at the trailer, that the last stream block decoded
// to no more than it declared: the decoder holds nothing more.
func (r *Reader) streamEnded() error {
	if r.sdec == nil {
		return nil
	}
	r.feed.b, r.feed.read = nil, 0
	var one [1]byte
	if k, _ := r.sdec.Read(one[:]); k > 0 {
		return fmt.Errorf("read trailer: the last stream block decodes past its end: %w", ErrCorrupt)
	}
	return nil
}
