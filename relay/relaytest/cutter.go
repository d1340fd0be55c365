package relaytest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// Cutter is a Dialer for a gateway client (openshell.Config.Dialer: its
// Dial) whose connections can all be dropped at once with Cut: a relay
// lost between two calls, or in the middle of one.
type Cutter struct {
	mu    sync.Mutex
	conns []*cutConn
	dials atomic.Int64
}

// Dial dials addr over TCP and keeps the connection for Cut.
func (c *Cutter) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c.dials.Add(1)
	cc := &cutConn{Conn: conn}
	c.mu.Lock()
	c.conns = append(c.conns, cc)
	c.mu.Unlock()
	return cc, nil
}

// Dials says how many connections Dial has made.
func (c *Cutter) Dials() int { return int(c.dials.Load()) }

// Cut closes every connection Dial made so far.
func (c *Cutter) Cut() {
	for _, conn := range c.take() {
		conn.Close()
	}
}

// CutUnseen drops every connection Dial made so far the way a lost route
// does: nothing tells the client until it next writes, and that write is
// lost (it seems to succeed, and the connection closes under it). A call
// made then fails after it was sent, before the server has it.
func (c *Cutter) CutUnseen() {
	for _, conn := range c.take() {
		conn.unseen.Store(true)
	}
}

func (c *Cutter) take() []*cutConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	conns := c.conns
	c.conns = nil
	return conns
}

type cutConn struct {
	net.Conn
	unseen atomic.Bool
}

func (c *cutConn) Write(p []byte) (int, error) {
	if c.unseen.Load() {
		c.Conn.Close()
		return len(p), nil
	}
	return c.Conn.Write(p)
}
