package wire_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// TestConnectEarly: an early connection writes the host's hello before
// reading anything, and refuses, before gRPC sees a byte of it, an agent
// whose hello is not accepted, that prints no hello (or too much banner
// before one), or that is closed before it has spoken; its calls then fail as Unavailable.
func TestConnectEarly(t *testing.T) {
	errRefused := errors.New("not ours")
	var hello bytes.Buffer
	if err := wire.WriteHello(&hello, wire.Hello{Version: wire.ProtocolVersion, Digest: [32]byte{9}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		agent []byte // what the agent writes, then it ends; nil: it never does
		want  error
	}{
		{"refused", append([]byte("banner\n"), hello.Bytes()...), errRefused},
		{"no hello", []byte("FERRY-PROBE Linux x86_64 zstd /tmp/.ferry-0\n"), wire.ErrNoMagic},
		// More banner than the host skips, then a hello it never reads.
		{"banner past the bound", append(bytes.Repeat([]byte("x"), 4<<10), hello.Bytes()...), wire.ErrNoMagic},
		{"closed first", nil, wire.ErrNotHeard},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fromAgent, toHost := io.Pipe()
			fromHost, toAgent := io.Pipe()
			closeFn := func() error {
				fromAgent.CloseWithError(io.ErrClosedPipe)
				fromHost.Close()
				return nil
			}
			wrote := make(chan []byte, 1)
			go func() {
				b := make([]byte, wire.HelloLen)
				_, err := io.ReadFull(fromHost, b)
				wrote <- b
				if err == nil {
					io.Copy(io.Discard, fromHost)
				}
			}()
			e, err := wire.ConnectEarly(fromAgent, toAgent, 1<<10, closeFn, [32]byte{7}, func(h wire.Hello) error {
				if h.Digest != [32]byte{7} {
					return errRefused
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			h, err := wire.ReadHello(bytes.NewReader(<-wrote), 0)
			if err != nil || h.Digest != [32]byte{7} {
				t.Fatalf("host hello %v, %v; want digest 7 before the agent spoke", h, err)
			}
			if tc.agent != nil {
				go func() {
					toHost.Write(tc.agent)
					toHost.Close()
				}()
			} else {
				e.CC.Close()
				e.Conn.Close()
			}
			select {
			case <-e.Heard():
			case <-time.After(10 * time.Second):
				t.Fatal("the hello was never settled")
			}
			if _, err := e.Hello(); !errors.Is(err, tc.want) {
				t.Fatalf("hello error %v, want %v", err, tc.want)
			}
			if tc.agent != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, err := agentv1.NewAgentClient(e.CC).Probe(ctx, &agentv1.ProbeRequest{})
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("call on a refused connection: %v, want Unavailable", err)
				}
				e.CC.Close()
				e.Conn.Close()
			}
		})
	}
}
