package agenttest

import (
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// Fake serves impl, a stand-in for the agent (usually a hostile one), over
// an in-memory connection after the usual hellos, and returns a client of
// it; both end when the test does.
func Fake(t testing.TB, impl agentv1.AgentServer) *agent.Client {
	t.Helper()
	hostEnd, agentEnd := net.Pipe()
	gs := grpc.NewServer()
	agentv1.RegisterAgentServer(gs, impl)
	served := make(chan error, 1)
	go func() {
		if err := wire.WriteHello(agentEnd, wire.Hello{Version: wire.ProtocolVersion}); err != nil {
			served <- err
			return
		}
		if _, err := wire.ReadHello(agentEnd, 0); err != nil {
			served <- err
			return
		}
		served <- gs.Serve(wire.ConnListener(agentEnd))
	}()
	var once sync.Once
	closeFn := func() error {
		once.Do(func() {
			hostEnd.Close()
			agentEnd.Close()
			gs.Stop()
			<-served
		})
		return nil
	}
	c, err := agent.NewClient(hostEnd, hostEnd, 0, closeFn)
	if err != nil {
		closeFn()
		t.Fatalf("client of the fake agent: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
