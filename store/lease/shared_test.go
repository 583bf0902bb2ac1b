package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
)

// TestSharedKeyAllOrNothing: a lease Store that shares a bucket with
// another client of its remote (another replica, taking from the remote
// directly), at instants a few µs to a few hundred ms apart, so that the
// remote and the lease each hold a fraction of a token; the remote decides
// up to 5ms after the lease read its clock, and rounds its durations up to
// the millisecond, as a Redis server on a busy machine does. Each request is
// an all-or-nothing batch of a sliding window on a key of its own (which
// only the remote decides) and a Take of the bucket. Every batch must be
// admitted whole (every op allowed, each taking its cost, the window
// charged at the remote) or denied whole (an op denied, nothing taken,
// the window charged nothing); and together the two clients admit no more
// of the bucket than capacity + rate × t. This is the drain of
// internal/tests/lease's TestPolicyLeasesTheBucket, where a batch the
// remote denied for lack of a whole token (the lease held the rest of it)
// was reported with every op allowed and admitted by httplimit, charged
// nothing.
func TestSharedKeyAllOrNothing(t *testing.T) {
	const capacity = 40
	rate := spigot.PerHour(40_000) // a token every 90ms
	bucket := spigot.MustBucket("shared-bucket", capacity, rate)
	window := spigot.Must(spigot.NewSlidingWindow("shared-window", spigot.PerSecond(100)))
	ctx := context.Background()
	for seed := range uint64(32) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 39))
			clk := clocktest.New(t0)
			remote := &laggingRemote{clk: clocktest.New(t0), of: clk, rng: rng}
			remote.Store = memory.New(memory.WithClock(remote.clk))
			s := lease.New(remote, lease.WithClock(clk), lease.WithIdle(1000*time.Hour))
			t.Cleanup(func() { s.Close(ctx) })

			var admitted, batches, denials int64 // bucket tokens admitted by either client
			for step := range 3000 {
				clk.Advance(time.Duration(rng.IntN(4)) * time.Duration(rng.IntN(150_000)) * time.Microsecond)
				n := int64(1 + rng.IntN(3))
				if rng.IntN(4) == 0 { // the other replica
					d, err := remote.Do(ctx, spigot.Op{Limit: bucket, Key: "k", N: n})
					if err != nil {
						t.Fatal(err)
					}
					admitted += d.N
					continue
				}
				key := fmt.Sprintf("addr-%d", step)
				ops := []spigot.Op{{Limit: window, Key: key, N: 1}, {Limit: bucket, Key: "k", N: n}}
				out := make([]spigot.Decision, len(ops))
				if err := s.DoMulti(ctx, spigot.AllOrNothing, ops, out); err != nil {
					t.Fatal(err)
				}
				peek, err := remote.Do(ctx, spigot.Op{Limit: window, Key: key, Action: spigot.Peek, N: 1})
				if err != nil {
					t.Fatal(err)
				}
				charged := window.Capacity() - peek.Remaining
				whole := out[0].Allowed() && out[1].Allowed()
				switch {
				case whole && (out[0].N != 1 || out[1].N != n || charged != 1):
					t.Fatalf("step %d: %v admitted with N %d and %d, the window charged %d at the remote; want 1, %d and 1", step, ops, out[0].N, out[1].N, charged, n)
				case !whole && (out[0].N != 0 || out[1].N != 0 || charged != 0):
					t.Fatalf("step %d: %v denied (%v, %v) with N %d and %d, the window charged %d at the remote; want nothing taken", step, ops, out[0], out[1], out[0].N, out[1].N, charged)
				case !whole:
					denials++
				}
				batches++
				admitted += out[1].N
				elapsed := remote.clk.Now().Sub(t0) // on the remote's clock
				if most := capacity + int64(elapsed)*rate.Tokens/int64(rate.Period); admitted > most {
					t.Fatalf("step %d, after %v: %d tokens admitted; want at most capacity + rate × t = %d", step, elapsed, admitted, most)
				}
			}
			if denials == 0 || denials == batches {
				t.Fatalf("%d of %d batches denied: the run never crossed the bucket's limit both ways", denials, batches)
			}
			t.Logf("%d of %d batches denied", denials, batches)
		})
	}
}

