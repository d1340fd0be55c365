package gateway_test

import (
	"context"
	"io"
	"strconv"
	"testing"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/internal/execcodec"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

// BenchmarkExec measures the exec channel's throughput through the embedded
// gateway over mTLS on loopback, in-process: download (remote output),
// upload (stdin) and both (cat).
func BenchmarkExec(b *testing.B) {
	// Benchmarks run after the tests, which poison every payload.
	execcodec.Debug(false)
	g := gatewaytest.Start(b, gatewaytest.Options{})
	c := g.Client(b, openshell.Config{})
	g.Sandbox(b, c, "bench")
	const size = 64 << 20
	for _, tc := range []struct {
		name  string
		argv  []string
		stdin bool
	}{
		{"Download", []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}, false},
		{"Upload", []string{"sh", "-c", "cat >/dev/null"}, true},
		{"Cat", []string{"cat"}, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				cmd := &relay.Command{Sandbox: "bench", Argv: tc.argv, Stdout: io.Discard}
				if tc.stdin {
					cmd.Stdin = io.LimitReader(relaytest.NewPattern(1), size)
				}
				code, err := c.Exec(context.Background(), cmd)
				if err != nil || code != 0 {
					b.Fatalf("code=%d err=%v", code, err)
				}
			}
		})
	}
}
