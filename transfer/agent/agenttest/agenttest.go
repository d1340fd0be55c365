// Package agenttest runs the agent's server in the test's own process, over
// pipes, for tests of the protocol that do not need an exec channel.
package agenttest

import (
	"context"
	"io"
	"sync"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent"
)

// InProcess serves cfg on a pair of pipes and returns a client connected to
// it; both end when the test does.
func InProcess(t testing.TB, cfg agent.ServerConfig) *agent.Client {
	t.Helper()
	toAgent, fromHost := io.Pipe()
	fromAgent, toHost := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		err := agent.Serve(ctx, toAgent, toHost, cfg)
		toHost.CloseWithError(io.EOF)
		toAgent.CloseWithError(io.EOF)
		served <- err
	}()
	var once sync.Once
	var serr error
	closeFn := func() error {
		once.Do(func() {
			fromHost.Close()
			// The server may be blocked writing a frame nobody reads yet.
			go io.Copy(io.Discard, fromAgent)
			serr = <-served
			cancel()
			fromAgent.Close()
		})
		return serr
	}
	c, err := agent.NewClient(fromAgent, fromHost, 0, closeFn)
	if err != nil {
		closeFn()
		t.Fatalf("agent client: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil && err != context.Canceled {
			t.Errorf("agent server: %v", err)
		}
	})
	return c
}
