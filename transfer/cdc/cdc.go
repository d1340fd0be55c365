package cdc

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// Params bound the chunk sizes. Avg must be a power of two; Min < Avg < Max.
type Params struct {
	Min, Avg, Max int
}

// Default is what ferry's session store cuts with: 32 KiB average, 8 KiB to
// 128 KiB (see the measurement in package session's doc). It is a
// function, not a variable, so that nothing can change what every store
// and agent must agree on.
func Default() Params { return Params{Min: 8 << 10, Avg: 32 << 10, Max: 128 << 10} }

// Validate reports whether p can be used.
func (p Params) Validate() error {
	if p.Min <= 0 || p.Avg <= p.Min || p.Max <= p.Avg || p.Avg&(p.Avg-1) != 0 || p.Max > 1<<30 {
		return fmt.Errorf("cdc: invalid params %+v: want 0 < Min < Avg < Max, Avg a power of two", p)
	}
	return nil
}

// masks returns the strict mask (used before Avg) and the loose one (after
// it): normalization level 2, two bits more and two bits fewer than
// log2(Avg). The masks test the high bits of the gear hash, which depend on
// the last 64 bytes; the low bits depend on only a few.
func (p Params) masks() (strict, loose uint64) {
	b := bits.TrailingZeros(uint(p.Avg))
	return ^uint64(0) << (64 - (b + 2)), ^uint64(0) << (64 - max(b-2, 1))
}

// Cut returns the length of the first chunk of data, where data holds the
// rest of the stream or at least p.Max bytes of it. It is len(data) when
// len(data) <= p.Min.
func (p Params) Cut(data []byte) int {
	n := len(data)
	if n <= p.Min {
		return n
	}
	n = min(n, p.Max)
	normal := min(n, p.Avg)
	strict, loose := p.masks()
	var fp uint64
	i := p.Min
	for ; i < normal; i++ {
		fp = fp<<1 + gear[data[i]]
		if fp&strict == 0 {
			return i + 1
		}
	}
	for ; i < n; i++ {
		fp = fp<<1 + gear[data[i]]
		if fp&loose == 0 {
			return i + 1
		}
	}
	return n
}

// Chunker reads a stream and returns its chunks. Memory is two times
// p.Max, whatever the stream's size. It is not safe for concurrent use.
type Chunker struct {
	r     io.Reader
	p     Params
	buf   []byte
	start int // first byte not yet returned
	end   int // end of the valid data in buf
	eof   bool
	err   error // sticky
}

// New returns a Chunker reading r. It panics if p is invalid: params are
// constants of the caller, not input.
func New(r io.Reader, p Params) *Chunker {
	if err := p.Validate(); err != nil {
		panic(err)
	}
	return &Chunker{r: r, p: p, buf: make([]byte, 2*p.Max)}
}

// Reset makes c read r from the start, keeping its buffer.
func (c *Chunker) Reset(r io.Reader) {
	c.r, c.start, c.end, c.eof, c.err = r, 0, 0, false, nil
}

// Next returns the next chunk, valid until the next call, or io.EOF after
// the last one. An empty stream has no chunks. After an error every call
// returns it.
func (c *Chunker) Next() ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	if c.end-c.start < c.p.Max && !c.eof {
		if err := c.fill(); err != nil {
			c.err = err
			return nil, err
		}
	}
	if c.start == c.end {
		c.err = io.EOF
		return nil, io.EOF
	}
	n := c.p.Cut(c.buf[c.start:c.end])
	chunk := c.buf[c.start : c.start+n]
	c.start += n
	return chunk, nil
}

// fill moves the unread bytes to the front and reads until the buffer
// holds p.Max bytes or the stream ends.
func (c *Chunker) fill() error {
	copy(c.buf, c.buf[c.start:c.end])
	c.end -= c.start
	c.start = 0
	for c.end < c.p.Max && !c.eof {
		n, err := c.r.Read(c.buf[c.end:])
		c.end += n
		if errors.Is(err, io.EOF) {
			c.eof = true
		} else if err != nil {
			return fmt.Errorf("read chunk: %w", err)
		}
	}
	return nil
}
