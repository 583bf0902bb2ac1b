package lease_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// setup returns a remote memory store that counts its calls, and a lease
// Store on it, both on clk.
func setup(t *testing.T, clk *clocktest.Clock, opts ...lease.Option) (*countstore.Store, *lease.Store) {
	t.Helper()
	remote := countstore.New(memory.New(memory.WithClock(clk)))
	s := lease.New(remote, append([]lease.Option{lease.WithClock(clk), lease.WithIdle(time.Hour)}, opts...)...)
	t.Cleanup(func() { s.Close(context.Background()) })
	return remote, s
}

func take(t *testing.T, s spigot.Store, l spigot.Limit, key string, n int64) spigot.Decision {
	t.Helper()
	d, err := s.Do(context.Background(), spigot.Op{Limit: l, Key: key, Action: spigot.Take, N: n})
	if err != nil {
		t.Fatalf("Take(%q, %d): %v", key, n, err)
	}
	return d
}

// busy sends n Takes of one token on key, 1µs apart, so that the Store
// takes a lease on it.
func busy(t *testing.T, s spigot.Store, clk *clocktest.Clock, l spigot.Limit, key string, n int) {
	t.Helper()
	for range n {
		take(t, s, l, key, 1)
		clk.Advance(time.Microsecond)
	}
}

func peek(t *testing.T, s spigot.Store, l spigot.Limit, key string) spigot.Decision {
	t.Helper()
	d, err := s.Do(context.Background(), spigot.Op{Limit: l, Key: key, Action: spigot.Peek})
	if err != nil {
		t.Fatalf("Peek(%q): %v", key, err)
	}
	return d
}

// TestBusyKeyFromLeases: a key taken from one token at a time, 10µs apart,
// is decided mostly from leases: at least 10× fewer remote calls than
// requests, and the bucket's capacity is admitted exactly, no more.
func TestBusyKeyFromLeases(t *testing.T) {
	clk := clocktest.New(t0)
	remote, s := setup(t, clk)
	b := spigot.MustBucket("busy", 10_000, spigot.Per(1, time.Hour))
	admitted := 0
	for range 10_001 {
		if take(t, s, b, "k", 1).Allowed() {
			admitted++
		}
		clk.Advance(10 * time.Microsecond)
	}
	if admitted != 10_000 {
		t.Errorf("admitted %d of 10 001; want exactly the capacity, 10 000", admitted)
	}
	if calls := remote.Calls(); calls*10 > 10_001 {
		t.Errorf("%d remote calls for 10 001 requests; want at most a tenth", calls)
	}
	d := take(t, s, b, "k", 1)
	if d.Allowed() || d.RetryAfter <= 0 || d.RetryAfter > time.Hour {
		t.Errorf("Take past the capacity = %+v; want denied, with the remote's RetryAfter (under an hour)", d)
	}
}

// TestFirstRequestTakesNoLease: a key seen once costs one remote call and
// takes nothing beyond its cost.
func TestFirstRequestTakesNoLease(t *testing.T) {
	clk := clocktest.New(t0)
	remote, s := setup(t, clk)
	b := spigot.MustBucket("once", 100, spigot.Per(1, time.Hour))
	d := take(t, s, b, "k", 3)
	if !d.Allowed() || d.N != 3 || d.Remaining != 97 {
		t.Errorf("first Take(3) = %+v; want allowed, N 3, Remaining 97", d)
	}
	if got := peek(t, remote, b, "k").Remaining; got != 97 {
		t.Errorf("the remote holds %d; want 97: no lease beyond the cost", got)
	}
}

