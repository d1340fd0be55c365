package frame

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// ReaderOptions bounds what a peer may make a Reader do. Every length in
// the stream is peer-controlled; these limits are checked against a block's
// header before its payload is read or decoded. Zero fields take the
// documented defaults; the struct is copied by NewReader.
type ReaderOptions struct {
	// MaxBlockSize bounds one block's plaintext length, and so the memory a
	// Reader holds (about twice this). Default DefaultMaxBlockSize; at most
	// MaxBlockSizeLimit.
	MaxBlockSize int
	// MaxRatio bounds a zstd block's plaintext length over its encoded
	// length: a peer must send at least one byte per MaxRatio bytes it
	// makes the Reader produce. Default DefaultMaxRatio; at least 2.
	MaxRatio int
	// MaxTotal bounds the whole stream's plaintext; 0 means no limit (the
	// consumer, such as the extractor, usually caps it too).
	MaxTotal int64
	// NoDigest skips the plaintext's SHA-256, for a consumer that checks
	// the plaintext by other means (agent mode checks every file's
	// SHA-256): the trailer's digest is not checked, and a trailer without
	// one (WriterOptions.NoDigest) is accepted. Counts and the wire
	// CRC-32C are still checked. Without NoDigest, a trailer without a
	// digest is ErrCorrupt.
	NoDigest bool
}

// Reader reads the plaintext of a framed stream. It returns io.EOF only
// after the trailer has been read and its byte count, block count, sha256
// digest (unless NoDigest) and wire CRC-32C match what was delivered: plaintext returned before that is
// unverified, so a consumer must not commit it until Read returns io.EOF
// (the extractor's staging directory does exactly that).
//
// A Reader reads exactly the framed stream from the underlying reader and
// nothing after the trailer. Errors are sticky. A Reader is not safe for
// concurrent use.
type Reader struct {
	r     io.Reader
	opts  ReaderOptions
	dec   *zstd.Decoder // nil until the first zstd block
	sdec  *zstd.Decoder // the stream blocks' decoder, nil until the first
	feed  streamFeed    // sdec's input
	sum   hash.Hash     // nil with NoDigest
	crc   uint32        // crc32c of the wire bytes so far
	plain []byte        // current block's plaintext
	off   int           // read offset in plain
	enc   []byte        // scratch for an encoded payload
	hdr   [trailerSize]byte
	err   error

	started bool
	blocks  uint64
	stats   Stats
}

// NewReader returns a Reader of the framed stream r. Invalid options are
// reported by the first Read.
func NewReader(r io.Reader, opts ReaderOptions) *Reader {
	fr := &Reader{r: r}
	if !opts.NoDigest {
		fr.sum = sha256.New()
	}
	if opts.MaxBlockSize == 0 {
		opts.MaxBlockSize = DefaultMaxBlockSize
	}
	if opts.MaxRatio == 0 {
		opts.MaxRatio = DefaultMaxRatio
	}
	switch {
	case opts.MaxBlockSize < 1 || opts.MaxBlockSize > MaxBlockSizeLimit:
		fr.err = fmt.Errorf("new frame reader: max block size %d out of range 1..%d", opts.MaxBlockSize, MaxBlockSizeLimit)
	case opts.MaxRatio < 2:
		fr.err = fmt.Errorf("new frame reader: max ratio %d under 2", opts.MaxRatio)
	case opts.MaxTotal < 0:
		fr.err = fmt.Errorf("new frame reader: negative max total %d", opts.MaxTotal)
	}
	fr.opts = opts
	return fr
}

// Read reads plaintext. It returns io.EOF only after a verified trailer.
func (r *Reader) Read(p []byte) (int, error) {
	for r.off == len(r.plain) {
		if r.err != nil {
			return 0, r.err
		}
		n, err := r.next(p)
		if err != nil {
			r.err = err
			r.plain, r.off = r.plain[:0], 0
			if err != io.EOF {
				r.dec = nil
			}
			r.sdec = nil
			return 0, err
		}
		if n > 0 {
			return n, nil
		}
	}
	n := copy(p, r.plain[r.off:])
	r.off += n
	return n, nil
}

// Stats reports what was read so far. Plaintext counts bytes decoded from
// blocks, including any not yet returned by Read.
func (r *Reader) Stats() Stats { return r.stats }

