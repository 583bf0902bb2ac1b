package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// The cases of several operations per call: a store's DoMulti, and
// spigot.DoMulti's fallback for a store that applies one op per call.

// modeName returns the name of a DoMulti mode, as in "AllOrNothing".
func modeName(m spigot.Mode) string {
	switch m {
	case spigot.Independent:
		return "Independent"
	case spigot.AllOrNothing:
		return "AllOrNothing"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// doMulti calls DoMulti, and skips the case when the store cannot apply
// several ops in one call.
func doMulti(t testing.TB, e env, mode spigot.Mode, ops []spigot.Op) []spigot.Decision {
	t.Helper()
	out := make([]spigot.Decision, len(ops))
	err := e.s.DoMulti(t.Context(), mode, ops, out)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		t.Skipf("the store cannot apply several ops in one DoMulti: %v", err)
	case err != nil:
		t.Fatalf("DoMulti (%v) of %v: unexpected error: %v", modeName(mode), ops, err)
	}
	return out
}

// peekAll checks what each limit of key holds, by Peek, and reports
// whether every one holds what want says.
func peekAll(t testing.TB, e env, why string, want map[spigot.Op]int64) bool {
	t.Helper()
	ok := true
	for op, n := range want {
		op.Action, op.N = spigot.Peek, 0
		if d, err := e.s.Do(t.Context(), op); err != nil || d.Remaining != n {
			t.Errorf("%v %q: Remaining %d, %v; want %d: %s", op.Limit, op.Key, d.Remaining, err, n, why)
			ok = false
		}
	}
	return ok
}

// testMultiIndependent: DoMulti with Independent decides each op as Do
// would, in order.
func testMultiIndependent(t testing.TB, e env) {
	b := e.bucket(t, "multi-independent", 5, spigot.PerSecond(1))
	if e.clk != nil {
		e.at(0)
	}
	ops := []spigot.Op{
		{Limit: b, Key: "a", N: 2},
		{Limit: b, Key: "b", N: 3},
		{Limit: b, Key: "a", N: 4}, // denied: 3 left
		{Limit: b, Key: "a", Action: spigot.TakeUpTo, N: 4},
		{Limit: b, Key: "c", Action: spigot.Peek, N: 6},
	}
	out := doMulti(t, e, spigot.Independent, ops)
	for i, want := range []spigot.Decision{
		took(2, 3, 2*s),
		took(3, 2, 3*s),
		deny(3, 1*s, 2*s),
		took(3, 0, 5*s),
		deny(5, spigot.Never, 0),
	} {
		if d := diff(out[i], want); d != "" {
			t.Errorf("DoMulti (Independent), op %d (%v): %s", i, ops[i], d)
		}
	}
	peekAll(t, e, "each op applied as Do would", map[spigot.Op]int64{ops[0]: 0, ops[1]: 2, ops[4]: 5})
}

// testMultiAllOrNothing: DoMulti with AllOrNothing charges every Take or
// none: a request limited by several limits is charged to none of them
// when one denies it, and two ops on one key are charged together. On a
// denial, an op that did not deny is a Peek on its key as the call found
// it: it says what its limit holds.
func testMultiAllOrNothing(t testing.TB, e env) {
	ip := e.bucket(t, "multi-ip", 10, spigot.PerSecond(10))
	user := e.bucket(t, "multi-user", 3, spigot.PerSecond(1))
	if e.clk != nil {
		e.at(0)
	}
	a := func(n int64) spigot.Op { return spigot.Op{Limit: ip, Key: "10.0.0.1", N: n} }
	u := func(n int64) spigot.Op { return spigot.Op{Limit: user, Key: "u", N: n} }
	both := func(ipLeft, userLeft int64) map[spigot.Op]int64 {
		return map[spigot.Op]int64{a(0): ipLeft, u(0): userLeft}
	}
	for i, c := range []struct {
		ops  []spigot.Op
		want []spigot.Decision
		left map[spigot.Op]int64
		why  string
	}{
		{[]spigot.Op{a(1), u(1)}, []spigot.Decision{took(1, 9, 100*ms), took(1, 2, 1*s)}, both(9, 2),
			"both allowed: both charged"},
		{[]spigot.Op{a(1), u(3)}, []spigot.Decision{allow(9, 100*ms), deny(2, 1*s, 1*s)}, both(9, 2),
			"the user's limit lacks a token: neither is charged, and the address's says what it holds"},
		{[]spigot.Op{u(1), a(1), u(1)}, []spigot.Decision{took(1, 1, 2*s), took(1, 8, 200*ms), took(1, 0, 3*s)}, both(8, 0),
			"one key twice: charged together"},
		{[]spigot.Op{u(1), u(0)}, []spigot.Decision{deny(0, 1*s, 3*s), allow(0, 3*s)}, both(8, 0),
			"denied: nothing charged"},
		{[]spigot.Op{a(11), u(0)}, []spigot.Decision{deny(8, spigot.Never, 200*ms), allow(0, 3*s)}, both(8, 0),
			"more than the capacity: never, and nothing charged"},
	} {
		out := doMulti(t, e, spigot.AllOrNothing, c.ops)
		for j := range c.ops {
			if d := diff(out[j], c.want[j]); d != "" {
				t.Errorf("step %d, DoMulti (AllOrNothing) of %v, op %d (%v): %s", i+1, c.ops, j, c.ops[j], d)
			}
		}
		peekAll(t, e, fmt.Sprintf("step %d: %s", i+1, c.why), c.left)
	}
}

// testMultiEmpty: DoMulti of no ops, in either mode, returns nil (or
// errors.ErrUnsupported, in a store that applies one op per call) and
// changes nothing; a call whose out is not as long as its ops, or with an
// invalid op, is an error and applies nothing.
func testMultiEmpty(t testing.TB, e env) {
	ctx := t.Context()
	b := e.bucket(t, "multi-empty", 3, spigot.PerHour(1))
	if e.clk != nil {
		e.at(0)
	}
	if d, err := take(ctx, e.s, b, "k", 1); err != nil || d.N != 1 {
		t.Fatalf("bucket %v: Take(%q, 1) on a full bucket = %s, %v; want 1 taken", b, "k", show(d), err)
	}
	ops := []spigot.Op{{Limit: b, Key: "k", N: 1}, {Limit: b, Key: "j", N: 1}}
	for _, mode := range []spigot.Mode{spigot.Independent, spigot.AllOrNothing} {
		for _, out := range [][]spigot.Decision{nil, {}} {
			if err := e.s.DoMulti(ctx, mode, nil, out); err != nil && !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("DoMulti (%v) of no ops: %v; want nil, or an error matching errors.ErrUnsupported", modeName(mode), err)
			}
			if err := spigot.DoMulti(ctx, e.s, mode, []spigot.Op{}, out); err != nil {
				t.Errorf("spigot.DoMulti (%v) of no ops: %v; want nil", modeName(mode), err)
			}
		}
		for _, c := range []struct {
			ops []spigot.Op
			out int
		}{{nil, 1}, {ops[:1], 0}, {ops[:1], 2}, {ops, 1}, {ops, 3}} {
			if err := e.s.DoMulti(ctx, mode, c.ops, make([]spigot.Decision, c.out)); err == nil {
				t.Errorf("DoMulti (%v) of %d ops with %d decisions: no error; want one: out must be as long as ops", modeName(mode), len(c.ops), c.out)
			}
			if err := spigot.DoMulti(ctx, e.s, mode, c.ops, make([]spigot.Decision, c.out)); err == nil {
				t.Errorf("spigot.DoMulti (%v) of %d ops with %d decisions: no error; want one: out must be as long as ops", modeName(mode), len(c.ops), c.out)
			}
		}
		for _, c := range []struct {
			bad  spigot.Op
			want error
		}{
			{spigot.Op{Key: "k", N: 1}, spigot.ErrInvalidLimit},
			{spigot.Op{Limit: b, Key: "j", N: -1}, spigot.ErrInvalidCost},
			{spigot.Op{Limit: b, Key: strings.Repeat("j", spigot.MaxKeyLen+1), N: 1}, spigot.ErrInvalidKey},
		} {
			set := []spigot.Op{ops[0], ops[1], c.bad}
			if err := spigot.DoMulti(ctx, e.s, mode, set, make([]spigot.Decision, len(set))); !errors.Is(err, c.want) {
				t.Errorf("spigot.DoMulti (%v) of %v: %v; want an error matching %v", modeName(mode), set, err, c.want)
			}
		}
	}
	peekAll(t, e, "the calls with no ops, or that failed, must change nothing", map[spigot.Op]int64{ops[0]: 2, ops[1]: 3})
}

