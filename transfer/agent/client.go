package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
)

// Client is the host's connection to one running agent.
type Client struct {
	// Hello is what the agent said first: its protocol version and digest.
	Hello Hello
	rpc   agentv1.AgentClient
	cc    *grpc.ClientConn
	conn  *streamConn
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
	h, err := ReadHello(r, maxSkip)
	if err != nil {
		return nil, err
	}
	if h.Version != ProtocolVersion {
		return &Client{Hello: h, conn: newStreamConn(r, w, closeFn)}, &VersionError{Got: h.Version, Want: ProtocolVersion}
	}
	if err := WriteHello(w, Hello{Version: ProtocolVersion, Digest: h.Digest}); err != nil {
		return nil, err
	}
	conn := newStreamConn(r, w, closeFn)
	var mu sync.Mutex
	dialed := false
	opts := append(dialOptions(),
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
	cc, err := grpc.NewClient("passthrough:///ferry-agent", opts...)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent client: %w", err)
	}
	// Connect now: the agent's first frames are waiting in the pipe.
	cc.Connect()
	return &Client{Hello: h, rpc: agentv1.NewAgentClient(cc), cc: cc, conn: conn}, nil
}

// RPC is the generated client, for operations without a wrapper here.
func (c *Client) RPC() agentv1.AgentClient { return c.rpc }

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

// Lost reports whether the stream under the connection has ended: the
// relay dropped, or the agent exited or was killed. A lost agent cleaned
// up nothing; whatever it was writing is left for the host to remove.
func (c *Client) Lost() bool {
	return c.err != nil && c.err() != nil
}
