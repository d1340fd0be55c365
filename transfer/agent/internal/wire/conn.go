package wire

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// StreamConn is a net.Conn over a reader and a writer: the agent's stdin
// and stdout, or the host's ends of an exec stream. gRPC needs a net.Conn;
// deadlines are not supported (gRPC's HTTP/2 transport does not need them
// on an established connection; cancellation closes the exec instead).
type StreamConn struct {
	r         io.Reader
	w         io.Writer
	closeOnce sync.Once
	close     func() error
	closeErr  error
}

func NewStreamConn(r io.Reader, w io.Writer, close func() error) *StreamConn {
	return &StreamConn{r: r, w: w, close: close}
}

func (c *StreamConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *StreamConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// Close runs the close function once; every call returns its result.
// gRPC closes the connection when the client or server shuts down and
// waits for its reader to return, so the function must end both streams.
func (c *StreamConn) Close() error {
	c.closeOnce.Do(func() {
		if c.close != nil {
			c.closeErr = c.close()
		}
	})
	return c.closeErr
}

func (c *StreamConn) LocalAddr() net.Addr              { return stdioAddr{} }
func (c *StreamConn) RemoteAddr() net.Addr             { return stdioAddr{} }
func (c *StreamConn) SetDeadline(time.Time) error      { return nil }
func (c *StreamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *StreamConn) SetWriteDeadline(time.Time) error { return nil }

type stdioAddr struct{}

func (stdioAddr) Network() string { return "stdio" }
func (stdioAddr) String() string  { return "stdio" }

// oneListener hands out one connection, then blocks in Accept until closed:
// a gRPC server serving exactly the stdio stream.
type oneListener struct {
	mu     sync.Mutex
	conn   net.Conn
	closed chan struct{}
	once   sync.Once
}

// ConnListener is a net.Listener whose Accept returns c once and then
// blocks until Close: a gRPC server serving exactly one stream.
func ConnListener(c net.Conn) net.Listener {
	return &oneListener{conn: c, closed: make(chan struct{})}
}

func (l *oneListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneListener) Addr() net.Addr { return stdioAddr{} }

var errDialedTwice = errors.New("agent: the exec stream carries one connection; it is gone")
