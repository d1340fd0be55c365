package wire

import (
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"

	"github.com/ferry-dev/ferry/relay/grpcbuf"
)

// Flow control. gRPC's default windows (64 KiB, grown by BDP estimation)
// throttle a stream whose round trip is long: a gateway relay across a
// continent is 100 ms or more, and 64 KiB per 100 ms is 640 KB/s. A fixed
// window of 8 MiB per stream and 16 MiB per connection fills such a link
// (80 MB/s at 100 ms); the memory it can cost is bounded by the window,
// not the data.
const (
	streamWindow = 8 << 20
	connWindow   = 16 << 20
	// maxMessage bounds one gRPC message. Data messages are at most
	// ChunkSize, the rest are small; a trailer of per-file digests for
	// the largest allowed tree is the biggest.
	maxMessage = 64 << 20
	// ChunkSize is the size of one data message: with its protobuf and
	// gRPC headers it fits a 256 KiB buffer of the pool.
	ChunkSize = 256<<10 - 32
	ioBuffer  = 256 << 10
	// frameBlock is the plaintext of one compressed block of Put and Get
	// streams. A 1 MiB block compresses agent-style JSONL a tenth smaller
	// than a 256 KiB one (S2: 0.22 of the input against 0.25) at the same
	// speed, and every byte less is a byte the relay does not carry.
	frameBlock = 1 << 20
)

func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.MaxSendMsgSize(maxMessage),
		grpc.ReadBufferSize(ioBuffer),
		grpc.WriteBufferSize(ioBuffer),
		grpc.MaxConcurrentStreams(math.MaxUint32),
		experimental.BufferPool(Buffers),
		grpc.ForceServerCodecV2(codec{}),
	}
}

func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage), grpc.ForceCodecV2(codec{})),
		grpc.WithReadBufferSize(ioBuffer),
		grpc.WithWriteBufferSize(ioBuffer),
		experimental.WithBufferPool(Buffers),
	}
}

// Buffers is the gRPC buffer pool of both ends, and of their codec (see
// codec): grpcbuf's, which does not zero what it hands out. gRPC's
// default pool clears every buffer and rounds a 256 KiB message up to a
// 1 MiB one: a tenth of the agent's CPU.
var Buffers mem.BufferPool = &grpcbuf.Pool{}

// wireCost is what Auto compression (frame.WriterOptions.WireCost) counts
// a MiB on the exec channel to cost at least. Every byte crosses the
// gateway's gRPC and the agent's, each with its framing and copies: in
// POSIX mode, the leanest path, that costs about 5.4 ns of CPU per byte
// across host, gateway and sandbox (make bench: 256 MiB in 1.46
// CPU-seconds), and agent mode's raw path about twice that. Counted at 5
// ns a byte, S2 (1 to 2 ns a byte) pays on any compressible data, while
// zstd (3 to 4 ns a byte, for a little more saving) still needs a slow
// link.
const wireCost = 5 * time.Millisecond

// relayBuffered is about what the exec channel takes in before a Write
// blocks: the 4 MiB flow-control windows of the gateway's gRPC (ferry's
// client and its embedded gateway both ask for them), and the pipes
// between the gateway and the agent. Until a stream has sent that much,
// the time its Writes take says nothing of the link (frame's Buffered).
const relayBuffered = 5 << 20

// StopWait bounds how long Serve waits, once its connection has ended,
// for the calls in flight to return.
const StopWait = 5 * time.Second
