package frame

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// WriterOptions configures a Writer. Zero fields take the documented
// defaults; the struct is copied by NewWriter.
type WriterOptions struct {
	// Compress selects the compression mode; the zero value is Auto.
	Compress Mode
	// BlockSize is the plaintext size of every block but the first few
	// and the last: the first is 64 KiB, and each next one twice the
	// last, up to BlockSize, so that a stream's first bytes go out
	// before a whole block has been read, hashed and compressed (and,
	// in a fresh process, its buffers faulted in). After a block that
	// goes raw untried (data Auto's sample finds does not compress, or
	// None), blocks are 256 KiB at most until one is tried. Default
	// DefaultBlockSize; at most MaxBlockSizeLimit, and it must not
	// exceed the reader's MaxBlockSize.
	BlockSize int
	// MaxRatio is the largest plaintext/encoded ratio a zstd block may
	// have. A block that compresses better is padded with a skippable zstd
	// frame, so that a reader with the same MaxRatio accepts it (a 256 KiB
	// block of zeros costs 263 bytes instead of about 30). Default
	// DefaultMaxRatio; at least 2; it must not exceed the reader's.
	MaxRatio int
	// Concurrency is how many blocks are compressed at once, each in a
	// goroutine of its own; blocks still go out in order, written by a
	// goroutine of their own. It bounds the memory: about (Concurrency+2)
	// × 2 × BlockSize, plus a zstd encoder's ~1 MiB per block compressed
	// at once. Default min(GOMAXPROCS, 4). Goroutines live only while a
	// block is being compressed or written; Close, or the first error,
	// waits for them.
	Concurrency int
	// NoDigest leaves the plaintext's SHA-256 out of the trailer (a
	// trailer of type 0xFE, its digest field zero), for a caller that
	// checks the plaintext by other means, as agent mode does with every
	// file's SHA-256. The wire CRC-32C stays. Only a Reader with NoDigest
	// accepts such a stream.
	NoDigest bool
	// WireCost is the least time Auto counts for sending one MiB, however
	// fast the underlying Write returns. A channel whose bytes cost CPU at
	// the far end (a relay, a receiver on the same few cores) is never
	// free even when it keeps up; without a floor Auto would see a
	// keeping-up link as costless and send compressible data raw. Zero
	// counts only what the Writer measures.
	WireCost time.Duration
	// RTT, when set, returns the channel's round trip as the caller has
	// measured it, or 0 while it has not; Auto calls it as it goes. From
	// WANRTT up, and while it is 0, Auto takes the link for a WAN's,
	// slower than the stream's encoder, and compresses what pays in the
	// stream (see Auto) unless it measures otherwise.
	RTT func() time.Duration
	// Buffered is how many wire bytes the channel takes before its Write
	// can block (a relay's flow-control windows). Until that many have
	// gone, a Write that returns at once says nothing of the link's pace,
	// so Auto compresses as on a link it has not measured: zstd, any S2
	// trial compressed with zstd too and the smaller sent. Zero trusts
	// the first Write.
	Buffered int64
}