// next reads the next block, or verifies the trailer and returns io.EOF.
// A raw or S2 block that fits in p goes straight there (its length is
// returned): a copy less of every byte for a caller reading whole blocks
// at a time, as the extractor does. Any other block goes to r.plain, and
// next returns 0.
func (r *Reader) next(p []byte) (int, error) {
	if !r.started {
		if err := r.full(r.hdr[:headerSize], "read stream header"); err != nil {
			return 0, err
		}
		if string(r.hdr[:headerSize-1]) != magic[:headerSize-1] {
			return 0, fmt.Errorf("read stream header: bad magic %q: %w", r.hdr[:headerSize-1], ErrCorrupt)
		}
		if v := r.hdr[headerSize-1]; v != magic[headerSize-1] {
			return 0, fmt.Errorf("read stream header: version %d, want %d: %w", v, magic[headerSize-1], ErrCorrupt)
		}
		r.started = true
	}
	op := fmt.Sprintf("read block %d", r.blocks)
	if err := r.full(r.hdr[:1], op); err != nil {
		return 0, err
	}
	switch r.hdr[0] {
	case typeTrailer, typeTrailerNoDigest:
		return 0, r.trailer()
	case typeRaw, typeZstd, typeS2, typeStream:
	default:
		return 0, fmt.Errorf("%s: unknown block type %#x: %w", op, r.hdr[0], ErrCorrupt)
	}
	if err := r.full(r.hdr[1:blockHeaderSize], op); err != nil {
		return 0, err
	}
	typ := r.hdr[0]
	plain := int64(binary.BigEndian.Uint32(r.hdr[1:]))
	enc := int64(binary.BigEndian.Uint32(r.hdr[5:]))
	switch {
	case plain == 0:
		return 0, fmt.Errorf("%s: empty block: %w", op, ErrCorrupt)
	case plain > int64(r.opts.MaxBlockSize):
		return 0, fmt.Errorf("%s: plaintext length %d over max block size %d: %w", op, plain, r.opts.MaxBlockSize, ErrLimit)
	case r.opts.MaxTotal > 0 && r.stats.Plaintext+plain > r.opts.MaxTotal:
		return 0, fmt.Errorf("%s: total plaintext %d over max total %d: %w", op, r.stats.Plaintext+plain, r.opts.MaxTotal, ErrLimit)
	case typ == typeRaw && enc != plain:
		return 0, fmt.Errorf("%s: raw block encoded length %d differs from plaintext length %d: %w", op, enc, plain, ErrCorrupt)
	case typ == typeStream && (enc <= streamLenSize || enc > plain+streamSlack(plain)):
		return 0, fmt.Errorf("%s: stream block encoded length %d out of range for plaintext length %d: %w", op, enc, plain, ErrCorrupt)
	case typ != typeRaw && typ != typeStream && (enc == 0 || enc >= plain):
		return 0, fmt.Errorf("%s: compressed block encoded length %d not under plaintext length %d: %w", op, enc, plain, ErrCorrupt)
	case typ != typeRaw && plain > enc*int64(r.opts.MaxRatio):
		return 0, fmt.Errorf("%s: compression ratio %d/%d over max ratio %d: %w", op, plain, enc, r.opts.MaxRatio, ErrLimit)
	}
	var dst []byte
	direct := typ != typeZstd && plain <= int64(len(p))
	if direct {
		dst = p[:plain]
	} else {
		if cap(r.plain) < int(plain)+decodeSlack {
			r.plain = make([]byte, plain, plain+decodeSlack)
		}
		r.plain, r.off = r.plain[:plain], 0
		dst = r.plain
	}
	if typ == typeRaw {
		if err := r.full(dst, op); err != nil {
			return 0, err
		}
		r.stats.RawBlocks++
	} else {
		if cap(r.enc) < int(enc) {
			r.enc = make([]byte, enc)
		}
		r.enc = r.enc[:enc]
		if err := r.full(r.enc, op); err != nil {
			return 0, err
		}
		switch typ {
		case typeS2:
			if err := r.decodeS2(op, dst); err != nil {
				return 0, err
			}
			r.stats.S2Blocks++
		case typeStream:
			if err := r.decodeStream(op, dst); err != nil {
				return 0, err
			}
			r.stats.StreamBlocks++
		default:
			if err := r.decode(op, int(plain)); err != nil {
				return 0, err
			}
			r.stats.ZstdBlocks++
		}
	}
	if r.sum != nil {
		r.sum.Write(dst)
	}
	r.blocks++
	r.stats.Plaintext += plain
	if direct {
		return int(plain), nil
	}
	return 0, nil
}

