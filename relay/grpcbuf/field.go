package grpcbuf

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// maxHeader bounds the header Field reads: up to maxDepth tags and
// lengths, each a varint of at most 10 bytes (protobuf accepts non-minimal
// ones).
const (
	maxDepth  = 2
	maxHeader = maxDepth * 2 * 10
)

// Field copies out the bytes of a received message that is one
// length-delimited field and nothing else: field path[0] of data, or, with
// a longer path, field path[1] of the message that field holds, and so on
// (at most two deep). The copy is made once, straight from gRPC's frames,
// into a buffer from pool, at offset 0; its owner may hand it back with
// Release. ok is false, and nothing taken, for any other message: another
// field, a field twice, an unknown field, a wire type or length that does
// not fit, an empty enclosing message. Those, and only those, are
// proto.Unmarshal's business: where Field takes a message, its bytes are
// what proto.Unmarshal would give.
func Field(pool mem.BufferPool, data mem.BufferSlice, path ...protowire.Number) (b []byte, ok bool) {
	if len(path) == 0 || len(path) > maxDepth {
		return nil, false
	}
	var buf [maxHeader]byte
	head := buf[:gather(buf[:], data)]
	total := data.Len()
	off := 0
	var n uint64
	for i, f := range path {
		num, typ, k := protowire.ConsumeTag(head[off:])
		if k < 0 || num != f || typ != protowire.BytesType {
			return nil, false
		}
		var m int
		n, m = protowire.ConsumeVarint(head[off+k:])
		if m < 0 {
			return nil, false
		}
		off += k + m
		if n != uint64(total-off) || n == 0 && i < len(path)-1 {
			return nil, false
		}
	}
	if n == 0 {
		// As proto.Unmarshal gives an empty bytes field.
		return []byte{}, true
	}
	b = *pool.Get(int(n))
	if c := copyAt(b, data, off); c != len(b) {
		// The lengths were checked against data.Len().
		panic(fmt.Sprintf("grpcbuf: %d bytes of a %d-byte field", c, len(b)))
	}
	return b, true
}

// Release hands b, a buffer Field gave, back to pool. Its caller must
// hold the last reference to b and drop it: the buffer is someone else's
// next. A buffer the pool does not take (an empty one, one whose capacity
// is not a size class) is left to the GC, which is harmless.
func Release(pool mem.BufferPool, b []byte) {
	if cap(b) == 0 {
		return
	}
	b = b[:0:cap(b)]
	pool.Put(&b)
}

// gather copies the first bytes of data into dst and returns how many.
func gather(dst []byte, data mem.BufferSlice) int {
	return copyAt(dst, data, 0)
}

// copyAt copies data from offset off into dst, as far as either goes, and
// returns the bytes copied.
func copyAt(dst []byte, data mem.BufferSlice, off int) int {
	n := 0
	for _, buf := range data {
		p := buf.ReadOnlyData()
		if off >= len(p) {
			off -= len(p)
			continue
		}
		n += copy(dst[n:], p[off:])
		off = 0
		if n == len(dst) {
			break
		}
	}
	return n
}