// Writer frames a byte stream into blocks, compressing each block per
// Compress, and ends it with a trailer on Close. It does not close the
// underlying writer. Errors are sticky: after the first failure every
// method returns it. A Writer is not safe for concurrent use.
//
// Blocks go through a short pipeline: the calling goroutine cuts and
// hashes the plaintext, up to Concurrency goroutines compress, and one
// sender goroutine writes the framed blocks in order. The sender's queue
// is how Auto measures the link (see Auto).
type Writer struct {
	w      io.Writer
	opts   WriterOptions
	sum    hash.Hash // nil with NoDigest
	buf    []byte    // pending plaintext, len < BlockSize between calls
	closed bool
	cut    int // blocks handed to the pipeline so far
	// ramp is how many blocks a stream begins with below BlockSize (see
	// limit), and warmupN how many Auto's warmup takes (see warmupBytes;
	// the ramp's small blocks are not counted among them); both follow
	// from BlockSize alone.
	ramp, warmupN int
	// raw: the last block went raw without a trial (Auto's sample, or
	// no compression asked): the next is at most rawBlock (see limit).
	raw bool

	// encs holds Concurrency encoders (nil until first used): a
	// compressing goroutine takes one for the block and puts it back.
	encs chan *zstd.Encoder

	mu      sync.Mutex
	cond    sync.Cond // signalled when a slot is freed or the sender stops
	q       []*slot   // framed or being framed, in stream order; q[0] goes out next
	free    []*slot
	slots   int  // slots made so far, at most maxSlots
	running bool // a sender goroutine is running; it stops when q is empty
	err     error
	miss    int // consecutive blocks that did not pay (Auto)
	// paid: the last block sent that a codec was tried on paid (Auto),
	// so the next ones are tried without a sample first.
	paid    bool
	skipped int // blocks sent raw untried since the last try (Auto)
	stats   Stats
	// The link, as Auto measures it: the time the sender spends in the
	// underlying Write per wire byte, once the channel's buffers are
	// full (see linkPace). link counts only blocks whose Write waited
	// for the link, linkAll every block; unblocked is the wire written
	// since one last waited.
	link      rate
	linkAll   rate
	unblocked int64
	codecT    [3]rate // time compressing, per plaintext byte, by codec (Auto)
	// framesT is codecT's zstd without the small blocks a stream begins
	// with (limit): streams weighs frames of their own by it. An
	// encoder's first block pays for its tables and history being
	// faulted in, which a 64 KiB block counts sixteen times over per
	// byte; timed by it, frames of their own would look too slow to
	// ever leave the stream on a fast WAN.
	framesT rate
	codecW  [3]rate // wire bytes of blocks tried, per plaintext byte, by codec (Auto)
	pick    byte    // the codec Auto uses, once measured: typeZstd or typeS2
	probe   int     // blocks since the last probe of what Auto does not pick
	gap     int     // blocks from one probe to the next (Auto)
	// streaming: Auto's last zstd block went into the stream (typeStream).
	streaming bool

	// stream is the encoder of typeStream blocks, made by the first. The
	// compressing goroutines of those blocks use it one at a time, in
	// stream order: each waits for the one before (slot.after), and
	// lastStream is the done channel of the last queued, owned by the
	// caller.
	stream     *streamEncoder
	lastStream chan struct{}
	// sinceStream counts the blocks cut since the last stream block;
	// from streamIdle on, the stream's frame is ended (endStream) and its
	// encoder dropped. streamEnd is that frame's last bytes, which the
	// next stream block carries ahead of a new frame. streamFrames counts
	// the frames the stream has begun.
	sinceStream  int
	streamEnd    []byte
	streamFrames int
	sample       []byte // sampleCompresses's S2 output

	// Owned by the sender goroutine while it runs, by the caller of Close
	// once it has stopped (the mutex orders the two).
	started bool   // stream header written
	crc     uint32 // crc32c of the wire bytes so far
	blocks  uint64
	out     []byte // scratch for the stream header and trailer
}

// slot is one block in the pipeline: its plaintext, its framed form, and
// whether a compressing goroutine made it. That goroutine owns the slot
// until done is closed.
type slot struct {
	plain []byte
	out   []byte // block header and payload
	// split: out is a raw block's header alone, and plain its payload.
	split bool
	typ   byte          // out's block type
	codec byte          // the compression tried: typeZstd, typeS2, typeStream, or typeRaw for none
	took  time.Duration // compressing it, in CPU time where it can be had
	// paid: a typeStream block compressed as Auto asks (pays); one that
	// did not still goes as typeStream, since the encoder's history has
	// it now, and counts as a miss.
	paid bool
	// after is closed once the stream block before this one (if this is
	// one) has been through the stream encoder.
	after chan struct{}
	// prefix, on a stream block, is the end of the stream's frame before
	// it (endStream): this block begins a new frame.
	prefix []byte
	// both: the block is an S2 trial on a link where zstd may pay (Auto's
	// warmup, a probe while zstd is picked): it is compressed with both
	// codecs, each measured (s2, zs), and the smaller is sent, so that a
	// trial costs CPU, never wire bytes.
	both   bool
	s2, zs trial
	alt    []byte // the other codec's framed block, kept for its buffer
	err    error
	done   chan struct{} // nil when out was built by the caller (raw)
}

// trial is one codec's measure on a block: CPU time and payload bytes.
type trial struct {
	took time.Duration
	n    int
}

// NewWriter returns a Writer framing onto w. Invalid options are reported
// by the first Write or Close.
func NewWriter(w io.Writer, opts WriterOptions) *Writer {
	fw := &Writer{w: w, pick: typeS2, gap: probeEvery}
	fw.cond.L = &fw.mu
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
	case opts.Compress != Auto && opts.Compress != Zstd && opts.Compress != S2 && opts.Compress != None:
		fw.err = fmt.Errorf("new frame writer: unknown compress mode %v", opts.Compress)
	case opts.Concurrency < 1:
		fw.err = fmt.Errorf("new frame writer: concurrency %d under 1", opts.Concurrency)
	}
	if fw.err == nil && opts.Compress != None {
		fw.encs = make(chan *zstd.Encoder, opts.Concurrency)
		for range opts.Concurrency {
			fw.encs <- nil
		}
	}
	if !opts.NoDigest {
		fw.sum = sha256.New()
	}
	fw.opts = opts
	for fw.ramp < maxRamp && minBuffer<<fw.ramp < opts.BlockSize {
		fw.ramp++
	}
	if opts.BlockSize > 0 {
		fw.warmupN = fw.ramp + min(max(warmupBytes/opts.BlockSize, minWarmup), warmupBlocks)
	}
	return fw
}

// maxSlots bounds the blocks in the pipeline: Concurrency compressing
// plus room for framed blocks queued behind the one being written, which
// is what tells Auto that the link is the bottleneck.
func (w *Writer) maxSlots() int { return w.opts.Concurrency + queueExtra }

