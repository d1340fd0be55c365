package gateway_test

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// TestExecContentType: the exec RPCs' requests carry the content-type that
// gRPC's default codec sends, "application/grpc", though the client forces
// its own codec for them (a forced codec's name would make it
// "application/grpc+proto").
func TestExecContentType(t *testing.T) {
	for _, oneShot := range []bool{false, true} {
		srv, err := gateway.New(gateway.Config{Root: t.TempDir(), ReadyDelay: time.Millisecond, DisableInteractive: oneShot, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		seen := map[string][]string{}
		note := func(ctx context.Context, method string) {
			md, _ := metadata.FromIncomingContext(ctx)
			mu.Lock()
			defer mu.Unlock()
			seen[method] = append(seen[method], md.Get("content-type")...)
		}
		gs := grpc.NewServer(append(gateway.ServerOptions(),
			grpc.ChainStreamInterceptor(func(s any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				note(ss.Context(), info.FullMethod)
				return h(s, ss)
			}),
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				note(ctx, info.FullMethod)
				return h(ctx, req)
			}))...)
		srv.Register(gs)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go gs.Serve(lis)
		c, err := openshell.Dial(openshell.Config{Settings: openshell.Settings{Endpoint: "http://" + lis.Addr().String()}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := c.Create(ctx, openshell.Spec{Name: "box"}); err != nil {
			t.Fatal(err)
		}
		code, err := c.Exec(ctx, &relay.Command{Sandbox: "box", Argv: []string{"true"}})
		cancel()
		c.Close()
		gs.Stop()
		srv.Close()
		if err != nil || code != 0 {
			t.Fatalf("oneShot=%v: code=%d err=%v", oneShot, code, err)
		}
		method := "/openshell.v1.OpenShell/ExecSandboxInteractive"
		if oneShot {
			method = "/openshell.v1.OpenShell/ExecSandbox"
		}
		if got := seen[method]; len(got) == 0 || slices.ContainsFunc(got, func(v string) bool { return v != "application/grpc" }) {
			t.Fatalf("%s content-type %q, want application/grpc", method, got)
		}
	}
}
