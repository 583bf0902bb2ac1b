package spigot_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/store/memory"
)

// noJitter makes WaitN's later tries sleep exactly RetryAfter.
func noJitter(time.Duration) time.Duration { return 0 }

// newQueueLimiter returns a limiter of a token bucket on a counting memory
// store, both on a fake clock that reads start, and without jitter.
func newQueueLimiter(t *testing.T, start time.Time, capacity int64, r spigot.Rate) (*spigot.Limiter, *clocktest.Clock, *countstore.Store) {
	t.Helper()
	clk := clocktest.New(start)
	store := countstore.New(memory.New(memory.WithClock(clk)))
	l := spigot.New(store, spigot.MustBucket("test", capacity, r), spigot.WithClock(clk), spigot.WithJitter(noJitter))
	return l, clk, store
}

// await returns once cond holds. It waits on state, not on time: a test
// that never gets there is stopped by go test's timeout.
func await(cond func() bool) {
	for !cond() {
		runtime.Gosched()
	}
}

// waitResult is what WaitN returned.
type waitResult struct {
	d   spigot.Decision
	err error
}

// startWait calls WaitN in a goroutine, and returns the channel that
// receives its result.
func startWait(ctx context.Context, l *spigot.Limiter, key string, n int64) <-chan waitResult {
	c := make(chan waitResult, 1)
	go func() {
		d, err := l.WaitN(ctx, key, n)
		c <- waitResult{d, err}
	}()
	return c
}

// notYet fails the test if any of cs has returned.
func notYet(t *testing.T, step int, cs map[string]<-chan waitResult) {
	t.Helper()
	for name, c := range cs {
		select {
		case r := <-c:
			t.Fatalf("step %d: %s returned %+v, %v; want it still waiting", step, name, r.d, r.err)
		default:
		}
	}
}

// TestWaitFIFO: the callers of WaitN on one key are admitted in the order
// they came, so a large cost is admitted before the smaller ones that came
// after it, and only the first asks the store while the others wait.
func TestWaitFIFO(t *testing.T) {
	l, clk, store := newQueueLimiter(t, t0, 4, spigot.PerSecond(1))
	ctx := context.Background()
	l.AllowN(ctx, "k", 4)
	big := startWait(ctx, l, "k", 4)
	clk.BlockUntil(1) // big sleeps until t0+4s
	small := make([]<-chan waitResult, 3)
	for i := range small {
		small[i] = startWait(ctx, l, "k", 1)
		await(func() bool { return spigot.WaitingBehind(l, "k") == i+1 })
	}
	if got, want := store.Calls(), int64(2); got != want {
		t.Errorf("store calls with 4 waiters = %d, want %d (the drain, and big's try)", got, want)
	}
	clk.Advance(3 * s) // the smaller costs could each have been admitted by now
	notYet(t, 0, map[string]<-chan waitResult{"big": big, "small 0": small[0], "small 1": small[1], "small 2": small[2]})
	clk.Advance(1 * s)
	if r := <-big; r.err != nil || r.d.N != 4 {
		t.Fatalf("step 0 (t0+4s): big = %+v, %v; want 4 tokens taken", r.d, r.err)
	}
	for i, c := range small {
		// The next one asks, is denied, and sleeps 1 s; the others wait.
		await(func() bool { return clk.Waiters() == 1 && spigot.WaitingBehind(l, "k") == len(small)-1-i })
		later := map[string]<-chan waitResult{}
		for j := i; j < len(small); j++ {
			later[fmt.Sprint("small ", j)] = small[j]
		}
		notYet(t, i+1, later)
		clk.Advance(999 * ms)
		notYet(t, i+1, later)
		clk.Advance(1 * ms)
		if r := <-c; r.err != nil || r.d.N != 1 {
			t.Fatalf("step %d (t0+%ds): small %d = %+v, %v; want 1 token taken", i+1, 5+i, i, r.d, r.err)
		}
	}
	// The drain, then two tries each: denied, then admitted.
	if got, want := store.Calls(), int64(1+2*4); got != want {
		t.Errorf("store calls = %d, want %d", got, want)
	}
	if n := spigot.WaitingKeys(l); n != 0 {
		t.Errorf("%d keys still have a queue, want 0", n)
	}
}

