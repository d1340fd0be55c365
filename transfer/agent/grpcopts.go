package agent

import (
	"math"

	"google.golang.org/grpc"
)

// Flow control. gRPC's default windows (64 KiB, grown by BDP estimation)
// throttle a stream whose round trip is long: a gateway relay across a
// continent is 100 ms or more, and 64 KiB per 100 ms is 640 KB/s. A fixed
// 16 MiB window per stream and 32 MiB per connection fill such a link; the
// memory it can cost is bounded by the window, not the data.
const (
	streamWindow = 16 << 20
	connWindow   = 32 << 20
	// maxMessage bounds one gRPC message. Data messages are at most
	// ChunkSize, the rest are small; a trailer of per-file digests for
	// the largest allowed tree is the biggest.
	maxMessage = 64 << 20
	// ChunkSize is the size of one data message.
	ChunkSize = 256 << 10
	ioBuffer  = 256 << 10
)

func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.MaxSendMsgSize(maxMessage),
		grpc.ReadBufferSize(ioBuffer),
		grpc.WriteBufferSize(ioBuffer),
		grpc.MaxConcurrentStreams(math.MaxUint32),
	}
}

func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		grpc.WithReadBufferSize(ioBuffer),
		grpc.WithWriteBufferSize(ioBuffer),
	}
}