// A laggingRemote is a memory store on a clock of its own, which each call
// sets up to 5ms after the lease Store's clock of (never back), and whose
// decisions' durations are rounded up to the millisecond: a Redis server,
// whose TIME is read after the client's, on a busy machine.
type laggingRemote struct {
	*memory.Store
	clk *clocktest.Clock // the remote's
	of  *clocktest.Clock // the lease Store's

	mu  sync.Mutex
	rng *rand.Rand
}

func (r *laggingRemote) tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at := r.of.Now().Add(time.Duration(r.rng.IntN(5000)) * time.Microsecond); at.After(r.clk.Now()) {
		r.clk.Set(at)
	}
}

func roundUp(d spigot.Decision) spigot.Decision {
	for _, p := range []*time.Duration{&d.RetryAfter, &d.ResetAfter, &d.RefillAfter, &d.Delay} {
		if *p > 0 && *p != spigot.Never {
			*p = (*p + time.Millisecond - 1).Truncate(time.Millisecond)
		}
	}
	return d
}

func (r *laggingRemote) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	r.tick()
	d, err := r.Store.Do(ctx, op)
	return roundUp(d), err
}

func (r *laggingRemote) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	r.tick()
	err := r.Store.DoMulti(ctx, mode, ops, out)
	for i := range out {
		out[i] = roundUp(out[i])
	}
	return err
}

// A gateMulti is a store whose first DoMulti once armed waits for
// release: it holds a batch's call in flight.
type gateMulti struct {
	spigot.Store
	armed            atomic.Bool
	entered, release chan struct{}
}

func (g *gateMulti) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.Store.DoMulti(ctx, mode, ops, out)
}

// TestBatchBesideAReservation: while one batch's call is in flight with
// every token the lease holds set aside for it, another replica empties
// the remote; a second batch that the key admits only with those tokens
// is denied (the remote denies its Take), and must say so: one op denied
// with a RetryAfter, nothing taken, its window op charged nothing. It
// was reported with every op allowed, N 0, which httplimit admitted.
func TestBatchBesideAReservation(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New(t0)
	remote := memory.New(memory.WithClock(clk))
	g := &gateMulti{Store: remote, entered: make(chan struct{}), release: make(chan struct{})}
	s := lease.New(g, lease.WithClock(clk), lease.WithIdle(1000*time.Hour))
	t.Cleanup(func() { s.Close(ctx) })
	bucket := spigot.MustBucket("reserved", 1000, spigot.PerHour(1))
	window := spigot.Must(spigot.NewSlidingWindow("reserved-window", spigot.PerSecond(100)))
	busy(t, s, clk, bucket, "k", 40) // the lease holds tokens, fewer than 1000/16
	if d := peek(t, s, bucket, "k"); d.Remaining < 100 {
		t.Fatalf("after 40 Takes the key holds %d; want at least 100", d.Remaining)
	}

	g.armed.Store(true)
	first := make(chan error, 1)
	go func() {
		ops := []spigot.Op{{Limit: window, Key: "a", N: 1}, {Limit: bucket, Key: "k", N: 100}}
		first <- s.DoMulti(ctx, spigot.AllOrNothing, ops, make([]spigot.Decision, 2))
	}()
	<-g.entered // every token held is set aside for the first batch's 100
	if _, err := remote.Do(ctx, spigot.Op{Limit: bucket, Key: "k", Action: spigot.TakeUpTo, N: 1000}); err != nil {
		t.Fatal(err) // the other replica
	}
	ops := []spigot.Op{{Limit: window, Key: "b", N: 1}, {Limit: bucket, Key: "k", N: 1}}
	out := make([]spigot.Decision, 2)
	if err := s.DoMulti(ctx, spigot.AllOrNothing, ops, out); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if out[0].N != 0 || out[1].N != 0 || out[0].Allowed() && out[1].Allowed() {
		t.Errorf("a batch the remote denied: %+v, %+v; want one op denied, nothing taken", out[0], out[1])
	}
	if !out[1].Allowed() && out[1].RetryAfter <= 0 {
		t.Errorf("the bucket's denial: RetryAfter %v; want a wait", out[1].RetryAfter)
	}
	if d := peek(t, remote, window, "b"); d.Remaining != window.Capacity() {
		t.Errorf("the denied batch's window at the remote: Remaining %d; want %d, nothing taken", d.Remaining, window.Capacity())
	}
}
