package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/net/http2"
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
	// rtt is the connection's round trip once measured (see
	// helloReader), 0 before; rttKnown is closed then. A Get's Auto
	// compression goes by it (frame.WriterOptions.RTT), and a Put's
	// header tells the host.
	rtt      func() time.Duration
	rttKnown <-chan struct{}
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
	hr := newHelloReader(r, time.Now())
	ended := make(chan struct{})
	var once sync.Once
	conn := wire.NewStreamConn(hr, w, func() error {
		once.Do(func() { close(ended) })
		return nil
	})
	lis := wire.ConnListener(conn)
	gs := grpc.NewServer(wire.ServerOptions()...)
	srv := &server{cfg: cfg, log: log, rtt: hr.rtt, rttKnown: hr.known}
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
//
// It also times the connection's round trip: from the agent's hello,
// which its HTTP/2 SETTINGS follow at once, to the host's acknowledgement
// of those SETTINGS, the first SETTINGS frame with the ACK flag in what
// the host sends. A host's gRPC acknowledges them as soon as it reads
// them, whenever it wrote its own hello: after reading the agent's, or
// before the agent had even started, with its first call behind it.
// Timing the host's hello instead would measure no round trip in that
// second case.
type helloReader struct {
	r     io.Reader
	sent  time.Time // when the agent's hello went
	known chan struct{}
	mu    sync.Mutex
	done  bool
	err   error
	took  time.Duration // from sent to the host's SETTINGS ACK
	// Following the host's frames until the ACK: the client preface's
	// bytes still to pass, a frame header gathered, the payload bytes of
	// the current frame still to pass.
	pre  int
	hdr  [h2HeaderLen]byte
	nhdr int
	body int
}

// h2HeaderLen is an HTTP/2 frame header's length (RFC 9113, section 4.1).
const h2HeaderLen = 9

// newHelloReader is the host's stream r, the agent's hello sent at sent.
func newHelloReader(r io.Reader, sent time.Time) *helloReader {
	return &helloReader{r: r, sent: sent, known: make(chan struct{}), pre: len(http2.ClientPreface)}
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
		}
	}
	err := h.err
	watching := h.took == 0
	h.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := h.r.Read(p)
	if watching && n > 0 {
		h.watch(p[:n])
	}
	return n, err
}

// watch follows the host's frames in p, which Read has just read, until
// the first SETTINGS ACK. Only gRPC's reader calls Read, one call at a
// time; the lock is for rtt's readers.
func (h *helloReader) watch(p []byte) {
	for len(p) > 0 {
		switch {
		case h.pre > 0:
			k := min(h.pre, len(p))
			h.pre, p = h.pre-k, p[k:]
		case h.body > 0:
			k := min(h.body, len(p))
			h.body, p = h.body-k, p[k:]
		default:
			k := copy(h.hdr[h.nhdr:], p)
			h.nhdr, p = h.nhdr+k, p[k:]
			if h.nhdr < h2HeaderLen {
				return
			}
			h.nhdr = 0
			h.body = int(h.hdr[0])<<16 | int(h.hdr[1])<<8 | int(h.hdr[2])
			if http2.FrameType(h.hdr[3]) == http2.FrameSettings && http2.Flags(h.hdr[4]).Has(http2.FlagSettingsAck) && h.body == 0 && h.hdr[5]&0x7f|h.hdr[6]|h.hdr[7]|h.hdr[8] == 0 {
				h.mu.Lock()
				h.took = max(time.Since(h.sent), time.Microsecond)
				h.mu.Unlock()
				close(h.known)
				return
			}
		}
	}
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
