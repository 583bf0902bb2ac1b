package conformance

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
)

// realTimeCases are the cases of RunRealTime. The store reads the real
// clock, so they only assert what holds however long the test takes
// between requests: time moves forward, so a bucket holds at least what it
// refilled since a request the test saw answered, and at most what it
// refilled since before the first request. The slow buckets (1 token an
// hour) make their Remaining exact for any test shorter than an hour.
var realTimeCases = []testCase{
	{"burst-then-denial", testRealBurst},
	{"retry-after", testRealRetryAfter},
	{"refill", testRealRefill},
	{"reset", testRealReset},
	{"operations", testRealOperations},
	{"cost-over-capacity", testRealCostOverCapacity},
	{"concurrent", testRealConcurrent},
	{"multi", testRealMulti},
	{"multi-empty", testMultiEmpty},
	{"multi-atomic-concurrent", testMultiAtomicConcurrent},
	{"invalid-input", testInvalidInput},
	{"cancelled-context", testCancelledContext},
	{"unsupported", testUnsupported},
}

// runID returns a random number that tells runs of the suite apart.
func runID() uint32 { return rand.Uint32() }

// acquire takes cost tokens and fails the test on an error.
func acquire(t testing.TB, e env, b spigot.Limit, key string, cost int64) spigot.Decision {
	t.Helper()
	a, err := take(t.Context(), e.s, b, key, cost)
	if err != nil {
		t.Fatalf("bucket %v: Take(%q, %d): unexpected error: %v", b, key, cost, err)
	}
	return a
}

// within reports whether d is in [lo, hi].
func within(d, lo, hi time.Duration) bool { return lo <= d && d <= hi }

// testRealBurst: a full bucket admits its capacity, Remaining counting down
// exactly, then denies and takes nothing.
func testRealBurst(t testing.TB, e env) {
	const slack = time.Minute // more than the test can take
	b := e.bucket(t, "rt-burst", 5, spigot.PerHour(1))
	for i := range int64(5) {
		a := acquire(t, e, b, "k", 1)
		want := time.Duration(i+1) * time.Hour
		if !a.Allowed() || a.Remaining != 4-i || a.RetryAfter != 0 || !within(a.ResetAfter, want-slack, want) {
			t.Fatalf("bucket %v: request %d of cost 1 = %s; want allowed, Remaining %d, RetryAfter 0, ResetAfter just under or at %v",
				b, i+1, show(a), 4-i, want)
		}
	}
	a := acquire(t, e, b, "k", 1)
	if a.Allowed() || a.Remaining != 0 || !within(a.RetryAfter, time.Hour-slack, time.Hour) || !within(a.ResetAfter, 5*time.Hour-slack, 5*time.Hour) {
		t.Fatalf("bucket %v: request 6 of cost 1 on the empty bucket = %s; want denied, Remaining 0, RetryAfter just under or at 1h, ResetAfter just under or at 5h", b, show(a))
	}

	w := e.bucket(t, "rt-burst-weighted", 5, spigot.PerHour(1))
	for i, c := range []struct {
		cost      int64
		allowed   bool
		remaining int64
	}{
		{2, true, 3},
		{4, false, 3}, // denied: takes nothing
		{3, true, 0},
	} {
		a := acquire(t, e, w, "k", c.cost)
		if a.Allowed() != c.allowed || a.Remaining != c.remaining {
			t.Fatalf("bucket %v: step %d (cost %d) = %s; want Allowed %v, Remaining %d", w, i+1, c.cost, show(a), c.allowed, c.remaining)
		}
	}
}

// testRealRetryAfter: sleeping RetryAfter after a denial admits the retry.
func testRealRetryAfter(t testing.TB, e env) {
	const token = 50 * time.Millisecond
	b := e.bucket(t, "rt-retry", 1, spigot.Per(1, token))
	for round := range 3 {
		// Take until denied: a request can be late enough to find the
		// token back.
		var a spigot.Decision
		for range 50 {
			if a = acquire(t, e, b, "k", 1); !a.Allowed() {
				break
			}
		}
		if a.Allowed() {
			t.Fatalf("bucket %v: 50 requests in a row were allowed; a bucket of 1 token every %v must deny some", b, token)
		}
		if !within(a.RetryAfter, ms, token) || a.RetryAfter%ms != 0 {
			t.Fatalf("bucket %v, round %d: a denial of cost 1 has RetryAfter %v; want a whole number of milliseconds in [1ms, %v]", b, round+1, a.RetryAfter, token)
		}
		time.Sleep(a.RetryAfter)
		if r := acquire(t, e, b, "k", 1); !r.Allowed() {
			t.Fatalf("bucket %v, round %d: the retry after sleeping exactly RetryAfter (%v) was denied: %s", b, round+1, a.RetryAfter, show(r))
		}
	}
}

