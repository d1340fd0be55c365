package openshell_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
)

const getSandbox = "/openshell.v1.OpenShell/GetSandbox"

// TestLookupShared: an exec's lookup and a log read or follow that ask
// for the same sandbox at once share one GetSandbox, and the log calls
// after an exec use its cached id: a run that follows its sandbox's log
// and runs its commands through one client resolves the sandbox once.
func TestLookupShared(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{Delay: map[string]time.Duration{getSandbox: 200 * time.Millisecond}})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	c = g.Client(t, openshell.Config{}) // one with nothing cached
	before := g.Calls(getSandbox)
	ctx := ctxFor(t)

	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- c.FollowLogs(fctx, "box", time.Time{}, func(openshell.LogLine) {}, nil) }()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				errs[i] = echo(t, c, "box", "x")
			} else {
				_, errs[i] = c.SandboxLogs(ctx, "box")
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	if _, err := c.SandboxLogs(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	stopFollow()
	if err := <-followed; err != nil {
		t.Fatalf("follow: %v", err)
	}
	if n := g.Calls(getSandbox) - before; n != 1 {
		t.Fatalf("%d GetSandbox calls for execs, log reads and a follow of one sandbox at once, want 1", n)
	}
}

// TestLogsStaleID: a sandbox recreated under its name since an exec
// cached its id still has its log read and followed: the cached id's
// NotFound is followed by one fresh lookup.
func TestLogsStaleID(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	g.Sandbox(t, c, "box")
	ctx := ctxFor(t)
	if err := echo(t, c, "box", "x"); err != nil {
		t.Fatal(err)
	}
	other := g.Client(t, openshell.Config{})
	if err := other.Delete(ctx, "box"); err != nil {
		t.Fatal(err)
	}
	g.Sandbox(t, other, "box")
	before := g.Calls(getSandbox)
	if _, err := c.SandboxLogs(ctx, "box"); err != nil {
		t.Fatalf("logs of the recreated sandbox through a stale id: %v", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := c.FollowLogs(fctx, "box", time.Time{}, func(openshell.LogLine) {}, nil); err != nil {
		t.Fatalf("follow of the recreated sandbox: %v", err)
	}
	if n := g.Calls(getSandbox) - before; n != 1 {
		t.Fatalf("%d GetSandbox calls after the stale id, want 1 (the id is cached again)", n)
	}
}
