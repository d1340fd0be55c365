package wire

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferry-dev/ferry/internal/h2early"
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
	cc, err := dial(conn, false, extra)
	if err != nil {
		conn.Close()
		return h, nil, nil, err
	}
	return h, cc, conn, nil
}

// dial starts a gRPC client connection on conn, the exec stream's only
// one. early makes its first call leave without waiting for the agent's
// HTTP/2 SETTINGS (h2early).
func dial(conn net.Conn, early bool, extra []grpc.DialOption) (*grpc.ClientConn, error) {
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
			if early {
				return h2early.Wrap(conn), nil
			}
			return conn, nil
		}),
	)
	opts = append(opts, extra...)
	opts = append(opts, rpctrace.Options("agent")...)
	cc, err := grpc.NewClient("passthrough:///ferry-agent", opts...)
	if err != nil {
		return nil, fmt.Errorf("agent client: %w", err)
	}
	// Connect now: the agent's first frames are waiting in the pipe.
	cc.Connect()
	return cc, nil
}

// Early is the host's end of a connection to an agent it has not heard
// yet (ConnectEarly): calls made on CC leave at once, with the host's
// hello and HTTP/2 preface, instead of a round trip later; the agent's
// answer reaches gRPC only once its hello has been read and accepted.
type Early struct {
	CC   *grpc.ClientConn
	Conn io.Closer
	v    *verifier
}

// Heard is closed once the agent's hello has been read and checked, or
// its reading has failed, or the connection has been closed before.
func (e *Early) Heard() <-chan struct{} { return e.v.done }

// Hello is the agent's hello, and why it was refused (nil when it was
// accepted); valid once Heard is closed. A refused hello leaves the
// connection failed: its calls end with gRPC's Unavailable.
func (e *Early) Hello() (Hello, error) {
	<-e.v.done
	return e.v.hello, e.v.err
}

// ErrNotHeard is Early.Hello's error for a connection closed before the
// agent's hello was read.
var ErrNotHeard = errors.New("agent: connection closed before the agent's hello")

// ConnectEarly is Connect for a host that expects a running agent: it
// writes its hello (with digest want) and starts gRPC at once, without
// reading the agent's hello first. That hello is read, skipping up to
// maxSkip bytes of banner, when gRPC first reads the connection, and
// check decides whether to accept it; until it has, nothing the agent
// sent reaches gRPC, and a refused hello ends the connection with
// check's error (or ReadHello's: no hello, a truncated one, another
// version).
//
// The calls made before the hello is accepted went to whatever read the
// agent's stdin: a shell that ignores them (no cached agent: the serve
// script prints its probe line and exits), an agent that refuses them, or
// a stale agent that answers them. The caller makes only calls that may
// go there, and makes them again on the connection it dials instead.
func ConnectEarly(r io.Reader, w io.Writer, maxSkip int, closeFn func() error, want [sha256.Size]byte, check func(Hello) error, extra ...grpc.DialOption) (*Early, error) {
	if err := WriteHello(w, Hello{Version: ProtocolVersion, Digest: want}); err != nil {
		return nil, err
	}
	v := &verifier{r: r, maxSkip: maxSkip, check: check, done: make(chan struct{})}
	conn := NewStreamConn(v, w, func() error {
		v.finish(Hello{}, ErrNotHeard)
		if closeFn == nil {
			return nil
		}
		return closeFn()
	})
	cc, err := dial(conn, true, extra)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &Early{CC: cc, Conn: conn, v: v}, nil
}

// verifier reads the agent's hello on the first Read and passes the
// stream after it through only if check accepts it.
type verifier struct {
	r       io.Reader
	maxSkip int
	check   func(Hello) error
	once    sync.Once
	mu      sync.Mutex
	hello   Hello
	err     error
	done    chan struct{}
}

// finish records the outcome once; later calls change nothing.
func (v *verifier) finish(h Hello, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.done:
		return
	default:
	}
	v.hello, v.err = h, err
	close(v.done)
}

func (v *verifier) Read(p []byte) (int, error) {
	v.once.Do(func() {
		h, err := ReadHello(v.r, v.maxSkip)
		if err == nil && v.check != nil {
			err = v.check(h)
		}
		v.finish(h, err)
	})
	<-v.done
	if v.err != nil {
		return 0, v.err
	}
	return v.r.Read(p)
}
