package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
)

// The differential tests drive one lease Store, the only client of its
// remote (a memory store), and a plain memory store through the same
// operations at the same instants of one fake clock, and require every
// decision of the lease Store to equal the plain store's, field by field.
// They keep to what the package doc promises that equality for: instants
// that are whole milliseconds, buckets whose token period is a whole number
// of milliseconds, one goroutine, and limits far from overflow.

// oneReplica returns a plain memory store and a lease Store on a remote
// memory store of its own, both on clk, with a sweeper that never wakes
// during a test; the remote, for a test to read; and obs, if given, as the
// lease Store's observer.
func oneReplica(t testing.TB, clk *clocktest.Clock, obs lease.Observer) (plain, remote *memory.Store, s *lease.Store) {
	t.Helper()
	plain = memory.New(memory.WithClock(clk))
	remote = memory.New(memory.WithClock(clk))
	s = lease.New(remote, lease.WithClock(clk), lease.WithIdle(1000*time.Hour), lease.WithObserver(obs))
	t.Cleanup(func() { s.Close(context.Background()) })
	return plain, remote, s
}

// TestOneReplicaGroupCountsItsLease: the case of issue 38. One lease Store
// is the only client of two limits; 40 single Allows on B build a lease,
// AllowN(268) empties the shared bucket, and a Group of A and B must then
// be admitted from the tokens the lease holds, with every field the plain
// store gives the same requests. The steps after it Peek, Refund and
// Reset the key that holds the lease, with the same fields as the plain
// store too.
func TestOneReplicaGroupCountsItsLease(t *testing.T) {
	a := spigot.MustBucket("one-a", 1600, spigot.Per(1, time.Hour))
	b := spigot.MustBucket("one-b", 320, spigot.Per(1, time.Hour))
	ctx := context.Background()
	clk := clocktest.New(t0)
	plain, remote, s := oneReplica(t, clk, lease.Observer{})

	// A step returns the decisions it made: one for a Limiter's call; the
	// combined decision, then each limit's, for a Group's, with its By.
	type result struct {
		ds []spigot.Decision
		by int
	}
	// limiter makes a step of one call of a Limiter of l on key "user".
	limiter := func(l spigot.Limit, call func(*spigot.Limiter) (spigot.Decision, error)) func(spigot.Store) (result, error) {
		return func(st spigot.Store) (result, error) {
			d, err := call(spigot.New(st, l))
			return result{ds: []spigot.Decision{d}}, err
		}
	}
	allow := func(l spigot.Limit, n int64) func(spigot.Store) (result, error) {
		return limiter(l, func(lm *spigot.Limiter) (spigot.Decision, error) { return lm.AllowN(ctx, "user", n) })
	}
	peekOf := func(l spigot.Limit) func(spigot.Store) (result, error) {
		return limiter(l, func(lm *spigot.Limiter) (spigot.Decision, error) { return lm.Peek(ctx, "user", 1) })
	}
	refund := func(l spigot.Limit, n int64) func(spigot.Store) (result, error) {
		return limiter(l, func(lm *spigot.Limiter) (spigot.Decision, error) { return lm.Refund(ctx, "user", n) })
	}
	reset := func(l spigot.Limit) func(spigot.Store) (result, error) {
		return limiter(l, func(lm *spigot.Limiter) (spigot.Decision, error) { return lm.Reset(ctx, "user") })
	}
	group := func(st spigot.Store) (result, error) {
		g, err := spigot.NewGroup(st, a, b).Allow(ctx, "user")
		return result{ds: append([]spigot.Decision{g.Decision}, g.Each...), by: g.By}, err
	}
	type step struct {
		at   time.Duration // since t0
		what string
		do   func(spigot.Store) (result, error)
	}
	var steps []step
	for i := range 40 {
		// Four a millisecond: each lease is gone within WithInterval
		// (10ms) of being taken, so the next one is twice as large.
		steps = append(steps, step{time.Duration(i/4) * time.Millisecond, "Allow B", allow(b, 1)})
	}
	const group1 = 43 // the index of the Group's step
	steps = append(steps,
		step{11 * time.Millisecond, "AllowN(268) B", allow(b, 268)},
		step{12 * time.Millisecond, "Peek B", peekOf(b)},
		step{12 * time.Millisecond, "Allow B", allow(b, 1)},
		step{13 * time.Millisecond, "Group(A, B).Allow", group},
		step{14 * time.Millisecond, "Peek A", peekOf(a)},
		step{14 * time.Millisecond, "Peek B", peekOf(b)},
		step{15 * time.Millisecond, "Group(A, B).Allow", group},
		step{16 * time.Millisecond, "Peek B", peekOf(b)},
		// Refund and Reset of a key that holds a lease.
		step{17 * time.Millisecond, "Refund(3) B", refund(b, 3)},
		step{17 * time.Millisecond, "Peek B", peekOf(b)},
		step{18 * time.Millisecond, "Allow B", allow(b, 1)},
		step{18 * time.Millisecond, "Reset B", reset(b)},
		step{19 * time.Millisecond, "Peek B", peekOf(b)},
		step{19 * time.Millisecond, "Group(A, B).Allow", group},
	)
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		if i == group1 {
			// The case is the only if the lease Store holds
			// tokens of B that its remote does not.
			held, err := s.Do(ctx, spigot.Op{Limit: b, Key: "user", Action: spigot.Peek})
			if err != nil {
				t.Fatal(err)
			}
			left, err := remote.Do(ctx, spigot.Op{Limit: b, Key: "user", Action: spigot.Peek})
			if err != nil {
				t.Fatal(err)
			}
			if held.Remaining <= left.Remaining {
				t.Fatalf("step %d: before the Group, the lease Store says B has %d left and its remote %d; want a lease (more in the Store)", i, held.Remaining, left.Remaining)
			}
			t.Logf("before the Group, the lease holds %d tokens of B (the remote %d)", held.Remaining-left.Remaining, left.Remaining)
		}
		want, err := st.do(plain)
		if err != nil {
			t.Fatalf("step %d: %s on the plain store: %v", i, st.what, err)
		}
		got, err := st.do(s)
		if err != nil {
			t.Fatalf("step %d: %s at t0+%v: %v", i, st.what, st.at, err)
		}
		if i == group1 && !want.ds[0].Allowed() {
			t.Fatalf("step %d: %s: the plain store denies it (%+v); want admitted, as in the issue", i, st.what, want.ds)
		}
		if got.by != want.by || !slices.Equal(got.ds, want.ds) {
			// The steps after it would run on states that differ.
			t.Fatalf("step %d: %s at t0+%v: got %+v (by %d), want %+v (by %d)", i, st.what, st.at, got.ds, got.by, want.ds, want.by)
		}
	}
}

