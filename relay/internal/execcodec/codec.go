package execcodec

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/grpcbuf"
)

// Codec is the exec channel's codec; see the package doc.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// ServerOption makes a grpc.Server use Codec for every method. The
// response's content-type is the request's, whatever the codec's name.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(Codec{}) }

// CallOption makes a call use Codec.
//
// gRPC sends a forced codec's name as the content-subtype
// ("application/grpc+proto"), where its default codec sends none
// ("application/grpc"); the call's codec has an empty name so that the
// request headers stay exactly what they were.
func CallOption() grpc.CallOption { return grpc.ForceCodecV2(unnamed{}) }

type unnamed struct{ Codec }

func (unnamed) Name() string { return "" }

// Name is the proto codec's.
func (Codec) Name() string { return protocodec.Name }

// Marshal is the proto codec's.
func (Codec) Marshal(v any) (mem.BufferSlice, error) { return protoCodec.Marshal(v) }

// Unmarshal decodes data into v. A payload it gives (see the package doc)
// is owned by the caller and may be handed back with Release.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *openshellv1.ExecSandboxInput:
		if b, ok := payload(data, fieldStdin, false); ok {
			m.Reset()
			m.Payload = &openshellv1.ExecSandboxInput_Stdin{Stdin: b}
			return nil
		}
	case *openshellv1.ExecSandboxEvent:
		if b, ok := payload(data, fieldStdout, true); ok {
			m.Reset()
			m.Payload = &openshellv1.ExecSandboxEvent_Stdout{Stdout: &openshellv1.ExecSandboxStdout{Data: b}}
			return nil
		}
		if b, ok := payload(data, fieldStderr, true); ok {
			m.Reset()
			m.Payload = &openshellv1.ExecSandboxEvent_Stderr{Stderr: &openshellv1.ExecSandboxStderr{Data: b}}
			return nil
		}
	}
	return protoCodec.Unmarshal(data, v)
}

// Field numbers from proto/openshell/v1/openshell.proto.
const (
	fieldStdin  protowire.Number = 2 // ExecSandboxInput.stdin
	fieldStdout protowire.Number = 1 // ExecSandboxEvent.stdout
	fieldStderr protowire.Number = 2 // ExecSandboxEvent.stderr
	fieldData   protowire.Number = 1 // ExecSandboxStdout.data, ExecSandboxStderr.data
)

// maxHeader bounds the header parse reads: two tags and two lengths, each a
// varint of at most 10 bytes (protobuf accepts non-minimal ones).
const maxHeader = 4 * 10

// payload copies out the bytes field of a message that holds field f and
// nothing else: f itself a bytes field when nested is false, else a message
// that holds only its bytes field 1. ok is false for any other message.
func payload(data mem.BufferSlice, f protowire.Number, nested bool) (b []byte, ok bool) {
	var buf [maxHeader]byte
	total := data.Len()
	head := buf[:gather(buf[:], data)]
	off, n, ok := parse(head, total, f, nested)
	if !ok {
		return nil, false
	}
	return copyOut(data, off, n), true
}

// parse reads the header of a message of total bytes whose first bytes are
// head, as payload describes it, and returns where the bytes field's value
// starts and its length. It accepts only a message in which that value
// runs to the end: anything after it would be another field, which
// proto.Unmarshal must see.
func parse(head []byte, total int, f protowire.Number, nested bool) (off, n int, ok bool) {
	num, typ, k := protowire.ConsumeTag(head)
	if k < 0 || num != f || typ != protowire.BytesType {
		return 0, 0, false
	}
	l, m := protowire.ConsumeVarint(head[k:])
	if m < 0 {
		return 0, 0, false
	}
	off = k + m
	if l != uint64(total-off) {
		return 0, 0, false
	}
	if !nested {
		return off, int(l), true
	}
	if l == 0 {
		// An empty stdout or stderr message: rare, and proto.Unmarshal's
		// business.
		return 0, 0, false
	}
	num, typ, k = protowire.ConsumeTag(head[off:])
	if k < 0 || num != fieldData || typ != protowire.BytesType {
		return 0, 0, false
	}
	l, m = protowire.ConsumeVarint(head[off+k:])
	if m < 0 {
		return 0, 0, false
	}
	off += k + m
	if l != uint64(total-off) {
		return 0, 0, false
	}
	return off, int(l), true
}

// gather copies the first bytes of data into dst and returns how many.
func gather(dst []byte, data mem.BufferSlice) int {
	n := 0
	for _, b := range data {
		n += copy(dst[n:], b.ReadOnlyData())
		if n == len(dst) {
			break
		}
	}
	return n
}

// copyOut copies n bytes of data from off into a pooled buffer.
func copyOut(data mem.BufferSlice, off, n int) []byte {
	if n == 0 {
		// As proto.Unmarshal gives an empty bytes field.
		return []byte{}
	}
	b := *pool.Get(n)
	dst := b
	for _, buf := range data {
		d := buf.ReadOnlyData()
		if off >= len(d) {
			off -= len(d)
			continue
		}
		c := copy(dst, d[off:])
		off = 0
		dst = dst[c:]
		if len(dst) == 0 {
			break
		}
	}
	if len(dst) != 0 {
		// parse checked the lengths against data.Len().
		panic(fmt.Sprintf("execcodec: %d bytes short of a %d-byte payload", len(dst), n))
	}
	debugGot(b)
	return b
}

var pool grpcbuf.Pool

// Release hands back a payload that Unmarshal gave. The caller must hold
// the last reference to b and drop it: after Release the buffer is someone
// else's. b must be the payload as received, not a slice of it. A payload
// that did not come from the pool (an empty one, or one from the fallback
// path) is pooled or dropped, which is harmless: nothing else holds it.
func Release(b []byte) {
	if cap(b) == 0 {
		return
	}
	debugPut(b)
	pool.Put(&b)
}

// protoCodec is gRPC's proto codec, which encoding/proto registers in its
// init, before this package's variables are initialized.
var protoCodec = encoding.GetCodecV2(protocodec.Name)
