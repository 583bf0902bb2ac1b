package denycache_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/store/denycache"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

const ms = time.Millisecond

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// setup returns a fake clock at t0, a memory store on it that counts its
// calls, and a Store in front of it.
func setup(t *testing.T, opts ...denycache.Option) (*clocktest.Clock, *countstore.Store, *denycache.Store) {
	t.Helper()
	clk := clocktest.New(t0)
	mem := countstore.New(memory.New(memory.WithClock(clk)))
	return clk, mem, denycache.New(mem, append([]denycache.Option{denycache.WithClock(clk)}, opts...)...)
}

var (
	bucket = spigot.MustBucket("b", 4, spigot.PerSecond(1)) // a token a second
	other  = spigot.MustBucket("b", 8, spigot.PerSecond(1)) // the same name, another config
)

// TestSteps: what the Store answers itself and what it sends to the store,
// at fixed instants.
func TestSteps(t *testing.T) {
	type step struct {
		at     time.Duration
		op     spigot.Op
		want   spigot.Decision
		remote bool // the store decided
	}
	take := func(l spigot.Limit, n int64) spigot.Op { return spigot.Op{Limit: l, Key: "k", N: n} }
	act := func(a spigot.Action, n int64) spigot.Op { return spigot.Op{Limit: bucket, Key: "k", Action: a, N: n} }
	d := func(n, rem int64, retry, reset, refill time.Duration) spigot.Decision {
		return spigot.Decision{N: n, Remaining: rem, RetryAfter: retry, ResetAfter: reset, RefillAfter: refill}
	}
	s := time.Second
	steps := []step{
		{0, take(bucket, 3), d(3, 1, 0, 3*s, s), true},
		// A Take of 2 is denied: 2 or more are denied until t0+1s.
		{0, take(bucket, 2), d(0, 1, s, 3*s, s), true},
		{0, take(bucket, 2), d(0, 0, s, 3*s, s), false},
		{500 * ms, take(bucket, 4), d(0, 0, 500*ms, 2500*ms, 500*ms), false},
		{500 * ms, act(spigot.Peek, 3), d(0, 0, 500*ms, 2500*ms, 500*ms), false},
		// A smaller cost, a TakeUpTo, a Take of 0 and another config go on.
		{500 * ms, take(bucket, 1), d(1, 0, 0, 3500*ms, 500*ms), true},
		// That left 0: a Take of 1 or more is denied until t0+1s.
		{500 * ms, take(bucket, 1), d(0, 0, 500*ms, 3500*ms, 500*ms), false},
		{500 * ms, act(spigot.TakeUpTo, 9), d(0, 0, 500*ms, 3500*ms, 500*ms), false},
		{500 * ms, take(bucket, 0), d(0, 0, 0, 3500*ms, 500*ms), true},
		{500 * ms, take(other, 1), d(0, 0, 500*ms, 7500*ms, 500*ms), true},
		// The Limit of that name is now other: bucket's requests go on.
		{600 * ms, take(bucket, 1), d(0, 0, 400*ms, 3400*ms, 400*ms), true},
		{600 * ms, take(bucket, 1), d(0, 0, 400*ms, 3400*ms, 400*ms), false},
		// At the instant the store named, the store decides.
		{s, take(bucket, 1), d(1, 0, 0, 4*s, s), true},
		{1999 * ms, take(bucket, 2), d(0, 0, ms, 3001*ms, ms), false},
		// A cost above the capacity is denied for ever.
		{2 * s, take(bucket, 5), d(0, 1, spigot.Never, 3*s, s), true},
		{2 * s, take(bucket, 6), d(0, 0, spigot.Never, 3*s, s), false},
		{9 * s, take(bucket, 5), d(0, 0, spigot.Never, 0, ms), false}, // RefillAfter: see the package doc
		{9 * s, take(bucket, 4), d(4, 0, 0, 4*s, s), true},
		{9 * s, act(spigot.Peek, 1), d(0, 0, s, 4*s, s), false},
		// A Refund forgets.
		{9 * s, act(spigot.Refund, 1), d(1, 1, 0, 3*s, s), true},
		{9 * s, act(spigot.Peek, 1), d(0, 1, 0, 3*s, s), true},
		{9 * s, act(spigot.Take, 1), d(1, 0, 0, 4*s, s), true},
		{9 * s, act(spigot.Take, 1), d(0, 0, s, 4*s, s), false},
		// So does a Reset.
		{9 * s, act(spigot.Reset, 0), d(4, 4, 0, 0, s), true},
		{9 * s, act(spigot.Take, 1), d(1, 3, 0, s, s), true},
	}
	clk, mem, c := setup(t)
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		before := mem.Calls()
		got, err := c.Do(context.Background(), st.op)
		if err != nil {
			t.Fatalf("step %d: %v: %v", i, st.op, err)
		}
		if got != st.want {
			t.Errorf("step %d: %v: got %+v, want %+v", i, st.op, got, st.want)
		}
		if remote := mem.Calls() > before; remote != st.remote {
			t.Errorf("step %d: %v: store called %v, want %v", i, st.op, remote, st.remote)
		}
	}
}

