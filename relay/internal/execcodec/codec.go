package execcodec

import (
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
		if b, ok := payload(data, fieldStdin); ok {
			m.Reset()
			m.Payload = &openshellv1.ExecSandboxInput_Stdin{Stdin: b}
			return nil
		}
	case *openshellv1.ExecSandboxEvent:
		if b, ok := payload(data, fieldStdout, fieldData); ok {
			m.Reset()
			m.Payload = &openshellv1.ExecSandboxEvent_Stdout{Stdout: &openshellv1.ExecSandboxStdout{Data: b}}
			return nil
		}
		if b, ok := payload(data, fieldStderr, fieldData); ok {
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

// payload copies out the bytes of a message that is one field along path
// and nothing else (see grpcbuf.Field), noting it for Debug. ok is false
// for any other message.
func payload(data mem.BufferSlice, path ...protowire.Number) (b []byte, ok bool) {
	b, ok = grpcbuf.Field(&pool, data, path...)
	if ok && len(b) > 0 {
		debugGot(b)
	}
	return b, ok
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
	grpcbuf.Release(&pool, b)
}

// protoCodec is gRPC's proto codec, which encoding/proto registers in its
// init, before this package's variables are initialized.
var protoCodec = encoding.GetCodecV2(protocodec.Name)
