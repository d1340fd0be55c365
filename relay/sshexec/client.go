package sshexec

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/ferry-dev/ferry/relay"
	"golang.org/x/crypto/ssh"
)

// Client runs commands on one SSH server. It is safe for concurrent use.
type Client struct {
	s  *settings
	hk *hostKeys

	dialing chan struct{} // one connect at a time
	execs   chan struct{} // a slot per running command
	stops   chan struct{} // the session kept for stopping commands

	mu     sync.Mutex
	cur    *conn
	closed bool
	bg     sync.WaitGroup // connection watchers and keepalives
}

var _ relay.Execer = (*Client)(nil)

// New checks cfg and returns a Client. It does not connect: the first Exec
// does.
func New(cfg Config) (*Client, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	return &Client{
		s:       s,
		hk:      &hostKeys{file: s.KnownHostsFile, addr: s.Addr},
		dialing: make(chan struct{}, 1),
		execs:   make(chan struct{}, s.MaxSessions-1),
		stops:   make(chan struct{}, 1),
	}, nil
}

// Close closes the connection, which makes Execs still running on it fail
// with relay.ErrRelayLost, and waits for the Client's own goroutines. Later
// Execs fail. A stdin pump still blocked in a caller's Read is not waited
// for: it ends when that Read returns.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	// A connect in flight finishes (bounded by ConnectTimeout) and sees
	// closed; none starts after it, so bg.Wait cannot race with bg.Add.
	c.dialing <- struct{}{}
	<-c.dialing
	c.mu.Lock()
	cn := c.cur
	c.cur = nil
	c.mu.Unlock()
	if cn != nil {
		cn.fail(net.ErrClosed)
	}
	c.bg.Wait()
	return nil
}

var errClosed = fmt.Errorf("sshexec: client closed: %w", net.ErrClosed)

// connection returns the live connection, opening one if there is none;
// fresh tells whether it was opened by this call.
func (c *Client) connection(ctx context.Context) (cn *conn, fresh bool, err error) {
	if cn, err := c.current(); cn != nil || err != nil {
		return cn, false, err
	}
	select {
	case c.dialing <- struct{}{}:
		defer func() { <-c.dialing }()
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	// Another Exec may have connected while this one waited.
	if cn, err := c.current(); cn != nil || err != nil {
		return cn, false, err
	}
	cn, err = dial(ctx, c.s, c.hk, &c.bg)
	if err != nil {
		return nil, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cn.fail(net.ErrClosed)
		return nil, false, errClosed
	}
	c.cur = cn
	return cn, true, nil
}

func (c *Client) current() (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if c.cur != nil && c.cur.alive() {
		return c.cur, nil
	}
	c.cur = nil
	return nil, nil
}

// session opens a session for one command. A cached connection that turns
// out to be dead is replaced once: nothing has run yet.
func (c *Client) session(ctx context.Context) (*conn, *ssh.Session, error) {
	for attempt := 0; ; attempt++ {
		cn, fresh, err := c.connection(ctx)
		if err != nil {
			return nil, nil, err
		}
		sess, err := cn.client.NewSession()
		if err == nil {
			return cn, sess, nil
		}
		var refused *ssh.OpenChannelError
		if errors.As(err, &refused) {
			return nil, nil, fmt.Errorf("sshexec: open session on %s: %w", c.s.Addr, err)
		}
		cn.fail(err)
		if fresh || attempt > 0 {
			return nil, nil, fmt.Errorf("sshexec: open session on %s: %w: %w", c.s.Addr, relay.ErrRelayLost, err)
		}
	}
}
