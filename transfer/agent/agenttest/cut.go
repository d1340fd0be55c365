package agenttest

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/ferry-dev/ferry/transfer/agent"
)

// ErrCut is what both ends of a connection read and write after its cut
// function has run.
var ErrCut = errors.New("agenttest: connection cut")

// Cuttable is InProcess with a way to break the connection: cut closes all
// four pipe ends with ErrCut at once, as a relay that drops mid-stream
// does, so that RPCs in flight fail on both sides and the server returns.
// cut may be called any number of times, from any goroutine, before or
// after the client is closed. The client is closed when the test ends; a
// caller may close it earlier.
func Cuttable(t testing.TB, cfg agent.ServerConfig) (c *agent.Client, cut func()) {
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
	var cutOnce sync.Once
	cutDone := make(chan struct{})
	cut = func() {
		cutOnce.Do(func() {
			close(cutDone)
			fromHost.CloseWithError(ErrCut)
			toAgent.CloseWithError(ErrCut)
			toHost.CloseWithError(ErrCut)
			fromAgent.CloseWithError(ErrCut)
		})
	}
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
		err := c.Close()
		select {
		case <-cutDone:
			return // a cut connection may end any way
		default:
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("agent server: %v", err)
		}
	})
	return c, cut
}
