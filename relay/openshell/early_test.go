package openshell_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// heldConn holds back all the server sends until the client has sent
// its first call's HEADERS frame. A client that waits for the server's
// SETTINGS before its first call never sends one, and its call runs out
// of time.
type heldConn struct {
	net.Conn
	sent    chan struct{} // closed at the first HEADERS
	closed  chan struct{}
	once    sync.Once
	close   sync.Once
	held    atomic.Int64 // reads that waited for the HEADERS
	mu      sync.Mutex
	written []byte // the client's bytes, until the HEADERS
}

func newHeldConn(c net.Conn) *heldConn {
	return &heldConn{Conn: c, sent: make(chan struct{}), closed: make(chan struct{})}
}

func (h *heldConn) Read(p []byte) (int, error) {
	select {
	case <-h.sent:
	default:
		h.held.Add(1)
		select {
		case <-h.sent:
		case <-h.closed:
			return 0, net.ErrClosed
		}
	}
	return h.Conn.Read(p)
}

func (h *heldConn) Write(p []byte) (int, error) {
	h.mu.Lock()
	select {
	case <-h.sent:
	default:
		h.written = append(h.written, p...)
		// After the 24-byte preface, frames: a 9-byte header (length,
		// type, flags, stream) and the payload.
		for b := h.written[min(24, len(h.written)):]; len(b) >= 9; {
			if b[3] == 0x1 {
				h.once.Do(func() { close(h.sent) })
				break
			}
			n := 9 + (int(b[0])<<16 | int(b[1])<<8 | int(b[2]))
			b = b[min(n, len(b)):]
		}
	}
	h.mu.Unlock()
	return h.Conn.Write(p)
}

func (h *heldConn) Close() error {
	h.close.Do(func() { close(h.closed) })
	return h.Conn.Close()
}

// heldCreds puts a heldConn over the TLS connection creds make, where the
// client's HTTP/2 frames are plain.
type heldCreds struct {
	credentials.TransportCredentials
	conns chan *heldConn
}

func (c heldCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return conn, info, err
	}
	h := newHeldConn(conn)
	c.conns <- h
	return h, info, nil
}

// TestFirstCallLeavesEarly: a new connection's first call is on the wire
// before the gateway's SETTINGS reach the client, a round trip sooner
// than grpc-go's own client sends it; and the connection serves the calls
// after it, the server's SETTINGS taken and acknowledged in their place.
func TestFirstCallLeavesEarly(t *testing.T) {
	t.Run("Plaintext", func(t *testing.T) {
		g := gatewaytest.Start(t, gatewaytest.Options{Plaintext: true})
		conns := make(chan *heldConn, 4)
		c := g.Client(t, openshell.Config{Dialer: func(ctx context.Context, addr string) (net.Conn, error) {
			raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			h := newHeldConn(raw)
			conns <- h
			return h, nil
		}})
		g.Sandbox(t, c, "box")
		var out bytes.Buffer
		if code, err := c.Exec(ctxFor(t), &relay.Command{Sandbox: "box", Argv: []string{"echo", "early"}, Stdout: &out}); code != 0 || err != nil || out.String() != "early\n" {
			t.Fatalf("exec = %d, %v, %q; want 0, nil, %q", code, err, out.String(), "early\n")
		}
		checkHeld(t, conns, 1)
	})
	t.Run("TLS", func(t *testing.T) {
		g := gatewaytest.Start(t, gatewaytest.Options{})
		tlsCfg, err := openshell.Config{Settings: g.Settings}.TLSConfig()
		if err != nil || tlsCfg == nil {
			t.Fatalf("TLSConfig = %v, %v; want the gateway's mTLS", tlsCfg, err)
		}
		conns := make(chan *heldConn, 4)
		creds := openshell.EarlyCreds(heldCreds{credentials.NewTLS(tlsCfg), conns})
		cc, err := grpc.NewClient("passthrough:///"+g.Settings.Target(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		api := openshellv1.NewOpenShellClient(cc)
		for i := range 3 {
			if _, err := api.Health(ctxFor(t), &openshellv1.HealthRequest{}); err != nil {
				t.Fatalf("Health call %d: %v", i, err)
			}
		}
		if _, err := api.GetSandbox(ctxFor(t), &openshellv1.GetSandboxRequest{Name: "none"}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Fatalf("GetSandbox of no sandbox: %v, want not found", err)
		}
		checkHeld(t, conns, 1)
	})
}

// checkHeld checks that the client made want connections, and that each
// had its reads held: the call left while the server's bytes were held.
func checkHeld(t *testing.T, conns chan *heldConn, want int) {
	t.Helper()
	if n := len(conns); n != want {
		t.Fatalf("%d connections made, want %d", n, want)
	}
	for range want {
		if h := <-conns; h.held.Load() == 0 {
			t.Fatal("no read waited for the first call's HEADERS: the test held nothing back")
		}
	}
}