// A multiStep is one all-or-nothing set of a table: ops applied at t0+at,
// the decision the model gives each, and what each key holds afterwards
// (Remaining, by Peek), for the reason why.
type multiStep struct {
	at   time.Duration
	ops  []spigot.Op
	want []spigot.Decision
	left map[spigot.Op]int64
	why  string
}

// denies reports whether ops, decided as each says, are a denied set: a
// Take or TakeUpTo among them was denied.
func denies(ops []spigot.Op, each []spigot.Decision) bool {
	for i, op := range ops {
		if !each[i].Allowed() && (op.Action == spigot.Take || op.Action == spigot.TakeUpTo) {
			return true
		}
	}
	return false
}

// playSets applies steps, each set all or nothing with do, moving the fake
// clock to each step's instant, and checks every decision and what each
// key holds after it. It stops at the first step that fails (the steps
// after it depend on it), and reports whether every step passed.
//
// With exact false, for spigot.DoMulti's fallback, a denied set's
// decisions are checked only for what the fallback promises: an op that
// it decides after the denied one is decided by a Peek, which may or may
// not count the ops on its key before it. So every N is 0, an op alone on
// its key in the set is allowed or denied as the model says, and the
// combined decision (spigot.Combine) waits: Never when the model's does.
func playSets(t testing.TB, e env, what string, do func([]spigot.Op) []spigot.Decision, exact bool, steps []multiStep) bool {
	t.Helper()
	for i, st := range steps {
		e.at(st.at)
		got := do(st.ops)
		where := fmt.Sprintf("step %d (t0+%v), %s of %v", i+1, st.at, what, st.ops)
		ok := true
		fail := func(format string, args ...any) {
			t.Helper()
			t.Errorf("%s: %s: %s", where, fmt.Sprintf(format, args...), st.why)
			ok = false
		}
		if exact || !denies(st.ops, st.want) {
			for j, op := range st.ops {
				if d := diff(got[j], st.want[j]); d != "" {
					fail("op %d (%v): %s", j, op, d)
				}
			}
		} else {
			for j, op := range st.ops {
				alone := true // the only op of the set on its key
				for k, o := range st.ops {
					alone = alone && (k == j || o.Limit != op.Limit || o.Key != op.Key)
				}
				switch {
				case got[j].N != 0:
					fail("op %d (%v): %s; want N 0: the set is denied", j, op, show(got[j]))
				case alone && got[j].Allowed() != st.want[j].Allowed():
					fail("op %d (%v): %s; want Allowed %v", j, op, show(got[j]), st.want[j].Allowed())
				}
			}
			w, _ := spigot.Combine(st.want)
			g, _ := spigot.Combine(got)
			if g.Allowed() || w.RetryAfter == spigot.Never && g.RetryAfter != spigot.Never {
				fail("combined (spigot.Combine) %s; want denied, with RetryAfter %s", show(g), map[bool]string{true: "Never", false: "above 0"}[w.RetryAfter == spigot.Never])
			}
		}
		if !peekAll(t, e, fmt.Sprintf("%s, step %d: %s", what, i+1, st.why), st.left) || !ok {
			return false
		}
	}
	return true
}

