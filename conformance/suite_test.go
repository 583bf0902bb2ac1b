package conformance

// The suite's own tests: the suite must fail a broken store, naming what
// it got wrong, and its hand-computed tables must agree with an
// implementation of the model that does not use store.Apply.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store"
)

// recorder is a testing.TB that records failures instead of failing the
// test. Like testing.T, its Fatal and Skip methods end the goroutine, so a
// case must run in a goroutine of its own (see runCase).
type recorder struct {
	testing.TB // the real test, for Helper, Context, Cleanup, Log

	mu      sync.Mutex
	msgs    []string
	failed  bool
	skipped bool
}

func (r *recorder) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	if msg != "" {
		r.msgs = append(r.msgs, msg)
	}
}

func (r *recorder) Error(args ...any)                 { r.fail(fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) { r.fail(fmt.Sprintf(format, args...)) }
func (r *recorder) Fail()                             { r.fail("") }
func (r *recorder) FailNow()                          { r.fail(""); runtime.Goexit() }
func (r *recorder) Fatal(args ...any)                 { r.Error(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); runtime.Goexit() }
func (r *recorder) SkipNow()                          { r.mu.Lock(); r.skipped = true; r.mu.Unlock(); runtime.Goexit() }
func (r *recorder) Skip(args ...any)                  { r.SkipNow() }
func (r *recorder) Skipf(format string, args ...any)  { r.SkipNow() }

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) Skipped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skipped
}

// record runs f with a recorder, in a goroutine of its own, and returns
// what it recorded.
func record(t *testing.T, f func(testing.TB)) *recorder {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

// runCase runs c against the store newStore builds on a fresh fake clock.
func runCase(t *testing.T, c testCase, newStore func(clk clock.Clock) spigot.Store) *recorder {
	t.Helper()
	clk := clocktest.New(t0)
	return record(t, func(r testing.TB) { c.run(r, env{s: newStore(clk), clk: clk}) })
}

// takeStore is a store on store.Apply, like the example's MapStore, with
// hooks that break it on purpose.
type takeStore struct {
	clk clock.Clock

	// apply replaces store.Apply.
	apply func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision)
	// name replaces the limit's name in the state's key.
	name func(b spigot.Limit) string
	// Skip checks of the input and of the context.
	noCheck, noContext bool
	// resetExisted makes Reset's N 1 when the key had state, rather than
	// what its bucket lacked.
	resetExisted bool
	// multi makes DoMulti apply several ops, one by one; leaky makes an
	// all-or-nothing batch keep what its allowed ops took.
	multi, leaky bool
	// fresh decides each op of an all-or-nothing batch on the state
	// before the batch; peekDenies makes a denied Peek deny the batch;
	// anyOut applies as many ops as out has room for.
	fresh, peekDenies, anyOut bool

	mu sync.Mutex
	m  map[[2]string]held
}

type held struct {
	b spigot.Limit
	s store.State
}

func newTakeStore(clk clock.Clock) *takeStore {
	return &takeStore{
		clk:   clk,
		apply: apply,
		name:  spigot.Limit.Name,
		m:     make(map[[2]string]held),
	}
}

// apply is store.Apply on a copy of s: it returns the new state and the
// decision.
func apply(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
	d, _ := store.Apply(op, &s, now) // an invalid op's error leaves s as it was
	return s, d
}

// takeOp applies a Take of cost tokens on b.
func takeOp(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
	return apply(spigot.Op{Limit: b, Action: spigot.Take, N: cost}, s, now)
}

func (s *takeStore) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := op.Check(); err != nil && !s.noCheck {
		return spigot.Decision{}, err
	}
	if err := ctx.Err(); err != nil && !s.noContext {
		return spigot.Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{s.name(op.Limit), op.Key}
	if op.Action == spigot.Reset && s.resetExisted {
		_, ok := s.m[k]
		delete(s.m, k)
		d := spigot.Decision{Remaining: op.Limit.Capacity()}
		if ok {
			d.N = 1
		}
		return d, nil
	}
	next, d := s.apply(op, s.m[k].s, s.clk.Now())
	s.m[k] = held{op.Limit, next}
	return d, nil
}