// Write buffers p and frames every full block.
func (w *Writer) Write(p []byte) (int, error) {
	if err := w.failed(); err != nil {
		return 0, err
	}
	if w.closed {
		return 0, errClosed
	}
	if len(p) > 0 && len(p) <= cap(w.buf)-len(w.buf) && &p[0] == &w.buf[:cap(w.buf)][len(w.buf)] {
		// Data read into Buffer's slice: it is in place already.
		w.buf = w.buf[:len(w.buf)+len(p)]
		if len(w.buf) == w.limit() {
			if err := w.block(w.buf, true); err != nil {
				return 0, err
			}
		}
		return len(p), nil
	}
	n := 0
	for len(p) > 0 {
		limit := w.limit()
		if len(w.buf) == 0 && len(p) >= limit {
			// A whole block straight from p, without copying into buf.
			if err := w.block(p[:limit], false); err != nil {
				return n, err
			}
			n += limit
			p = p[limit:]
			continue
		}
		w.room()
		k := copy(w.buf[len(w.buf):w.end()], p)
		w.buf = w.buf[:len(w.buf)+k]
		n += k
		p = p[k:]
		if len(w.buf) == limit {
			if err := w.block(w.buf, true); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Buffer returns the unused part of the block being filled, never empty
// (though short of the block's end in a buffer a smaller block left: see
// room), for a caller that reads data straight into it: a Write of that
// slice, or of a prefix of it, takes the bytes where they are instead of
// copying them. The slice is the Writer's again at the next Write or
// Close; anything written in it but not passed to Write is overwritten.
func (w *Writer) Buffer() []byte {
	w.room()
	return w.buf[len(w.buf):w.end()]
}

// end is where the block being filled ends in buf: its limit, or buf's
// end when buf is smaller. A buffer may be larger than the limit: a
// block before it was, before a raw run (see limit).
func (w *Writer) end() int { return min(cap(w.buf), w.limit()) }

// room makes sure the block being filled has room for more plaintext:
// a buffer that is full below the block's limit (see end) is replaced by
// one of the limit's size. The limit grows with the stream (see limit), so a
// stream of a few KiB, all of many a command's, does not pay for a whole
// block's buffer (a MiB, zeroed and faulted in).
func (w *Writer) room() {
	if len(w.buf) < w.end() {
		return
	}
	b := make([]byte, len(w.buf), w.limit())
	copy(b, w.buf)
	w.buf = b
}

// limit is the size of the block being filled: minBuffer for the
// stream's first, twice the last for each next, up to BlockSize (see
// WriterOptions.BlockSize); after a block that went raw without a trial,
// rawBlock at most. A raw block gains nothing from its size, and every
// block in the pipeline holds a buffer of it: in a new process, memory
// to fault in, which costs 3 ms a MiB in a Firecracker VM (11 µs a
// page) and kept a new agent's first MiB on a LAN 20 ms behind tar's.
func (w *Writer) limit() int {
	n := w.opts.BlockSize
	if w.cut < w.ramp {
		n = minBuffer << w.cut
	}
	if w.raw {
		n = min(n, rawBlock)
	}
	return n
}

// Close frames any pending plaintext, waits for every block to be
// written and writes the trailer. It does not close the underlying
// writer. Calling Close again returns the first Close's result.
func (w *Writer) Close() error {
	if err := w.failed(); err != nil {
		return err
	}
	if w.closed {
		return nil
	}
	w.closed = true
	if len(w.buf) > 0 {
		if err := w.block(w.buf, true); err != nil {
			return err
		}
	}
	w.drain()
	if err := w.failed(); err != nil {
		return err
	}
	// The sender has stopped: its fields are the caller's now.
	out := w.out[:0]
	if !w.started {
		w.started = true
		out = append(out, magic...)
	}
	if w.sum != nil {
		out = append(out, typeTrailer)
	} else {
		out = append(out, typeTrailerNoDigest)
	}
	w.mu.Lock()
	total := w.stats.Plaintext
	w.mu.Unlock()
	out = binary.BigEndian.AppendUint64(out, uint64(total))
	out = binary.BigEndian.AppendUint64(out, w.blocks)
	if w.sum != nil {
		out = w.sum.Sum(out)
	} else {
		out = append(out, make([]byte, sha256.Size)...)
	}
	out = binary.BigEndian.AppendUint32(out, crc32.Update(w.crc, castagnoli, out))
	w.out = out
	n, err := w.emit(out)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.Wire += int64(n)
	if err != nil {
		w.err = err
		return err
	}
	w.free, w.encs, w.stream = nil, nil, nil
	return nil
}

// Stats reports what was framed so far: blocks still in the pipeline are
// not counted yet.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// failed returns the sticky error, if any, once the pipeline has
// drained.
func (w *Writer) failed() error {
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		w.drain()
	}
	return err
}

// drain waits until the sender has written (or, after an error, dropped)
// every block in the pipeline and stopped; no goroutine of the Writer is
// left once it returns.
func (w *Writer) drain() {
	w.mu.Lock()
	for w.running {
		w.cond.Wait()
	}
	w.mu.Unlock()
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

// block hands one non-empty block of plaintext p to the pipeline, once a
// slot is free. p is not retained, except when it is w.buf (own): then
// the slot takes the buffer and w.buf becomes the slot's old one, which
// saves copying every byte a second time.
func (w *Writer) block(p []byte, own bool) error {
	if w.sum != nil {
		w.sum.Write(p)
	}
	w.mu.Lock()
	for w.err == nil && len(w.free) == 0 && w.slots >= w.maxSlots() {
		w.cond.Wait()
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		w.drain()
		return err
	}
	var s *slot
	if n := len(w.free); n > 0 {
		s = w.free[n-1]
		w.free = w.free[:n-1]
	} else {
		s = &slot{}
		w.slots++
	}
	try := w.try(p)
	// An S2 trial is compressed with zstd too, and the smaller sent,
	// while the link is not measured yet (the first blocks go before any
	// has been sent) unless it is a LAN's, and, in the warmup or as a
	// probe beside zstd, where zstd may pay: on a slow link a trial then
	// costs no wire bytes.
	both := try == typeS2 && w.opts.Compress == Auto &&
		(!w.linkKnown() && !w.lan() || (w.cut < w.warmupN || w.pick == typeZstd) && w.zstdMayPay())
	w.mu.Unlock()

	w.cut++
	w.raw = try == typeRaw
	s.done, s.typ, s.codec, s.err, s.both, s.after, s.prefix, s.split = nil, typeRaw, try, nil, both, nil, nil, false
	if try == typeStream {
		w.sinceStream = 0
	} else if w.lastStream != nil {
		w.sinceStream++
		if err := w.endStream(); err != nil {
			return err
		}
	}
	if try != typeRaw {
		if own {
			// A slot's old buffer is nil or one a block grew
			// (room).
			s.plain, w.buf = p, s.plain[:0]
		} else {
			s.plain = append(s.plain[:0], p...)
		}
		s.done = make(chan struct{})
		if try == typeStream {
			s.after, w.lastStream = w.lastStream, s.done
			s.prefix, w.streamEnd = w.streamEnd, nil
		}
		go w.compress(s, w.opts.Compress, w.opts.MaxRatio, w.opts.BlockSize)
	} else if own {
		// Raw, from the Writer's own buffer: the buffer goes as it is,
		// after its header, and the slot's comes back in its place.
		// Framing it whole in out would copy every byte once more.
		s.plain, w.buf = p, s.plain[:0]
		s.out, s.typ, s.split = rawHeader(s.out[:0], len(p)), typeRaw, true
	} else {
		s.out, s.typ = encodeBlock(s.out[:0], p, nil, w.opts.Compress, w.opts.MaxRatio)
	}

	w.mu.Lock()
	w.q = append(w.q, s)
	if !w.running {
		w.running = true
		go w.send()
	}
	w.mu.Unlock()
	return nil
}

// compress frames s.plain with one of the Writer's encoders and closes
// s.done. It touches only s and the encoder pool.
func (w *Writer) compress(s *slot, mode Mode, maxRatio, blockSize int) {
	defer close(s.done)
	if s.codec == typeStream {
		if s.after != nil {
			<-s.after
		}
		if w.stream == nil {
			if w.stream, s.err = newStreamEncoder(); s.err != nil {
				return
			}
			w.streamFrames++
		}
		s.took = cpuClock(func() { s.out, s.paid, s.err = w.stream.block(s.out[:0], s.prefix, s.plain, mode, maxRatio) })
		s.typ = typeStream
		return
	}
	if s.codec == typeS2 {
		var ok bool
		if s.took = cpuClock(func() { s.out, s.typ, ok = encodeS2(s.out[:0], s.plain, mode, maxRatio) }); ok {
			if s.both {
				w.compressBoth(s, mode, maxRatio, blockSize)
			}
			return
		}
		// Denser than maxRatio allows: S2 has no padding, zstd has.
		s.both = false
	}
	enc := <-w.encs
	if enc == nil {
		var err error
		if enc, err = newEncoder(blockSize); err != nil {
			w.encs <- nil
			s.err = err
			return
		}
	}
	s.took += cpuClock(func() { s.out, s.typ = encodeBlock(s.out[:0], s.plain, enc, mode, maxRatio) })
	w.encs <- enc
}

// sampleCompresses reports whether S2 saves what pays (Auto's 3%) on a
// sample of p: sampleParts slices spread over it, sampleSize in all. A
// glance, a few tens of microseconds, where compressing a MiB block of
// data that does not compress costs milliseconds. Spread, so that a
// block whose start is the end of a media file and whose rest is text
// is still tried. A slice counts what the poorer of its halves saves,
// twice: what compresses across a slice, text, counts in full, while
// a spot of it does not, such as the tar headers ahead of a media file
// (a few KiB of zeros for a file and its directories, more than 3% of
// the sample, a few thousandths of the block). It runs on the caller's
// goroutine.
func (w *Writer) sampleCompresses(p []byte) bool {
	total := min(len(p), sampleSize)
	part := total / sampleParts
	if len(p) <= sampleSize {
		part = len(p)
	}
	half := part / 2
	if n := s2.MaxEncodedLen(part - half); cap(w.sample) < n {
		w.sample = make([]byte, n)
	}
	step := 0
	if len(p) > part {
		step = (len(p) - part) / (sampleParts - 1)
	}
	saved := 0
	for i := range sampleParts {
		q := p[i*step : i*step+part]
		a := half - len(s2.Encode(w.sample[:cap(w.sample)], q[:half]))
		b := len(q) - half - len(s2.Encode(w.sample[:cap(w.sample)], q[half:]))
		saved += 2 * min(a, b)
		if saved*100 >= total*(100-autoMaxPct) {
			return true
		}
		if step == 0 {
			break
		}
	}
	return false
}

// endStream ends the stream's frame and drops its encoder once the
// stream has gone unused for streamIdle blocks and its last block is
// through the encoder: the encoder's history (18 MiB) would otherwise be
// live for the rest of the transfer, and near the process's heap limit
// (ferry's is 40 MiB) the collector then runs all the time. Data that
// compresses again later begins a new frame, which the next stream
// block carries after the old one's end; the reader's one zstd decoder
// takes both as one stream. The caller owns lastStream, and a closed one
// says no compressing goroutine touches the encoder.
func (w *Writer) endStream() error {
	if w.sinceStream < streamIdle {
		return nil
	}
	select {
	case <-w.lastStream:
	default:
		return nil
	}
	w.lastStream = nil
	if w.stream == nil {
		return nil // its first block failed to make it; that block's error ends the Writer
	}
	end, err := w.stream.end()
	w.stream = nil
	if err != nil {
		return fmt.Errorf("end zstd stream frame: %w", err)
	}
	w.streamEnd = end
	return nil
}

// compressBoth compresses s, framed with S2 already, with zstd too, and
// keeps the smaller in s.out; both measures go into s.s2 and s.zs.
func (w *Writer) compressBoth(s *slot, mode Mode, maxRatio, blockSize int) {
	s.s2 = trial{s.took, len(s.out) - blockHeaderSize}
	enc := <-w.encs
	if enc == nil {
		var err error
		if enc, err = newEncoder(blockSize); err != nil {
			w.encs <- nil
			s.both = false
			return
		}
	}
	var typ byte
	zt := cpuClock(func() { s.alt, typ = encodeBlock(s.alt[:0], s.plain, enc, mode, maxRatio) })
	w.encs <- enc
	s.zs = trial{zt, len(s.alt) - blockHeaderSize}
	if typ == typeZstd && len(s.alt) < len(s.out) {
		s.out, s.alt, s.typ = s.alt, s.out, typ
	}
}

// send is the sender goroutine: it writes the queued blocks in order,
// each once it is framed, and stops when the queue is empty. After an
// error it still waits for every queued block, so that no compressing
// goroutine outlives the Writer's failure.
func (w *Writer) send() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.q) > 0 {
		s := w.q[0]
		failed := w.err != nil
		w.mu.Unlock()
		if s.done != nil {
			<-s.done
		}
		var n int
		var took time.Duration
		err := s.err
		if !failed && err == nil {
			t0 := time.Now()
			if !w.started {
				w.started = true
				var k int
				k, err = w.emit([]byte(magic))
				n += k
			}
			if err == nil {
				var k int
				k, err = w.emit(s.out)
				n += k
				if err == nil && s.split {
					k, err = w.emit(s.plain)
					n += k
				}
			}
			w.blocks++
			took = time.Since(t0)
		}
		w.mu.Lock()
		w.q[0] = nil
		w.q = w.q[1:]
		w.free = append(w.free, s)
		w.stats.Wire += int64(n)
		switch {
		case failed:
		case err != nil:
			if w.err == nil {
				w.err = err
			}
		default:
			w.sent(s)
			w.measureLink(took, n)
		}
		w.cond.Broadcast()
	}
	w.running = false
	w.cond.Broadcast()
}

// sent counts a block written, with w.mu held.
func (w *Writer) sent(s *slot) {
	plain := float64(binary.BigEndian.Uint32(s.out[1:]))
	if s.codec != typeRaw {
		window := float64(zstdWindow * w.opts.BlockSize)
		measure := func(codec byte, t trial) {
			c := codecIndex(codec)
			w.codecT[c].add(t.took.Seconds(), plain, window)
			if codec == typeZstd && int(plain) >= w.opts.BlockSize {
				w.framesT.add(t.took.Seconds(), plain, window)
			}
			// The ratio follows the data at once (the last block tried):
			// when text follows media, a codec probed once in a while
			// must not be judged by the media for many probes more.
			w.codecW[c] = rate{float64(t.n), plain}
		}
		if s.both {
			measure(typeS2, s.s2)
			measure(typeZstd, s.zs)
		} else {
			measure(s.codec, trial{s.took, len(s.out) - blockHeaderSize})
		}
		if s.typ != typeRaw && (s.typ != typeStream || s.paid) {
			w.miss, w.paid = 0, true
		} else {
			w.miss, w.paid = w.miss+1, false
		}
	}
	switch s.typ {
	case typeStream:
		w.stats.StreamBlocks++
	case typeZstd:
		w.stats.ZstdBlocks++
	case typeS2:
		w.stats.S2Blocks++
	default:
		w.stats.RawBlocks++
	}
	w.stats.Plaintext += int64(binary.BigEndian.Uint32(s.out[1:]))
}

// encodeBlock appends the framed block of plaintext p to out and returns
// its type: zstd when enc is not nil and compressing pays for mode, else
// raw. It touches nothing but its arguments, so slots run it in
// goroutines.
func encodeBlock(out, p []byte, enc *zstd.Encoder, mode Mode, maxRatio int) ([]byte, byte) {
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
	return header(out, h, typ, len(p)), typ
}

// encodeS2 is encodeBlock with S2: an S2 block when that pays, else raw.
// ok is false, and out unchanged, for a block that S2 compresses beyond
// maxRatio, which must go as zstd (padded) instead.
func encodeS2(out, p []byte, mode Mode, maxRatio int) (_ []byte, typ byte, ok bool) {
	h := len(out)
	start := h + blockHeaderSize
	limit := s2.MaxEncodedLen(len(p))
	out = slices.Grow(append(out, zeroHeader[:]...), limit)
	dst := out[start : start+limit]
	e := s2.Encode(dst, p)
	if len(e) > 0 && &e[0] != &dst[0] {
		copy(dst, e) // S2 allocated after all; keep out's buffer
	}
	switch {
	case len(p) > len(e)*maxRatio:
		return out[:h], typeRaw, false
	case pays(mode, len(e), len(p)):
		typ = typeS2
		out = out[:start+len(e)]
	default:
		typ = typeRaw
		out = append(out[:start], p...)
	}
	return header(out, h, typ, len(p)), typ, true
}

// rawHeader appends the header of a raw block of n bytes to out, for a
// payload written after it.
func rawHeader(out []byte, n int) []byte {
	h := len(out)
	out = append(out, zeroHeader[:]...)
	putHeader(out[h:], typeRaw, n, n)
	return out
}

// header fills in the header of the block that starts at out[h:].
func header(out []byte, h int, typ byte, plain int) []byte {
	putHeader(out[h:], typ, plain, len(out)-h-blockHeaderSize)
	return out
}

// putHeader writes a block header at the start of b.
func putHeader(b []byte, typ byte, plain, payload int) {
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:], uint32(plain))
	binary.BigEndian.PutUint32(b[5:], uint32(payload))
}

