package spigot_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/memory"
)

func TestCombine(t *testing.T) {
	// Each decision's RefillAfter names it: i ms for the i-th of its
	// case, 10+i ms for the combined decision of a case whose deciding
	// limit is the i-th.
	d := func(n, remaining int64, retry, reset time.Duration, refill int) spigot.Decision {
		return spigot.Decision{N: n, Remaining: remaining, RetryAfter: retry, ResetAfter: reset, RefillAfter: time.Duration(refill) * ms}
	}
	for _, c := range []struct {
		name string
		each []spigot.Decision
		want spigot.Decision
		by   int
	}{
		{"none", nil, spigot.Decision{}, -1},
		{"one", []spigot.Decision{d(1, 4, 0, 2*s, 1)}, d(1, 4, 0, 2*s, 1), 0},
		{"all allowed: the fewest remaining decides", []spigot.Decision{d(1, 9, 0, 1*s, 1), d(1, 2, 0, 5*s, 2), d(1, 2, 0, 3*s, 3)}, d(1, 2, 0, 5*s, 2), 1},
		{"one denied", []spigot.Decision{d(0, 9, 0, 1*s, 1), d(0, 0, 2*s, 5*s, 2)}, d(0, 0, 2*s, 5*s, 2), 1},
		{"the longest wait decides", []spigot.Decision{d(0, 0, 3*s, 3*s, 1), d(0, 9, 0, 1*s, 2), d(0, 0, 7*s, 7*s, 3), d(0, 1, 7*s, 9*s, 4)}, d(0, 0, 7*s, 9*s, 3), 2},
		{"never", []spigot.Decision{d(0, 0, 3*s, 3*s, 1), d(0, 5, spigot.Never, 0, 2)}, d(0, 0, spigot.Never, 3*s, 2), 1},
		{"degraded", []spigot.Decision{d(1, 5, 0, 1*s, 1), d(0, -1, 0, 0, 0)}, d(0, -1, 0, 1*s, 0), 1},
		{"take up to: the least moved", []spigot.Decision{d(3, 0, 0, 3*s, 1), d(5, 0, 0, 5*s, 2)}, d(3, 0, 0, 5*s, 1), 0},
	} {
		got, by := spigot.Combine(c.each)
		if got != c.want || by != c.by {
			t.Errorf("%s: Combine(%v) = %+v, %d; want %+v, %d", c.name, c.each, got, by, c.want, c.by)
		}
	}
}

// TestGroup: per address 10/s and per user 3 per second, one request at a
// time: a request that the user's limit denies is not charged to the
// address's.
func TestGroup(t *testing.T) {
	clk := clocktest.New(t0)
	ip := spigot.MustBucket("ip", 10, spigot.PerSecond(10))
	user := spigot.MustBucket("user", 3, spigot.PerSecond(1))
	g := spigot.NewGroup(memory.New(memory.WithClock(clk)), ip, user)
	ctx := context.Background()
	for i, want := range []struct {
		allowed bool
		by      int
		retry   time.Duration
		each    []spigot.Decision
	}{
		// RefillAfter: one token, 100 ms for the address, 1 s for the user.
		{true, 1, 0, []spigot.Decision{refill(taken(allow(9, 100*ms), 1), 100*ms), refill(taken(allow(2, 1*s), 1), 1*s)}},
		{true, 1, 0, []spigot.Decision{refill(taken(allow(8, 200*ms), 1), 100*ms), refill(taken(allow(1, 2*s), 1), 1*s)}},
		{true, 1, 0, []spigot.Decision{refill(taken(allow(7, 300*ms), 1), 100*ms), refill(taken(allow(0, 3*s), 1), 1*s)}},
		// Denied by the user's limit: the address's says what it holds.
		{false, 1, 1 * s, []spigot.Decision{refill(allow(7, 300*ms), 100*ms), refill(deny(0, 1*s, 3*s), 1*s)}},
		{false, 1, 1 * s, []spigot.Decision{refill(allow(7, 300*ms), 100*ms), refill(deny(0, 1*s, 3*s), 1*s)}},
	} {
		d, err := g.Allow(ctx, "10.0.0.1", "alice")
		if err != nil || d.Allowed() != want.allowed || d.By != want.by || d.RetryAfter != want.retry || fmt.Sprint(d.Each) != fmt.Sprint(want.each) {
			t.Errorf("request %d: %+v, %v; want allowed %v by %d retry %v each %v", i+1, d, err, want.allowed, want.by, want.retry, want.each)
		}
	}
	// The denials took nothing from the address: 7 left.
	if d, err := g.Peek(ctx, 7, "10.0.0.1", "bob"); err != nil || !d.Each[0].Allowed() || d.Each[0].Remaining != 7 {
		t.Errorf("Peek 7 of the address: %+v, %v; want allowed, 7 remaining", d, err)
	}
	// One key for every limit; Refund gives back to each.
	if d, err := g.AllowN(ctx, 2, "carol"); err != nil || !d.Allowed() || d.Each[0].Remaining != 8 || d.Each[1].Remaining != 1 {
		t.Errorf("AllowN(2, carol): %+v, %v", d, err)
	}
	if d, err := g.Refund(ctx, 2, "carol"); err != nil || d.Each[0].N != 2 || d.Each[1].Remaining != 3 {
		t.Errorf("Refund(2, carol): %+v, %v", d, err)
	}
	if got := g.Limits(); len(got) != 2 || got[0] != ip || got[1] != user {
		t.Errorf("Limits() = %v", got)
	}
}