// The limits of the random differential: token buckets of small and large
// capacities and rates (a token period of 1ms to an hour), fixed windows
// (one with an offset), and a leaky bucket, a sliding window and a sliding
// log, which pass through to the remote. Every bucket's token period is a
// whole number of milliseconds. diffBucket and diffWindow are busy: most
// ops go to them, on one key.
var (
	diffBucket = spigot.MustBucket("diff-bucket", 1000, spigot.Per(100, time.Second)) // 10ms a token
	diffWindow = spigot.Must(spigot.NewFixedWindow("diff-window", spigot.Per(500, time.Second), 0))
	diffLimits = []spigot.Limit{
		diffBucket,
		diffWindow,
		spigot.MustBucket("diff-one", 1, spigot.Per(1, 10*time.Millisecond)),
		spigot.MustBucket("diff-three", 3, spigot.Per(3, 30*time.Millisecond)),
		spigot.MustBucket("diff-five", 5, spigot.Per(1, time.Second)),
		spigot.MustBucket("diff-hourly", 320, spigot.Per(1, time.Hour)),
		spigot.MustBucket("diff-odd", 1600, spigot.Per(1600, time.Hour)), // 2.25s a token
		spigot.MustBucket("diff-large", 100_000, spigot.Per(1000, time.Second)),
		spigot.Must(spigot.NewFixedWindow("diff-small-window", spigot.Per(3, 10*time.Millisecond), 0)),
		spigot.Must(spigot.NewFixedWindow("diff-minute", spigot.Per(40, time.Minute), 1500*time.Millisecond)),
		spigot.Must(spigot.NewLeakyBucket("diff-leaky", 5, spigot.Per(10, time.Second))),
		spigot.Must(spigot.NewSlidingWindow("diff-sliding", spigot.Per(20, time.Second))),
		spigot.Must(spigot.NewSlidingLog("diff-log", spigot.Per(8, 200*time.Millisecond))),
	}
	diffKeys = []string{"hot", "a", "b"}
)