func (s *takeStore) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if s.anyOut && len(out) != len(ops) {
		n := min(len(ops), len(out))
		ops, out = ops[:n], out[:n]
	}
	if !s.multi {
		return fmt.Errorf("takeStore: one op per call: %w", errors.ErrUnsupported)
	}
	if len(out) != len(ops) || mode > spigot.AllOrNothing {
		return store.CheckMulti(mode, ops, out)
	}
	for _, op := range ops { // an invalid op fails the call: nothing applied
		if err := op.Check(); err != nil && !s.noCheck {
			return err
		}
	}
	if mode == spigot.Independent {
		for i, op := range ops {
			d, err := s.Do(ctx, op)
			if err != nil {
				return err
			}
			out[i] = d
		}
		return nil
	}
	// AllOrNothing: decide on copies, and keep them only if all allowed.
	s.mu.Lock()
	defer s.mu.Unlock()
	next, all, err := s.decide(ops, out)
	if err != nil || !all && !s.leaky {
		return err
	}
	for k, h := range next {
		s.m[k] = h
	}
	return nil
}

// decide decides an all-or-nothing batch, under s.mu: it returns the
// state each key will have if the batch is kept, and whether it is (no
// Take or TakeUpTo was denied); when it is not, every N is 0 (but with
// leaky).
func (s *takeStore) decide(ops []spigot.Op, out []spigot.Decision) (map[[2]string]held, bool, error) {
	next := map[[2]string]held{}
	all := true
	denied := make([]bool, len(ops))
	for i, op := range ops {
		if err := op.Check(); err != nil {
			return nil, false, err
		}
		k := [2]string{s.name(op.Limit), op.Key}
		h, ok := next[k]
		if !ok || s.fresh {
			h = s.m[k]
		}
		h.b = op.Limit
		h.s, out[i] = s.apply(op, h.s, s.clk.Now())
		next[k] = h
		denies := op.Action == spigot.Take || op.Action == spigot.TakeUpTo || s.peekDenies && op.Action == spigot.Peek
		denied[i] = !out[i].Allowed() && denies
		all = all && !denied[i]
	}
	if !all && !s.leaky {
		// Each op that did not deny is a Peek on its key as the batch
		// found it.
		for i, op := range ops {
			if !denied[i] {
				h := s.m[[2]string{s.name(op.Limit), op.Key}]
				_, out[i] = s.apply(store.PeekOf(op), h.s, s.clk.Now())
			}
			out[i].N = 0
		}
	}
	return next, all, nil
}

// lenStore adds Len to a takeStore.
type lenStore struct {
	*takeStore
	countFull bool // count keys whose bucket is full again too
}

func (s lenStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, h := range s.m {
		if _, a := takeOp(h.b, h.s, s.clk.Now(), 0); a.ResetAfter > 0 || s.countFull {
			n++
		}
	}
	return n
}

// A mutant is a broken store, and the cases that must catch it.
type mutant struct {
	name     string
	store    func(clk clock.Clock) spigot.Store
	mustFail []string // names of cases, or their prefix ending in '*'
	msg      string   // a part of a failure message that names the fault
}

// mutate returns a store whose Takes go through f.
func mutate(f func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision)) func(clock.Clock) spigot.Store {
	return mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
		if op.Action == spigot.Take {
			return f(op.Limit, s, now, op.N)
		}
		return apply(op, s, now)
	})
}

// mutateOps returns a store whose operations go through f, in Do and in
// a DoMulti of several.
func mutateOps(f func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision)) func(clock.Clock) spigot.Store {
	return func(clk clock.Clock) spigot.Store {
		s := newTakeStore(clk)
		s.apply = f
		s.multi = true
		return s
	}
}

