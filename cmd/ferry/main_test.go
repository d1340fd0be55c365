package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ferry-dev/ferry/relay/grpcbuf"
	"github.com/ferry-dev/ferry/transfer/agent/agenttest"
)

// TestMain installs the gRPC buffer pool as main does, so that the tests
// drive the same transport, and fails the run if any test leaves a
// goroutine behind (STYLE.md 12): every run, gateway and SSH client a test
// starts must have ended when it returns.
func TestMain(m *testing.M) {
	grpcbuf.Install()
	// The CLI installs a fresh build of the agent, as `make build` would
	// embed it.
	agentBundle = agenttest.Build
	goleak.VerifyTestMain(m)
}