// A source gives the random differential its choices: a seeded generator,
// or a fuzzer's bytes.
type source interface {
	// intn returns a choice in [0, n), n > 0.
	intn(n int) int
	// done reports that the source has no more choices to give.
	done() bool
}

// An rngSource draws from rng, for steps steps: done counts one each time
// it is asked.
type rngSource struct {
	rng   *rand.Rand
	steps int // left to give
}

func (r *rngSource) intn(n int) int { return r.rng.IntN(n) }
func (r *rngSource) done() bool     { r.steps--; return r.steps < 0 }

// A byteSource reads a choice from one byte, or two for choices of more
// than 256; it gives 0 once the bytes run out.
type byteSource struct {
	b []byte
	i int
}

func (b *byteSource) intn(n int) int {
	v := 0
	for w := 1; w < n && w < 1<<16; w <<= 8 {
		if b.i < len(b.b) {
			v = v<<8 | int(b.b[b.i])
			b.i++
		}
	}
	return v % n
}

func (b *byteSource) done() bool { return b.i >= len(b.b) }

// What a step of the random differential does.
type stepKind uint8

const (
	single      stepKind = iota // Do(ops[0])
	allOrNone                   // DoMulti(AllOrNothing, ops)
	independent                 // DoMulti(Independent, ops)
	group                       // NewGroup(limits of ops).AllowN(ops[0].N, keys)
)

// A diffStep is one step of the random differential: advance the clock by
// advance, then apply ops as kind says. A group's ops are Takes of one N;
// its keys are the ops' keys, or their one key when oneKey.
type diffStep struct {
	advance time.Duration
	kind    stepKind
	ops     []spigot.Op
	oneKey  bool
}

func (st diffStep) String() string {
	ops := make([]string, len(st.ops))
	for i, op := range st.ops {
		ops[i] = op.String()
	}
	list := strings.Join(ops, "; ")
	switch st.kind {
	case allOrNone:
		return "DoMulti(AllOrNothing, [" + list + "])"
	case independent:
		return "DoMulti(Independent, [" + list + "])"
	case group:
		names, keys := make([]string, len(st.ops)), make([]string, len(st.ops))
		for i, op := range st.ops {
			names[i], keys[i] = op.Limit.Name(), fmt.Sprintf("%q", op.Key)
		}
		if st.oneKey {
			keys = keys[:1]
		}
		return fmt.Sprintf("Group(%s).AllowN(%d, %s)", strings.Join(names, ", "), st.ops[0].N, strings.Join(keys, ", "))
	}
	return "Do(" + list + ")"
}

// nextStep draws a step from src.
func nextStep(src source) diffStep {
	var st diffStep
	switch r := src.intn(1000); {
	case r < 650: // at the same instant
	case r < 950:
		st.advance = time.Duration(1+src.intn(3)) * time.Millisecond
	case r < 985:
		st.advance = time.Duration(5+src.intn(200)) * time.Millisecond
	case r < 997:
		st.advance = time.Duration(1+src.intn(120)) * time.Second
	default:
		st.advance = time.Duration(1+src.intn(3)) * time.Hour
	}
	switch r := src.intn(100); {
	case r < 65:
		st.kind = single
		st.ops = []spigot.Op{singleOp(src)}
	case r < 83:
		st.kind = allOrNone
		st.ops = batch(src, func(op *spigot.Op) {
			switch r := src.intn(100); {
			case r < 75:
			case r < 90:
				op.Action = spigot.TakeUpTo
			default:
				op.Action = spigot.Peek
			}
			op.N = cost(src, *op)
		})
	case r < 88:
		st.kind = independent
		st.ops = batch(src, func(op *spigot.Op) { *op = randomAction(src, *op) })
	default:
		st.kind = group
		st.oneKey = src.intn(2) == 0
		st.ops = batch(src, func(*spigot.Op) {})
		n := cost(src, st.ops[0])
		for i := range st.ops {
			st.ops[i].N = n
			if st.oneKey {
				st.ops[i].Key = st.ops[0].Key
			}
		}
	}
	return st
}

// target draws a limit and a key: the busy bucket or the busy window on
// the hot key most of the time.
func target(src source) spigot.Op {
	switch r := src.intn(10); {
	case r < 4:
		return spigot.Op{Limit: diffBucket, Key: hotOr(src)}
	case r < 6:
		return spigot.Op{Limit: diffWindow, Key: hotOr(src)}
	}
	return spigot.Op{Limit: diffLimits[src.intn(len(diffLimits))], Key: diffKeys[src.intn(len(diffKeys))]}
}