// TestWaitCancelledLeaves: a waiter whose context ends leaves the queue at
// once, without a store call, whether it waits behind others or asks the
// store for them; the next one goes on.
func TestWaitCancelledLeaves(t *testing.T) {
	t.Run("behind", func(t *testing.T) {
		l, clk, store := newQueueLimiter(t, t0, 1, spigot.PerSecond(1))
		l.Allow(context.Background(), "k")
		a := startWait(context.Background(), l, "k", 1)
		clk.BlockUntil(1)
		bctx, cancel := context.WithCancel(context.Background())
		b := startWait(bctx, l, "k", 1)
		await(func() bool { return spigot.WaitingBehind(l, "k") == 1 })
		c := startWait(context.Background(), l, "k", 1)
		await(func() bool { return spigot.WaitingBehind(l, "k") == 2 })
		cancel()
		if r := <-b; !errors.Is(r.err, context.Canceled) || r.d.Allowed() {
			t.Fatalf("step 0: b = %+v, %v; want denied, context.Canceled", r.d, r.err)
		}
		if n := spigot.WaitingBehind(l, "k"); n != 1 {
			t.Errorf("step 0: %d waiting behind the head, want 1", n)
		}
		clk.Advance(1 * s)
		if r := <-a; r.err != nil || !r.d.Allowed() {
			t.Fatalf("step 1: a = %+v, %v; want allowed", r.d, r.err)
		}
		clk.BlockUntil(1) // c asks, and sleeps 1 s
		clk.Advance(1 * s)
		if r := <-c; r.err != nil || !r.d.Allowed() {
			t.Fatalf("step 2: c = %+v, %v; want allowed", r.d, r.err)
		}
		if got, want := store.Calls(), int64(1+2+2); got != want {
			t.Errorf("store calls = %d, want %d (none by b)", got, want)
		}
	})
	t.Run("head", func(t *testing.T) {
		l, clk, store := newQueueLimiter(t, t0, 1, spigot.PerSecond(1))
		l.Allow(context.Background(), "k")
		actx, cancel := context.WithCancel(context.Background())
		a := startWait(actx, l, "k", 1)
		clk.BlockUntil(1)
		b := startWait(context.Background(), l, "k", 1)
		await(func() bool { return spigot.WaitingBehind(l, "k") == 1 })
		cancel()
		if r := <-a; !errors.Is(r.err, context.Canceled) || r.d.Allowed() {
			t.Fatalf("step 0: a = %+v, %v; want denied, context.Canceled", r.d, r.err)
		}
		// b asks at once, and sleeps beside a's abandoned timer.
		clk.BlockUntil(2)
		if got, want := store.Calls(), int64(3); got != want {
			t.Errorf("step 0: store calls = %d, want %d", got, want)
		}
		clk.Advance(1 * s)
		if r := <-b; r.err != nil || !r.d.Allowed() {
			t.Fatalf("step 1: b = %+v, %v; want allowed", r.d, r.err)
		}
		if n := spigot.WaitingKeys(l); n != 0 {
			t.Errorf("%d keys still have a queue, want 0", n)
		}
	})
}

