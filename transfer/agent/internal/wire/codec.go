package wire

import (
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/relay/grpcbuf"
)

// codec is gRPC's protobuf codec with the Buffers pool in place of the
// default one, whose buffers are zeroed on every Get (see Buffers), and a
// receive path for data messages that copies their bytes once (see
// Unmarshal). Both ends of an agent connection force it; on the wire it
// is "proto".
type codec struct{}

// Codec is the codec both ends force, for the tests and the hostile agent.
var Codec encoding.CodecV2 = codec{}

func (codec) Name() string { return "proto" }

// Marshal copies a data message's bytes into a pooled buffer, as proto
// does. Handing gRPC the caller's slice instead would save that copy, but
// gRPC writes a message after Send returns, and the senders reuse their
// buffer as soon as it does (ChunkWriter, Restore): the copy is what makes
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
	b := Buffers.Get(size)
	if _, err := opts.MarshalAppend((*b)[:0], m); err != nil {
		Buffers.Put(b)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(b, Buffers)}, nil
}

// The bytes fields Unmarshal fills by hand; each is its message's only
// field when it is set (a oneof member). TestDataTags holds them to the
// descriptors.
const (
	PutDataField      protowire.Number = 2 // PutRequest.data
	GetDataField      protowire.Number = 1 // GetResponse.data
	RestoreChunkField protowire.Number = 3 // RestoreRequest.chunk
)

// Unmarshal is proto.Unmarshal, except for a data message: a PutRequest,
// GetResponse or RestoreRequest whose encoding is exactly one field, its
// bulk bytes. proto would copy the message's frames into one buffer, then
// its bytes into a fresh allocation (256 KiB each, for the GC to clear
// and collect); here they are copied once, from the frames into a buffer
// of the pool. The message then owns that buffer: a consumer that has
// read the last of it may hand it back with Release; one that does not
// leaves it to the GC. Any other encoding (another field, unknown fields,
// the field twice) goes to proto.Unmarshal, so the result is always what
// proto.Unmarshal gives.
func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *agentv1.PutRequest:
		if b, ok := UnmarshalBytes(data, PutDataField); ok {
			m.Reset()
			m.Msg = &agentv1.PutRequest_Data{Data: b}
			return nil
		}
	case *agentv1.GetResponse:
		if b, ok := UnmarshalBytes(data, GetDataField); ok {
			m.Reset()
			m.Msg = &agentv1.GetResponse_Data{Data: b}
			return nil
		}
	case *agentv1.RestoreRequest:
		if b, ok := UnmarshalBytes(data, RestoreChunkField); ok {
			m.Reset()
			m.Msg = &agentv1.RestoreRequest_Chunk{Chunk: b}
			return nil
		}
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal %T: not a proto.Message", v)
	}
	b := data.MaterializeToBuffer(Buffers)
	defer b.Free()
	return proto.Unmarshal(b.ReadOnlyData(), m)
}

// UnmarshalBytes returns the payload of data when data is exactly one
// bytes field, number f (see grpcbuf.Field), in a buffer of the pool; ok
// is false, and nothing taken, for anything else.
func UnmarshalBytes(data mem.BufferSlice, f protowire.Number) (b []byte, ok bool) {
	b, ok = grpcbuf.Field(Buffers, data, f)
	if ok && len(b) > 0 {
		if h := AcquireHook.Load(); h != nil {
			(*h)(b)
		}
	}
	return b, ok
}

// Release hands a data message's bytes (see Unmarshal) back to Buffers.
// Its caller must own b alone, as the consumer of a received message
// does, and must not read b, or any slice of it, afterwards: the pool
// hands it to the next message, or to gRPC's transport.
func Release(b []byte) {
	if h := ReleaseHook.Load(); h != nil {
		(*h)(b)
	}
	grpcbuf.Release(Buffers, b)
}

// AcquireHook and ReleaseHook, when set, see every buffer UnmarshalBytes
// fills and every buffer Release takes: tests track ownership with them
// (export_test.go).
var AcquireHook, ReleaseHook atomic.Pointer[func([]byte)]
