package agent

import (
	"context"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// Client is the host's connection to one running agent.
//
// A Client that Dial returned early (DialConfig.Memory) has not heard the
// agent yet: its first calls leave at once, a round trip before the
// agent's hello could have come. Should that hello not be the agent's it
// expects (no agent cached, or another build), the Client dials the agent
// as Dial does otherwise (installing it if need be) and makes those
// calls again there; see speculative for which calls go early.
type Client struct {
	// Hello is what the agent said first: its protocol version and digest.
	// In a Client not yet connected to the agent it expects, the digest
	// is the one the host wrote in its hello.
	Hello Hello
	rpc   agentv1.AgentClient
	sup   agentv1.SupervisorClient

	mu  sync.Mutex
	cur *link
	// redial connects the agent the slow way, after an early link's
	// hello was refused for why; failed is its error, if it failed.
	redial func(ctx context.Context, why error) (*link, error)
	failed error
}

// link is one agent connection: one exec.
type link struct {
	hello Hello
	cc    *grpc.ClientConn
	conn  io.Closer
	calls *calls
	// err reports why the stream under the connection ended, for RPC
	// errors; nil while it has not.
	err func() error
	// early is the connection's hello check, for a link made before
	// the agent's hello; nil for one made after.
	early *wire.Early
}

func newClient(l *link) *Client {
	c := &Client{Hello: l.hello, cur: l}
	c.rpc = agentv1.NewAgentClient(rpcConn{c})
	c.sup = agentv1.NewSupervisorClient(rpcConn{c})
	return c
}

// NewClient talks to an agent whose stdout is r and whose stdin is w: it
// reads the agent's hello (skipping up to maxSkip bytes of banner before
// it), writes its own, and returns a client whose RPCs travel on r and w.
// The caller checks Hello before using the client. closeFn is called once,
// by Close, to end the stream: it must end both r and w (a Read blocked on r
// returns) and wait for the agent's side to end. It may be nil.
func NewClient(r io.Reader, w io.Writer, maxSkip int, closeFn func() error) (*Client, error) {
	calls := &calls{}
	h, cc, conn, err := wire.Connect(r, w, maxSkip, closeFn, grpc.WithStatsHandler(calls))
	if conn == nil {
		return nil, err
	}
	return newClient(&link{hello: h, cc: cc, conn: conn, calls: calls}), err
}

// link is the connection calls go on now.
func (c *Client) link() *link {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cur
}

// Close ends the connection and waits for the stream under it to end.
func (c *Client) Close() error {
	l := c.link()
	if l.cc != nil {
		l.cc.Close()
	}
	return l.conn.Close()
}

// wrap prefers the reason the stream under the connection ended (a lost
// relay, an agent that died) to the gRPC status it caused.
func (c *Client) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if why := c.failure(); why != nil {
		return fmt.Errorf("%s: %w", op, why)
	}
	if l := c.link(); l.err != nil {
		if why := l.err(); why != nil {
			return fmt.Errorf("%s: %w", op, why)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// settled reports whether every call made on the connection has been
// answered by the agent and none is in flight: the agent has nothing
// left to do, and closing need not wait for it to exit.
func (c *Client) settled() bool { return c.link().calls.settled() }

// Lost reports whether the stream under the connection has ended: the
// relay dropped, or the agent exited or was killed. A lost agent cleaned
// up nothing; whatever it was writing is left for the host to remove.
func (c *Client) Lost() bool {
	l := c.link()
	return l.err != nil && l.err() != nil
}

// speculative are the methods an early link carries before the agent's
// hello is in: those whose request alone may reach another program
// harmlessly, and whose answer the host reads only once the hello is
// accepted. The Agent's reads are: they change nothing in the sandbox.
// The rest (Put, Restore, Remove, the supervisor's Spawn and Signal)
// wait for the hello: a stale agent in the cache, of our key but not our
// build, would carry them out before the host could refuse it, and the
// host would then carry them out again. Put and Restore would gain
// nothing anyway: their data must wait for the hello.
var speculative = map[string]bool{
	agentv1.Agent_Get_FullMethodName:         true,
	agentv1.Agent_Stat_FullMethodName:        true,
	agentv1.Agent_Probe_FullMethodName:       true,
	agentv1.Agent_ScanStream_FullMethodName:  true,
	agentv1.Agent_ReadChunks_FullMethodName:  true,
	agentv1.Agent_Follow_FullMethodName:      true,
	agentv1.Supervisor_Status_FullMethodName: true,
}

// settle waits until l's agent has been heard: it returns the link calls
// go on from then, l itself when its hello was accepted, else the one
// redial made (or another call's redial already had).
func (c *Client) settle(ctx context.Context, l *link) (*link, error) {
	if l.early == nil {
		return l, nil
	}
	select {
	case <-l.early.Heard():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != l {
		return c.cur, nil
	}
	if c.failed != nil {
		return nil, c.failed
	}
	h, why := l.early.Hello()
	if why == nil {
		c.Hello = h
		return l, nil
	}
	// The early exec is done with: its calls failed with the hello.
	l.cc.Close()
	l.conn.Close()
	nl, err := c.redial(ctx, why)
	if err != nil {
		c.failed = err
		return nil, err
	}
	c.cur, c.Hello = nl, nl.hello
	return nl, nil
}

// failure is why a redial failed, once one has: every call fails with it.
func (c *Client) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// heard reports whether l's hello has been accepted (or l was made after
// it): a call's outcome on l then stands.
func heard(l *link) bool {
	if l.early == nil {
		return true
	}
	select {
	case <-l.early.Heard():
		_, err := l.early.Hello()
		return err == nil
	default:
		return false
	}
}

// rpcConn is the connection the generated clients call through: the
// Client's current link, and what an early one needs.
type rpcConn struct{ c *Client }

// Invoke is a unary call on the current link, made again on the
// redialled one when it went early to an agent that was not there.
func (r rpcConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	c := r.c
	l := c.link()
	if !speculative[method] {
		var err error
		if l, err = c.settle(ctx, l); err != nil {
			return err
		}
	}
	err := l.cc.Invoke(ctx, method, args, reply, opts...)
	if err == nil || heard(l) {
		return err
	}
	nl, serr := c.settle(ctx, l)
	if serr != nil {
		return serr
	}
	if nl == l {
		return err
	}
	return nl.cc.Invoke(ctx, method, args, reply, opts...)
}

// NewStream opens a stream on the current link: see Invoke, and
// earlyStream for a stream that goes early.
func (r rpcConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c := r.c
	l := c.link()
	if !speculative[method] {
		var err error
		if l, err = c.settle(ctx, l); err != nil {
			return nil, err
		}
	}
	if heard(l) {
		return l.cc.NewStream(ctx, desc, method, opts...)
	}
	cs, err := l.cc.NewStream(ctx, desc, method, opts...)
	if err != nil {
		nl, serr := c.settle(ctx, l)
		if serr != nil {
			return nil, serr
		}
		if nl == l {
			return nil, err
		}
		return nl.cc.NewStream(ctx, desc, method, opts...)
	}
	return &earlyStream{c: c, l: l, ctx: ctx, desc: desc, method: method, opts: opts, cs: cs}, nil
}

// earlyStream is a stream opened on a link whose agent has not been
// heard. Its first message and its half-close go at once; anything else
// (a second message, a read) waits for the hello. If the hello is
// refused, the stream is opened again on the redialled link, and what
// went early is sent again there.
type earlyStream struct {
	c      *Client
	l      *link
	ctx    context.Context
	desc   *grpc.StreamDesc
	method string
	opts   []grpc.CallOption

	mu      sync.Mutex
	cs      grpc.ClientStream
	settled bool
	err     error // settling failed: every later call returns it
	first   any   // the first message, once sent
	sent    int
	closed  bool // CloseSend went early
}

// stream settles s once (see Client.settle) and returns the stream to
// use from then on.
func (s *earlyStream) stream() (grpc.ClientStream, error) {
	// The hello is waited for without the lock, so that a first message
	// sent meanwhile still goes early.
	select {
	case <-s.l.early.Heard():
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.settled || s.err != nil {
		return s.cs, s.err
	}
	nl, err := s.c.settle(s.ctx, s.l)
	if err != nil {
		s.err = err
		return nil, err
	}
	s.settled = true
	if nl == s.l {
		return s.cs, nil
	}
	cs, err := nl.cc.NewStream(s.ctx, s.desc, s.method, s.opts...)
	if err == nil && s.sent > 0 {
		err = cs.SendMsg(s.first)
	}
	if err == nil && s.closed {
		err = cs.CloseSend()
	}
	if err != nil {
		s.err = err
		return nil, err
	}
	s.cs = cs
	return cs, nil
}

func (s *earlyStream) SendMsg(m any) error {
	s.mu.Lock()
	if !s.settled && s.err == nil && s.sent == 0 {
		// A copy: the caller may change m once SendMsg returns (as
		// Scan does, reusing its batch), and the copy is what goes
		// again on a redialled link.
		pm, ok := m.(proto.Message)
		if !ok {
			s.mu.Unlock()
			return fmt.Errorf("send %T: not a proto.Message", m)
		}
		s.first, s.sent = proto.Clone(pm), 1
		cs := s.cs
		s.mu.Unlock()
		// An early stream's end is settled by the reads, which say
		// why; a failed send reports only io.EOF (grpc.ClientStream).
		if err := cs.SendMsg(m); err != nil && heard(s.l) {
			return err
		}
		return nil
	}
	s.mu.Unlock()
	cs, err := s.stream()
	if err != nil {
		return err
	}
	return cs.SendMsg(m)
}

func (s *earlyStream) CloseSend() error {
	s.mu.Lock()
	if !s.settled && s.err == nil {
		s.closed = true
		cs := s.cs
		s.mu.Unlock()
		cs.CloseSend()
		return nil
	}
	s.mu.Unlock()
	cs, err := s.stream()
	if err != nil {
		return err
	}
	return cs.CloseSend()
}

func (s *earlyStream) RecvMsg(m any) error {
	cs, err := s.stream()
	if err != nil {
		return err
	}
	return cs.RecvMsg(m)
}

func (s *earlyStream) Header() (metadata.MD, error) {
	cs, err := s.stream()
	if err != nil {
		return nil, err
	}
	return cs.Header()
}

func (s *earlyStream) Trailer() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cs == nil {
		return nil
	}
	return s.cs.Trailer()
}

func (s *earlyStream) Context() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cs.Context()
}