func TestGroupBadInput(t *testing.T) {
	ip := spigot.MustBucket("ip", 10, spigot.PerSecond(10))
	g := spigot.NewGroup(memory.New(), ip, ip, ip)
	d, err := g.Allow(context.Background(), "a", "b")
	if err == nil || !strings.HasPrefix(err.Error(), "spigot: Group of 3 limits given 2 keys") || d.Allowed() || !d.Degraded() || len(d.Each) != 3 {
		t.Errorf("two keys for three limits: %+v, %v; want a denied, degraded decision and an error", d, err)
	}
	if d, err := spigot.NewGroup(memory.New(), ip, spigot.Limit{}).Allow(context.Background(), "a"); !errors.Is(err, spigot.ErrInvalidLimit) || d.Allowed() {
		t.Errorf("zero Limit: %+v, %v; want ErrInvalidLimit", d, err)
	}
	if d, err := g.AllowN(context.Background(), -1, "a"); !errors.Is(err, spigot.ErrInvalidCost) || d.Allowed() {
		t.Errorf("AllowN(-1): %+v, %v; want ErrInvalidCost", d, err)
	}
	defer func() {
		if recover() == nil {
			t.Error("NewGroup(nil) did not panic")
		}
	}()
	spigot.NewGroup(nil, ip)
}

// oneAtATime is a store that applies one op per call, as a user's store
// may: its DoMulti applies nothing.
type oneAtATime struct {
	spigot.Store
	calls atomic.Int64
}

func (s *oneAtATime) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	s.calls.Add(1)
	return s.Store.Do(ctx, op)
}

func (s *oneAtATime) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return fmt.Errorf("oneAtATime: %w", errors.ErrUnsupported)
}

// TestDoMultiFallback: DoMulti in a store that applies one op per call
// decides as the memory store does in one step, for random sets of ops
// over few keys: the same allowed sets with the same decisions, the same
// state after every set, and for a denied set a RetryAfter above 0 and no
// longer than the atomic store's.
func TestDoMultiFallback(t *testing.T) {
	clk := clocktest.New(t0)
	limits := []spigot.Limit{
		spigot.MustBucket("a", 5, spigot.PerSecond(2)),
		spigot.MustBucket("b", 3, spigot.Per(1, 3*time.Second)),
	}
	native := memory.New(memory.WithClock(clk))
	fallback := &oneAtATime{Store: memory.New(memory.WithClock(clk))}
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for i := range 2000 {
		clk.Advance(time.Duration(rng.IntN(700)) * ms)
		ops := make([]spigot.Op, 1+rng.IntN(4))
		for j := range ops {
			ops[j] = spigot.Op{Limit: limits[rng.IntN(2)], Key: fmt.Sprint(rng.IntN(2)), N: int64(rng.IntN(5))}
			if rng.IntN(4) == 0 {
				ops[j].Action = []spigot.Action{spigot.TakeUpTo, spigot.Peek}[rng.IntN(2)]
			}
		}
		want, got := make([]spigot.Decision, len(ops)), make([]spigot.Decision, len(ops))
		if err := native.DoMulti(ctx, spigot.AllOrNothing, ops, want); err != nil {
			t.Fatal(err)
		}
		if err := spigot.DoMulti(ctx, fallback, spigot.AllOrNothing, ops, got); err != nil {
			t.Fatalf("set %d, %v: %v", i, ops, err)
		}
		w, _ := spigot.Combine(want)
		g, _ := spigot.Combine(got)
		switch {
		case w.Allowed() != g.Allowed():
			t.Fatalf("set %d, %v: allowed %v, want %v: got %v, want %v", i, ops, g.Allowed(), w.Allowed(), got, want)
		case w.Allowed() && fmt.Sprint(got) != fmt.Sprint(want):
			t.Fatalf("set %d, %v: got %v, want %v", i, ops, got, want)
		case !w.Allowed() && (g.RetryAfter <= 0 || g.RetryAfter > w.RetryAfter):
			t.Fatalf("set %d, %v: combined RetryAfter %v, want in (0, %v]: got %v, want %v", i, ops, g.RetryAfter, w.RetryAfter, got, want)
		}
		for _, l := range limits {
			for _, k := range []string{"0", "1"} {
				op := spigot.Op{Limit: l, Key: k, Action: spigot.Peek}
				a, _ := native.Do(ctx, op)
				b, _ := fallback.Store.Do(ctx, op)
				if a != b {
					t.Fatalf("set %d, %v: then %v %q holds %+v, want %+v", i, ops, l, k, b, a)
				}
			}
		}
	}
}