// multiStore returns a takeStore with DoMulti of several, broken by f.
func multiStore(f func(s *takeStore)) func(clock.Clock) spigot.Store {
	return func(clk clock.Clock) spigot.Store {
		s := newTakeStore(clk)
		s.multi = true
		f(s)
		return s
	}
}

// ignoreCost takes at most 1 token.
func ignoreCost(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
	return takeOp(b, s, now, min(cost, 1))
}

// neverRefill keeps a key at the instant of its first request.
func neverRefill(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
	if s.Scale != 0 {
		now = time.UnixMicro(s.Stamp)
	}
	return takeOp(b, s, now, cost)
}

var mutants = []mutant{
	{
		// Before FullAt, Take carried a state over a config change until
		// it refilled under the new config.
		name: "ignores FullAt",
		store: mutate(func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
			if s.Kind == b.Kind() {
				s.FullAt = math.MaxInt64 // read the state as a bucket's, however long ago it was full
			}
			return takeOp(b, s, now, cost)
		}),
		mustFail: []string{"full-again-forgets"},
		msg:      "Remaining = 2, want 10",
	},
	{
		// x/time/rate moves its stamp back when time goes back, so the
		// time between refills twice when the clock catches up.
		name: "moves its stamp back",
		store: mutate(func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
			if s.Scale != 0 && now.UnixMicro() < s.Stamp {
				s.Stamp = now.UnixMicro()
			}
			return takeOp(b, s, now, cost)
		}),
		mustFail: []string{"clock-steps-back"},
		msg:      "RetryAfter = 1s, want 2s",
	},
	{
		// A store that loses precision on waits of centuries, as float64
		// arithmetic near 2^53 does.
		name: "loses precision on long waits",
		store: mutate(func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
			next, a := takeOp(b, s, now, cost)
			if a.ResetAfter > 0 && a.ResetAfter != spigot.Never {
				a.ResetAfter = time.Duration(float64(a.ResetAfter) * (1 + 1e-12)).Round(time.Millisecond)
			}
			return next, a
		}),
		mustFail: []string{"slowest-exact-rate"},
		msg:      "ResetAfter",
	},
	{
		name: "a leaky bucket without Delay",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			next, d := apply(op, s, now)
			d.Delay = 0
			return next, d
		}),
		mustFail: []string{"leaky-bucket-queue", "kind-reuse", "kinds-random-operations"},
		msg:      "Delay = 0s, want 10ms",
	},
	{
		// A store from before RefillAfter.
		name: "without RefillAfter",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			next, d := apply(op, s, now)
			d.RefillAfter = 0
			return next, d
		}),
		mustFail: []string{"exact-fields-7-per-10s", "random-operations", "kinds-random-operations", "refill-after"},
		msg:      "RefillAfter = 0s, want 1.429s",
	},
	{
		// The time until full, draft-10's t, for the effective window.
		name: "RefillAfter is the time until full",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			next, d := apply(op, s, now)
			if d.ResetAfter > 0 {
				d.RefillAfter = d.ResetAfter
			}
			return next, d
		}),
		mustFail: []string{"exact-fields-7-per-10s", "random-operations", "kinds-random-operations", "refill-after"},
		msg:      "RefillAfter = 10s, want 1.429s",
	},
	{
		name: "a sliding window counts its own window alone",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			if op.Limit.Kind() == spigot.SlidingWindow {
				op.Limit = spigot.Must(spigot.NewFixedWindow(op.Limit.Name(), op.Limit.Rate(), 0))
				if s.Kind == spigot.SlidingWindow {
					s.Kind, s.Prev = spigot.FixedWindow, 0
				}
			}
			return apply(op, s, now)
		}),
		mustFail: []string{"sliding-window-weighted", "sliding-window-actions", "kinds-random-operations"},
		msg:      "ResetAfter = 1s, want 2s",
	},
	{
		name: "fixed windows without their offset",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			if op.Limit.Kind() == spigot.FixedWindow {
				op.Limit = spigot.Must(spigot.NewFixedWindow(op.Limit.Name(), op.Limit.Rate(), 0))
			}
			return apply(op, s, now)
		}),
		mustFail: []string{"fixed-window-offset", "kinds-random-operations"},
		msg:      "ResetAfter = 20h55m55s, want 1h55m55s",
	},
	{
		name: "a state of another kind is a whole limit",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			if s.Kind != op.Limit.Kind() {
				s = store.State{}
			}
			return apply(op, s, now)
		}),
		mustFail: []string{"kind-reuse"},
		msg:      "allowed, want denied",
	},
	{
		name: "a sliding log forgets its tokens at once",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			next, d := apply(op, s, now)
			if op.Limit.Kind() == spigot.SlidingLog && op.Action != spigot.Peek {
				next = store.State{}
			}
			return next, d
		}),
		mustFail: []string{"sliding-log-password-resets", "sliding-log-actions", "kinds-random-operations"},
		msg:      "Remaining = 4, want 3",
	},
	{
		name: "TakeUpTo takes all or nothing",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			if op.Action == spigot.TakeUpTo {
				op.Action = spigot.Take
			}
			return apply(op, s, now)
		}),
		mustFail: []string{"take-up-to", "random-operations", "multi-mixed-costs"},
		msg:      "denied, want allowed",
	},
	{
		name: "Refund reports what it was asked",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			next, d := apply(op, s, now)
			if op.Action == spigot.Refund {
				d.N = op.N
			}
			return next, d
		}),
		mustFail: []string{"refund", "random-operations"},
		msg:      "N = 10, want 3",
	},
	{
		name: "Refund drops fractions",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			next, d := apply(op, s, now)
			if op.Action == spigot.Refund && next.Scale > 0 {
				next.Tokens -= next.Tokens % next.Scale
			}
			return next, d
		}),
		mustFail: []string{"take-then-refund"},
		msg:      "as if neither happened",
	},
	{
		name: "Peek takes",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			if op.Action == spigot.Peek {
				op.Action = spigot.Take
				next, d := apply(op, s, now)
				d.N = 0
				return next, d
			}
			return apply(op, s, now)
		}),
		mustFail: []string{"peek", "random-operations", "multi-mixed-costs"},
		msg:      "Remaining = 0, want 3",
	},
	{
		// spigot.DoMulti's fallback gives back what a denied set took.
		name: "Refund gives nothing back",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			if op.Action == spigot.Refund {
				op.Action, op.N = spigot.Take, 0
			}
			return apply(op, s, now)
		}),
		mustFail: []string{"refund", "take-then-refund", "random-operations", "multi-fallback"},
		msg:      "Refund 2): N = 0, want 2",
	},
	{
		name: "Reset resets nothing",
		store: mutateOps(func(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
			if op.Action == spigot.Reset {
				op.Action = spigot.Peek
			}
			return apply(op, s, now)
		}),
		mustFail: []string{"reset", "random-operations"},
	},
	{
		name: "an unknown action takes",
		store: func(clk clock.Clock) spigot.Store {
			s := newTakeStore(clk)
			s.noCheck = true
			s.apply = func(op spigot.Op, st store.State, now time.Time) (store.State, spigot.Decision) {
				if op.Action > spigot.Peek {
					op.Action = spigot.Take
				}
				return apply(op, st, now)
			}
			return s
		},
		mustFail: []string{"unsupported"},
		msg:      "want an error matching errors.ErrUnsupported",
	},
	{
		name:  "charges a denied all-or-nothing batch in part",
		store: multiStore(func(s *takeStore) { s.leaky = true }),
		mustFail: []string{"multi-all-or-nothing", "multi-duplicates", "multi-mixed-costs", "multi-over-capacity",
			"multi-atomic-concurrent"},
		msg: "neither is charged",
	},
	{
		name:     "decides each op of a batch on the state before it",
		store:    multiStore(func(s *takeStore) { s.fresh = true }),
		mustFail: []string{"multi-all-or-nothing", "multi-duplicates"},
		msg:      "one key twice is charged together",
	},
	{
		name:     "a denied Peek denies the batch",
		store:    multiStore(func(s *takeStore) { s.peekDenies = true }),
		mustFail: []string{"multi-mixed-costs", "multi-duplicates", "multi-over-capacity"},
		msg:      "a denied Peek does not deny the set",
	},
	{
		name:     "DoMulti ignores the length of out",
		store:    multiStore(func(s *takeStore) { s.anyOut = true }),
		mustFail: []string{"multi-empty"},
		msg:      "out must be as long as ops",
	},
	{
		name: "decides a batch, then writes it, in two steps",
		store: func(clk clock.Clock) spigot.Store {
			s := &twoStepStore{takeStore: newTakeStore(clk)}
			s.multi = true
			s.gate.wg.Add(2)
			return s
		},
		mustFail: []string{"multi-atomic-concurrent"},
		msg:      "a set was charged in part",
	},
	{
		name:     "ignores the cost",
		store:    mutate(ignoreCost),
		mustFail: []string{"burst-weighted", "cost-over-capacity", "concurrent", "never-more-than", "retry-after-*"},
		msg:      "allowed, want denied",
	},
	{
		name:     "never refills",
		store:    mutate(neverRefill),
		mustFail: []string{"burst", "steady-refill", "refill-fractions", "retry-after-*", "never-more-than"},
		msg:      "denied, want allowed",
	},
	{
		name: "reads the system clock",
		store: func(clock.Clock) spigot.Store {
			return newTakeStore(clock.System())
		},
		mustFail: []string{"steady-refill", "refill-fractions", "retry-after-*", "never-more-than"},
	},
	{
		name: "RetryAfter 1ms short",
		store: mutate(func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
			next, a := takeOp(b, s, now, cost)
			if !a.Allowed() && a.RetryAfter != spigot.Never {
				a.RetryAfter -= time.Millisecond
			}
			return next, a
		}),
		mustFail: []string{"burst", "exact-fields-*", "retry-after-*", "never-more-than"},
		msg:      "RetryAfter = 2.999s, want 3s",
	},
	{
		name: "RetryAfter 1ms long",
		store: mutate(func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
			next, a := takeOp(b, s, now, cost)
			if !a.Allowed() && a.RetryAfter != spigot.Never {
				a.RetryAfter += time.Millisecond
			}
			return next, a
		}),
		mustFail: []string{"burst", "exact-fields-*", "retry-after-*", "never-more-than"},
		msg:      "RetryAfter = 3.001s, want 3s",
	},
	{
		name: "RetryAfter Never is 0",
		store: mutate(func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
			next, a := takeOp(b, s, now, cost)
			if a.RetryAfter == spigot.Never {
				a.RetryAfter = 0
			}
			return next, a
		}),
		mustFail: []string{"cost-over-capacity", "capacity-0", "multi-over-capacity"},
		msg:      "RetryAfter = 0s, want Never",
	},
	{
		name: "ResetAfter rounded down",
		store: mutate(func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
			next, a := takeOp(b, s, now, cost)
			if next.Scale != 0 { // not the zero State of a full bucket
				us := (b.Capacity()*scaleOf(b) - next.Tokens) / refillOf(b)
				a.ResetAfter = time.Duration(us/1000) * time.Millisecond
			}
			return next, a
		}),
		mustFail: []string{"exact-fields-7-per-10s", "retry-after-3-per-s", "retry-after-7-per-10s"},
		msg:      "ResetAfter = ",
	},
	{
		name: "Remaining rounded up",
		store: mutate(func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
			next, a := takeOp(b, s, now, cost)
			if next.Scale != 0 { // not the zero State of a full bucket
				a.Remaining = (next.Tokens + next.Scale - 1) / next.Scale
			}
			return next, a
		}),
		mustFail: []string{"refill-fractions", "never-more-than"},
		msg:      "Remaining = 1, want 0",
	},
	{
		name: "charges denied requests",
		store: mutate(func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
			next, a := takeOp(b, s, now, cost)
			if !a.Allowed() && a.RetryAfter != spigot.Never {
				next.Tokens = 0 // takes what there was
			}
			return next, a
		}),
		mustFail: []string{"denied-takes-nothing", "retry-after-3-per-s", "never-more-than"},
	},
	{
		name: "peeks take a token",
		store: mutate(func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
			if cost == 0 {
				if next, a := takeOp(b, s, now, 1); a.Allowed() {
					return next, a
				}
			}
			return takeOp(b, s, now, cost)
		}),
		mustFail: []string{"cost-0", "refill-fractions"},
	},
	{
		name: "a config change refills",
		store: func(clk clock.Clock) spigot.Store {
			s := newTakeStore(clk)
			s.name = spigot.Limit.String // state keyed by name and config
			return s
		},
		mustFail: []string{"config-change"},
		msg:      "Remaining = 20, want 3",
	},
	{
		name: "a config change keeps fractions across scales",
		store: mutate(func(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
			if s.Scale != 0 && s.Scale != scaleOf(b) { // convert exactly, rounding down
				s.Tokens = s.Tokens * scaleOf(b) / s.Scale
				s.Scale = scaleOf(b)
			}
			return takeOp(b, s, now, cost)
		}),
		mustFail: []string{"config-change"},
		msg:      "ResetAfter = 3.75s, want 4s",
	},
	{
		name: "ignores bucket names",
		store: func(clk clock.Clock) spigot.Store {
			s := newTakeStore(clk)
			s.name = func(spigot.Limit) string { return "" }
			return s
		},
		mustFail: []string{"bucket-names"},
	},
	{
		name: "Reset reports whether the key had state",
		store: func(clk clock.Clock) spigot.Store {
			s := newTakeStore(clk)
			s.resetExisted = true
			return s
		},
		mustFail: []string{"reset"},
		msg:      "bucket is full",
	},
	{
		name: "accepts bad input",
		store: func(clk clock.Clock) spigot.Store {
			s := newTakeStore(clk)
			s.noCheck = true
			return s
		},
		mustFail: []string{"invalid-input"},
		msg:      "want an error matching spigot: invalid limit",
	},
	{
		name: "ignores the context",
		store: func(clk clock.Clock) spigot.Store {
			s := newTakeStore(clk)
			s.noContext = true
			return s
		},
		mustFail: []string{"cancelled-context"},
		msg:      "want an error matching context canceled",
	},
	{
		name: "not atomic",
		store: func(clk clock.Clock) spigot.Store {
			return &racyStore{takeStore: newTakeStore(clk)}
		},
		mustFail: []string{"concurrent"},
		msg:      "must be atomic",
	},
	{
		name: "Len counts full buckets",
		store: func(clk clock.Clock) spigot.Store {
			return lenStore{takeStore: newTakeStore(clk), countFull: true}
		},
		mustFail: []string{"ttl"},
		msg:      "Len() at t0+1s = 600, want 500",
	},
}