// try returns the compression to try on block p (typeRaw for none),
// with w.mu held: choose's, with Auto's zstd in the stream where that is
// faster.
func (w *Writer) try(p []byte) byte {
	c := w.choose()
	sampled := false
	if c != typeRaw && w.opts.Compress == Auto && !w.paid {
		// Raw without a trial: a MiB of media or random bytes costs
		// zstd milliseconds to find it does not compress, as much as the
		// relay takes to carry it on a LAN. Not a miss: the sample is
		// cheap enough to take on every block until one pays.
		if !w.sampleCompresses(p) {
			return typeRaw
		}
		sampled = true
	}
	// Not the first block, which is all of most small streams: a frame
	// of its own costs less than an encoder with a StreamWindow of
	// history (18 MiB, a few ms). Not after a block that did not pay: a
	// stream block is sent even then (its encoder has it), so data that
	// may not compress is tried outside the stream, which sends what
	// does not pay raw.
	if c == typeRaw || w.opts.Compress != Auto || w.cut == 0 || w.miss > 0 {
		return c
	}
	switch {
	case w.wan():
		// Auto's own measures cannot be had in time here: a WAN's
		// buffers (flow-control windows, sockets) take several MiB at
		// once, as much as a whole transfer of text sends, so the link
		// shows its pace late if at all, and a Write that returns at
		// once would look like a fast link. The stream is kept, for S2
		// too, unless the link is shown fast after all (fastWAN).
		w.streaming = !w.fastWAN()
	case c == typeZstd:
		w.streaming = w.linkKnown() && w.streams()
	default:
		w.streaming = false
	}
	if w.streaming && w.lastStream == nil && !sampled && !w.sampleCompresses(p) {
		// A new frame's encoder costs 18 MiB and its default level
		// about 10 ms a MiB on data that does not compress: the block
		// after one that paid is sampled before it begins one.
		w.streaming = false
		return typeZstd
	}
	if w.streaming {
		c = typeStream
	}
	return c
}