// TestDifferential: over random sequences of ops on every kind of limit,
// at whole milliseconds, what the Store answers agrees with a twin memory
// store that gets every op: what the Store sends on is decided as the twin
// decides it, and what it answers itself the twin denies, with a
// RetryAfter and a ResetAfter no shorter and a Remaining no smaller.
func TestDifferential(t *testing.T) {
	limits := []spigot.Limit{
		spigot.MustBucket("tb", 5, spigot.Per(3, time.Second)),
		spigot.Must(spigot.NewLeakyBucket("lb", 4, spigot.Per(2, time.Second))),
		spigot.Must(spigot.NewFixedWindow("fw", spigot.Per(5, time.Second), 300*ms)),
		spigot.Must(spigot.NewSlidingWindow("sw", spigot.Per(5, time.Second))),
		spigot.Must(spigot.NewSlidingLog("sl", spigot.Per(4, time.Second))),
		spigot.MustBucket("zero", 0, spigot.PerSecond(1)),
	}
	keys := []string{"a", "b"}
	ctx := context.Background()
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		clk, mem, c := setup(t, denycache.WithMaxKeys(4+int(seed%3)*8))
		twin := memory.New(memory.WithClock(clk))
		local := 0
		randOp := func() spigot.Op {
			op := spigot.Op{Limit: limits[rng.IntN(len(limits))], Key: keys[rng.IntN(len(keys))], N: rng.Int64N(7)}
			switch r := rng.IntN(20); {
			case r < 12:
				op.Action = spigot.Take
			case r < 15:
				op.Action = spigot.TakeUpTo
			case r < 18:
				op.Action = spigot.Peek
			case r < 19:
				op.Action = spigot.Refund
			default:
				op.Action = spigot.Reset
			}
			return op
		}
		for i := range 400 {
			clk.Advance(time.Duration(rng.IntN(4)*rng.IntN(300)) * ms)
			n := 1
			if rng.IntN(5) == 0 {
				n = 1 + rng.IntN(3)
			}
			ops := make([]spigot.Op, n)
			for j := range ops {
				ops[j] = randOp()
			}
			before := mem.Calls()
			got := make([]spigot.Decision, n)
			want := make([]spigot.Decision, n)
			mode := spigot.Mode(rng.IntN(2))
			var err, werr error
			if n == 1 && rng.IntN(2) == 0 {
				got[0], err = c.Do(ctx, ops[0])
				want[0], werr = twin.Do(ctx, ops[0])
			} else {
				err = c.DoMulti(ctx, mode, ops, got)
				werr = twin.DoMulti(ctx, mode, ops, want)
			}
			if (err == nil) != (werr == nil) {
				t.Fatalf("seed %d step %d: %v: got error %v, twin %v", seed, i, ops, err, werr)
			}
			if err != nil {
				continue
			}
			remote := mem.Calls() > before
			for j := range ops {
				g, w := got[j], want[j]
				if g == w {
					continue
				}
				if remote && n == 1 {
					t.Fatalf("seed %d step %d: %v (mode %d) from the store: got %+v, want %+v", seed, i, ops[j], mode, g, w)
				}
				// Answered here (all of a batch may not be).
				local++
				if g.Allowed() || w.Allowed() || g.RetryAfter > w.RetryAfter || g.ResetAfter > w.ResetAfter || g.Remaining > w.Remaining || g.N != 0 {
					t.Fatalf("seed %d step %d: %v (mode %d, remote %v): got %+v, twin %+v", seed, i, ops[j], mode, remote, g, w)
				}
			}
		}
		if local == 0 {
			t.Errorf("seed %d: the Store never answered itself", seed)
		}
	}
}