// racyStore reads a key's state and writes it back in two critical
// sections, and lets the first two requests on a key both read before
// either writes, so it loses an update for sure.
type racyStore struct {
	*takeStore
	gates sync.Map // key → *gate
}

// gate holds the first two requests on a key until both have read.
type gate struct {
	n  atomic.Int32
	wg sync.WaitGroup
}

func (s *racyStore) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := op.Check(); err != nil {
		return spigot.Decision{}, err
	}
	b := op.Limit
	k := [2]string{b.Name(), op.Key}
	s.mu.Lock()
	state := s.m[k].s
	s.mu.Unlock()

	g := new(gate)
	g.wg.Add(2)
	if v, loaded := s.gates.LoadOrStore(k, g); loaded {
		g = v.(*gate)
	}
	if g.n.Add(1) <= 2 { // the first two requests read the same state
		g.wg.Done()
		g.wg.Wait()
	}

	next, a := apply(op, state, s.clk.Now())
	s.mu.Lock()
	s.m[k] = held{b, next}
	s.mu.Unlock()
	return a, nil
}

func (s *racyStore) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return fmt.Errorf("racyStore: one op per call: %w", errors.ErrUnsupported)
}

// twoStepStore decides an all-or-nothing batch in one critical section
// and writes what it decided in another, and lets the first two batches
// both decide before either writes, so that the second overwrites what
// the first took from a key both name: the first is charged in part.
type twoStepStore struct {
	*takeStore
	gate gate // Add(2) before use
}

