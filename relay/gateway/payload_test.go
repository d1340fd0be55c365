package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

// TestExecPayloads sends stdin in messages of many sizes through the
// gateway and back as stdout and stderr, and checks every byte. Stdin
// payloads (gateway side) and output payloads (client side) come from
// execcodec's pool, and TestMain has execcodec poison each one as it is
// released: a payload released before its last read, on either side,
// shows here as wrong bytes.
func TestExecPayloads(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  gateway.Config
	}{
		{"Plain", gateway.Config{}},
		// The fault hooks wrap the gateway's stdin; a flip past the end
		// keeps the bytes as they are.
		{"Hooks", gateway.Config{CorruptStdinAfter: 1 << 40, CutAfter: 1 << 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := gatewaytest.Start(t, gatewaytest.Options{Config: tc.cfg})
			g.Sandbox(t, g.Client(t, openshell.Config{}), "box")
			for _, chunk := range []int{1, 127, 128, 16383, 16384, 16385, 100 << 10, 256<<10 - 64} {
				c := g.Client(t, openshell.Config{ChunkSize: chunk})
				size := min(4<<20, chunk*200+17)
				in := make([]byte, size)
				relaytest.NewPattern(uint64(chunk)).Read(in)
				var out, errOut bytes.Buffer
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				code, err := c.Exec(ctx, &relay.Command{
					Sandbox: "box",
					Argv:    []string{"sh", "-c", "tee /dev/stderr"},
					Stdin:   bytes.NewReader(in),
					Stdout:  &out,
					Stderr:  &errOut,
				})
				cancel()
				if err != nil || code != 0 {
					t.Fatalf("chunk %d: code=%d err=%v", chunk, code, err)
				}
				for name, got := range map[string][]byte{"stdout": out.Bytes(), "stderr": errOut.Bytes()} {
					if !bytes.Equal(got, in) {
						t.Fatalf("chunk %d: %s differs from stdin: %s", chunk, name, diff(got, in))
					}
				}
			}
		})
	}
}

func diff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at %d: %#x, want %#x", i, got[i], want[i])
		}
	}
	return "equal"
}