// TestNeverAboveTheLimit: three lease Stores share one remote, with 8
// goroutines each taking random costs while the clock moves; together they
// admit no more than capacity + rate × elapsed, and after Close every
// unspent token is back: the remote holds what was not admitted.
func TestNeverAboveTheLimit(t *testing.T) {
	clk := clocktest.New(t0)
	remote := memory.New(memory.WithClock(clk))
	const capacity, perSecond = 500, 1000
	b := spigot.MustBucket("shared", capacity, spigot.Per(perSecond, time.Second))
	stores := make([]*lease.Store, 3)
	for i := range stores {
		stores[i] = lease.New(remote, lease.WithClock(clk), lease.WithIdle(time.Hour))
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 24 {
		s := stores[g%len(stores)]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := 1 + rng.Int64N(3)
				d, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: "hot", N: n})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed() {
					if d.N != n {
						t.Errorf("admitted %+v for a Take of %d", d, n)
					}
					admitted.Add(d.N)
				}
			}
		})
	}
	const steps, step = 2000, 100 * time.Microsecond
	for range steps {
		clk.Advance(step)
	}
	close(stop)
	wg.Wait()
	elapsed := steps * step
	limit := capacity + int64(perSecond*elapsed/time.Second)
	if got := admitted.Load(); got > limit {
		t.Errorf("the three Stores admitted %d tokens in %v; want at most capacity + rate × elapsed = %d", got, elapsed, limit)
	} else {
		t.Logf("admitted %d of at most %d", got, limit)
	}
	for _, s := range stores {
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Every token still out in a lease is back: with the remote never
	// full (demand exceeds the rate), what it holds is exactly what the
	// Stores did not admit.
	if rem := peek(t, remote, b, "hot").Remaining; rem+admitted.Load() > limit {
		t.Errorf("after Close the remote holds %d and %d were admitted: %d, more than %d", rem, admitted.Load(), rem+admitted.Load(), limit)
	}
}

// TestIdleLeaseGoesBack: a lease unused for WithIdle goes back to the
// remote at the next Sweep, and the key is forgotten.
func TestIdleLeaseGoesBack(t *testing.T) {
	clk := clocktest.New(t0)
	remote, s := setup(t, clk, lease.WithIdle(time.Second))
	b := spigot.MustBucket("idle", 1000, spigot.Per(1, time.Hour))
	busy(t, s, clk, b, "k", 50)
	held := peek(t, s, b, "k").Remaining - peek(t, remote, b, "k").Remaining
	if held <= 0 {
		t.Fatalf("the Store holds a lease of %d after 50 busy requests; want some", held)
	}
	clk.Advance(999 * time.Millisecond)
	if err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := peek(t, remote, b, "k").Remaining; got != 950-held {
		t.Errorf("before WithIdle, the remote holds %d; want %d (the lease kept)", got, 950-held)
	}
	clk.Advance(time.Millisecond)
	if err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := peek(t, remote, b, "k").Remaining; got != 950 {
		t.Errorf("after WithIdle and a Sweep, the remote holds %d; want 950 (the lease back)", got)
	}
	if got := peek(t, s, b, "k").Remaining; got != 950 {
		t.Errorf("the Store's Peek says %d; want 950", got)
	}
}

// TestCloseGivesBack: Close refunds every lease, and the Store then goes
// to the remote for everything.
func TestCloseGivesBack(t *testing.T) {
	clk := clocktest.New(t0)
	remote, s := setup(t, clk)
	b := spigot.MustBucket("close", 1000, spigot.Per(1, time.Hour))
	for _, key := range []string{"a", "b"} {
		busy(t, s, clk, b, key, 30)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "b"} {
		if got := peek(t, remote, b, key).Remaining; got != 970 {
			t.Errorf("key %s: after Close the remote holds %d; want 970", key, got)
		}
	}
	before := remote.Calls()
	take(t, s, b, "a", 1)
	take(t, s, b, "a", 1)
	if got := remote.Calls() - before; got != 2 {
		t.Errorf("after Close, 2 Takes made %d remote calls; want 2", got)
	}
}

// TestResetDropsLease: a Reset drops the key's lease without giving it back
// (the limit is full again), so the Store admits no more than the capacity
// after it.
func TestResetDropsLease(t *testing.T) {
	clk := clocktest.New(t0)
	_, s := setup(t, clk)
	b := spigot.MustBucket("reset", 100, spigot.Per(1, time.Hour))
	busy(t, s, clk, b, "k", 40)
	if _, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: "k", Action: spigot.Reset}); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 150 {
		if take(t, s, b, "k", 1).Allowed() {
			admitted++
		}
		clk.Advance(time.Microsecond)
	}
	if admitted != 100 {
		t.Errorf("after Reset, %d admitted; want the capacity, 100", admitted)
	}
}

