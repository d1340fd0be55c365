package tcpframe

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// MaxData is the most payload one data frame carries, as upstream's relay
// sends and accepts.
const MaxData = 64 << 10

// Stream is one end of a ForwardTcp stream, client or server.
type Stream interface {
	Send(*openshellv1.TcpForwardFrame) error
	Recv() (*openshellv1.TcpForwardFrame, error)
}

// ErrFrameTooLarge means the peer sent a data frame over MaxData.
var ErrFrameTooLarge = errors.New("tcpframe: data frame over 64 KiB")

// ErrUnexpectedInit means the peer sent a second init frame.
var ErrUnexpectedInit = errors.New("tcpframe: init frame after the first")

// Conn is a net.Conn over a Stream whose init frame has already been
// exchanged. Deadlines are not supported: whoever owns the stream ends it
// with its context, and Close releases blocked Reads.
//
// One goroutine receives frames, one at a time, so that no more is taken
// off the stream than Read has asked for (gRPC's flow control then holds
// the sender back). It returns when Recv fails: on the client once the
// stream's context is cancelled, on the server once the handler returns.
// Close does not wait for it.
type Conn struct {
	s      Stream
	frames chan []byte
	closed chan struct{}
	once   sync.Once

	recvErr  error         // why receiving ended; set before recvDone is closed
	recvDone chan struct{} // closed when receive returns

	rbuf []byte // what the last frame has left for Read

	wmu    sync.Mutex // gRPC allows one Send at a time
	werr   error      // sticky: a stream that failed a Send is done
	onStop func()

	local, remote net.Addr
}

var _ net.Conn = (*Conn)(nil)

// New starts receiving on s. onClose, if not nil, runs once at the first
// Close (the client cancels its stream there).
func New(s Stream, local, remote net.Addr, onClose func()) *Conn {
	c := &Conn{s: s, frames: make(chan []byte), closed: make(chan struct{}), recvDone: make(chan struct{}), onStop: onClose, local: local, remote: remote}
	go c.receive()
	return c
}

func (c *Conn) receive() {
	defer close(c.recvDone)
	for {
		f, err := c.s.Recv()
		if err != nil {
			c.recvErr = err
			return
		}
		switch p := f.GetPayload().(type) {
		case *openshellv1.TcpForwardFrame_Data:
			if len(p.Data) > MaxData {
				c.recvErr = fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, len(p.Data))
				return
			}
			if len(p.Data) == 0 {
				continue
			}
			select {
			case c.frames <- p.Data:
			case <-c.closed:
				c.recvErr = net.ErrClosed
				return
			}
		case *openshellv1.TcpForwardFrame_Init:
			c.recvErr = ErrUnexpectedInit
			return
		}
	}
}

// Err is why the receiving side ended: io.EOF for a peer that closed its
// side, the stream's error, ErrFrameTooLarge or ErrUnexpectedInit; nil
// while it is still open.
func (c *Conn) Err() error {
	select {
	case <-c.recvDone:
		return c.recvErr
	default:
		return nil
	}
}

// Read implements net.Conn.
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.rbuf) == 0 {
		select {
		case <-c.closed:
			return 0, net.ErrClosed
		case f := <-c.frames:
			c.rbuf = f
		case <-c.recvDone:
			if errors.Is(c.recvErr, io.EOF) {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("tcpframe: receive: %w", c.recvErr)
		}
	}
	n := copy(p, c.rbuf)
	c.rbuf = c.rbuf[n:]
	return n, nil
}

// Write implements net.Conn: p goes out in frames of at most MaxData.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for n < len(p) {
		select {
		case <-c.closed:
			return n, net.ErrClosed
		default:
		}
		if c.werr != nil {
			return n, c.werr
		}
		k := min(len(p)-n, MaxData)
		// Send marshals the frame before it returns, so p may be reused.
		if err := c.s.Send(&openshellv1.TcpForwardFrame{Payload: &openshellv1.TcpForwardFrame_Data{Data: p[n : n+k]}}); err != nil {
			c.werr = fmt.Errorf("tcpframe: send: %w", err)
			return n, c.werr
		}
		n += k
	}
	return n, nil
}

// Close releases blocked Reads and runs the onClose given to New. It does
// not end the stream by itself on the server side: the handler does, by
// returning.
func (c *Conn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		if c.onStop != nil {
			c.onStop()
		}
	})
	return nil
}

func (c *Conn) LocalAddr() net.Addr  { return c.local }
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline and its kin are not supported (see Conn).
func (c *Conn) SetDeadline(time.Time) error      { return os.ErrNoDeadline }
func (c *Conn) SetReadDeadline(time.Time) error  { return os.ErrNoDeadline }
func (c *Conn) SetWriteDeadline(time.Time) error { return os.ErrNoDeadline }

// Addr is a net.Addr naming one end of a relayed stream.
type Addr string

func (a Addr) Network() string { return "openshell-forward" }
func (a Addr) String() string  { return string(a) }
