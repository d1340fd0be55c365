package relaytest

import (
	"context"
	"net"
	"sync"
)

// Cutter is a Dialer for a gateway client (openshell.Config.Dialer: its
// Dial) whose connections can all be dropped at once with Cut: a relay
// lost between two calls, or in the middle of one.
type Cutter struct {
	mu    sync.Mutex
	conns []net.Conn
}

// Dial dials addr over TCP and keeps the connection for Cut.
func (c *Cutter) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

// Cut closes every connection Dial made so far.
func (c *Cutter) Cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}