func (s *twoStepStore) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if mode != spigot.AllOrNothing || len(ops) < 2 || len(out) != len(ops) {
		return s.takeStore.DoMulti(ctx, mode, ops, out)
	}
	s.mu.Lock()
	next, all, err := s.decide(ops, out)
	s.mu.Unlock()
	if err != nil || !all {
		return err
	}
	if s.gate.n.Add(1) <= 2 {
		s.gate.wg.Done()
		s.gate.wg.Wait()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, h := range next {
		s.m[k] = h
	}
	return nil
}

// matches reports whether case name is one of patterns, where a pattern
// ending in '*' matches a prefix.
func matches(name string, patterns []string) bool {
	for _, p := range patterns {
		if p == name || strings.HasSuffix(p, "*") && strings.HasPrefix(name, p[:len(p)-1]) {
			return true
		}
	}
	return false
}

// TestSuiteCatchesMutants runs every case against broken stores: the cases
// named for each must fail it, with a message that says what is wrong.
func TestSuiteCatchesMutants(t *testing.T) {
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			var msgs []string
			for _, c := range cases {
				if !matches(c.name, m.mustFail) {
					continue
				}
				r := runCase(t, c, m.store)
				if r.Skipped() || !r.Failed() {
					t.Errorf("case %s passed the broken store; it must fail it", c.name)
				} else if len(r.msgs) > 0 {
					t.Logf("case %s: %s", c.name, r.msgs[0])
				}
				msgs = append(msgs, r.msgs...)
			}
			if m.msg != "" && !slices.ContainsFunc(msgs, func(s string) bool { return strings.Contains(s, m.msg) }) {
				t.Errorf("no failure message contains %q; got:\n%s", m.msg, strings.Join(msgs, "\n"))
			}
		})
	}
}

