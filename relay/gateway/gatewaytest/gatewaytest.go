// Package gatewaytest starts an embedded gateway on loopback for tests, with
// mTLS certificates made for the occasion, and hands out clients for it.
package gatewaytest

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// Options choose the gateway's flavour; the zero value is an mTLS gateway.
type Options struct {
	Plaintext bool
	// Config is passed to gateway.New; Root defaults to a temp dir.
	Config gateway.Config
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
	srv, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{Server: srv, Root: cfg.Root}
	sopts := gateway.ServerOptions()
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
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Create(ctx, &openshellv1.CreateSandboxRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
}