func hotOr(src source) string {
	if src.intn(5) > 0 {
		return "hot"
	}
	return diffKeys[src.intn(len(diffKeys))]
}

// hotOp reports whether op is on the hot key of the busy bucket or window,
// whose ops are mostly small Takes: Refunds and Resets, which empty a
// lease, and Takes of much of the capacity are rarer there.
func hotOp(op spigot.Op) bool {
	return op.Key == "hot" && (op.Limit == diffBucket || op.Limit == diffWindow)
}

// cost draws the N of a Take of op: mostly 1 to 3, sometimes any from 0
// to the capacity, sometimes above it.
func cost(src source, op spigot.Op) int64 {
	c := op.Limit.Capacity()
	small, any := 70, 92
	if hotOp(op) {
		small, any = 93, 98
	}
	switch r := src.intn(100); {
	case r < small:
		return 1 + int64(src.intn(int(min(c, 3))))
	case r < any:
		return int64(src.intn(int(c + 1)))
	}
	return c + 1 + int64(src.intn(2))
}

// singleOp draws an op for Do.
func singleOp(src source) spigot.Op { return randomAction(src, target(src)) }

// randomAction gives op an action and an N: mostly Takes, and every other
// action.
func randomAction(src source, op spigot.Op) spigot.Op {
	c := op.Limit.Capacity()
	ends := [4]int{60, 75, 87, 96} // Take, TakeUpTo, Peek, Refund; then Reset
	if hotOp(op) {
		ends = [4]int{80, 88, 95, 99}
	}
	switch r := src.intn(100); {
	case r < ends[0]:
		op.Action, op.N = spigot.Take, cost(src, op)
	case r < ends[1]:
		op.Action, op.N = spigot.TakeUpTo, cost(src, op)
	case r < ends[2]:
		op.Action, op.N = spigot.Peek, int64(src.intn(int(c+2)))
	case r < ends[3]:
		op.Action, op.N = spigot.Refund, int64(src.intn(int(c+2)))
	default:
		op.Action, op.N = spigot.Reset, 0
	}
	return op
}

// batch draws 1 to 4 ops, a fifth of them on the limit and key of the op
// before, and has each filled in by fill.
func batch(src source, fill func(*spigot.Op)) []spigot.Op {
	ops := make([]spigot.Op, 1+src.intn(4))
	for i := range ops {
		if i > 0 && src.intn(5) == 0 {
			ops[i] = spigot.Op{Limit: ops[i-1].Limit, Key: ops[i-1].Key}
		} else {
			ops[i] = target(src)
		}
		fill(&ops[i])
	}
	return ops
}

// A differ applies steps to a lease Store and to a plain store, and
// fails the test at the first decision on which they differ.
type differ struct {
	t      testing.TB
	label  string // names the run: its seed
	clk    *clocktest.Clock
	plain  *memory.Store
	s      spigot.Store // the lease Store
	n      int          // steps applied
	recent []string     // the last few steps, for a failure's message
	hits   map[string]int64
	takes  map[string]int64 // Takes and TakeUpTos of N > 0, by limit
}

func newDiffer(t testing.TB, label string) *differ {
	d := &differ{t: t, label: label, clk: clocktest.New(t0), hits: map[string]int64{}, takes: map[string]int64{}}
	d.plain, _, d.s = oneReplica(t, d.clk, lease.Observer{
		Hit: func(_ context.Context, op spigot.Op) { d.hits[op.Limit.Name()]++ },
	})
	return d
}

// An outcome is what a store decided on a step: every op's decision (for
// a group, the combined decision first), a group's By, and any error.
type outcome struct {
	ds  []spigot.Decision
	by  int
	err error
}

func (o outcome) equal(p outcome) bool {
	return (o.err == nil) == (p.err == nil) && o.by == p.by && slices.Equal(o.ds, p.ds)
}

func (o outcome) String() string {
	if o.err != nil {
		return "error " + o.err.Error()
	}
	ds := make([]string, len(o.ds))
	for i, d := range o.ds {
		ds[i] = fmt.Sprintf("%+v", d)
	}
	s := "[" + strings.Join(ds, " ") + "]"
	if o.by >= 0 {
		s += fmt.Sprintf(" by %d", o.by)
	}
	return s
}

