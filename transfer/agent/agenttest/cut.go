package agenttest

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/agent/server"
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
func Cuttable(t testing.TB, cfg server.Config) (c *agent.Client, cut func()) {
	t.Helper()
	p := servePipes(cfg)
	c, err := agent.NewClient(p.fromAgent, p.fromHost, 0, p.close)
	if err != nil {
		p.close()
		t.Fatalf("agent client: %v", err)
	}
	t.Cleanup(func() {
		err := c.Close()
		select {
		case <-p.cutDone:
			return // a cut connection may end any way
		default:
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("agent server: %v", err)
		}
	})
	return c, p.cut
}

// RawInProcess serves cfg as InProcess does and returns the generated client of it,
// for tests that send what agent.Client never would, or that stand between
// a Client and the agent (a recording proxy served with Fake).
func RawInProcess(t testing.TB, cfg server.Config) agentv1.AgentClient {
	t.Helper()
	p := servePipes(cfg)
	_, cc, conn, err := wire.Connect(p.fromAgent, p.fromHost, 0, p.close)
	if err != nil {
		if conn != nil {
			conn.Close()
		} else {
			p.close()
		}
		t.Fatalf("agent client: %v", err)
	}
	t.Cleanup(func() {
		cc.Close()
		if err := conn.Close(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("agent server: %v", err)
		}
	})
	return agentv1.NewAgentClient(cc)
}

// pipes is an in-process agent's connection: the host's ends of it, the
// close function that ends it and waits for the server, and cut.
type pipes struct {
	fromAgent io.Reader
	fromHost  io.Writer
	close     func() error
	cut       func()
	cutDone   chan struct{}
}

// servePipes serves cfg on a pair of pipes until the returned close.
func servePipes(cfg server.Config) *pipes {
	toAgent, fromHost := newPipe()
	fromAgent, toHost := newPipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		err := server.Serve(ctx, toAgent, toHost, cfg)
		toHost.CloseWithError(io.EOF)
		toAgent.CloseWithError(io.EOF)
		served <- err
	}()
	var cutOnce sync.Once
	cutDone := make(chan struct{})
	cut := func() {
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
	return &pipes{fromAgent: fromAgent, fromHost: fromHost, close: closeFn, cut: cut, cutDone: cutDone}
}