// wan reports whether the channel's round trip (WriterOptions.RTT) is a
// WAN's, or may be: until the caller has measured it, the link is taken
// for a WAN's, where the first MiBs compressed the most save the most.
// A LAN's round trip is known after about a millisecond, a block or two.
func (w *Writer) wan() bool {
	if w.opts.RTT == nil {
		return false
	}
	rtt := w.opts.RTT()
	return rtt == 0 || rtt >= WANRTT
}

// lan reports whether the channel's round trip has been measured and is
// a LAN's. Until the link shows its pace, Auto then takes it for as fast
// as a LAN's usually is, faster than zstd, and uses S2: zstd's first MiBs
// would cost a gigabit link's two ends more CPU than the bytes they
// save take to send (make bench, lan: 10,000 small files up, zstd's
// start added a tenth). A slow LAN's link is measured once the channel's
// buffers are full (Buffered), and zstd picked then.
func (w *Writer) lan() bool {
	if w.opts.RTT == nil {
		return false
	}
	rtt := w.opts.RTT()
	return rtt > 0 && rtt < WANRTT
}

// fastWAN reports, with w.mu held, whether a WAN's link has been shown
// faster than the stream's encoder: the link measured well past the
// channel's buffers (4 × Buffered of wire, 1 MiB at least), and frames of
// their own faster there than the stream (streams).
func (w *Writer) fastWAN() bool {
	return w.linkKnown() && w.stats.Wire >= 4*max(w.opts.Buffered, 1<<20) && !w.streams()
}