// TestDenialRetryAfter: a Take that the lease holds part of is denied with
// the RetryAfter of what it lacks, as the remote tells it.
func TestDenialRetryAfter(t *testing.T) {
	clk := clocktest.New(t0)
	_, s := setup(t, clk)
	b := spigot.MustBucket("retry", 10, spigot.Per(1, time.Second))
	if d := take(t, s, b, "k", 8); !d.Allowed() {
		t.Fatalf("Take(8) of 10 = %+v; want allowed", d)
	}
	d := take(t, s, b, "k", 5) // 2 there, 3 lacking
	if d.Allowed() || d.RetryAfter != 3*time.Second {
		t.Errorf("Take(5) with 2 left = %+v; want denied, RetryAfter 3s", d)
	}
	clk.Advance(3 * time.Second)
	if d := take(t, s, b, "k", 5); !d.Allowed() {
		t.Errorf("Take(5) after the RetryAfter = %+v; want allowed", d)
	}
}

// TestOtherKindsPassThrough: the ops of a leaky bucket, a sliding window
// and a sliding log go to the remote as they are, one call each.
func TestOtherKindsPassThrough(t *testing.T) {
	for _, l := range []spigot.Limit{
		spigot.Must(spigot.NewLeakyBucket("leaky", 5, spigot.Per(5, time.Minute))),
		spigot.Must(spigot.NewSlidingWindow("sliding", spigot.Per(5, time.Minute))),
		spigot.Must(spigot.NewSlidingLog("log", spigot.Per(5, time.Minute))),
	} {
		clk := clocktest.New(t0)
		remote, s := setup(t, clk)
		for i := range 7 {
			d := take(t, s, l, "k", 1)
			if d.Allowed() != (i < 5) {
				t.Errorf("%v: Take %d = %+v; want allowed %v", l, i+1, d, i < 5)
			}
			clk.Advance(time.Microsecond)
		}
		if got := remote.Calls(); got != 7 {
			t.Errorf("%v: 7 Takes made %d remote calls; want 7", l, got)
		}
	}
}

// TestAllOrNothing: a batch the leases hold is applied from them with no
// remote call; one they do not hold goes to the remote, all or nothing.
func TestAllOrNothing(t *testing.T) {
	clk := clocktest.New(t0)
	remote, s := setup(t, clk)
	a := spigot.MustBucket("a", 1000, spigot.Per(1, time.Hour))
	b := spigot.MustBucket("b", 2, spigot.Per(1, time.Hour))
	busy(t, s, clk, a, "k", 40)
	ops := []spigot.Op{{Limit: a, Key: "k", N: 1}, {Limit: a, Key: "k", N: 1}}
	out := make([]spigot.Decision, 2)
	before := remote.Calls()
	if err := s.DoMulti(context.Background(), spigot.AllOrNothing, ops, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed() || !out[1].Allowed() || remote.Calls() != before {
		t.Errorf("a batch the lease holds = %+v with %d remote calls; want both allowed, no call", out, remote.Calls()-before)
	}
	// b holds 2: a batch of 1 of a and 3 of b is denied whole.
	ops = []spigot.Op{{Limit: a, Key: "k", N: 1}, {Limit: b, Key: "k", N: 3}}
	rem := peek(t, s, a, "k").Remaining
	if err := s.DoMulti(context.Background(), spigot.AllOrNothing, ops, out); err != nil {
		t.Fatal(err)
	}
	if out[0].N != 0 || out[1].Allowed() {
		t.Errorf("a batch b cannot hold = %+v; want nothing taken", out)
	}
	if got := peek(t, s, a, "k").Remaining; got != rem {
		t.Errorf("a's Remaining went from %d to %d after a denied batch; want unchanged", rem, got)
	}
}

// TestInvalidOp: an invalid op is the model's error, and changes nothing.
func TestInvalidOp(t *testing.T) {
	clk := clocktest.New(t0)
	remote, s := setup(t, clk)
	b := spigot.MustBucket("bad", 10, spigot.Per(1, time.Hour))
	if _, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: "k", N: -1}); err == nil {
		t.Error("Take(-1) gave no error")
	}
	if remote.Calls() != 0 {
		t.Errorf("an invalid op made %d remote calls; want 0", remote.Calls())
	}
}

