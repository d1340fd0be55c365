package agent

import (
	"fmt"
	"io"

	"google.golang.org/grpc"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// Client is the host's connection to one running agent.
type Client struct {
	// Hello is what the agent said first: its protocol version and digest.
	Hello Hello
	rpc   agentv1.AgentClient
	cc    *grpc.ClientConn
	conn  io.Closer
	calls *calls
	// err reports why the stream under the connection ended, for RPC
	// errors; nil while it has not.
	err func() error
}

// NewClient talks to an agent whose stdout is r and whose stdin is w: it
// reads the agent's hello (skipping up to maxSkip bytes of banner before
// it), writes its own, and returns a client whose RPCs travel on r and w.
// The caller checks Hello before using the client. closeFn is called once,
// by Close, to end the stream: it must end both r and w (a Read blocked on r
// returns) and wait for the agent's side to end. It may be nil.
func NewClient(r io.Reader, w io.Writer, maxSkip int, closeFn func() error) (*Client, error) {
	calls := &calls{}
	h, cc, conn, err := wire.Connect(r, w, maxSkip, closeFn, grpc.WithStatsHandler(calls))
	if conn == nil {
		return nil, err
	}
	c := &Client{Hello: h, cc: cc, conn: conn, calls: calls}
	if cc != nil {
		c.rpc = agentv1.NewAgentClient(cc)
	}
	return c, err
}

// Close ends the connection and waits for the stream under it to end.
func (c *Client) Close() error {
	if c.cc != nil {
		c.cc.Close()
	}
	return c.conn.Close()
}

// wrap prefers the reason the stream under the connection ended (a lost
// relay, an agent that died) to the gRPC status it caused.
func (c *Client) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if c.err != nil {
		if why := c.err(); why != nil {
			return fmt.Errorf("%s: %w", op, why)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// settled reports whether every call made on the connection has been
// answered by the agent and none is in flight: the agent has nothing
// left to do, and closing need not wait for it to exit.
func (c *Client) settled() bool { return c.calls.settled() }

// Lost reports whether the stream under the connection has ended: the
// relay dropped, or the agent exited or was killed. A lost agent cleaned
// up nothing; whatever it was writing is left for the host to remove.
func (c *Client) Lost() bool {
	return c.err != nil && c.err() != nil
}