// nativeSets returns what playSets calls to apply a set with the store's
// own DoMulti, skipping the case if the store cannot.
func nativeSets(t testing.TB, e env) func([]spigot.Op) []spigot.Decision {
	return func(ops []spigot.Op) []spigot.Decision {
		t.Helper()
		return doMulti(t, e, spigot.AllOrNothing, ops)
	}
}

// duplicateSets are the steps of multi-duplicates, on buckets whose names
// start with prefix.
func duplicateSets(t testing.TB, e env, prefix string) []multiStep {
	one := e.bucket(t, prefix+"duplicates", 3, spigot.PerSecond(1))
	other := e.bucket(t, prefix+"duplicates-other", 3, spigot.PerSecond(1))
	o := func(b spigot.Limit, key string, act spigot.Action, n int64) spigot.Op {
		return spigot.Op{Limit: b, Key: key, Action: act, N: n}
	}
	k := func(n int64) spigot.Op { return o(one, "k", spigot.Take, n) }
	j := func(n int64) spigot.Op { return o(one, "j", spigot.Take, n) }
	x := func(b spigot.Limit, n int64) spigot.Op { return o(b, "x", spigot.Take, n) }
	return []multiStep{
		{0, []spigot.Op{k(2), k(2)}, []spigot.Decision{allow(3, 0), deny(1, 1*s, 2*s)},
			map[spigot.Op]int64{k(0): 3}, "one key twice is charged together: the second Take finds 1 token, and nothing is charged (the first says what the key holds)"},
		{0, []spigot.Op{k(1), k(2)}, []spigot.Decision{took(1, 2, 1*s), took(2, 0, 3*s)},
			map[spigot.Op]int64{k(0): 0}, "1 and 2 tokens of 3: both taken"},
		{0, []spigot.Op{j(2), j(2), j(1)}, []spigot.Decision{allow(3, 0), deny(1, 1*s, 2*s), allow(3, 0)},
			map[spigot.Op]int64{j(0): 3}, "the denied Take takes nothing, the one after it is allowed after the first, and nothing is charged: the two that did not deny say what the key holds"},
		{0, []spigot.Op{x(one, 2), x(other, 2)}, []spigot.Decision{took(2, 1, 2*s), took(2, 1, 2*s)},
			map[spigot.Op]int64{x(one, 0): 1, x(other, 0): 1}, "one key name under two limits is two keys: each limit is charged 2 of its own 3"},
		{0, []spigot.Op{x(other, 1), x(one, 2)}, []spigot.Decision{allow(1, 2*s), deny(1, 1*s, 2*s)},
			map[spigot.Op]int64{x(one, 0): 1, x(other, 0): 1}, "one limit's key holds 1 token of the 2 asked: neither is charged, and the other says it holds 1"},
		{1 * s, []spigot.Op{k(1), o(one, "k", spigot.Take, 0), o(one, "k", spigot.Peek, 1)},
			[]spigot.Decision{took(1, 0, 3*s), allow(0, 3*s), deny(0, 1*s, 3*s)},
			map[spigot.Op]int64{k(0): 0}, "the Take of 0 and the Peek see the Take before them, and a denied Peek denies nothing"},
	}
}