// TestDoMultiOneAtATime: in a store that applies one op per call, a batch
// is one call per op, and an all-or-nothing set of one op or of none is
// that op or nothing, with no more calls than ops.
func TestDoMultiOneAtATime(t *testing.T) {
	s := &oneAtATime{Store: memory.New()}
	a, b := spigot.MustBucket("a", 5, spigot.PerSecond(1)), spigot.MustBucket("b", 5, spigot.PerSecond(1))
	ctx := context.Background()
	ops := []spigot.Op{{Limit: a, Key: "k", N: 1}, {Limit: b, Key: "k", N: 1}}
	out := make([]spigot.Decision, 2)
	if err := spigot.DoMulti(ctx, s, spigot.Independent, ops, out); err != nil || s.calls.Load() != 2 || out[0].N != 1 || out[1].N != 1 {
		t.Errorf("Independent: %v, %d calls, %v; want two calls that take 1 each", err, s.calls.Load(), out)
	}
	s.calls.Store(0)
	if err := spigot.DoMulti(ctx, s, spigot.AllOrNothing, ops[:1], out[:1]); err != nil || s.calls.Load() != 1 || out[0].N != 1 {
		t.Errorf("AllOrNothing of one op: %v, %d calls, %v; want one call that takes 1", err, s.calls.Load(), out[:1])
	}
	if err := spigot.DoMulti(ctx, s, spigot.AllOrNothing, nil, nil); err != nil || s.calls.Load() != 1 {
		t.Errorf("AllOrNothing of no ops: %v, %d calls; want nil and no call", err, s.calls.Load())
	}
	if err := spigot.DoMulti(ctx, s, spigot.AllOrNothing, ops, out[:1]); err == nil || errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("AllOrNothing with out too short: %v; want an error that says so", err)
	}
}

// parted is a store that applies ops all or nothing only within a part,
// as a cluster does within a hash slot: part names the part of an op, and
// do applies the ops of one part.
type parted struct {
	part func(op spigot.Op) uint64
	do   func(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error
}

func (p parted) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	out := make([]spigot.Decision, 1)
	err := p.do(ctx, spigot.Independent, []spigot.Op{op}, out)
	return out[0], err
}

func (p parted) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if mode == spigot.AllOrNothing && len(ops) > 1 {
		parts := make([]uint64, len(ops))
		for i, op := range ops {
			parts[i] = p.part(op)
		}
		if slices.ContainsFunc(parts, func(x uint64) bool { return x != parts[0] }) {
			return &store.PartsError{Parts: parts}
		}
	}
	return p.do(ctx, mode, ops, out)
}

