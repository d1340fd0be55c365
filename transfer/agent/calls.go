package agent

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// calls counts a connection's RPCs in flight, and whether each that ended
// ended with the agent's own answer. Close uses it: once every call has
// been answered, the agent's handlers have all returned (their cleanup
// done), and nothing it could still do changes an outcome; the exec
// under it can end at once instead of waiting a round trip for its exit.
type calls struct {
	mu       sync.Mutex
	inFlight int
	unsure   bool // a call ended without the agent's answer (cancelled, lost)
}

// settled reports whether no call is in flight and every one that ended
// was answered by the agent.
func (c *calls) settled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inFlight == 0 && !c.unsure
}

func (c *calls) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (c *calls) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (c *calls) HandleConn(context.Context, stats.ConnStats) {}

func (c *calls) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.Begin:
		c.mu.Lock()
		c.inFlight++
		c.mu.Unlock()
	case *stats.End:
		c.mu.Lock()
		c.inFlight--
		if !answered(s.Error) {
			c.unsure = true
		}
		c.mu.Unlock()
	}
}

// answered reports whether a call that ended with err ended because the
// agent's handler returned: success, or a status only a handler sends. A
// cancelled call, a lost stream or a message over a limit may leave the
// handler running (a failed Put still removing its staging directory).
func answered(err error) bool {
	if err == nil {
		return true
	}
	switch status.Code(err) {
	case codes.NotFound, codes.AlreadyExists, codes.InvalidArgument, codes.FailedPrecondition,
		codes.PermissionDenied, codes.OutOfRange, codes.Unimplemented:
		return true
	}
	return false
}