// TestSmallerCost: a denial of a Take of N answers Takes of N or more
// only; a smaller cost reaches the store every time.
func TestSmallerCost(t *testing.T) {
	clk, mem, c := setup(t)
	ctx := context.Background()
	l := spigot.MustBucket("big", 10, spigot.PerSecond(1))
	take := func(n int64) spigot.Decision {
		t.Helper()
		d, err := c.Do(ctx, spigot.Op{Limit: l, Key: "k", N: n})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	take(7)                        // 3 left
	if d := take(5); d.Allowed() { // 5 or more denied for 2 s
		t.Fatalf("got %+v, want a denial", d)
	}
	for step, c := range []struct {
		n      int64
		remote bool
	}{
		{5, false}, {9, false}, {2, true}, // 1 left
		{2, true},  // 2 or more denied for 1 s
		{5, false}, // the fact about 2 covers 5
		{1, true},  // 0 left: 1 or more denied for 1 s
		{1, false}, {2, false},
	} {
		clk.Advance(10 * ms)
		before := mem.Calls()
		n, want := c.n, c.remote
		d := take(n)
		if got := mem.Calls() > before; got != want {
			t.Errorf("step %d: Take of %d reached the store: got %v, want %v (%+v)", step, n, got, want, d)
		}
	}
}

// TestResetRefundForget: a Refund or Reset through the Store, by Do or
// DoMulti, forgets the denials of that key under every Limit of its name.
func TestResetRefundForget(t *testing.T) {
	ctx := context.Background()
	for i, clear := range []spigot.Op{
		{Limit: bucket, Key: "k", Action: spigot.Refund, N: 1},
		{Limit: other, Key: "k", Action: spigot.Reset},
		{Limit: bucket, Key: "k", Action: spigot.Reset},
	} {
		for _, multi := range []bool{false, true} {
			_, mem, c := setup(t)
			take := spigot.Op{Limit: bucket, Key: "k", N: 4}
			c.Do(ctx, take)
			if d, _ := c.Do(ctx, take); d.Allowed() {
				t.Fatalf("step %d: got %+v, want a denial", i, d)
			}
			before := mem.Calls()
			c.Do(ctx, take)
			if mem.Calls() != before {
				t.Fatalf("step %d: the denial was not answered here", i)
			}
			if multi {
				err := c.DoMulti(ctx, spigot.Independent, []spigot.Op{clear, {Limit: bucket, Key: "other", N: 1}}, make([]spigot.Decision, 2))
				if err != nil {
					t.Fatal(err)
				}
			} else if _, err := c.Do(ctx, clear); err != nil {
				t.Fatal(err)
			}
			before = mem.Calls()
			d, _ := c.Do(ctx, spigot.Op{Limit: bucket, Key: "k", N: 1})
			if mem.Calls() == before {
				t.Errorf("step %d (multi %v): after %v, a Take was answered here: %+v", i, multi, clear, d)
			}
		}
	}
}

// TestNotRemembered: degraded decisions and errors are not remembered.
func TestNotRemembered(t *testing.T) {
	ctx := context.Background()
	for i, f := range []fake{
		{d: spigot.Undecided()},
		{d: spigot.Decision{Remaining: -1, RetryAfter: 5 * time.Second}},
		{d: spigot.Decision{RetryAfter: time.Second}, err: errors.New("down")},
	} {
		c := denycache.New(&f)
		for range 3 {
			c.Do(ctx, spigot.Op{Limit: bucket, Key: "k", N: 1})
			c.DoMulti(ctx, spigot.Independent, []spigot.Op{{Limit: bucket, Key: "k", N: 1}}, make([]spigot.Decision, 1))
		}
		if f.calls != 6 {
			t.Errorf("step %d: got %d calls of the store, want 6", i, f.calls)
		}
	}
}

// fake answers every op with d and err.
type fake struct {
	d     spigot.Decision
	err   error
	calls int
}

func (f *fake) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	f.calls++
	return f.d, f.err
}

func (f *fake) DoMulti(_ context.Context, _ spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	f.calls++
	for i := range out {
		out[i] = f.d
	}
	return f.err
}