// TestTakeUpToTakesAll: a TakeUpTo larger than the lease takes the lease
// and all the remote holds, as the limit would without leases.
func TestTakeUpToTakesAll(t *testing.T) {
	clk := clocktest.New(t0)
	remote, s := setup(t, clk)
	b := spigot.MustBucket("upto", 1000, spigot.Per(1, time.Hour))
	busy(t, s, clk, b, "k", 40)
	if held := peek(t, s, b, "k").Remaining - peek(t, remote, b, "k").Remaining; held <= 0 {
		t.Fatalf("no lease after 40 busy requests (held %d)", held)
	}
	d, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: "k", Action: spigot.TakeUpTo, N: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if d.N != 960 || d.Remaining != 0 {
		t.Errorf("TakeUpTo(5000) with 960 left = %+v; want N 960, Remaining 0", d)
	}
	if d := take(t, s, b, "k", 1); d.Allowed() {
		t.Errorf("Take after taking everything = %+v; want denied", d)
	}
}

// TestOldLeaseGoesBack: a lease taken more than twice WithIdle ago goes
// back at the next Sweep even on a key still in use, which keeps its
// place.
func TestOldLeaseGoesBack(t *testing.T) {
	clk := clocktest.New(t0)
	remote, s := setup(t, clk, lease.WithIdle(time.Second))
	b := spigot.MustBucket("old", 1000, spigot.Per(1, time.Hour))
	busy(t, s, clk, b, "k", 50)
	held := func() int64 { return peek(t, s, b, "k").Remaining - peek(t, remote, b, "k").Remaining }
	if held() < 4 {
		t.Fatalf("held %d after 50 busy requests; want a lease of at least 4", held())
	}
	for range 3 { // a request every 600ms, from the lease: the key is not idle
		clk.Advance(600 * time.Millisecond)
		take(t, s, b, "k", 1)
	}
	if err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := held(); h == 0 {
		t.Fatalf("the lease went back 1.8s after it was taken; want it kept until 2s")
	}
	clk.Advance(300 * time.Millisecond)
	if err := s.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := held(); h != 0 {
		t.Errorf("2.1s after the lease was taken, the Store still holds %d; want 0 (given back)", h)
	}
	if got := peek(t, remote, b, "k").Remaining; got != 1000-53 {
		t.Errorf("the remote holds %d; want %d: all but the 53 admitted", got, 1000-53)
	}
}

// TestPeekCountsTheLease: a Peek the lease holds is allowed, one beyond
// the lease and the remote is denied, and neither takes anything.
func TestPeekCountsTheLease(t *testing.T) {
	clk := clocktest.New(t0)
	remote, s := setup(t, clk)
	b := spigot.MustBucket("peek", 100, spigot.Per(1, time.Hour))
	busy(t, s, clk, b, "k", 20)
	remoteLeft := peek(t, remote, b, "k").Remaining
	held := peek(t, s, b, "k").Remaining - remoteLeft
	if held <= 0 {
		t.Fatalf("no lease after 20 busy requests")
	}
	for _, c := range []struct {
		n    int64
		want bool
	}{{held, true}, {held + remoteLeft, true}, {held + remoteLeft + 1, false}} {
		d, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: "k", Action: spigot.Peek, N: c.n})
		if err != nil || d.Allowed() != c.want || d.Remaining != 80 {
			t.Errorf("Peek(%d) with %d leased and %d remote = %+v, %v; want allowed %v, Remaining 80", c.n, held, remoteLeft, d, err, c.want)
		}
	}
	if got := peek(t, remote, b, "k").Remaining; got != remoteLeft {
		t.Errorf("the Peeks moved the remote from %d to %d", remoteLeft, got)
	}
}

// TestObserver: every request on a busy key is a lease hit or asks the
// remote, and what the takes brought is what was admitted plus what went
// back at Close.
func TestObserver(t *testing.T) {
	clk := clocktest.New(t0)
	var hits, takes, taken, returned atomic.Int64
	remote := memory.New(memory.WithClock(clk))
	s := lease.New(remote, lease.WithClock(clk), lease.WithIdle(time.Hour), lease.WithObserver(lease.Observer{
		Hit: func(_ context.Context, op spigot.Op) { hits.Add(op.N) },
		Take: func(_ context.Context, _ spigot.Op, asked, got int64, err error) {
			if err != nil || got > asked {
				t.Errorf("Take: got %d of %d, %v", got, asked, err)
			}
			takes.Add(1)
			taken.Add(got)
		},
		Return: func(_ context.Context, _ spigot.Limit, tokens int64, err error) {
			if err != nil {
				t.Error(err)
			}
			returned.Add(tokens)
		},
	}))
	l := spigot.MustBucket("observed", 10_000, spigot.PerSecond(1))
	busy(t, s, clk, l, "k", 1000)
	if hits.Load()+takes.Load() != 1000 || hits.Load() < 900 {
		t.Errorf("%d hits and %d takes for 1000 requests; want them to add up, and 90%% hits at least", hits.Load(), takes.Load())
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := taken.Load() - returned.Load(); got != 1000 {
		t.Errorf("taken %d, returned %d: %d kept; want the 1000 admitted", taken.Load(), returned.Load(), got)
	}
	if d := peek(t, remote, l, "k"); d.Remaining != 10_000-1000 {
		t.Errorf("the remote holds %d after Close; want %d", d.Remaining, 10_000-1000)
	}
}

// gate is a store whose first TakeUpTo once armed waits for release: it
// holds a lease's fill in flight.
type gate struct {
	spigot.Store
	armed            atomic.Bool
	entered, release chan struct{}
}

func (g *gate) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if op.Action == spigot.TakeUpTo && g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.Store.Do(ctx, op)
}