// TestWaitDeadlineBehindOthers: a waiter whose deadline falls before the
// waiter ahead of it asks the store again fails at once, without a store
// call, and with how long at least it would have waited.
func TestWaitDeadlineBehindOthers(t *testing.T) {
	t.Run("on arrival", func(t *testing.T) {
		l, clk, store := newQueueLimiter(t, tFuture, 4, spigot.PerSecond(1))
		l.AllowN(context.Background(), "k", 4)
		big := startWait(context.Background(), l, "k", 4)
		clk.BlockUntil(1) // until tFuture+4s
		before := store.Calls()
		ctx, cancel := context.WithDeadline(context.Background(), tFuture.Add(2*s))
		defer cancel()
		clk.Advance(500 * ms)
		d, err := l.WaitN(ctx, "k", 1)
		if !errors.Is(err, context.DeadlineExceeded) || d.Allowed() || d.RetryAfter != 3500*ms {
			t.Errorf("WaitN = %+v, %v; want denied with RetryAfter 3.5s, context.DeadlineExceeded", d, err)
		}
		if got := store.Calls(); got != before {
			t.Errorf("store calls: %d, want %d (none)", got, before)
		}
		if n := spigot.WaitingBehind(l, "k"); n != 0 {
			t.Errorf("%d waiting behind the head, want 0", n)
		}
		clk.Advance(3500 * ms)
		if r := <-big; r.err != nil || !r.d.Allowed() {
			t.Errorf("big = %+v, %v; want allowed", r.d, r.err)
		}
	})
	t.Run("while waiting", func(t *testing.T) {
		l, clk, store := newQueueLimiter(t, tFuture, 1, spigot.PerSecond(1))
		l.Allow(context.Background(), "k")
		a := startWait(context.Background(), l, "k", 1)
		clk.BlockUntil(1) // until tFuture+1s
		b := startWait(context.Background(), l, "k", 1)
		await(func() bool { return spigot.WaitingBehind(l, "k") == 1 })
		// c could be admitted at tFuture+1.5s if b were not ahead of it.
		ctx, cancel := context.WithDeadline(context.Background(), tFuture.Add(1500*ms))
		defer cancel()
		c := startWait(ctx, l, "k", 1)
		await(func() bool { return spigot.WaitingBehind(l, "k") == 2 })
		clk.Advance(1 * s)
		if r := <-a; r.err != nil || !r.d.Allowed() {
			t.Fatalf("step 0: a = %+v, %v; want allowed", r.d, r.err)
		}
		// b asks, sleeps until tFuture+2s, and so turns c away.
		r := <-c
		if !errors.Is(r.err, context.DeadlineExceeded) || r.d.Allowed() || r.d.RetryAfter != 1*s {
			t.Errorf("step 1: c = %+v, %v; want denied with RetryAfter 1s, context.DeadlineExceeded", r.d, r.err)
		}
		clk.BlockUntil(1)
		clk.Advance(1 * s)
		if r := <-b; r.err != nil || !r.d.Allowed() {
			t.Fatalf("step 2: b = %+v, %v; want allowed", r.d, r.err)
		}
		if got, want := store.Calls(), int64(1+2+2); got != want {
			t.Errorf("store calls = %d, want %d (none by c)", got, want)
		}
	})
}

// pollWaitN is WaitN as it was before it queued: each waiter sleeps the
// RetryAfter of its denial and asks again. The baseline of
// TestWaitStoreCalls.
func pollWaitN(ctx context.Context, l *spigot.Limiter, clk *clocktest.Clock, key string, n int64) (spigot.Decision, error) {
	for {
		d, err := l.AllowN(ctx, key, n)
		if err != nil || d.Allowed() {
			return d, err
		}
		select {
		case <-clk.After(d.RetryAfter):
		case <-ctx.Done():
			return d, ctx.Err()
		}
	}
}