// testMultiDuplicates: ops on the same key in one all-or-nothing set are
// charged together, each on the state the ones before it left; the same
// key name under two limits is two keys.
func testMultiDuplicates(t testing.TB, e env) {
	playSets(t, e, "DoMulti (AllOrNothing)", nativeSets(t, e), true, duplicateSets(t, e, ""))
}

// mixedSets are the steps of multi-mixed-costs, on buckets whose names
// start with prefix.
func mixedSets(t testing.TB, e env, prefix string) []multiStep {
	ip := e.bucket(t, prefix+"mixed-ip", 10, spigot.PerSecond(10))
	user := e.bucket(t, prefix+"mixed-user", 5, spigot.PerSecond(1))
	rows := e.bucket(t, prefix+"mixed-rows", 100, spigot.PerSecond(10))
	o := func(b spigot.Limit, act spigot.Action, n int64) spigot.Op {
		return spigot.Op{Limit: b, Key: "k", Action: act, N: n}
	}
	take := spigot.Take
	left := func(ipLeft, userLeft, rowsLeft int64) map[spigot.Op]int64 {
		return map[spigot.Op]int64{o(ip, take, 0): ipLeft, o(user, take, 0): userLeft, o(rows, take, 0): rowsLeft}
	}
	return []multiStep{
		{0, []spigot.Op{o(ip, take, 1), o(user, take, 2), o(rows, spigot.TakeUpTo, 30), o(user, spigot.Peek, 3)},
			[]spigot.Decision{took(1, 9, 100*ms), took(2, 3, 2*s), took(30, 70, 3*s), allow(3, 2*s)},
			left(9, 3, 70), "every op allowed: each limit charged its cost, and the Peek sees the Take before it"},
		{0, []spigot.Op{o(ip, take, 0), o(user, take, 4), o(rows, spigot.TakeUpTo, 80)},
			[]spigot.Decision{allow(9, 100*ms), deny(3, 1*s, 2*s), allow(70, 3*s)},
			left(9, 3, 70), "the user's limit lacks a token: nothing is charged, not even the 70 rows TakeUpTo would take, which it says the limit holds"},
		{500 * ms, []spigot.Op{o(rows, spigot.TakeUpTo, 80), o(ip, take, 5), o(user, spigot.Peek, 5), o(user, take, 0)},
			[]spigot.Decision{took(75, 0, 10*s), took(5, 5, 500*ms), deny(3, 1500*ms, 1500*ms), allow(3, 1500*ms)},
			left(5, 3, 0), "a denied Peek does not deny the set: every limit charged"},
		{500 * ms, []spigot.Op{o(user, spigot.TakeUpTo, 0), o(rows, spigot.TakeUpTo, 5), o(ip, take, 1)},
			[]spigot.Decision{allow(3, 1500*ms), deny(0, 100*ms, 10*s), allow(5, 500*ms)},
			left(5, 3, 0), "a TakeUpTo that finds no token denies the set: nothing is charged"},
		{500 * ms, []spigot.Op{o(rows, take, 0), o(ip, take, 4)},
			[]spigot.Decision{allow(0, 10*s), took(4, 1, 900*ms)},
			left(1, 3, 0), "a Take of 0 from an empty limit is allowed"},
		{1 * s, []spigot.Op{o(ip, spigot.TakeUpTo, 9), o(user, take, 0), o(rows, spigot.Peek, 0)},
			[]spigot.Decision{took(6, 0, 1*s), allow(4, 1*s), allow(5, 9500*ms)},
			left(0, 4, 5), "TakeUpTo takes the 6 tokens the limit holds"},
	}
}