// decode decodes r.enc into r.plain, whose length is the declared
// plaintext length. The decoder may not produce more than that: it is
// capped both by WithDecoderMaxMemory (MaxBlockSize) and by dst's capacity
// (WithDecodeAllCapLimit), so a block that decodes to more than it declared
// fails without allocating what it would decode to.
func (r *Reader) decode(op string, plain int) error {
	if r.dec == nil {
		dec, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(uint64(r.opts.MaxBlockSize)),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			return fmt.Errorf("create zstd decoder: %w", err)
		}
		r.dec = dec
	}
	// Room past plain lets zstd use its fast loop (see decodeSlack); a
	// payload that decodes past plain is refused below all the same.
	dst := r.plain[: 0 : plain+decodeSlack]
	out, err := r.dec.DecodeAll(r.enc, dst)
	switch {
	case errors.Is(err, zstd.ErrDecoderSizeExceeded), errors.Is(err, zstd.ErrWindowSizeExceeded):
		return fmt.Errorf("%s: zstd payload decodes to more than %d bytes: %w", op, plain, ErrLimit)
	case err != nil:
		return fmt.Errorf("%s: decode zstd: %v: %w", op, err, ErrCorrupt)
	case len(out) != plain:
		return fmt.Errorf("%s: zstd payload decodes to %d bytes, declared %d: %w", op, len(out), plain, ErrCorrupt)
	}
	if &out[0] != &r.plain[0] {
		copy(r.plain, out) // the decoder reallocated; keep r.plain's buffer
	}
	return nil
}

// decodeS2 decodes r.enc, one S2 block, into dst, whose length is the
// declared plaintext length. S2 states its decoded length up front: one
// that is not the declared length is refused before anything is decoded.
func (r *Reader) decodeS2(op string, dst []byte) error {
	plain := len(dst)
	n, err := s2.DecodedLen(r.enc)
	switch {
	case err != nil:
		return fmt.Errorf("%s: decode s2: %v: %w", op, err, ErrCorrupt)
	case n != plain:
		return fmt.Errorf("%s: s2 payload decodes to %d bytes, declared %d: %w", op, n, plain, ErrCorrupt)
	}
	out, err := s2.Decode(dst, r.enc)
	switch {
	case err != nil:
		return fmt.Errorf("%s: decode s2: %v: %w", op, err, ErrCorrupt)
	case len(out) != plain || &out[0] != &dst[0]:
		return fmt.Errorf("%s: s2 payload decodes to %d bytes, declared %d: %w", op, len(out), plain, ErrCorrupt)
	}
	return nil
}

// trailer reads the rest of the trailer and checks it: counts, then the
// plaintext digest (unless NoDigest), then the wire checksum.
func (r *Reader) trailer() error {
	if err := r.full(r.hdr[1:trailerSize-4], "read trailer"); err != nil {
		return err
	}
	if err := r.streamEnded(); err != nil {
		return err
	}
	crc := r.crc
	if err := r.full(r.hdr[trailerSize-4:trailerSize], "read trailer"); err != nil {
		return err
	}
	total := binary.BigEndian.Uint64(r.hdr[1:])
	blocks := binary.BigEndian.Uint64(r.hdr[9:])
	switch {
	case total != uint64(r.stats.Plaintext):
		return fmt.Errorf("read trailer: %d bytes declared, %d read: %w", total, r.stats.Plaintext, ErrCorrupt)
	case blocks != r.blocks:
		return fmt.Errorf("read trailer: %d blocks declared, %d read: %w", blocks, r.blocks, ErrCorrupt)
	case r.hdr[0] == typeTrailerNoDigest && r.sum != nil:
		return fmt.Errorf("read trailer: the stream carries no sha256 of the plaintext: %w", ErrCorrupt)
	case r.hdr[0] == typeTrailerNoDigest && !bytes.Equal(r.hdr[17:49], make([]byte, sha256.Size)):
		return fmt.Errorf("read trailer: a trailer without a digest has a nonzero digest field: %w", ErrCorrupt)
	case r.sum != nil && !bytes.Equal(r.hdr[17:49], r.sum.Sum(nil)):
		return fmt.Errorf("read trailer: sha256 of the plaintext differs: %w", ErrCorrupt)
	case binary.BigEndian.Uint32(r.hdr[49:]) != crc:
		// The plaintext is intact (its digest matched) but the wire bytes
		// were altered, e.g. in a zstd frame header field that changes
		// no decoded byte: refuse, a channel that flips bits is broken.
		return fmt.Errorf("read trailer: crc32c of the wire bytes differs: %w", ErrCorrupt)
	}
	return io.EOF
}

// full reads exactly len(b) bytes, counting them as wire bytes; any end of
// input before that is ErrTruncated.
func (r *Reader) full(b []byte, op string) error {
	n, err := io.ReadFull(r.r, b)
	r.stats.Wire += int64(n)
	r.crc = crc32.Update(r.crc, castagnoli, b[:n])
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return fmt.Errorf("%s: %w", op, ErrTruncated)
	case err != nil:
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// decodeSlack is room past a block's plaintext in the decode buffer:
// zstd's fast decoding loop writes in wide words and needs some, else it
// falls back to a loop about twice as slow.
const decodeSlack = 4 << 10