// testRealRefill: an emptied bucket refills at its rate: no faster than
// the time elapsed, and at least as fast.
func testRealRefill(t testing.TB, e env) {
	const token = 20 * time.Millisecond
	b := e.bucket(t, "rt-refill", 4, spigot.Per(1, token))
	before := time.Now()
	if a := acquire(t, e, b, "k", 4); !a.Allowed() || a.Remaining != 0 {
		t.Fatalf("bucket %v: cost 4 on a full bucket = %s; want allowed, Remaining 0", b, show(a))
	}
	drained := time.Now()
	a := acquire(t, e, b, "k", 0)
	if most := int64(time.Since(before) / token); a.Remaining > most {
		t.Errorf("bucket %v: a peek right after emptying it = %s; want Remaining at most %d: only %v passed", b, show(a), most, time.Since(before))
	}
	// Sleep 3 tokens' time since the drain was answered: at least 3 are back.
	time.Sleep(3*token - time.Since(drained))
	if a := acquire(t, e, b, "k", 3); !a.Allowed() {
		t.Errorf("bucket %v: cost 3, %v after emptying it = %s; want allowed: 3 tokens refilled", b, time.Since(drained), show(a))
	}
	time.Sleep(5 * token)
	if a := acquire(t, e, b, "k", 0); a.Remaining != 4 || a.ResetAfter != 0 {
		t.Errorf("bucket %v: a peek 5 tokens' time after the last request = %s; want Remaining 4 and ResetAfter 0: full, and no fuller", b, show(a))
	}
}

// testRealReset: Reset fills a bucket again and reports whether it was not
// full.
func testRealReset(t testing.TB, e env) {
	ctx := t.Context()
	b := e.bucket(t, "rt-reset", 3, spigot.PerHour(1))
	check := func(key string, want bool, why string) {
		t.Helper()
		got, err := resetKey(ctx, e.s, b, key)
		if err != nil || got != want {
			t.Errorf("bucket %v: Reset(%q) = %v, %v; want %v: %s", b, key, got, err, want, why)
		}
	}
	check("untouched", false, "the key was never used")
	acquire(t, e, b, "used", 3)
	check("used", true, "the key took 3 tokens")
	if a := acquire(t, e, b, "used", 3); !a.Allowed() {
		t.Errorf("bucket %v: cost 3 right after Reset = %s; want allowed: Reset fills the bucket", b, show(a))
	}

	f := e.bucket(t, "rt-reset-refilled", 1, spigot.Per(1, 20*time.Millisecond))
	a := acquire(t, e, f, "k", 1)
	time.Sleep(a.ResetAfter)
	if got, err := resetKey(ctx, e.s, f, "k"); err != nil || got {
		t.Errorf("bucket %v: Reset after sleeping ResetAfter (%v) = %v, %v; want false: the bucket is full again", f, a.ResetAfter, got, err)
	}
}

// testRealOperations: TakeUpTo, Refund, Peek and Reset on a slow bucket,
// whose counts no delay can change.
func testRealOperations(t testing.TB, e env) {
	b := e.bucket(t, "rt-operations", 3, spigot.PerHour(1))
	do := func(act spigot.Action, n int64) spigot.Decision {
		t.Helper()
		d, err := e.s.Do(t.Context(), spigot.Op{Limit: b, Key: "k", Action: act, N: n})
		if err != nil {
			t.Fatalf("bucket %v: %v %d: unexpected error: %v", b, act, n, err)
		}
		return d
	}
	const slack = time.Minute // ResetAfter shrinks as the test runs
	for _, c := range []struct {
		act        spigot.Action
		n          int64
		allowed    bool
		moved, rem int64
		reset      time.Duration // at most, and at least reset − slack
	}{
		{spigot.TakeUpTo, 5, true, 3, 0, 3 * time.Hour},
		{spigot.TakeUpTo, 1, false, 0, 0, 3 * time.Hour},
		{spigot.Refund, 1, true, 1, 1, 2 * time.Hour},
		{spigot.Peek, 2, false, 0, 1, 2 * time.Hour},
		{spigot.Peek, 1, true, 0, 1, 2 * time.Hour},
		{spigot.Reset, 0, true, 2, 3, 0},
		{spigot.Peek, 3, true, 0, 3, 0},
	} {
		d := do(c.act, c.n)
		if d.Allowed() != c.allowed || d.N != c.moved || d.Remaining != c.rem || !within(d.ResetAfter, max(c.reset-slack, 0), c.reset) {
			t.Errorf("bucket %v: %v %d = %s; want Allowed %v, N %d, Remaining %d, ResetAfter just under or at %v",
				b, c.act, c.n, show(d), c.allowed, c.moved, c.rem, c.reset)
		}
	}
}