// testMultiMixedCosts: an all-or-nothing set over several limits with
// different costs, TakeUpTo, Peek and costs of 0 charges every limit its
// own cost, or, when a Take or TakeUpTo is denied, nothing.
func testMultiMixedCosts(t testing.TB, e env) {
	playSets(t, e, "DoMulti (AllOrNothing)", nativeSets(t, e), true, mixedSets(t, e, ""))
}

// overSets are the steps of multi-over-capacity, on buckets whose names
// start with prefix.
func overSets(t testing.TB, e env, prefix string) []multiStep {
	ip := e.bucket(t, prefix+"over-ip", 10, spigot.PerSecond(10))
	user := e.bucket(t, prefix+"over-user", 3, spigot.PerSecond(1))
	none := e.bucket(t, prefix+"over-none", 0, spigot.PerSecond(1))
	o := func(b spigot.Limit, act spigot.Action, n int64) spigot.Op {
		return spigot.Op{Limit: b, Key: "k", Action: act, N: n}
	}
	take := spigot.Take
	left := func(ipLeft, userLeft int64) map[spigot.Op]int64 {
		return map[spigot.Op]int64{o(ip, take, 0): ipLeft, o(user, take, 0): userLeft, o(none, take, 0): 0}
	}
	return []multiStep{
		{0, []spigot.Op{o(ip, take, 2), o(user, take, 4)},
			[]spigot.Decision{allow(10, 0), deny(3, spigot.Never, 0)},
			left(10, 3), "4 tokens of a capacity of 3 are never admitted: nothing is charged"},
		{0, []spigot.Op{o(user, take, 3), o(ip, take, 11), o(user, take, 1)},
			[]spigot.Decision{allow(3, 0), deny(10, spigot.Never, 0), deny(0, 1*s, 3*s)},
			left(10, 3), "11 tokens of a capacity of 10 are never admitted, whatever the user's limit needs: nothing is charged"},
		{0, []spigot.Op{o(ip, take, 1), o(none, take, 0)},
			[]spigot.Decision{took(1, 9, 100*ms), allow(0, 0)},
			left(9, 3), "a Take of 0 from a capacity of 0 is allowed"},
		{0, []spigot.Op{o(ip, take, 1), o(none, take, 1)},
			[]spigot.Decision{allow(9, 100*ms), deny(0, spigot.Never, 0)},
			left(9, 3), "a capacity of 0 never admits a token: nothing is charged"},
		{0, []spigot.Op{o(ip, take, 1), o(user, spigot.Peek, 4)},
			[]spigot.Decision{took(1, 8, 200*ms), deny(3, spigot.Never, 0)},
			left(8, 3), "a Peek of more than the capacity denies nothing"},
		{0, []spigot.Op{o(user, spigot.TakeUpTo, 4), o(ip, take, 1)},
			[]spigot.Decision{took(3, 0, 3*s), took(1, 7, 300*ms)},
			left(7, 0), "a TakeUpTo of more than the capacity takes what the limit holds"},
	}
}

