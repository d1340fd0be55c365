package gateway_test

import (
	"testing"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

// TestSSHConformance runs the relay suite over SSH through the gateway's
// ForwardTcp relay: ferry's SSH execer, the embedded gateway's SSH server,
// and the fault hook cutting the relay.
func TestSSHConformance(t *testing.T) {
	start := func(t *testing.T, cut int64) (relay.Execer, string) {
		g := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{CutAfter: cut}})
		c := g.Client(t, openshell.Config{})
		g.Sandbox(t, c, "box")
		x := c.SSH(openshell.SSHConfig{})
		t.Cleanup(func() { x.Close() })
		return x, "box"
	}
	relaytest.Run(t, relaytest.Harness{
		New: func(t *testing.T) (relay.Execer, string) { return start(t, 0) },
		Cut: start,
		// sshexec's wrapper shell reports its child's death by SIGKILL
		// as 128+9.
		KilledExit: 137,
	})
}