// TestCloseDuringFill: a lease whose fill is in flight when Close runs
// gives back what the fill brought when it returns, and its key is
// forgotten: requests after Close go to the remote as they are, one call
// each.
func TestCloseDuringFill(t *testing.T) {
	clk := clocktest.New(t0)
	remote := memory.New(memory.WithClock(clk))
	counted := countstore.New(remote)
	g := &gate{Store: counted, entered: make(chan struct{}), release: make(chan struct{})}
	s := lease.New(g, lease.WithClock(clk), lease.WithIdle(time.Hour))
	l := spigot.MustBucket("closing", 1000, spigot.PerSecond(1))
	busy(t, s, clk, l, "k", 20) // leases grow
	g.armed.Store(true)
	admitted := int64(20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-g.entered:
				// This Take is the one that entered the gate: it returns
				// once released, after Close.
				return
			default:
			}
			d, err := s.Do(context.Background(), spigot.Op{Limit: l, Key: "k", N: 1})
			if err != nil || !d.Allowed() {
				t.Errorf("Take: %+v, %v", d, err)
				return
			}
			admitted++
		}
	}()
	<-g.entered
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	<-done
	if d := peek(t, remote, l, "k"); d.Remaining != 1000-admitted {
		t.Errorf("the remote holds %d after Close and the fill; want %d, all but the %d admitted", d.Remaining, 1000-admitted, admitted)
	}
	before := counted.Calls()
	for range 3 {
		take(t, s, l, "k", 1)
	}
	if n := counted.Calls() - before; n != 3 {
		t.Errorf("3 Takes after Close made %d remote calls; want 3", n)
	}
}

// refundsFail is a store whose Refunds fail, alone or in a batch.
type refundsFail struct{ spigot.Store }

var errRefund = errors.New("test: refund refused")

func (r refundsFail) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if op.Action == spigot.Refund {
		return spigot.Undecided(), errRefund
	}
	return r.Store.Do(ctx, op)
}

// TestOvertakenLeaseDrops: a lease the remote's refill overtook keeps
// only what the remote lacks, with no Refund (the remote has the rest
// again: a Refund would fill it past what a central bucket holds), and the
// observer sees the rest go back; the next Take is decided as a central
// bucket would.
func TestOvertakenLeaseDrops(t *testing.T) {
	clk := clocktest.New(t0)
	var returned, returnErrs atomic.Int64
	s := lease.New(refundsFail{memory.New(memory.WithClock(clk))}, lease.WithClock(clk), lease.WithIdle(time.Hour), lease.WithObserver(lease.Observer{
		Return: func(_ context.Context, _ spigot.Limit, n int64, err error) {
			returned.Add(n)
			if err != nil {
				returnErrs.Add(1)
			}
		},
	}))
	t.Cleanup(func() { s.Close(context.Background()) })
	l := spigot.MustBucket("overtaken", 1000, spigot.Per(1, time.Millisecond))
	busy(t, s, clk, l, "k", 100)
	clk.Advance(2 * time.Second) // the remote is full again: the lease is overtaken
	if d := take(t, s, l, "k", 1); !d.Allowed() || d.Remaining != 999 {
		t.Errorf("Take after the lease was overtaken: %+v; want admitted, 999 left", d)
	}
	if returned.Load() == 0 || returnErrs.Load() != 0 {
		t.Errorf("%d tokens went back, with %d errors (a Refund was sent); want some, with none", returned.Load(), returnErrs.Load())
	}
}