// testMultiOverCapacity: an all-or-nothing set with a Take of more than
// its limit's capacity is denied, that op with RetryAfter Never, and so
// the combined decision (spigot.Combine); nothing is charged.
func testMultiOverCapacity(t testing.TB, e env) {
	steps := overSets(t, e, "")
	sets := nativeSets(t, e)
	do := func(ops []spigot.Op) []spigot.Decision {
		t.Helper()
		out := sets(ops)
		if d, by := spigot.Combine(out); denies(ops, out) && (d.RetryAfter != spigot.Never || ops[by].N <= ops[by].Limit.Capacity()) {
			t.Errorf("DoMulti (AllOrNothing) of %v: combined (spigot.Combine) %s, by op %d; want RetryAfter Never, by an op over its capacity", ops, show(d), by)
		}
		return out
	}
	playSets(t, e, "DoMulti (AllOrNothing)", do, true, steps)
}

// testMultiAtomicConcurrent: goroutines racing, at a frozen clock, with
// all-or-nothing sets over two or three limits whose keys they share
// charge each set whole or not at all, with spigot.DoMulti (the store's
// DoMulti, or the fallback of a store that applies one op per call).
// Afterwards, every key has given (by Peek) exactly the tokens of the
// allowed sets that name it, and no more than its capacity.
func testMultiAtomicConcurrent(t testing.TB, e env) {
	const goroutines, each = 12, 6
	tenant := e.bucket(t, "atomic-tenant", 8, spigot.PerHour(1))
	user := e.bucket(t, "atomic-user", 3, spigot.PerHour(1))
	addr := e.bucket(t, "atomic-addr", 4, spigot.PerHour(1))
	if e.clk != nil {
		e.at(0)
	}
	// Every set takes 1 from the tenant, 1 or 2 from one of 3 users and,
	// two times in three, 1 from one of 4 addresses, in either order:
	// they ask for many times what the limits hold.
	sets := make([][]spigot.Op, goroutines*each)
	for g := range goroutines {
		for i := range each {
			ops := []spigot.Op{
				{Limit: tenant, Key: "t", N: 1},
				{Limit: user, Key: fmt.Sprintf("u%d", g%3), N: int64(1 + (g+i)%2)},
			}
			if (g+i)%3 != 0 {
				ops = append(ops, spigot.Op{Limit: addr, Key: fmt.Sprintf("10.0.0.%d", (g+i)%4), N: 1})
			}
			if i%2 == 1 {
				slices.Reverse(ops)
			}
			sets[g*each+i] = ops
		}
	}
	outs := make([][]spigot.Decision, len(sets))
	errs := make([]error, goroutines)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range each {
				k := g*each + i
				outs[k] = make([]spigot.Decision, len(sets[k]))
				if err := spigot.DoMulti(t.Context(), e.s, spigot.AllOrNothing, sets[k], outs[k]); err != nil {
					errs[g] = fmt.Errorf("spigot.DoMulti (AllOrNothing) of %v: %w", sets[k], err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent sets: unexpected error: %v", err)
	}

	type key struct {
		limit spigot.Limit
		key   string
	}
	var keys []key
	taken := make(map[key]int64) // by the allowed sets
	denied := 0
	for k, ops := range sets {
		out := outs[k]
		allowed := !denies(ops, out)
		if !allowed {
			denied++
		}
		for j, op := range ops {
			want := op.N
			if !allowed {
				want = 0
			}
			if out[j].N != want {
				t.Errorf("set %v, %s: op %d took %d, want %d: a set takes every op's N, or nothing when one is denied", ops, showAll(out), j, out[j].N, want)
			}
			kk := key{op.Limit, op.Key}
			if _, ok := taken[kk]; !ok {
				keys = append(keys, kk)
			}
			taken[kk] += want
		}
	}
	if denied == 0 {
		t.Errorf("all %d concurrent sets were allowed; they ask for more than the limits hold", len(sets))
	}
	for _, k := range keys {
		d, err := e.s.Do(t.Context(), spigot.Op{Limit: k.limit, Key: k.key, Action: spigot.Peek})
		if err != nil {
			t.Fatalf("%v %q: Peek: unexpected error: %v", k.limit, k.key, err)
		}
		capacity := k.limit.Capacity()
		if got := capacity - d.Remaining; got != taken[k] {
			t.Errorf("%v %q: %d tokens taken (Remaining %d), but the allowed sets that name it took %d: a set was charged in part",
				k.limit, k.key, got, d.Remaining, taken[k])
		}
		if taken[k] > capacity {
			t.Errorf("%v %q: the allowed sets took %d tokens, more than its capacity %d", k.limit, k.key, taken[k], capacity)
		}
	}
}

// showAll formats decisions, as show does each.
func showAll(each []spigot.Decision) string {
	s := make([]string, len(each))
	for i, d := range each {
		s[i] = show(d)
	}
	return fmt.Sprint(s)
}

// oneAtATime is the store under test as a store of one's own may be: its
// DoMulti applies nothing (errors.ErrUnsupported), so that spigot.DoMulti
// applies the ops one by one with Do. It records the ops it is asked to Do.
type oneAtATime struct {
	s spigot.Store

	mu  sync.Mutex
	did []spigot.Op
}

func (w *oneAtATime) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	w.mu.Lock()
	w.did = append(w.did, op)
	w.mu.Unlock()
	return w.s.Do(ctx, op)
}

func (w *oneAtATime) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return fmt.Errorf("conformance: one op per call: %w", errors.ErrUnsupported)
}