// doOnly is a store that applies one op per call: DoMulti is unsupported.
type doOnly struct{ spigot.Store }

func (doOnly) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return fmt.Errorf("doOnly: %w", errors.ErrUnsupported)
}

// TestMulti: DoMulti answers here what it can, and an all-or-nothing
// request only when it denies every op; bad input and a store's
// ErrUnsupported come back as they are.
func TestMulti(t *testing.T) {
	ctx := context.Background()
	_, mem, c := setup(t)
	a, b, fresh := spigot.Op{Limit: bucket, Key: "a", N: 4}, spigot.Op{Limit: bucket, Key: "b", N: 4}, spigot.Op{Limit: bucket, Key: "c", N: 1}
	for _, op := range []spigot.Op{a, a, b, b} {
		c.Do(ctx, op)
	}
	out := make([]spigot.Decision, 3)
	for step, tc := range []struct {
		mode   spigot.Mode
		ops    []spigot.Op
		remote bool
	}{
		{spigot.Independent, []spigot.Op{a, b}, false},
		{spigot.AllOrNothing, []spigot.Op{a, b}, false},
		{spigot.AllOrNothing, []spigot.Op{a, fresh}, true},
		{spigot.Independent, []spigot.Op{a, fresh, b}, true},
	} {
		before := mem.Calls()
		if err := c.DoMulti(ctx, tc.mode, tc.ops, out[:len(tc.ops)]); err != nil {
			t.Fatal(err)
		}
		if got := mem.Calls() > before; got != tc.remote {
			t.Errorf("step %d: store called %v, want %v", step, got, tc.remote)
		}
		for i, op := range tc.ops {
			if op != fresh && out[i].Allowed() {
				t.Errorf("step %d: op %d allowed: %+v", step, i, out[i])
			}
		}
	}
	if err := c.DoMulti(ctx, spigot.Mode(9), []spigot.Op{a}, out[:1]); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("mode 9: got %v, want ErrUnsupported", err)
	}
	if err := c.DoMulti(ctx, spigot.Independent, []spigot.Op{{Key: "k"}}, out[:1]); !errors.Is(err, spigot.ErrInvalidLimit) {
		t.Errorf("zero Limit: got %v, want ErrInvalidLimit", err)
	}
	if _, err := c.Do(ctx, spigot.Op{Limit: bucket, Key: "k", N: -1}); !errors.Is(err, spigot.ErrInvalidCost) {
		t.Errorf("N -1: got %v, want ErrInvalidCost", err)
	}
	d := denycache.New(doOnly{memory.New()})
	if err := d.DoMulti(ctx, spigot.AllOrNothing, []spigot.Op{fresh}, out[:1]); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("doOnly: got %v, want ErrUnsupported", err)
	}
	if err := spigot.DoMulti(ctx, d, spigot.AllOrNothing, []spigot.Op{fresh, a}, out[:2]); err != nil || !out[0].Allowed() {
		t.Errorf("spigot.DoMulti through doOnly: %v, %+v", err, out[:2])
	}
}

// TestBounded: a flood of distinct denied keys keeps at most
// WithMaxKeys keys, and the latest keys are remembered.
func TestBounded(t *testing.T) {
	for _, max := range []int{1, 7, 100, 1000} {
		clk, mem, c := setup(t, denycache.WithMaxKeys(max))
		ctx := context.Background()
		l := spigot.MustBucket("one", 1, spigot.PerMinute(1))
		for i := range 20 * max {
			if i%max == 0 {
				clk.Advance(ms)
			}
			key := fmt.Sprint(i)
			c.Do(ctx, spigot.Op{Limit: l, Key: key, N: 1})
			if got := c.Len(); got > max {
				t.Fatalf("max %d: %d entries after %d keys", max, got, i+1)
			}
		}
		before := mem.Calls()
		c.Do(ctx, spigot.Op{Limit: l, Key: fmt.Sprint(20*max - 1), N: 1})
		if mem.Calls() != before {
			t.Errorf("max %d: the latest key was forgotten", max)
		}
	}
}

