package openshell_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// holder is a Dialer whose connections, once armed, hold what the gateway
// sends until open is closed: the client cannot have seen the exec's
// headers (or its refusal) before then.
type holder struct {
	armed atomic.Bool
	open  chan struct{}
}

func newHolder() *holder { return &holder{open: make(chan struct{})} }

func (h *holder) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &holdConn{Conn: c, h: h}, nil
}

type holdConn struct {
	net.Conn
	h *holder
}

func (c *holdConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.h.armed.Load() {
		select {
		case <-c.h.open:
		case <-time.After(20 * time.Second): // bounded: a failure is slow, not a hang
		}
	}
	return n, err
}

// opener is stdin that opens h when it is read a second time: Exec has
// taken its first chunk without having heard from the gateway.
type opener struct {
	r     io.Reader
	h     *holder
	reads int
}

func (o *opener) Read(p []byte) (int, error) {
	o.reads++
	if o.reads == 2 {
		close(o.h.open)
	}
	return o.r.Read(p)
}

func catOf(t *testing.T, c *openshell.Client, stdin io.Reader) []byte {
	t.Helper()
	var out bytes.Buffer
	code, err := c.Exec(ctxFor(t), &relay.Command{Sandbox: "box", Argv: []string{"cat"}, Stdin: stdin, Stdout: &out})
	if err != nil || code != 0 {
		t.Fatalf("cat: exit %d, %v", code, err)
	}
	return out.Bytes()
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExecStdinEarly: Exec streams stdin before the gateway's headers, and
// when the attempt fails before them (no interactive RPC, or a stale id)
// it gives the next attempt all of stdin again.
func TestExecStdinEarly(t *testing.T) {
	for _, tc := range []struct {
		name      string
		oneShot   bool // the gateway lacks ExecSandboxInteractive
		staleID   bool // the client's cached id is the sandbox's previous one
		wantAgain bool // a second attempt reads stdin again
	}{
		{"Interactive", false, false, false},
		{"OneShotFallback", true, false, true},
		{"StaleID", false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{DisableInteractive: tc.oneShot}})
			g.Sandbox(t, g.Client(t, openshell.Config{}), "box")
			h := newHolder()
			ids := openshell.IDDir(t.TempDir())
			c := g.Client(t, openshell.Config{Dialer: h.Dial, IDs: ids})
			// The connection is up, and the id known, before the holder
			// is armed.
			if tc.staleID {
				if _, err := openshell.API(c).Health(ctxFor(t), &openshellv1.HealthRequest{}); err != nil {
					t.Fatal(err)
				}
				ids.StoreID(openshell.IDKey(c, "box"), "872d8802-ab19-41bd-9741-0ca7e77a7cca")
			} else if _, err := c.SandboxID(ctxFor(t), "box"); err != nil {
				t.Fatal(err)
			}

			data := randomBytes(t, 100<<10)
			h.armed.Store(true)
			if got := catOf(t, c, &opener{r: bytes.NewReader(data), h: h}); !bytes.Equal(got, data) {
				t.Fatalf("cat gave %d bytes, want the %d of stdin", len(got), len(data))
			}
			st := openshell.Stdin(c)
			if st.Early != int64(len(data)) {
				t.Fatalf("%d bytes of stdin read before the headers, want all %d", st.Early, len(data))
			}
			want := int64(0)
			if tc.wantAgain {
				want = int64(len(data))
			}
			if st.Replayed != want {
				t.Fatalf("%d bytes given again to a second attempt, want %d", st.Replayed, want)
			}
			if openshell.OneShot(c) != tc.oneShot {
				t.Fatalf("one-shot %v, want %v", openshell.OneShot(c), tc.oneShot)
			}
		})
	}
}

// TestExecStdinBeyondEarly: stdin longer than what may go before the
// headers arrives whole, on a gateway with the interactive RPC and on one
// without it (where the one-shot attempt reads the rest).
func TestExecStdinBeyondEarly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		oneShot bool
		size    int
	}{
		{"Interactive", false, 3 << 20},
		{"OneShotFallback", true, 900 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{DisableInteractive: tc.oneShot}})
			c := g.Client(t, openshell.Config{})
			g.Sandbox(t, c, "box")
			data := randomBytes(t, tc.size)
			if got := catOf(t, c, bytes.NewReader(data)); !bytes.Equal(got, data) {
				t.Fatalf("cat gave %d bytes, want the %d of stdin", len(got), len(data))
			}
			if st := openshell.Stdin(c); st.Early > 256<<10 {
				t.Fatalf("%d bytes of stdin read before the headers, want at most 256 KiB", st.Early)
			}
		})
	}
}

// stalled gives first, then on its second Read opens h and waits for
// rest: a caller's stdin with nothing more to give yet.
type stalled struct {
	first []byte
	rest  chan []byte
	h     *holder
	reads int
}

func (s *stalled) Read(p []byte) (int, error) {
	s.reads++
	switch s.reads {
	case 1:
		return copy(p, s.first), nil
	case 2:
		close(s.h.open)
		b, ok := <-s.rest
		if !ok {
			return 0, io.EOF
		}
		return copy(p, b), nil
	}
	return 0, io.EOF
}

// TestExecStdinInFlight: the failed attempt's Read of stdin, which nothing
// can cancel, is still in flight when the one-shot attempt starts. What it
// returns reaches the command: only one Read of stdin is ever in flight.
func TestExecStdinInFlight(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{DisableInteractive: true}})
	h := newHolder()
	c := g.Client(t, openshell.Config{Dialer: h.Dial})
	g.Sandbox(t, c, "box")

	in := &stalled{first: []byte("early "), rest: make(chan []byte), h: h}
	go func() {
		// Once the interactive attempt has failed, its pump sits in
		// stdin's second Read: feed it then.
		deadline := time.Now().Add(20 * time.Second)
		for !openshell.OneShot(c) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		in.rest <- []byte("late")
		close(in.rest)
	}()
	h.armed.Store(true)
	if got := catOf(t, c, in); string(got) != "early late" {
		t.Fatalf("cat gave %q, want %q", got, "early late")
	}
	if !openshell.OneShot(c) {
		t.Fatal("no fallback to one-shot: the test did not take its path")
	}
	if st := openshell.Stdin(c); st.Replayed != int64(len("early ")) {
		t.Fatalf("%d bytes given again, want the %d read before the refusal", st.Replayed, len("early "))
	}
}