// TestSuitePassesCorrectStores checks the harness of the test above: the
// unbroken takeStore passes every case through the recorder, with and
// without DoMulti of several ops, and the Len case runs (is not skipped)
// when the store has Len.
func TestSuitePassesCorrectStores(t *testing.T) {
	for _, multi := range []bool{false, true} {
		for _, c := range cases {
			r := runCase(t, c, func(clk clock.Clock) spigot.Store {
				s := newTakeStore(clk)
				s.multi = multi
				return lenStore{takeStore: s}
			})
			// The cases of DoMulti of several skip a store without it,
			// but for those that need only Do.
			multiCase := strings.HasPrefix(c.name, "multi-") &&
				!slices.Contains([]string{"multi-empty", "multi-atomic-concurrent", "multi-fallback"}, c.name)
			if r.Failed() || r.Skipped() != (multiCase && !multi) {
				t.Errorf("case %s (DoMulti of several: %v): the correct store failed, or skipped (%v): %s", c.name, multi, r.Skipped(), strings.Join(r.msgs, "; "))
			}
		}
	}
	r := runCase(t, testCase{"ttl", testTTL}, func(clk clock.Clock) spigot.Store { return newTakeStore(clk) })
	if !r.Skipped() || r.Failed() {
		t.Errorf("the ttl case on a store without Len: skipped %v, failed %v; want skipped", r.Skipped(), r.Failed())
	}
}

