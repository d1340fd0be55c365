package wire

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferry-dev/ferry/internal/rpctrace"
)

// Connect is the host's end of a connection to an agent whose stdout is r
// and whose stdin is w: it reads the agent's hello (skipping up to maxSkip
// bytes of banner before it), writes its own, and returns a gRPC
// connection on r and w. closeFn, called once by the returned closer,
// must end both r and w and wait for the agent's side to end; it may be
// nil. extra are more dial options for the connection. An agent of another
// version gives its hello, no gRPC connection, the closer and a
// *VersionError.
func Connect(r io.Reader, w io.Writer, maxSkip int, closeFn func() error, extra ...grpc.DialOption) (Hello, *grpc.ClientConn, io.Closer, error) {
	h, err := ReadHello(r, maxSkip)
	if err != nil {
		return h, nil, nil, err
	}
	if h.Version != ProtocolVersion {
		return h, nil, NewStreamConn(r, w, closeFn), &VersionError{Got: h.Version, Want: ProtocolVersion}
	}
	if err := WriteHello(w, Hello{Version: ProtocolVersion, Digest: h.Digest}); err != nil {
		return h, nil, nil, err
	}
	conn := NewStreamConn(r, w, closeFn)
	var mu sync.Mutex
	dialed := false
	opts := append(DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
			mu.Lock()
			defer mu.Unlock()
			if dialed {
				return nil, errDialedTwice
			}
			dialed = true
			return conn, nil
		}),
	)
	opts = append(opts, extra...)
	opts = append(opts, rpctrace.Options("agent")...)
	cc, err := grpc.NewClient("passthrough:///ferry-agent", opts...)
	if err != nil {
		conn.Close()
		return h, nil, nil, fmt.Errorf("agent client: %w", err)
	}
	// Connect now: the agent's first frames are waiting in the pipe.
	cc.Connect()
	return h, cc, conn, nil
}
