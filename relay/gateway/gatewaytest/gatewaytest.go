// Package gatewaytest starts an embedded gateway on loopback for tests, with
// mTLS certificates made for the occasion, and hands out clients for it.
package gatewaytest

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// Options choose the gateway's flavour; the zero value is an mTLS gateway.
type Options struct {
	Plaintext bool
	// Config is passed to gateway.New; Root defaults to a temp dir.
	Config gateway.Config
	// Refuse lists methods, unary or streaming (full names, as
	// "/openshell.v1.OpenShell/GetSandboxLogs") answered UNAVAILABLE,
	// for tests of a gateway that fails them.
	Refuse []string
	// Delay holds unary methods (full names) back this long before they
	// are answered, for tests of callers that share a call in flight.
	Delay map[string]time.Duration
}

// Seen is everything a gateway was told about the execs it ran, apart
// from their stdin: commands, environments, workdirs, and every log line.
// Tests grep it for secrets.
type Seen struct {
	mu    sync.Mutex
	lines []string
}

func (s *Seen) add(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, line)
}

// String joins all that was seen, one item a line.
func (s *Seen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

func (s *Seen) Write(p []byte) (int, error) {
	s.add(string(p))
	return len(p), nil
}

func (s *Seen) request(req *openshellv1.ExecSandboxRequest) {
	if req == nil {
		return
	}
	s.add("argv: " + strings.Join(req.GetCommand(), " "))
	s.add("workdir: " + req.GetWorkdir())
	for k, v := range req.GetEnvironment() {
		s.add("env: " + k + "=" + v)
	}
}

// recordingStream notes every exec start that passes through it.
type recordingStream struct {
	grpc.ServerStream
	seen *Seen
}

func (r *recordingStream) RecvMsg(m any) error {
	err := r.ServerStream.RecvMsg(m)
	if err == nil {
		switch v := m.(type) {
		case *openshellv1.ExecSandboxRequest:
			r.seen.request(v)
		case *openshellv1.ExecSandboxInput:
			r.seen.request(v.GetStart())
		}
	}
	return err
}

// Gateway is a running embedded gateway.
type Gateway struct {
	Server *gateway.Server
	Addr   string
	Root   string
	// CertDir holds the files `ferry gateway certs` writes.
	CertDir string
	// Settings reach this gateway as a ferry client would.
	Settings openshell.Settings
	// Seen records every exec request and log line, unless the test set
	// its own Logger.
	Seen *Seen

	mu      sync.Mutex
	creates []*openshellv1.CreateSandboxRequest
	refuse  []string
	calls   map[string]int // by full method name
	conns   int
}

// Calls is how many calls of method (a full name, as
// "/openshell.v1.OpenShell/GetSandbox") the gateway has received.
func (g *Gateway) Calls(method string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[method]
}

// Conns is how many connections the gateway has accepted.
func (g *Gateway) Conns() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.conns
}

func (g *Gateway) called(method string) {
	g.mu.Lock()
	g.calls[method]++
	g.mu.Unlock()
}

// countingListener counts the connections a gateway accepts.
type countingListener struct {
	net.Listener
	g *Gateway
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.g.mu.Lock()
		l.g.conns++
		l.g.mu.Unlock()
	}
	return c, err
}

// Refuse makes the gateway answer the methods UNAVAILABLE from now on,
// besides Options.Refuse's: a test sets its sandbox up first, then
// breaks what it tests.
func (g *Gateway) Refuse(methods ...string) {
	g.mu.Lock()
	g.refuse = append(g.refuse, methods...)
	g.mu.Unlock()
}

func (g *Gateway) refused(method string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Contains(g.refuse, method)
}

// Creates are the CreateSandboxRequests the gateway received, as they
// arrived (copies), in order.
func (g *Gateway) Creates() []*openshellv1.CreateSandboxRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*openshellv1.CreateSandboxRequest, len(g.creates))
	for i, r := range g.creates {
		out[i] = proto.Clone(r).(*openshellv1.CreateSandboxRequest)
	}
	return out
}