// byKey is the store under test as a cluster is: it applies ops all or
// nothing only within a part, here one key of one limit, and answers a
// *store.PartsError for several, so that spigot.DoMulti applies them part
// by part.
type byKey struct{ s spigot.Store }

func (w byKey) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) { return w.s.Do(ctx, op) }

func (w byKey) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if mode == spigot.AllOrNothing && len(ops) == len(out) {
		parts := make([]uint64, len(ops))
		for i, op := range ops {
			j := slices.IndexFunc(ops, func(o spigot.Op) bool { return o.Limit.Name() == op.Limit.Name() && o.Key == op.Key })
			parts[i] = uint64(j)
		}
		if slices.ContainsFunc(parts, func(p uint64) bool { return p != parts[0] }) {
			return &store.PartsError{Parts: parts}
		}
	}
	return spigot.DoMulti(ctx, w.s, mode, ops, out)
}

// calls returns the ops Do was asked since the last call, and forgets them.
func (w *oneAtATime) calls() []spigot.Op {
	w.mu.Lock()
	defer w.mu.Unlock()
	did := w.did
	w.did = nil
	return did
}

// testMultiFallback: spigot.DoMulti in the store, behind a DoMulti that
// applies one op per call, applies all-or-nothing sets by taking and, on
// a denial, giving back; behind one that applies them only within parts
// (a key each, as a cluster's slots), by taking part by part and, on a
// denial, giving back. Either way the sets of multi-duplicates,
// multi-mixed-costs and multi-over-capacity leave every key as the model
// says, and their decisions are the model's as far as DoMulti promises. A
// batch is one Do per op, in order.
func testMultiFallback(t testing.TB, e env) {
	ctx := t.Context()
	w := &oneAtATime{s: e.s}
	for _, via := range []struct {
		name string
		s    spigot.Store
	}{{"one op per call", w}, {"parts", byKey{e.s}}} {
		what := "spigot.DoMulti (AllOrNothing) behind a DoMulti of " + via.name
		do := func(ops []spigot.Op) []spigot.Decision {
			t.Helper()
			out := make([]spigot.Decision, len(ops))
			if err := spigot.DoMulti(ctx, via.s, spigot.AllOrNothing, ops, out); err != nil {
				t.Fatalf("%s, of %v: unexpected error: %v", what, ops, err)
			}
			return out
		}
		for _, sets := range []func(testing.TB, env, string) []multiStep{duplicateSets, mixedSets, overSets} {
			if !playSets(t, e, what, do, false, sets(t, e, "fallback-"+strings.ReplaceAll(via.name, " ", "-")+"-")) {
				return
			}
		}
	}

	// A batch: one Do per op, in order.
	b := e.bucket(t, "fallback-batch", 5, spigot.PerSecond(1))
	e.at(0)
	o := func(key string, act spigot.Action, n int64) spigot.Op {
		return spigot.Op{Limit: b, Key: key, Action: act, N: n}
	}
	ops := []spigot.Op{
		o("k", spigot.Take, 2), o("j", spigot.Take, 3), o("k", spigot.Take, 4), o("k", spigot.TakeUpTo, 4),
		o("j", spigot.Refund, 1), o("j", spigot.Reset, 0), o("k", spigot.Peek, 6),
	}
	out := make([]spigot.Decision, len(ops))
	w.calls()
	if err := spigot.DoMulti(ctx, w, spigot.Independent, ops, out); err != nil {
		t.Fatalf("spigot.DoMulti (Independent) behind a DoMulti of one op per call, of %v: unexpected error: %v", ops, err)
	}
	if did := w.calls(); !slices.Equal(did, ops) {
		t.Errorf("spigot.DoMulti (Independent) behind a DoMulti of one op per call, of %v: the store was asked to Do %v; want each op once, in order", ops, did)
	}
	for i, want := range []spigot.Decision{
		took(2, 3, 2*s), took(3, 2, 3*s), deny(3, 1*s, 2*s), took(3, 0, 5*s), took(1, 3, 2*s), took(2, 5, 0), deny(0, spigot.Never, 5*s),
	} {
		if d := diff(out[i], want); d != "" {
			t.Errorf("spigot.DoMulti (Independent) behind a DoMulti of one op per call, op %d (%v): %s", i, ops[i], d)
		}
	}
	peekAll(t, e, "a batch applies each op as Do would", map[spigot.Op]int64{ops[0]: 0, ops[1]: 5})
}
