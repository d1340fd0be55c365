package sshexec_test

import (
	"net"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/ferry-dev/ferry/relay/sshexec"
	"github.com/ferry-dev/ferry/relay/sshexec/sshdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newClient returns a Client for srv that trusts its host key and logs in
// with its user key; edit, if not nil, adjusts the Config first.
func newClient(t *testing.T, srv *sshdtest.Server, edit func(*sshexec.Config)) *sshexec.Client {
	t.Helper()
	cfg := sshexec.Config{
		User:           srv.User,
		Addr:           srv.Addr,
		KnownHostsFile: srv.KnownHosts,
		IdentityFile:   srv.IdentityFile,
	}
	if edit != nil {
		edit(&cfg)
	}
	c, err := sshexec.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// cutConn breaks once more than left bytes have been read from it, as a
// relay dropping mid-stream would.
type cutConn struct {
	net.Conn
	mu   sync.Mutex
	left int64
}

func (c *cutConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	cut := c.left <= 0
	c.mu.Unlock()
	if cut {
		c.Conn.Close()
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.left -= int64(n)
	c.mu.Unlock()
	return n, err
}

// stallConn stops delivering bytes, in both directions, once stall is
// closed, without closing: a peer that vanished from the network.
type stallConn struct {
	net.Conn
	stall  <-chan struct{}
	closed chan struct{}
	once   sync.Once
}

func newStallConn(c net.Conn, stall <-chan struct{}) *stallConn {
	return &stallConn{Conn: c, stall: stall, closed: make(chan struct{})}
}

func (c *stallConn) Read(p []byte) (int, error) {
	select {
	case <-c.stall:
		<-c.closed
		return 0, net.ErrClosed
	default:
	}
	n, err := c.Conn.Read(p)
	select {
	case <-c.stall:
		<-c.closed // drop what arrived
		return 0, net.ErrClosed
	default:
		return n, err
	}
}

func (c *stallConn) Write(p []byte) (int, error) {
	select {
	case <-c.stall:
		return len(p), nil
	default:
		return c.Conn.Write(p)
	}
}

func (c *stallConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