// choose returns the codec to try on the next block, zstd, S2 or none
// (typeRaw), with w.mu held.
func (w *Writer) choose() byte {
	switch w.opts.Compress {
	case None:
		return typeRaw
	case Zstd:
		return typeZstd
	case S2:
		return typeS2
	}
	var c byte
	if w.cut < w.warmupN {
		// Both codecs in turn, so that both are measured by the end:
		// zstd first, then again only where it may pay.
		c = typeS2
		if w.cut == 0 && !w.lan() || w.cut%2 == 0 && w.zstdMayPay() {
			c = typeZstd
		}
	} else if !w.linkKnown() {
		// The channel's buffers still hide the link: the codec that
		// saves the most, until the link shows its pace, but on a LAN
		// (see lan).
		c = typeZstd
		if w.lan() {
			c = typeS2
		}
	} else {
		w.adapt()
		c = w.pick
		w.probe++
		if other := otherCodec(w.pick); w.probe >= w.gap && w.miss < skipAfter && (other == typeS2 || w.zstdMayPay()) {
			// Keep the measure of what is not picked current: the data,
			// the link and the CPU's load all change.
			w.probe = 0
			w.gap = min(2*w.gap, probeMax)
			return other
		}
	}
	if w.miss < skipAfter {
		return c
	}
	w.skipped++
	if w.skipped < skipEvery {
		return typeRaw
	}
	w.skipped = 0
	return c
}

