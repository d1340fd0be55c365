package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"

	agentv1 "github.com/ferry-dev/ferry/proto/ferry/agent/v1"
	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
	"github.com/ferry-dev/ferry/transfer/agent/supervisor"
)

// Config is what the agent needs to serve.
type Config struct {
	// Workspace is the directory relative paths start from; empty means
	// the process's working directory.
	Workspace string
	// TempDir is the sandbox's temporary directory, reported by Probe.
	TempDir string
	// Version is the agent's release string, reported by Probe.
	Version string
	// Digest is the agent binary's SHA-256, sent in the hello.
	Digest [32]byte
	// Logger receives the agent's own log lines (on its stderr); nil
	// discards them. Never stdout: that is the protocol stream.
	Logger *slog.Logger
	// Wrap, when non-nil, is given the agent's implementation and returns
	// the one served. ferry-agent never sets it: the project's hostile-agent
	// tests do, to answer as a sandbox that turned hostile would, through
	// the real agent where they do not lie.
	Wrap func(agentv1.AgentServer) agentv1.AgentServer
}

// server implements ferry.agent.v1.Agent. Its methods live in one file per
// operation.
type server struct {
	agentv1.UnimplementedAgentServer
	cfg Config
	log *slog.Logger
	// rtt is the connection's round trip, once the host's hello is in:
	// from writing the agent's hello to reading the host's, which the
	// host writes as soon as it has read the agent's. A Get's Auto
	// compression goes by it (frame.WriterOptions.RTT). 0 before.
	rtt func() time.Duration
}

// Serve runs the agent's side of one connection: it writes its hello to w,
// reads and checks the host's from r, then serves gRPC on r and w until the
// host closes the stream or ctx ends. A host of another protocol version
// gets the agent's hello (so it learns the version) and then an error.
func Serve(ctx context.Context, r io.Reader, w io.Writer, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := wire.WriteHello(w, wire.Hello{Version: wire.ProtocolVersion, Digest: cfg.Digest}); err != nil {
		return err
	}
	// gRPC starts now, before the host's hello has come: its server
	// writes its HTTP/2 SETTINGS at once, so they reach the host right
	// behind this hello, and the host's first call leaves with its own
	// hello instead of a round trip later (a gRPC client sends no call
	// before the server's SETTINGS). The host's hello is still read and
	// checked before any byte of its HTTP/2 stream.
	hr := &helloReader{r: r, sent: time.Now()}
	ended := make(chan struct{})
	var once sync.Once
	conn := wire.NewStreamConn(hr, w, func() error {
		once.Do(func() { close(ended) })
		return nil
	})
	lis := wire.ConnListener(conn)
	gs := grpc.NewServer(wire.ServerOptions()...)
	srv := &server{cfg: cfg, log: log, rtt: hr.rtt}
	var impl agentv1.AgentServer = srv
	if cfg.Wrap != nil {
		impl = cfg.Wrap(srv)
	}
	agentv1.RegisterAgentServer(gs, impl)
	supervisor.Register(gs, paths{srv})
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	select {
	case <-ended:
	case <-ctx.Done():
		// gRPC's Stop waits for its reader, which only a closed r ends.
		if c, ok := r.(io.Closer); ok {
			c.Close()
		}
	}
	// Let the calls in flight finish their cleanup (a failed Put or
	// Restore removes its staging directory) before the process may
	// exit; the transport is gone, so they are ending. A handler that
	// does not end within wire.StopWait is stopped.
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(wire.StopWait)
	select {
	case <-stopped:
	case <-t.C:
		gs.Stop()
		<-stopped
	}
	t.Stop()
	lis.Close()
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve: %w", err)
	}
	if err := hr.failed(); err != nil {
		return fmt.Errorf("read host hello: %w", err)
	}
	return ctx.Err()
}

// helloReader reads and checks the host's hello on its first Read, then
// reads through: the host's stdin carries nothing before its hello.
type helloReader struct {
	r    io.Reader
	sent time.Time // when the agent's hello went
	mu   sync.Mutex
	done bool
	err  error
	took time.Duration // from sent to the host's hello read
}

func (h *helloReader) rtt() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.took
}

func (h *helloReader) Read(p []byte) (int, error) {
	h.mu.Lock()
	if !h.done {
		h.done = true
		if _, err := wire.ReadHello(h.r, 0); err != nil {
			h.err = err
		} else {
			h.took = time.Since(h.sent)
		}
	}
	err := h.err
	h.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return h.r.Read(p)
}

// failed is why the host's hello was refused, if it was.
func (h *helloReader) failed() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// paths is the server's resolution of request paths, for the supervisor.
type paths struct{ s *server }

func (p paths) Abs(path string) string     { return p.s.abs(path) }
func (p paths) Workspace() (string, error) { return p.s.workspace() }

// ProtocolVersion is the version of the protocol Serve speaks, for the
// agent's `version` subcommand.
const ProtocolVersion = wire.ProtocolVersion