// Start starts a gateway that stops when t ends.
func Start(t testing.TB, opts Options) *Gateway {
	t.Helper()
	cfg := opts.Config
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	if cfg.ReadyDelay == 0 {
		cfg.ReadyDelay = 10 * time.Millisecond
	}
	seen := &Seen{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(seen, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	srv, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{Server: srv, Root: cfg.Root, Seen: seen, calls: map[string]int{}}
	// WaitForHandlers: Stop returns only once every handler has, so that
	// none writes the gateway's logs into a temp dir being removed.
	sopts := append(gateway.ServerOptions(), grpc.WaitForHandlers(true), grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		g.called(info.FullMethod)
		if slices.Contains(opts.Refuse, info.FullMethod) || g.refused(info.FullMethod) {
			return status.Error(codes.Unavailable, "refused by the test")
		}
		return handler(srv, &recordingStream{ServerStream: ss, seen: seen})
	}), grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		g.called(info.FullMethod)
		if slices.Contains(opts.Refuse, info.FullMethod) || g.refused(info.FullMethod) {
			return nil, status.Error(codes.Unavailable, "refused by the test")
		}
		if d := opts.Delay[info.FullMethod]; d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if r, ok := req.(*openshellv1.CreateSandboxRequest); ok {
			g.mu.Lock()
			g.creates = append(g.creates, proto.Clone(r).(*openshellv1.CreateSandboxRequest))
			g.mu.Unlock()
		}
		return handler(ctx, req)
	}))
	if !opts.Plaintext {
		g.CertDir = filepath.Join(t.TempDir(), "certs")
		if err := gateway.WriteCerts(g.CertDir, nil); err != nil {
			t.Fatal(err)
		}
		tlsCfg, err := gateway.LoadServerTLS(g.CertDir)
		if err != nil {
			t.Fatal(err)
		}
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	gs := grpc.NewServer(sopts...)
	srv.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.Addr = lis.Addr().String()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(countingListener{Listener: lis, g: g})
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
		// What the test's execs left running ends with the test.
		srv.EndProcesses()
		srv.Close()
	})
	if opts.Plaintext {
		g.Settings = openshell.Settings{Endpoint: "http://" + g.Addr, Workspace: "default"}
	} else {
		g.Settings = openshell.Settings{
			Endpoint:       "https://" + g.Addr,
			Workspace:      "default",
			CACertFile:     filepath.Join(g.CertDir, "client", "ca.crt"),
			ClientCertFile: filepath.Join(g.CertDir, "client", "tls.crt"),
			ClientKeyFile:  filepath.Join(g.CertDir, "client", "tls.key"),
		}
	}
	return g
}

// Client returns a client for the gateway, closed when t ends.
func (g *Gateway) Client(t testing.TB, cfg openshell.Config) *openshell.Client {
	t.Helper()
	cfg.Settings = g.Settings
	c, err := openshell.Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Sandbox creates a READY sandbox called name.
func (g *Gateway) Sandbox(t testing.TB, c *openshell.Client, name string) {
	t.Helper()
	g.SandboxEnv(t, c, name, nil)
}

// SandboxEnv is Sandbox with env set for the sandbox's commands, as
// `ferry sandbox create -e` sets it.
func (g *Gateway) SandboxEnv(t testing.TB, c *openshell.Client, name string, env map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Create(ctx, openshell.Spec{Name: name, Env: env}); err != nil {
		t.Fatal(err)
	}
}

// Providers creates, through CreateProvider as `ferry provider create`
// does, a provider of each name that does not exist yet, its type the
// name and its one credential NAME_TOKEN (upper case, '-' as '_'), so
// that any of them may be attached to one sandbox together.
func (g *Gateway) Providers(t testing.TB, c *openshell.Client, names ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range names {
		if _, err := c.Provider(ctx, name); err == nil {
			continue
		}
		k := strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_TOKEN"
		if _, err := c.CreateProvider(ctx, openshell.ProviderSpec{Name: name, Type: name, Credentials: map[string]string{k: "test-" + name}}); err != nil {
			t.Fatal(err)
		}
	}
}