// TestExpired: entries that ran out make room before live ones.
func TestExpired(t *testing.T) {
	clk, mem, c := setup(t, denycache.WithMaxKeys(1))
	ctx := context.Background()
	short := spigot.MustBucket("short", 1, spigot.PerSecond(1))
	c.Do(ctx, spigot.Op{Limit: short, Key: "a", N: 1}) // remembered until t0+1s
	clk.Advance(2 * time.Second)
	c.Do(ctx, spigot.Op{Limit: short, Key: "b", N: 1})
	if c.Len() != 1 {
		t.Fatalf("got %d entries, want 1", c.Len())
	}
	before := mem.Calls()
	c.Do(ctx, spigot.Op{Limit: short, Key: "b", N: 1})
	if mem.Calls() != before {
		t.Errorf("b was not remembered")
	}
}

// TestConcurrent: many goroutines on a few keys admit exactly what the
// store admits, and a Reset afterwards is seen at once.
func TestConcurrent(t *testing.T) {
	clk, mem, c := setup(t, denycache.WithMaxKeys(3))
	ctx := context.Background()
	l := spigot.MustBucket("c", 10, spigot.PerSecond(1))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				op := spigot.Op{Limit: l, Key: fmt.Sprint(i % 3), N: int64(1 + g%2)}
				if g == 7 && i%50 == 0 {
					op.Action = spigot.Peek
				}
				d, err := c.Do(ctx, op)
				if err != nil {
					t.Error(err)
					return
				}
				if op.Action == spigot.Take {
					admitted.Add(d.N)
				}
				if g == 0 && i == 100 {
					clk.Advance(ms)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got > 30+3 || got < 30 { // 10 per key, and a token a key in the ms
		t.Errorf("admitted %d tokens, want 30 to 33", got)
	}
	calls := mem.Calls()
	if calls > 8*200/2 {
		t.Errorf("%d store calls for 1600 requests", calls)
	}
	for k := range 3 {
		c.Do(ctx, spigot.Op{Limit: l, Key: fmt.Sprint(k), Action: spigot.Reset})
		if d, _ := c.Do(ctx, spigot.Op{Limit: l, Key: fmt.Sprint(k), N: 10}); !d.Allowed() {
			t.Errorf("key %d after Reset: %+v", k, d)
		}
	}
}

// TestHitAllocs: a request answered here allocates nothing.
func TestHitAllocs(t *testing.T) {
	_, mem, c := setup(t)
	ctx := context.Background()
	op := spigot.Op{Limit: bucket, Key: "k", N: 5}
	c.Do(ctx, op)
	before := mem.Calls()
	if n := testing.AllocsPerRun(100, func() { c.Do(ctx, op) }); n != 0 {
		t.Errorf("got %v allocations per hit, want 0", n)
	}
	ops := []spigot.Op{op, op}
	out := make([]spigot.Decision, 2)
	if n := testing.AllocsPerRun(100, func() { c.DoMulti(ctx, spigot.AllOrNothing, ops, out) }); n != 0 {
		t.Errorf("got %v allocations per all-or-nothing hit, want 0", n)
	}
	if mem.Calls() != before {
		t.Errorf("hits reached the store")
	}
}

func TestOptions(t *testing.T) {
	for name, f := range map[string]func(){
		"nil store":  func() { denycache.New(nil) },
		"nil clock":  func() { denycache.WithClock(nil) },
		"0 keys":     func() { denycache.WithMaxKeys(0) },
		"nil memory": func() { denycache.New((*memory.Store)(nil)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// gated is a store whose calls, once armed, block until released.
type gated struct {
	spigot.Store
	armed      atomic.Bool   // calls block before the store decides
	armedAfter atomic.Bool   // the next call blocks after the store decides
	entered    chan struct{} // receives every call made while armed
	release    chan struct{}
}

func (g *gated) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if g.armed.Load() {
		g.entered <- struct{}{}
		<-g.release
	}
	d, err := g.Store.Do(ctx, op)
	if g.armedAfter.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.release
	}
	return d, err
}

// TestProbe: when a denial the Store remembers runs out, one request asks
// the store, and the others that come meanwhile wait for its answer and
// are answered from it, with no call of their own.
func TestProbe(t *testing.T) {
	clk := clocktest.New(t0)
	g := &gated{Store: memory.New(memory.WithClock(clk)), entered: make(chan struct{}, 16), release: make(chan struct{})}
	mem := countstore.New(g)
	c := denycache.New(mem, denycache.WithClock(clk))
	ctx := context.Background()
	l := spigot.MustBucket("probe", 1, spigot.PerSecond(1))
	op := spigot.Op{Limit: l, Key: "k", N: 1}
	if d, _ := c.Do(ctx, op); !d.Allowed() || d.Remaining != 0 { // 0 left: remembered until t0+1s
		t.Fatalf("got %+v", d)
	}
	clk.Advance(time.Second)
	waiting := make(chan struct{}, 16)
	t.Cleanup(denycache.SetWaitHook(func() { waiting <- struct{}{} }))
	g.armed.Store(true)
	const n = 8
	results := make(chan spigot.Decision, n+1)
	var wg sync.WaitGroup
	do := func() {
		d, err := c.Do(ctx, op)
		if err != nil {
			t.Error(err)
		}
		results <- d
	}
	wg.Go(do)
	<-g.entered // the probe
	for range n {
		wg.Go(do)
	}
	for range n {
		select {
		case <-waiting:
		case <-g.entered:
			t.Fatal("a request reached the store during the probe")
		}
	}
	g.armed.Store(false)
	close(g.release)
	wg.Wait()
	close(results)
	admitted := 0
	for d := range results {
		switch {
		case d.Allowed():
			admitted++
		case d.RetryAfter != time.Second:
			t.Errorf("got %+v, want a denial for 1s", d)
		}
	}
	if admitted != 1 || mem.Calls() != 2 {
		t.Errorf("got %d admitted and %d store calls, want 1 and 2", admitted, mem.Calls())
	}
}

// TestStaleDenial: a denial that the store decided before a Reset through
// the Store, but that comes back after it, is not remembered.
func TestStaleDenial(t *testing.T) {
	clk := clocktest.New(t0)
	mem := memory.New(memory.WithClock(clk))
	g := &gated{Store: mem, entered: make(chan struct{}, 1), release: make(chan struct{})}
	c := denycache.New(g, denycache.WithClock(clk))
	ctx := context.Background()
	op := spigot.Op{Limit: bucket, Key: "k", N: 1}
	mem.Do(ctx, spigot.Op{Limit: bucket, Key: "k", N: 4}) // empty, behind the Store's back
	g.armedAfter.Store(true)
	done := make(chan spigot.Decision)
	go func() {
		d, _ := c.Do(ctx, op)
		done <- d
	}()
	<-g.entered // decided, not yet back
	if _, err := c.Do(ctx, spigot.Op{Limit: bucket, Key: "k", Action: spigot.Reset}); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if d := <-done; d.Allowed() {
		t.Fatalf("the Take before the Reset: got %+v, want a denial", d)
	}
	if d, _ := c.Do(ctx, op); !d.Allowed() {
		t.Errorf("after the Reset: got %+v, want the Take allowed", d)
	}
}

// TestHybrid: in front of store/hybrid, the FailClosed denials of an
// unavailable remote are not remembered, and once the remote is back its
// denials are.
func TestHybrid(t *testing.T) {
	clk := clocktest.New(t0)
	remote := &fake{d: spigot.Decision{RetryAfter: time.Second, RefillAfter: time.Second}, err: errors.New("down")}
	h := countstore.New(hybrid.New(remote, memory.New(memory.WithClock(clk)),
		hybrid.WithClock(clk), hybrid.WithPolicy(hybrid.FailClosed), hybrid.WithBreaker(1, time.Second)))
	c := denycache.New(h, denycache.WithClock(clk))
	ctx := context.Background()
	op := spigot.Op{Limit: bucket, Key: "k", N: 1}
	for step := range 3 {
		d, err := c.Do(ctx, op)
		if err != nil || d.Allowed() || !d.Degraded() {
			t.Fatalf("step %d: got %+v, %v; want a degraded denial", step, d, err)
		}
	}
	if n := h.Calls(); n != 3 {
		t.Errorf("got %d calls of the hybrid store, want 3", n)
	}
	remote.err = nil
	clk.Advance(time.Second) // the breaker probes again
	for step := range 3 {
		d, err := c.Do(ctx, op)
		if err != nil || d.Allowed() || d.Degraded() {
			t.Fatalf("step %d: got %+v, %v; want the remote's denial", step, d, err)
		}
	}
	if n := h.Calls(); n != 4 {
		t.Errorf("got %d calls of the hybrid store, want 4", n)
	}
}