// TestRealTimeCatchesMutants runs the real-time cases that matter against
// a few broken stores on the system clock.
func TestRealTimeCatchesMutants(t *testing.T) {
	for _, m := range []struct {
		name  string
		store spigot.Store
		cases []string
	}{
		{"ignores the cost", mutate(ignoreCost)(clock.System()), []string{"burst-then-denial", "cost-over-capacity", "refill"}},
		{"never refills", mutate(neverRefill)(clock.System()), []string{"retry-after", "refill"}},
		{"charges a denied all-or-nothing batch in part", multiStore(func(s *takeStore) { s.leaky = true })(clock.System()),
			[]string{"multi", "multi-atomic-concurrent"}},
		{"DoMulti ignores the length of out", multiStore(func(s *takeStore) { s.anyOut = true })(clock.System()), []string{"multi-empty"}},
	} {
		t.Run(m.name, func(t *testing.T) {
			for _, c := range realTimeCases {
				if !slices.Contains(m.cases, c.name) {
					continue
				}
				r := record(t, func(r testing.TB) { c.run(r, env{s: m.store, suffix: fmt.Sprintf("-%08x", runID())}) })
				if !r.Failed() {
					t.Errorf("real-time case %s passed the broken store; it must fail it", c.name)
				}
			}
		})
	}
}