// TestDoMultiParts: in a store that answers a PartsError, DoMulti applies
// the parts one by one (a part per key here, as a cluster's hash slots); a
// denial in a later part gives back what the earlier parts took, and the
// parts after it are decided without being applied.
func TestDoMultiParts(t *testing.T) {
	clk := clocktest.New(t0)
	m := memory.New(memory.WithClock(clk))
	lim := spigot.MustBucket("l", 3, spigot.PerSecond(1))
	ctx := context.Background()
	keyOrder := func(op spigot.Op) uint64 { return uint64(strings.Index("abcdzef", op.Key)) } // a part per key, in order
	// do runs in several goroutines at once.
	var mu sync.Mutex
	var batches, dry []int
	do := func(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
		mu.Lock()
		defer mu.Unlock()
		if mode == spigot.AllOrNothing {
			for _, op := range ops[1:] {
				if op.Key != ops[0].Key {
					t.Errorf("one part holds keys %q and %q", ops[0].Key, op.Key)
				}
			}
			if last := ops[len(ops)-1]; last.N > last.Limit.Capacity() {
				dry = append(dry, len(ops))
			}
		} else {
			batches = append(batches, len(ops))
		}
		return m.DoMulti(ctx, mode, ops, out)
	}
	st := parted{keyOrder, do}
	left := func(key string) int64 {
		d, _ := m.Do(ctx, spigot.Op{Limit: lim, Key: key, Action: spigot.Peek})
		return d.Remaining
	}
	if _, err := m.Do(ctx, spigot.Op{Limit: lim, Key: "z", N: 3}); err != nil { // z is empty
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c", "d", "z", "e", "f"}
	ops := make([]spigot.Op, len(keys))
	for i, k := range keys {
		ops[i] = spigot.Op{Limit: lim, Key: k, N: 2}
	}
	ops[0].Action, ops[0].N = spigot.TakeUpTo, 3
	out := make([]spigot.Decision, len(ops))
	if err := spigot.DoMulti(ctx, st, spigot.AllOrNothing, ops, out); err != nil {
		t.Fatal(err)
	}
	d, by := spigot.Combine(out)
	if d.Allowed() || ops[by].Key != "z" || d.RetryAfter != 2*s {
		t.Errorf("combined %+v by %v; want denied by z, RetryAfter 2s", d, ops[by])
	}
	for i, k := range keys {
		if out[i].N != 0 || left(k) != map[bool]int64{true: 0, false: 3}[k == "z"] {
			t.Errorf("%s: N %d, %d left; want nothing taken", k, out[i].N, left(k))
		}
		if k != "z" && !out[i].Allowed() {
			t.Errorf("%s: %+v; want allowed", k, out[i])
		}
	}
	// One batch gives back what a, b, c and d took, and one Peeks them;
	// e and f are each decided by a set made to be denied (one more op),
	// which applies nothing. Every key but z says what it holds: 3.
	if fmt.Sprint(batches, dry) != "[4 4] [2 2]" {
		t.Errorf("batches %v, dry runs %v; want [4 4] [2 2]", batches, dry)
	}
	for i, k := range keys {
		if k != "z" && out[i].Remaining != 3 {
			t.Errorf("%s: %+v; want Remaining 3, what it holds", k, out[i])
		}
	}

	// Allowed: every part charged.
	clk.Advance(3 * s)
	if err := spigot.DoMulti(ctx, st, spigot.AllOrNothing, ops, out); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if want := ops[i].N; out[i].N != want || left(k) != 3-want {
			t.Errorf("allowed set, %s: %+v, %d left; want %d taken", k, out[i], left(k), want)
		}
	}

	// A Refund or Reset cannot be undone across parts.
	ops[1].Action = spigot.Reset
	if err := spigot.DoMulti(ctx, st, spigot.AllOrNothing, ops, out); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("a Reset among parts: %v, want ErrUnsupported", err)
	}
	if left("a") != 0 || left("b") != 1 {
		t.Errorf("after the refused set: a %d, b %d left; want 0, 1: nothing applied", left("a"), left("b"))
	}
}

func TestCheckMulti(t *testing.T) {
	b := spigot.MustBucket("b", 1, spigot.PerSecond(1))
	ok := []spigot.Op{{Limit: b, Key: "k"}}
	for _, c := range []struct {
		mode spigot.Mode
		ops  []spigot.Op
		out  int
		want error
	}{
		{spigot.AllOrNothing, ok, 1, nil},
		{spigot.Independent, nil, 0, nil},
		{spigot.Mode(9), ok, 1, errors.ErrUnsupported},
		{spigot.Independent, ok, 2, nil},
		{spigot.Independent, []spigot.Op{{Limit: b, N: -1}}, 1, spigot.ErrInvalidCost},
		{spigot.Independent, []spigot.Op{{Key: "k"}}, 1, spigot.ErrInvalidLimit},
	} {
		err := store.CheckMulti(c.mode, c.ops, make([]spigot.Decision, c.out))
		if c.want == nil && len(c.ops) != c.out {
			if err == nil {
				t.Errorf("CheckMulti(%d ops, %d decisions) = nil; want an error", len(c.ops), c.out)
			}
			continue
		}
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("CheckMulti(%v, %v) = %v; want %v", c.mode, c.ops, err, c.want)
		}
	}
}
