package agent

import (
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
)

// codec is gRPC's protobuf codec with the buffers pool in place of the
// default one, whose buffers are zeroed on every Get (see buffers), and a
// receive path for data messages that copies their bytes once (see
// Unmarshal). Both ends of an agent connection force it; on the wire it
// is "proto".
type codec struct{}

var _ encoding.CodecV2 = codec{}

func (codec) Name() string { return "proto" }

// Marshal copies a data message's bytes into a pooled buffer, as proto
// does. Handing gRPC the caller's slice instead would save that copy, but
// gRPC writes a message after Send returns, and the senders reuse their
// buffer as soon as it does (chunkWriter, Restore): the copy is what makes
// that safe.
func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a proto.Message", v)
	}
	// Size, then UseCachedSize: the message is not changed in between.
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	b := buffers.Get(size)
	if _, err := opts.MarshalAppend((*b)[:0], m); err != nil {
		buffers.Put(b)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(b, buffers)}, nil
}

// Tags (field number << 3 | wire type 2) of the bytes fields Unmarshal
// fills by hand; each is its message's only field when it is set (a
// oneof member). TestDataTags holds them to the descriptors.
const (
	putDataTag      = 2<<3 | 2 // PutRequest.data
	getDataTag      = 1<<3 | 2 // GetResponse.data
	restoreChunkTag = 3<<3 | 2 // RestoreRequest.chunk
)

// Unmarshal is proto.Unmarshal, except for a data message: a PutRequest,
// GetResponse or RestoreRequest whose encoding is exactly one field, its
// bulk bytes. proto would copy the message's frames into one buffer, then
// its bytes into a fresh allocation (256 KiB each, for the GC to clear
// and collect); here they are copied once, from the frames into a buffer
// of the pool. The message then owns that buffer: a consumer that has
// read the last of it may hand it back with release; one that does not
// leaves it to the GC. Any other encoding (another field, unknown fields,
// the field twice, a long varint) goes to proto.Unmarshal, so the result
// is always what proto.Unmarshal gives.
func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *agentv1.PutRequest:
		if b, ok := unmarshalBytes(data, putDataTag); ok {
			m.Reset()
			m.Msg = &agentv1.PutRequest_Data{Data: b}
			return nil
		}
	case *agentv1.GetResponse:
		if b, ok := unmarshalBytes(data, getDataTag); ok {
			m.Reset()
			m.Msg = &agentv1.GetResponse_Data{Data: b}
			return nil
		}
	case *agentv1.RestoreRequest:
		if b, ok := unmarshalBytes(data, restoreChunkTag); ok {
			m.Reset()
			m.Msg = &agentv1.RestoreRequest_Chunk{Chunk: b}
			return nil
		}
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal %T: not a proto.Message", v)
	}
	b := data.MaterializeToBuffer(buffers)
	defer b.Free()
	return proto.Unmarshal(b.ReadOnlyData(), m)
}

// maxLenBytes bounds the length varint unmarshalBytes takes: four bytes
// carry up to 256 MiB, past maxMessage.
const maxLenBytes = 4

// unmarshalBytes returns the payload of data when data is exactly one
// field: tag (one byte), a varint length, and that many bytes to the end.
// The payload is in a buffer of the pool (len 0: an empty, unpooled
// slice, as proto gives); ok is false, and nothing taken, for anything
// else.
func unmarshalBytes(data mem.BufferSlice, tag byte) (b []byte, ok bool) {
	var hdr [1 + maxLenBytes]byte
	h := readAt(hdr[:], data, 0)
	if h < 2 || hdr[0] != tag {
		return nil, false
	}
	var size, k int
	for k = 1; ; k++ {
		if k == h || k > maxLenBytes {
			return nil, false // the varint does not end
		}
		size |= int(hdr[k]&0x7f) << (7 * (k - 1))
		if hdr[k] < 0x80 {
			break
		}
	}
	off := k + 1
	if size != data.Len()-off {
		return nil, false // more fields follow, or the field is cut
	}
	if size == 0 {
		return []byte{}, true
	}
	b = *buffers.Get(size)
	readAt(b, data, off)
	if h := acquireHook.Load(); h != nil {
		(*h)(b)
	}
	return b, true
}

// readAt copies data from offset off into dst, as far as either goes, and
// returns the bytes copied.
func readAt(dst []byte, data mem.BufferSlice, off int) int {
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

// release hands a data message's bytes (see Unmarshal) back to buffers.
// Its caller must own b alone, as the consumer of a received message
// does, and must not read b, or any slice of it, afterwards: the pool
// hands it to the next message, or to gRPC's transport. A slice the pool
// does not take (an empty one, one whose capacity is not a size class)
// is left to the GC.
func release(b []byte) {
	if h := releaseHook.Load(); h != nil {
		(*h)(b)
	}
	b = b[:0:cap(b)]
	buffers.Put(&b)
}

// acquireHook and releaseHook, when set, see every buffer unmarshalBytes
// fills and every buffer release takes: tests track ownership with them
// (export_test.go).
var acquireHook, releaseHook atomic.Pointer[func([]byte)]