// otherCodec is the codec Auto probes while it uses c.
func otherCodec(c byte) byte {
	if c == typeZstd {
		return typeS2
	}
	return typeZstd
}

func codecIndex(c byte) int {
	switch c {
	case typeS2:
		return 1
	case typeStream:
		return 2
	}
	return 0
}

// streams reports, with w.mu held, whether a block Auto compresses with
// zstd is faster sent as a piece of the stream's shared zstd frame
// (typeStream) than as a frame of its own. The stream compresses better
// (each block refers to the StreamWindow before it, and it uses zstd's
// default level), but blocks go through its one encoder one at a time,
// while frames of their own are compressed Concurrency at a time. So
// each way goes at the pace of the slower of its compression and the
// link's time for its output, and the stream wins where the link is the
// bottleneck: about 100 Mbit/s and slower for text. A switch needs a
// gain of hysteresisPct. The link must be known.
func (w *Writer) streams() bool {
	st, z := codecIndex(typeStream), codecIndex(typeZstd)
	if w.codecT[st].n == 0 && w.framesT.n == 0 {
		return true
	}
	link := w.linkCost()
	// Unmeasured, a frame of its own is about twice as fast as the
	// stream's default level, and a sixth larger on text; and the
	// other way round: a fast link, before the stream is measured, is
	// not given a block of it on a guess.
	ts, ws := w.codecT[st].per(), w.codecW[st].per()
	tz, wz := w.framesT.per(), w.codecW[z].per()
	if w.codecT[st].n == 0 {
		ts, ws = tz*2, wz*6/7
	}
	if w.framesT.n == 0 {
		tz, wz = ts/2, ws*7/6
	}
	stream := max(ts, link*ws)
	frames := max(tz/float64(w.opts.Concurrency), link*wz)
	if w.streaming {
		return frames*100 >= stream*(100-hysteresisPct)
	}
	return frames*(100-hysteresisPct) > stream*100
}

