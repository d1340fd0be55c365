package gateway

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/ferry-dev/ferry/relay/internal/execcodec"
)

// Upstream's server decodes with tonic, capped at 1 MiB
// (openshell-server multiplex.rs MAX_GRPC_DECODE_SIZE), and tonic refuses
// a longer message as a decode error, OUT_OF_RANGE "Error, decoded message
// length too large: found N bytes, the limit is: M bytes", which the
// handler sees: a unary or server-streaming call fails with it, and
// ExecSandboxInteractive's stdin pump takes it as the end of stdin.
//
// grpc-go's own limit (MaxRecvMsgSize) cannot give that: it answers
// RESOURCE_EXHAUSTED and ends the stream itself, before the handler
// knows. So grpc-go's limit is set higher (decodeBuffer) and the 1 MiB
// one is kept here: the codec does not decode an oversized message but
// notes it, and the handler's RecvMsg, wrapped, returns tonic's error in
// its place. A message past decodeBuffer still meets grpc-go's refusal.

// decodeBuffer is grpc-go's limit, the most a message may hold for the
// gateway to refuse it as upstream does.
const decodeBuffer = 4 << 20

// oversized maps a message that the codec did not decode, because its
// encoding was longer than maxMessage, to that length. The RecvMsg that
// passed the message in takes the entry out.
var oversized sync.Map

// limitCodec is execcodec's codec with upstream's decode limit.
type limitCodec struct{ execcodec.Codec }

func (c limitCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if n := data.Len(); n > maxMessage {
		oversized.Store(v, n)
		return nil
	}
	return c.Codec.Unmarshal(data, v)
}

// recvChecked is a RecvMsg that gives tonic's error for a message that
// the codec noted as oversized.
func recvChecked(recv func(any) error, m any) error {
	err := recv(m)
	if n, ok := oversized.LoadAndDelete(m); ok && err == nil {
		return status.Errorf(codes.OutOfRange, "Error, decoded message length too large: found %d bytes, the limit is: %d bytes", n, maxMessage)
	}
	return err
}

// withTonicLimits returns a copy of desc whose handlers receive through
// recvChecked.
func withTonicLimits(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error { return recvChecked(dec, v) }, ic)
		}
		d.Methods[i] = m
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, st := range desc.Streams {
		h := st.Handler
		st.Handler = func(srv any, ss grpc.ServerStream) error { return h(srv, tonicStream{ss}) }
		d.Streams[i] = st
	}
	return &d
}

type tonicStream struct{ grpc.ServerStream }

func (t tonicStream) RecvMsg(m any) error { return recvChecked(t.ServerStream.RecvMsg, m) }

// tooLarge reports whether err is the refusal of an oversized message.
func tooLarge(err error) bool { return status.Code(err) == codes.OutOfRange }
