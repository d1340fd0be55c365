// Package agenttest runs the agent's server in the test's own process, over
// pipes, for tests of the protocol that do not need an exec channel, and
// builds the agent for tests that do.
package agenttest

import (
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/server"
)

// InProcess serves cfg on a pair of pipes and returns a client connected to
// it; both end when the test does.
func InProcess(t testing.TB, cfg server.Config) *agent.Client {
	t.Helper()
	c, _ := Cuttable(t, cfg)
	return c
}