// adapt picks, with w.mu held, the codec Auto uses: zstd or S2,
// whichever gains the most time per plaintext byte. A codec gains the
// link time of the bytes it saves less the time it takes. Both are
// measured: the time the sender spends in the underlying Write per wire
// byte (about nothing while the link keeps up, the link's pace once it is
// backed up; never less than WireCost), and each codec's CPU time and
// output per plaintext byte. On a slow link zstd wins (it saves the most
// bytes), on a fast one S2 (several times zstd's speed). Raw is not a
// pick: data that compresses is worth S2's time on any link a relay
// carries (S2 costs less CPU per byte than relaying the byte does), and
// data that does not is found by the skip logic in try. A switch needs a
// gain hysteresisPct of the codec's time over the current pick, so that
// the choice does not flap around a balance.
func (w *Writer) adapt() {
	if !w.linkKnown() || w.codecT[0].n == 0 || w.codecT[1].n == 0 {
		return
	}
	link := w.linkCost()
	gain := func(c byte) (gain, cost float64) {
		i := codecIndex(c)
		cost = w.codecT[i].per()
		return (1-w.codecW[i].per())*link - cost, cost
	}
	cur, curCost := gain(w.pick)
	for _, c := range []byte{typeZstd, typeS2} {
		g, cost := gain(c)
		if c != w.pick && (g-cur)*100 > max(cost, curCost)*hysteresisPct {
			w.pick, cur, curCost = c, g, cost
			w.gap = probeEvery
		}
	}
}

// zstdMayPay reports, with w.mu held, whether zstd could still beat S2
// on this link and data: whether the most it could save, every wire byte
// S2 sends, would take longer on the link than the time zstd takes over
// S2's. That extra time is as last measured, or, before zstd has been,
// at least S2's own (klauspost's fastest zstd measured 3 to 4 times S2 on
// amd64, where S2 has assembly, and more elsewhere). Where zstd cannot
// pay, trying it (warmup, probes) only spends CPU: a tenth of a fast
// transfer's compression time. The link is measured on every block
// sent, so a link that slows down brings the probes back. Until S2 and
// the link have been measured it says no.
func (w *Writer) zstdMayPay() bool {
	s, z := codecIndex(typeS2), codecIndex(typeZstd)
	if !w.linkKnown() || w.codecT[s].n == 0 {
		return false
	}
	link := w.linkCost()
	extra := w.codecT[s].per()
	if w.codecT[z].n > 0 {
		extra = w.codecT[z].per() - w.codecT[s].per()
	}
	return w.codecW[s].per()*link > extra
}

// measureLink counts, with w.mu held, a block of n wire bytes that the
// underlying Write took took to take. What a channel takes before its
// buffers are full (WriterOptions.Buffered) it takes at once whatever the
// link, and is not counted.
func (w *Writer) measureLink(took time.Duration, n int) {
	if w.stats.Wire-int64(n) < w.opts.Buffered || n == 0 {
		return
	}
	w.linkAll.add(took.Seconds(), float64(n), linkWindow)
	if took.Seconds() >= float64(n)*blockedPace {
		w.link.add(took.Seconds(), float64(n), linkWindow)
		w.unblocked = 0
	} else {
		w.unblocked += int64(n)
	}
}

// linkKnown reports, with w.mu held, whether the link has been measured
// past the channel's buffers (WriterOptions.Buffered).
func (w *Writer) linkKnown() bool {
	return w.linkAll.n > 0
}

// linkPace is the link's time per wire byte, with w.mu held. A Write that
// returns at once says only that the link kept up with what was written
// so far, not how fast it is: a Writer that compresses harder once the
// link is slow writes slower than the link then, for a while, before
// the channel's buffers fill again. So the pace is that of the Writes
// that waited, until 2 × linkWindow of wire has gone without one waiting:
// the link is faster than the Writer then, and the pace is every Write's.
func (w *Writer) linkPace() float64 {
	if w.link.n > 0 && w.unblocked < 2*linkWindow {
		return w.link.per()
	}
	return w.linkAll.per()
}

// linkCost is what Auto counts a wire byte to cost, in seconds: the link's
// measured pace, but never less than WireCost. w.mu is held.
func (w *Writer) linkCost() float64 {
	return max(w.linkPace(), w.opts.WireCost.Seconds()/(1<<20))
}

// rate is a quantity per byte over roughly the last window bytes.
type rate struct{ v, n float64 }

func (r *rate) add(v, n, window float64) {
	r.v += v
	r.n += n
	if r.n > window {
		k := window / r.n
		r.v *= k
		r.n *= k
	}
}

func (r *rate) per() float64 { return r.v / r.n }

// pays reports whether n encoded bytes are worth sending for plain bytes.
func pays(mode Mode, n, plain int) bool {
	if mode == Zstd || mode == S2 {
		return n < plain
	}
	return n*100 <= plain*autoMaxPct
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

// emit writes b to the underlying writer and adds it to the CRC.
func (w *Writer) emit(b []byte) (int, error) {
	n, err := w.w.Write(b)
	w.crc = crc32.Update(w.crc, castagnoli, b)
	if err == nil && n != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return n, fmt.Errorf("write frame: %w", err)
	}
	return n, nil
}
