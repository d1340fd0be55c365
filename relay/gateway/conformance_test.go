package gateway_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/grpcbuf"
	"github.com/ferry-dev/ferry/relay/internal/execcodec"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

func TestMain(m *testing.M) {
	// As the ferry binary does, so tests and benchmarks run its data path.
	grpcbuf.Install()
	// Every test's payloads are poisoned on release and checked for a
	// second one, so that a release before the last read shows as wrong
	// bytes (BenchmarkExec turns this off).
	execcodec.Debug(true)
	goleak.VerifyTestMain(m)
}

// TestConformance runs the relay suite through ferry's OpenShell client
// against the embedded gateway: over mTLS with the streaming RPC, and with
// the streaming RPC switched off so that the client falls back to one-shot
// ExecSandbox.
func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name    string
		oneShot bool
		plain   bool
	}{
		{"InteractiveTLS", false, false},
		{"OneShotTLS", true, false},
		{"InteractivePlaintext", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := func(t *testing.T, cut int64) (relay.Execer, string) {
				g := gatewaytest.Start(t, gatewaytest.Options{
					Plaintext: tc.plain,
					Config:    gateway.Config{DisableInteractive: tc.oneShot, CutAfter: cut},
				})
				c := g.Client(t, openshell.Config{})
				g.Sandbox(t, c, "box")
				return c, "box"
			}
			h := relaytest.Harness{
				New:        func(t *testing.T) (relay.Execer, string) { return start(t, 0) },
				Cut:        start,
				KilledExit: 1,
			}
			if tc.oneShot {
				h.MaxStdin = 900 << 10
			}
			if tc.plain {
				h.BigSize = 32 << 20
			}
			relaytest.Run(t, h)
		})
	}
}

// TestConformanceConnectionCut cuts the client's TCP connection itself, not
// the gateway's stream: what a dropped network does to a transfer.
func TestConformanceConnectionCut(t *testing.T) {
	relaytest.Run(t, relaytest.Harness{
		New: func(t *testing.T) (relay.Execer, string) {
			g := gatewaytest.Start(t, gatewaytest.Options{})
			c := g.Client(t, openshell.Config{})
			g.Sandbox(t, c, "box")
			return c, "box"
		},
		Cut: func(t *testing.T, n int64) (relay.Execer, string) {
			g := gatewaytest.Start(t, gatewaytest.Options{})
			g.Sandbox(t, g.Client(t, openshell.Config{}), "box")
			c := g.Client(t, openshell.Config{Dialer: func(ctx context.Context, addr string) (net.Conn, error) {
				var d net.Dialer
				conn, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				return &cutConn{Conn: conn, left: n}, nil
			}})
			return c, "box"
		},
		KilledExit: 1,
		BigSize:    16 << 20,
	})
}

// cutConn closes itself once n bytes have been read from it.
type cutConn struct {
	net.Conn
	mu   sync.Mutex
	left int64
}

func (c *cutConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.left -= int64(n)
	cut := c.left <= 0
	c.mu.Unlock()
	if cut {
		c.Conn.Close()
		return 0, net.ErrClosed
	}
	return n, err
}
