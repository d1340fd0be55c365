package session

import (
	"context"
	"sync"
)

// Bounds of the backend requests one operation keeps in flight. A request
// to S3 costs about a millisecond on loopback and tens across a network,
// nearly all of it waiting, so one at a time leaves a save or a restore
// of thousands of chunks waiting seconds; several at once hide each
// other's round trips. A look-up is small; an upload holds a copy of its
// chunk (up to ~260 KiB with its compressed form), so fewer of those.
// Limitation: against a server short of CPU (versitygw on a 2-core
// loopback host saturates near 1,800 HEADs or 1,000 PUTs a second at 4
// or more in flight) no bound helps; only fewer requests do, which is
// what Config.Pack is for.
const (
	lookupParallel = 16 // Stats: CheckPresent, a save's Has
	uploadParallel = 8  // chunk Puts of one Save
)

// group runs functions on at most a fixed number of goroutines; the first
// error cancels the group's context, which the others receive. It is
// errgroup.WithContext with SetLimit, kept here because the module does
// not depend on golang.org/x/sync. The goroutine that makes a group owns
// it: it calls Go, and Wait before it returns, so that no function
// outlives it.
type group struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	sem    chan struct{}
	wg     sync.WaitGroup
}

// newGroup returns a group of at most n goroutines under ctx.
func newGroup(ctx context.Context, n int) *group {
	ctx, cancel := context.WithCancelCause(ctx)
	return &group{ctx: ctx, cancel: cancel, sem: make(chan struct{}, n)}
}

// Go runs fn on a goroutine of the group once one is free, waiting no
// longer than ctx allows. It runs nothing and returns the group's error
// once the group has one (see Err), or ctx's.
func (g *group) Go(ctx context.Context, fn func(ctx context.Context) error) error {
	select {
	case g.sem <- struct{}{}:
	case <-g.ctx.Done():
		return g.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
	// select chooses at random among ready cases: a free slot does not
	// mean the group is still good.
	if err := g.Err(); err != nil {
		<-g.sem
		return err
	}
	g.wg.Go(func() {
		defer func() { <-g.sem }()
		if err := fn(g.ctx); err != nil {
			g.fail(err)
		}
	})
	return nil
}

// fail makes err the group's error, unless it has one, and cancels the
// group's context.
func (g *group) fail(err error) { g.cancel(err) }

// Err returns the group's first error, or its parent context's once that
// is done; nil while neither has happened. It does not wait.
func (g *group) Err() error { return context.Cause(g.ctx) }

// Wait waits for every function Go started and returns Err. The group is
// done then: its context is cancelled.
func (g *group) Wait() error {
	g.wg.Wait()
	err := g.Err()
	g.cancel(nil)
	return err
}
