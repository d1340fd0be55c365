package main

import (
	"os"
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
	// The children these tests start of this binary (run as ferry) exit
	// without the second a -race build sleeps before it exits 0 (GORACE's
	// atexit_sleep_ms), which tests of a few dozen children would pay in
	// full; a GORACE the caller set is left as it is.
	if _, ok := os.LookupEnv("GORACE"); !ok {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	goleak.VerifyTestMain(m)
}