// testRealCostOverCapacity: a cost above the capacity is denied with
// RetryAfter Never and takes nothing.
func testRealCostOverCapacity(t testing.TB, e env) {
	b := e.bucket(t, "rt-over", 3, spigot.PerHour(1))
	if a := acquire(t, e, b, "k", 4); a.Allowed() || a.RetryAfter != spigot.Never || a.Remaining != 3 || a.ResetAfter != 0 {
		t.Errorf("bucket %v: cost 4 on a full bucket = %s; want denied, RetryAfter Never, Remaining 3, ResetAfter 0", b, show(a))
	}
	if a := acquire(t, e, b, "k", 3); !a.Allowed() || a.Remaining != 0 {
		t.Errorf("bucket %v: cost 3 after the denial = %s; want allowed, Remaining 0: the denial took nothing", b, show(a))
	}
}

// testRealConcurrent: goroutines racing on one key are admitted exactly the
// capacity, each token once.
func testRealConcurrent(t testing.TB, e env) {
	b := e.bucket(t, "rt-concurrent", 50, spigot.PerHour(1))
	results := race(t, e, 8, 20, func(int, int) (spigot.Limit, string, int64) { return b, "hot", 1 })
	checkRace(t, b, "hot", 1, results)
}

// testRealMulti: all-or-nothing sets and a batch on slow buckets, with
// spigot.DoMulti (the store's DoMulti, or its fallback for a store that
// applies one op per call): a denied set charges nothing, and each op of
// a batch is decided as Do would.
func testRealMulti(t testing.TB, e env) {
	ip := e.bucket(t, "rt-multi-ip", 5, spigot.PerHour(1))
	user := e.bucket(t, "rt-multi-user", 3, spigot.PerHour(1))
	a := func(act spigot.Action, n int64) spigot.Op {
		return spigot.Op{Limit: ip, Key: "10.0.0.1", Action: act, N: n}
	}
	u := func(act spigot.Action, n int64) spigot.Op { return spigot.Op{Limit: user, Key: "u", Action: act, N: n} }
	const slack = time.Minute // RetryAfter shrinks as the test runs
	type want struct {
		allowed    bool
		moved, rem int64
		retry      time.Duration // when denied: at most, and at least retry − slack
	}
	take, upTo := spigot.Take, spigot.TakeUpTo
	for i, c := range []struct {
		mode          spigot.Mode
		ops           []spigot.Op
		want          []want
		ipLeft, uLeft int64
	}{
		{spigot.AllOrNothing, []spigot.Op{a(take, 1), u(take, 2)},
			[]want{{true, 1, 4, 0}, {true, 2, 1, 0}}, 4, 1},
		{spigot.AllOrNothing, []spigot.Op{a(take, 1), u(take, 2)}, // the user holds 1
			[]want{{true, 0, 4, 0}, {false, 0, 1, time.Hour}}, 4, 1}, // the address says what it holds
		{spigot.AllOrNothing, []spigot.Op{a(take, 6), u(take, 0)},
			[]want{{false, 0, 4, spigot.Never}, {true, 0, 1, 0}}, 4, 1},
		{spigot.Independent, []spigot.Op{a(take, 2), u(take, 2), u(upTo, 5), a(spigot.Peek, 3), a(spigot.Refund, 1)},
			[]want{{true, 2, 2, 0}, {false, 0, 1, time.Hour}, {true, 1, 0, 0}, {false, 0, 2, time.Hour}, {true, 1, 3, 0}}, 3, 0},
	} {
		out := make([]spigot.Decision, len(c.ops))
		if err := spigot.DoMulti(t.Context(), e.s, c.mode, c.ops, out); err != nil {
			t.Fatalf("step %d: spigot.DoMulti (%v) of %v: unexpected error: %v", i+1, modeName(c.mode), c.ops, err)
		}
		for j, w := range c.want {
			d := out[j]
			retryOK := d.RetryAfter == 0
			if !w.allowed {
				retryOK = d.RetryAfter == w.retry || w.retry != spigot.Never && within(d.RetryAfter, w.retry-slack, w.retry)
			}
			if d.Allowed() != w.allowed || d.N != w.moved || d.Remaining != w.rem || !retryOK {
				t.Errorf("step %d: spigot.DoMulti (%v) of %v, op %d (%v) = %s; want Allowed %v, N %d, Remaining %d, RetryAfter %s",
					i+1, modeName(c.mode), c.ops, j, c.ops[j], show(d), w.allowed, w.moved, w.rem,
					map[bool]string{true: "0", false: "just under or at " + dur(w.retry)}[w.allowed])
			}
		}
		peekAll(t, e, fmt.Sprintf("step %d: what the allowed ops took, and nothing of a denied set", i+1),
			map[spigot.Op]int64{a(take, 0): c.ipLeft, u(take, 0): c.uLeft})
	}
}