func apply(s spigot.Store, st diffStep) outcome {
	ctx := context.Background()
	switch st.kind {
	case single:
		d, err := s.Do(ctx, st.ops[0])
		return outcome{ds: []spigot.Decision{d}, by: -1, err: err}
	case allOrNone, independent:
		mode := spigot.AllOrNothing
		if st.kind == independent {
			mode = spigot.Independent
		}
		out := make([]spigot.Decision, len(st.ops))
		err := s.DoMulti(ctx, mode, st.ops, out)
		return outcome{ds: out, by: -1, err: err}
	}
	limits, keys := make([]spigot.Limit, len(st.ops)), make([]string, len(st.ops))
	for i, op := range st.ops {
		limits[i], keys[i] = op.Limit, op.Key
	}
	if st.oneKey {
		keys = keys[:1]
	}
	g, err := spigot.NewGroup(s, limits...).AllowN(ctx, st.ops[0].N, keys...)
	return outcome{ds: append([]spigot.Decision{g.Decision}, g.Each...), by: g.By, err: err}
}

// step applies st to both stores and fails at a difference.
func (d *differ) step(st diffStep) {
	d.t.Helper()
	d.clk.Advance(st.advance)
	for _, op := range st.ops {
		if (op.Action == spigot.Take || op.Action == spigot.TakeUpTo) && op.N > 0 { // a group's ops are Takes
			d.takes[op.Limit.Name()]++
		}
	}
	want := apply(d.plain, st)
	got := apply(d.s, st)
	at := fmt.Sprintf("step %d at t0+%v: %v", d.n, d.clk.Now().Sub(t0), st)
	if want.err != nil {
		d.t.Fatalf("%s: %s: the plain store failed: %v", d.label, at, want.err)
	}
	if !got.equal(want) {
		d.t.Fatalf("%s: %s:\n\tgot  %v\n\twant %v\nthe steps before it:\n\t%s", d.label, at, got, want, strings.Join(d.recent, "\n\t"))
	}
	d.recent = append(d.recent, at+": "+want.String())
	if len(d.recent) > 6 {
		d.recent = d.recent[1:]
	}
	d.n++
}

// TestDifferentialRandom: seeded random sequences of single ops (every
// action), all-or-nothing and independent batches (some with one key
// twice) and Groups, on buckets, fixed windows and the kinds that pass
// through, at instants that stay put, move by milliseconds, or by hours.
// Every decision of the lease Store equals the plain store's, and the
// busy bucket and busy window are served from leases for a share of their
// Takes, so that the equality is not that of a Store that asks the remote
// for everything.
func TestDifferentialRandom(t *testing.T) {
	const steps = 2500
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			d := newDiffer(t, fmt.Sprintf("seed %d", seed))
			src := &rngSource{rng: rand.New(rand.NewPCG(seed, 38)), steps: steps}
			for !src.done() {
				d.step(nextStep(src))
			}
			for _, l := range []spigot.Limit{diffBucket, diffWindow} {
				name := l.Name()
				hits, takes := d.hits[name], d.takes[name]
				t.Logf("%s: %d of %d Takes from leases", name, hits, takes)
				if hits*10 < takes {
					t.Errorf("%s: %d of %d Takes decided from leases; want at least a tenth", name, hits, takes)
				}
			}
		})
	}
}

// FuzzDifferential drives the comparison of TestDifferentialRandom from
// the fuzzer's bytes: each step's choices are read from them in turn.
func FuzzDifferential(f *testing.F) {
	f.Add([]byte{})
	// 40 Takes of 1 on the busy bucket's hot key at one instant, 9 bytes
	// each, which build a lease; then a Group of the busy bucket and the
	// busy window on the hot key.
	takes := make([]byte, 40*9)
	f.Add(takes)
	f.Add(append(takes, 0, 0, 90, 0, 1, 0, 1, 1, 4, 1, 0, 0))
	rng := rand.New(rand.NewPCG(38, 1))
	for range 4 {
		b := make([]byte, 600)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 20_000 {
			return // keep each input fast
		}
		d := newDiffer(t, fmt.Sprintf("an input of %d bytes", len(b)))
		src := &byteSource{b: b}
		for !src.done() {
			d.step(nextStep(src))
		}
	})
}
