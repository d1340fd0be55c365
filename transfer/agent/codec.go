package agent

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codec is gRPC's protobuf codec with the buffers pool in place of the
// default one, whose buffers are zeroed on every Get (see buffers). Both
// ends of an agent connection force it; on the wire it is "proto".
type codec struct{}

var _ encoding.CodecV2 = codec{}

func (codec) Name() string { return "proto" }

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

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal %T: not a proto.Message", v)
	}
	b := data.MaterializeToBuffer(buffers)
	defer b.Free()
	return proto.Unmarshal(b.ReadOnlyData(), m)
}