// modelStore runs the suite's reference model (model.go) instead of
// store.Apply, so that Run against it checks the tables of expected
// admissions, worked out by hand, against an implementation other than
// store.Apply (the memory store's tests check them against store.Apply).
type modelStore struct {
	clk clock.Clock
	mu  sync.Mutex
	m   map[[2]string]modelEntry
}

// get returns key's model under b's config; with keep false (a Peek), it
// leaves the stored model as it was.
func (s *modelStore) get(b spigot.Limit, key string, keep bool) keyModel {
	k := [2]string{b.Name(), key}
	var m keyModel
	if e, ok := s.m[k]; ok {
		m = carry(e, b, s.clk.Now())
	} else {
		m = newKeyModel(b)
	}
	if keep {
		s.m[k] = modelEntry{b, m}
	}
	return m
}

func (s *modelStore) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := op.Check(); err != nil {
		return spigot.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return spigot.Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return refApply(s.get(op.Limit, op.Key, op.Action != spigot.Peek), s.clk.Now(), op.Action, op.N), nil
}

// DoMulti applies several ops, so that the tables of the cases of
// several ops are checked against the model too.
func (s *modelStore) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if err := store.CheckMulti(mode, ops, out); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if mode == spigot.Independent {
		for i, op := range ops {
			out[i], _ = s.Do(ctx, op)
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	next := make(map[[2]string]modelEntry) // each key's model if the set is kept
	denied := false
	for i, op := range ops {
		k := [2]string{op.Limit.Name(), op.Key}
		e, ok := next[k]
		switch {
		case !ok:
			e = modelEntry{op.Limit, s.get(op.Limit, op.Key, false).clone()}
		case e.l != op.Limit:
			e = modelEntry{op.Limit, carry(e, op.Limit, now).clone()}
		}
		next[k] = e
		out[i] = refApply(e.m, now, op.Action, op.N)
		denied = denied || !out[i].Allowed() && (op.Action == spigot.Take || op.Action == spigot.TakeUpTo)
	}
	if denied {
		// Each op that did not deny is a Peek on its key as the set found
		// it.
		for i, op := range ops {
			if out[i].Allowed() || op.Action != spigot.Take && op.Action != spigot.TakeUpTo {
				p := store.PeekOf(op)
				out[i] = refApply(s.get(op.Limit, op.Key, false).clone(), now, p.Action, p.N)
			}
			out[i].N = 0
		}
		return nil
	}
	for k, m := range next {
		s.m[k] = m
	}
	return nil
}

func TestModelStore(t *testing.T) {
	Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
		return &modelStore{clk: clk, m: make(map[[2]string]modelEntry)}
	})
}

// scaleOf and refillOf return a bucket's scaled units (see store.Scaled).
func scaleOf(l spigot.Limit) int64  { s, _ := store.Scaled(l); return s }
func refillOf(l spigot.Limit) int64 { _, r := store.Scaled(l); return r }
