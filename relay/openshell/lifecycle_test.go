package openshell_test

import (
	"errors"
	"strings"
	"testing"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
)

// TestStopStart drives Stop and Start, and Ensure on a stopped sandbox,
// which fails at once naming the phase rather than waiting on a watch
// that upstream would not end.
func TestStopStart(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	ctx := ctxFor(t)

	sb, err := c.Stop(ctx, "box")
	if err != nil || sb.GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_STOPPED {
		t.Fatalf("Stop = %v, %v; want STOPPED", sb, err)
	}
	err = c.Ensure(ctx, "box", "")
	if !errors.Is(err, relay.ErrNotReady) || !strings.Contains(err.Error(), "phase stopped") {
		t.Fatalf("Ensure of a stopped sandbox: %v, want ErrNotReady naming phase stopped", err)
	}
	if err := echo(t, c, "box", "x"); !errors.Is(err, relay.ErrNotReady) {
		t.Fatalf("exec in a stopped sandbox: %v, want ErrNotReady", err)
	}
	sb, err = c.Start(ctx, "box")
	if err != nil || sb.GetStatus().GetPhase() != openshellv1.SandboxPhase_SANDBOX_PHASE_READY {
		t.Fatalf("Start = %v, %v; want READY", sb, err)
	}
	if err := echo(t, c, "box", "back"); err != nil {
		t.Fatalf("exec after Start: %v", err)
	}
	if _, err := c.Stop(ctx, "nosuch"); !errors.Is(err, relay.ErrNotFound) {
		t.Fatalf("Stop of an unknown sandbox: %v, want ErrNotFound", err)
	}
}
