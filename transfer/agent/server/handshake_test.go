package server

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// TestHandshake: the agent's HTTP/2 SETTINGS follow its hello before the
// host has written anything, so that a host's first call needs no round
// trip of its own; and the host's hello is still checked before its
// HTTP/2 stream is read: a stream without one ends Serve with the hello's
// error.
func TestHandshake(t *testing.T) {
	for _, tc := range []struct {
		name    string
		host    []byte // what the host writes after reading the agent's SETTINGS
		wantErr error
	}{
		{"no hello", []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + string(make([]byte, 64))), wire.ErrNoMagic},
		{"hello then eof", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// OS pipes: buffered, as every real channel is.
			toAgent, fromHost, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			fromAgent, toHost, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { toAgent.Close(); fromHost.Close(); fromAgent.Close(); toHost.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			served := make(chan error, 1)
			go func() {
				err := Serve(ctx, toAgent, toHost, Config{Workspace: t.TempDir()})
				toHost.Close()
				served <- err
			}()
			// Without the eager SETTINGS, the read below would wait for
			// the host forever.
			fromAgent.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := wire.ReadHello(fromAgent, 0); err != nil {
				t.Fatalf("read agent hello: %v", err)
			}
			// An HTTP/2 frame header: 3 bytes of length, then the type;
			// 0x4 is SETTINGS. It comes before the host says a word.
			var fh [9]byte
			if _, err := io.ReadFull(fromAgent, fh[:]); err != nil {
				t.Fatalf("read the agent's first frame: %v", err)
			}
			if fh[3] != 0x4 {
				t.Fatalf("agent's first frame after its hello is type %#x, want SETTINGS (0x4)", fh[3])
			}
			fromAgent.SetReadDeadline(time.Time{})
			go io.Copy(io.Discard, fromAgent)
			if tc.host != nil {
				fromHost.Write(tc.host)
			} else if err := wire.WriteHello(fromHost, wire.Hello{Version: wire.ProtocolVersion}); err != nil {
				t.Fatal(err)
			}
			fromHost.Close()
			err = <-served
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Serve = %v, want a clean end", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("Serve = %v, want %v", err, tc.wantErr)
			}
		})
	}
}
