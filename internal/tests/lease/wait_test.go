package lease_test

// How long a request waits for leases asked by other requests on its key.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
)

// TestWaitsForOneLease: near its key's limit, a request that finds
// another asking the remote for a lease waits for that lease, and no
// other: once it has come, the request is decided from it, asks the
// remote itself, or goes to the remote as it is. Waiting again and again,
// while the key's other requests take each new lease first, would hold a
// request that a central bucket decides at once for as many round trips
// as there are requests on the key: on real servers at the limit, with
// 24 goroutines on one replica, over a second against 30ms without
// leases (TestFairness with 24 goroutines and capacity 320 logged it).
//
// On a fake clock, with the memory store as the remote behind a gate that
// holds each lease's TakeUpTo until the test lets it go: the remote is
// drained to 24 tokens, and 12 requests grow the key's lease to 4, which
// leaves the remote 12. The next request (the filler) asks for a lease of
// 3 (a quarter of 12) and is held, and 8 others find it asking and wait.
// The lease comes with 4 tokens: the filler's and 3 for the waiters; of
// the 5 waiters left, one asks for the next lease. The other 4 must not
// wait for it.
func TestWaitsForOneLease(t *testing.T) {
	const waiters = 8
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := spigot.MustBucket("wait", 1024, spigot.PerHour(1)) // no refill on a clock that stands still
	g := &gate{Store: memory.New(memory.WithClock(clk)), arrived: make(chan struct{}, 16), release: make(chan struct{})}
	s := lease.New(g, lease.WithClock(clk))
	t.Cleanup(func() { s.Close(context.Background()) })
	op := spigot.Op{Limit: b, Key: "k", N: 1}
	if d, err := g.Do(context.Background(), spigot.Op{Limit: b, Key: "k", N: 1000}); err != nil || !d.Allowed() {
		t.Fatalf("draining the remote: %+v, %v", d, err)
	}

	// Grow the lease to 4 and spend it: leases of 0, 1, 3 and 4 beyond
	// their requests' own token (a quarter of 17 caps the last), 12
	// requests.
	for i := range 12 {
		if d, err := s.Do(context.Background(), op); err != nil || !d.Allowed() {
			t.Fatalf("request %d: %+v, %v; want admitted", i, d, err)
		}
	}

	g.mu.Lock()
	g.on = true
	g.mu.Unlock()
	type result struct {
		d   spigot.Decision
		err error
	}
	results := make(chan result, waiters+1)
	do := func(ctx context.Context) {
		d, err := s.Do(ctx, op)
		results <- result{d, err}
	}
	go do(context.Background()) // the filler
	<-g.arrived
	ctxs := make([]*watchCtx, waiters)
	var wg sync.WaitGroup
	for i := range ctxs {
		ctxs[i] = newWatchCtx()
		wg.Go(func() { do(ctxs[i]) })
	}
	waitFor(t, "every waiter waiting for the filler's lease", func() bool {
		for _, c := range ctxs {
			if c.waits() < 1 {
				return false
			}
		}
		return true
	})

	// The lease comes: every waiter is decided, or asks the remote, or
	// waits again.
	g.release <- struct{}{}
	returned, filling := 0, 0
	waitFor(t, "every request decided, asking the remote, or waiting again", func() bool {
	drain:
		for {
			select {
			case r := <-results:
				if r.err != nil || !r.d.Allowed() {
					t.Errorf("%+v, %v; want admitted", r.d, r.err)
				}
				returned++
			case <-g.arrived:
				filling++
			default:
				break drain
			}
		}
		again := 0
		for _, c := range ctxs {
			if c.waits() > 1 {
				again++
			}
		}
		return returned+filling+again == waiters+1
	})
	again := 0
	for _, c := range ctxs {
		if c.waits() > 1 {
			again++
		}
	}
	if again > 0 {
		t.Errorf("%d of %d waiters wait again, for the next lease, once the one they waited for has come (%d requests decided, %d asking the remote for a lease); want each decided or asking the remote after one",
			again, waiters, returned, filling)
	}

	// Let every lease go, and every request end.
	g.mu.Lock()
	g.on = false
	g.mu.Unlock()
	close(g.release)
	wg.Wait()
}

// A gate is a remote that holds each TakeUpTo, while on, until release
// lets one go, and says on arrived that one came.
type gate struct {
	spigot.Store
	mu      sync.Mutex
	on      bool
	arrived chan struct{}
	release chan struct{}
}

func (g *gate) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	g.mu.Lock()
	on := g.on
	g.mu.Unlock()
	if on && op.Action == spigot.TakeUpTo {
		g.arrived <- struct{}{}
		<-g.release
	}
	return g.Store.Do(ctx, op)
}

// A watchCtx is a context that never ends and counts the calls of its
// Done method: the lease Store calls it each time a request starts to
// wait for a lease another request is asking for.
type watchCtx struct {
	context.Context
	mu sync.Mutex
	n  int
}

func newWatchCtx() *watchCtx { return &watchCtx{Context: context.Background()} }

func (c *watchCtx) Done() <-chan struct{} {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return nil
}

func (c *watchCtx) waits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