// TestWaitStoreCalls counts the store's calls per admitted request with 64
// callers waiting on one key of a bucket that admits one a second, each
// polling the store (the baseline) or through WaitN's queue.
func TestWaitStoreCalls(t *testing.T) {
	const waiters = 64
	perAdmitted := map[string]float64{}
	for _, c := range []struct {
		name string
		wait func(l *spigot.Limiter, clk *clocktest.Clock) (spigot.Decision, error)
		// idle reports whether every waiter still waiting sleeps or waits its turn.
		idle func(l *spigot.Limiter, clk *clocktest.Clock, waiting int) bool
	}{
		{"polling",
			func(l *spigot.Limiter, clk *clocktest.Clock) (spigot.Decision, error) {
				return pollWaitN(context.Background(), l, clk, "k", 1)
			},
			func(l *spigot.Limiter, clk *clocktest.Clock, waiting int) bool { return clk.Waiters() == waiting }},
		{"WaitN",
			func(l *spigot.Limiter, clk *clocktest.Clock) (spigot.Decision, error) {
				return l.WaitN(context.Background(), "k", 1)
			},
			func(l *spigot.Limiter, clk *clocktest.Clock, waiting int) bool {
				return clk.Waiters()+spigot.WaitingBehind(l, "k") == waiting
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			store := countstore.New(memory.New(memory.WithClock(clk)))
			// With the default jitter: every sleep is at most 1.01 s.
			l := spigot.New(store, spigot.MustBucket("test", 1, spigot.PerSecond(1)), spigot.WithClock(clk))
			l.Allow(context.Background(), "k")
			start := store.Calls()
			var done atomic.Int64
			errc := make(chan error, waiters)
			for range waiters {
				go func() {
					d, err := c.wait(l, clk)
					if err == nil && !d.Allowed() {
						err = fmt.Errorf("got %+v, want allowed", d)
					}
					done.Add(1)
					errc <- err
				}()
			}
			for step := 0; done.Load() < waiters; step++ {
				await(func() bool { return c.idle(l, clk, waiters-int(done.Load())) })
				if step > 2*waiters {
					t.Fatalf("step %d: %d of %d admitted", step, done.Load(), waiters)
				}
				clk.Advance(1010 * ms)
			}
			for range waiters {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			calls := store.Calls() - start
			perAdmitted[c.name] = float64(calls) / waiters
			t.Logf("%d waiters on one key: %d store calls, %.2f per admitted request", waiters, calls, perAdmitted[c.name])
		})
	}
	if q, p := perAdmitted["WaitN"], perAdmitted["polling"]; q > 3 || q >= p {
		t.Errorf("store calls per admitted request: WaitN %.2f, polling %.2f; want WaitN at most 3 and below polling", q, p)
	} else {
		t.Logf("store calls per admitted request: polling %.2f, WaitN %.2f (%.1f× fewer)", p, q, p/q)
	}
}

// TestWaitShaperQueue: on a leaky bucket, a waiter admitted with a Delay
// leaves the queue before it sleeps it, so the next one asks the store at
// once and takes the next turn.
func TestWaitShaperQueue(t *testing.T) {
	clk := clocktest.New(t0)
	store := countstore.New(memory.New(memory.WithClock(clk)))
	shaper := spigot.Must(spigot.NewLeakyBucket("shaper", 2, spigot.PerSecond(1)))
	l := spigot.New(store, shaper, spigot.WithClock(clk), spigot.WithJitter(noJitter))
	ctx := context.Background()
	l.AllowN(ctx, "k", 2) // two turns: at t0 and t0+1s
	a := startWait(ctx, l, "k", 1)
	clk.BlockUntil(1) // denied, sleeps until t0+1s
	b := startWait(ctx, l, "k", 1)
	await(func() bool { return spigot.WaitingBehind(l, "k") == 1 })
	clk.Advance(1 * s)
	// a is admitted with the turn at t0+2s and sleeps until then; b asks
	// meanwhile, is denied, and sleeps beside it.
	clk.BlockUntil(2)
	if got, want := store.Calls(), int64(1+2+1); got != want {
		t.Errorf("step 0: store calls = %d, want %d", got, want)
	}
	notYet(t, 0, map[string]<-chan waitResult{"a": a, "b": b})
	clk.Advance(1 * s)
	if r := <-a; r.err != nil || !r.d.Allowed() || r.d.Delay != 1*s {
		t.Fatalf("step 1 (t0+2s): a = %+v, %v; want allowed with Delay 1s", r.d, r.err)
	}
	clk.BlockUntil(1) // b is admitted with the turn at t0+3s
	notYet(t, 1, map[string]<-chan waitResult{"b": b})
	clk.Advance(1 * s)
	if r := <-b; r.err != nil || !r.d.Allowed() || r.d.Delay != 1*s {
		t.Fatalf("step 2 (t0+3s): b = %+v, %v; want allowed with Delay 1s", r.d, r.err)
	}
}

// TestWaitConcurrent: many callers of WaitN on a few keys, some cancelled,
// some with deadlines, while the clock moves: each returns, none is
// admitted beyond what the limit holds, every one without a context that
// ends is admitted, and no queue is left.
func TestWaitConcurrent(t *testing.T) {
	clk := clocktest.New(tFuture)
	l := spigot.New(memory.New(memory.WithClock(clk)), spigot.MustBucket("test", 5, spigot.PerSecond(10)), spigot.WithClock(clk))
	keys := []string{"a", "b", "c"}
	rnd := rand.New(rand.NewPCG(1, 2))
	type waiter struct {
		key      string
		kind     int // 0: no end, 1: cancelled at step cancelAt, 2: a deadline
		cancel   context.CancelFunc
		cancelAt int
		res      <-chan waitResult
	}
	ws := make([]*waiter, 90)
	for i := range ws {
		w := &waiter{key: keys[i%len(keys)], kind: i / len(keys) % 3}
		ctx := context.Background()
		switch w.kind {
		case 1:
			ctx, w.cancel = context.WithCancel(ctx)
			w.cancelAt = rnd.IntN(300)
		case 2:
			ctx, w.cancel = context.WithDeadline(ctx, tFuture.Add(time.Duration(rnd.IntN(3000))*ms))
		}
		w.res = startWait(ctx, l, w.key, 1+rnd.Int64N(5))
		ws[i] = w
	}
	taken := map[string]int64{}
	left := len(ws)
	step := 0
	for ; left > 0; step++ {
		if step > 100_000 {
			t.Fatalf("step %d: %d waiters left", step, left)
		}
		for i, w := range ws {
			if w == nil {
				continue
			}
			if w.kind == 1 && w.cancelAt == step {
				w.cancel()
			}
			select {
			case r := <-w.res:
				switch {
				case r.err == nil:
					taken[w.key] += r.d.N
				case w.kind == 1 && errors.Is(r.err, context.Canceled), w.kind == 2 && errors.Is(r.err, context.DeadlineExceeded):
				default:
					t.Errorf("waiter %d (kind %d): got %+v, %v", i, w.kind, r.d, r.err)
				}
				if w.cancel != nil {
					w.cancel()
				}
				ws[i] = nil
				left--
			default:
			}
		}
		clk.Advance(10 * ms)
		runtime.Gosched()
	}
	most := 5 + int64(step)/10 // capacity, and 10 a second for step × 10 ms
	for _, k := range keys {
		if taken[k] > most {
			t.Errorf("key %s: %d tokens taken in %d steps, want at most %d", k, taken[k], step, most)
		}
	}
	if n := spigot.WaitingKeys(l); n != 0 {
		t.Errorf("%d keys still have a queue, want 0", n)
	}
}

// TestWaitZero: WaitN of 0 tokens is admitted at once, even with others
// waiting on the key.
func TestWaitZero(t *testing.T) {
	l, clk, _ := newQueueLimiter(t, t0, 1, spigot.PerSecond(1))
	ctx := context.Background()
	l.Allow(ctx, "k")
	a := startWait(ctx, l, "k", 1)
	clk.BlockUntil(1)
	if d, err := l.WaitN(ctx, "k", 0); err != nil || !d.Allowed() {
		t.Errorf("WaitN of 0 = %+v, %v; want allowed at once", d, err)
	}
	clk.Advance(1 * s)
	if r := <-a; r.err != nil || !r.d.Allowed() {
		t.Errorf("a = %+v, %v; want allowed", r.d, r.err)
	}
}

// BenchmarkWaitAdmitted: WaitN when the tokens are there, beside AllowN
// (the baseline) in the same run, on one hot key and on a key per
// goroutine.
func BenchmarkWaitAdmitted(b *testing.B) {
	for _, keys := range []string{"hot", "per-goroutine"} {
		for _, op := range []string{"AllowN", "WaitN"} {
			b.Run("keys="+keys+"/op="+op, func(b *testing.B) {
				l := spigot.New(memory.New(), spigot.MustBucket("bench", 1<<30, spigot.PerSecond(1<<30)))
				var id atomic.Int64
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					key := "hot"
					if keys != "hot" {
						key = fmt.Sprint("k", id.Add(1))
					}
					for pb.Next() {
						var d spigot.Decision
						var err error
						if op == "AllowN" {
							d, err = l.AllowN(ctx, key, 1)
						} else {
							d, err = l.WaitN(ctx, key, 1)
						}
						if err != nil || !d.Allowed() {
							b.Fatalf("%s = %+v, %v", op, d, err)
						}
					}
				})
			})
		}
	}
}
