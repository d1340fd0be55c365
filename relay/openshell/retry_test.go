package openshell_test

import (
	"context"
	"errors"
	"testing"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
	"github.com/ferry-dev/ferry/relay/relaytest"
)

// TestRetryUnseenDrop: a call made on a connection whose drop gRPC has not
// seen yet is sent, lost, and fails before the gateway has it. A call that
// changes nothing goes again on a new connection; Exec, which may have run
// a command, fails as a lost relay.
func TestRetryUnseenDrop(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	var cut relaytest.Cutter
	c := g.Client(t, openshell.Config{Dialer: cut.Dial})
	g.Sandbox(t, c, "box")
	id, err := c.SandboxID(ctxFor(t), "box")
	if err != nil {
		t.Fatal(err)
	}
	api := openshell.API(c)
	for _, tc := range []struct {
		name string
		call func(context.Context) error
		want error // nil: retried on a new connection, and it worked
	}{
		{"GetSandbox", func(ctx context.Context) error {
			_, err := api.GetSandbox(ctx, &openshellv1.GetSandboxRequest{Name: "box"})
			return err
		}, nil},
		{"ListSandboxes", func(ctx context.Context) error {
			_, err := api.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{})
			return err
		}, nil},
		{"CreateSshSession", func(ctx context.Context) error {
			_, err := api.CreateSshSession(ctx, &openshellv1.CreateSshSessionRequest{SandboxId: id})
			return err
		}, nil},
		{"Exec", func(ctx context.Context) error {
			_, err := c.Exec(ctx, &relay.Command{Sandbox: "box", Argv: []string{"true"}})
			return err
		}, relay.ErrRelayLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A call first, so that the connection is up and known good.
			if _, err := api.Health(ctxFor(t), &openshellv1.HealthRequest{}); err != nil {
				t.Fatal(err)
			}
			dials := cut.Dials()
			cut.CutUnseen()
			err := tc.call(ctxFor(t))
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("after an unseen drop: %v, want it retried", err)
			case tc.want == nil && cut.Dials() != dials+1:
				t.Fatalf("%d dials, want %d: the call did not meet the drop", cut.Dials(), dials+1)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("after an unseen drop: %v, want one wrapping %v", err, tc.want)
			}
		})
	}
}
