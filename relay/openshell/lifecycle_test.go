package openshell_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay"
	"github.com/ferry-dev/ferry/relay/gateway"
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
	if err != nil || sb.Phase != "stopped" {
		t.Fatalf("Stop = %v, %v; want STOPPED", sb, err)
	}
	_, err = c.Ensure(ctx, openshell.Spec{Name: "box"})
	if !errors.Is(err, relay.ErrNotReady) || !strings.Contains(err.Error(), "phase stopped") {
		t.Fatalf("Ensure of a stopped sandbox: %v, want ErrNotReady naming phase stopped", err)
	}
	if err := echo(t, c, "box", "x"); !errors.Is(err, relay.ErrNotReady) {
		t.Fatalf("exec in a stopped sandbox: %v, want ErrNotReady", err)
	}
	sb, err = c.Start(ctx, "box")
	if err != nil || sb.Phase != "ready" {
		t.Fatalf("Start = %v, %v; want READY", sb, err)
	}
	if err := echo(t, c, "box", "back"); err != nil {
		t.Fatalf("exec after Start: %v", err)
	}
	if _, err := c.Stop(ctx, "nosuch"); !errors.Is(err, relay.ErrNotFound) {
		t.Fatalf("Stop of an unknown sandbox: %v, want ErrNotFound", err)
	}
}

// TestEnsure: Ensure needs a name, gives concurrent callers one and the
// same sandbox (whichever of them made it), and gives up at the caller's deadline naming the
// sandbox and the phase it was stuck in.
func TestEnsure(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	ctx := ctxFor(t)
	if _, err := c.Ensure(ctx, openshell.Spec{}); !errors.Is(err, openshell.ErrInvalidRequest) {
		t.Fatalf("Ensure without a name: %v, want ErrInvalidRequest", err)
	}
	const callers = 4
	ids := make([]string, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := c.Ensure(ctx, openshell.Spec{Name: "raced", Labels: map[string]string{"n": "1"}})
			ids[i], errs[i] = info.ID, err
		}()
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil || ids[i] == "" || ids[i] != ids[0] {
			t.Fatalf("caller %d: id %q, err %v; caller 0 got %q", i, ids[i], errs[i], ids[0])
		}
	}
	if all, err := c.List(ctx); err != nil || len(all) != 1 || all[0].Phase != "ready" {
		t.Fatalf("List after the calls = %+v, %v; want one ready sandbox", all, err)
	}

	slow := gatewaytest.Start(t, gatewaytest.Options{Config: gateway.Config{ReadyDelay: time.Hour}})
	sc := slow.Client(t, openshell.Config{})
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := sc.Ensure(dctx, openshell.Spec{Name: "stuck"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "stuck") || !strings.Contains(err.Error(), "still provisioning") {
		t.Fatalf("Ensure past its deadline: %v, want DeadlineExceeded naming stuck and its phase", err)
	}
	// The second call finds the first one's sandbox rather than making another.
	if all, err := sc.List(ctx); err != nil || len(all) != 1 || all[0].Name != "stuck" {
		t.Fatalf("List = %+v, %v; want only stuck", all, err)
	}
}
