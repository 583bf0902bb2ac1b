package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// The expected admissions in the tables below are worked out by hand from
// the model, as store.Apply documents it:
//
//	refill     = rate.Tokens / rate.Period
//	tokens     = min(capacity, tokens + elapsed × refill)
//	RetryAfter = ceil_ms((cost - tokens) / refill), Never if cost > capacity
//	ResetAfter = ceil_ms((capacity - tokens) / refill)
//	Remaining  = floor(tokens)
//	RefillAfter = ceil_ms((Remaining + 1 - tokens) / refill), Never if capacity is 0
//
// and never by calling store.Apply, which a store under test may use.

const (
	ms = time.Millisecond
	s  = time.Second
)

// cases are the cases of Run, in order.
var cases = slices.Concat([]testCase{
	{"burst", testBurst},
	{"burst-weighted", testBurstWeighted},
	{"steady-refill", testSteadyRefill},
	{"refill-fractions", testRefillFractions},
	{"denied-takes-nothing", testDeniedTakesNothing},
	{"cost-0", testCostZero},
	{"cost-over-capacity", testCostOverCapacity},
	{"costs-past-2^53", testCostsPastExact},
	{"capacity-0", testCapacityZero},
	{"exact-fields-7-per-10s", testExactFields7per10s},
	{"exact-fields-10-per-13s", testExactFields10per13s},
}, retryAfterCases(), []testCase{
	{"reset", testReset},
	{"take-up-to", testTakeUpTo},
	{"refund", testRefund},
	{"take-then-refund", testTakeThenRefund},
	{"peek", testPeek},
	{"unsupported", testUnsupported},
	{"multi-independent", testMultiIndependent},
	{"multi-all-or-nothing", testMultiAllOrNothing},
	{"multi-empty", testMultiEmpty},
	{"multi-duplicates", testMultiDuplicates},
	{"multi-mixed-costs", testMultiMixedCosts},
	{"multi-over-capacity", testMultiOverCapacity},
	{"multi-atomic-concurrent", testMultiAtomicConcurrent},
	{"multi-fallback", testMultiFallback},
	{"config-change", testConfigChange},
	{"full-again-forgets", testFullAgainForgets},
	{"clock-steps-back", testClockStepsBack},
	{"slowest-exact-rate", testSlowestExactRate},
	{"invalid-input", testInvalidInput},
	{"cancelled-context", testCancelledContext},
	{"concurrent", testConcurrent},
	{"many-keys", testManyKeys},
	{"odd-keys", testOddKeys},
	{"bucket-names", testBucketNames},
	{"never-more-than", testNeverMoreThan},
	{"random-operations", testRandomOperations},
	{"ttl", testTTL},
}, kindCases)

// testBurst: a full bucket admits its capacity at once, Remaining counting
// down exactly, then denies.
func testBurst(t testing.TB, e env) {
	// 20 tokens, 1 every 3s: 20 rapid requests, the 21st waits 3s; the
	// bucket is full again 60s after.
	b := e.bucket(t, "burst", 20, spigot.Per(1, 3*s))
	var steps []step
	for i := range int64(20) {
		steps = append(steps, step{0, 1, allow(19-i, time.Duration(i+1)*3*s)})
	}
	steps = append(steps,
		step{0, 1, deny(0, 3*s, 60*s)},
		step{60 * s, 0, allow(20, 0)},
		step{60 * s, 20, allow(0, 60*s)},
	)
	play(t, e, b, "k", steps)
}

// testBurstWeighted: each request takes its cost.
func testBurstWeighted(t testing.TB, e env) {
	w := e.bucket(t, "burst-weighted", 10, spigot.PerSecond(1))
	play(t, e, w, "k", []step{
		{0, 3, allow(7, 3*s)},
		{0, 3, allow(4, 6*s)},
		{0, 3, allow(1, 9*s)},
		{0, 3, deny(1, 2*s, 9*s)}, // needs 2 more tokens
		{0, 1, allow(0, 10*s)},
		{0, 10, deny(0, 10*s, 10*s)},
		{10 * s, 10, allow(0, 10*s)},
	})
}

// testSteadyRefill: an empty bucket refills continuously at its rate, up to
// its capacity.
func testSteadyRefill(t testing.TB, e env) {
	// Capacity 10 at 1/s: 15 requests at once admit 10 and deny 5; then
	// one request a second is always admitted.
	b := e.bucket(t, "refill", 10, spigot.PerSecond(1))
	var steps []step
	for i := range int64(10) {
		steps = append(steps, step{0, 1, allow(9-i, time.Duration(i+1)*s)})
	}
	for range 5 {
		steps = append(steps, step{0, 1, deny(0, s, 10*s)})
	}
	for i := range 10 {
		steps = append(steps, step{time.Duration(i+1) * s, 1, allow(0, 10*s)})
	}
	play(t, e, b, "k", steps)
}

// testRefillFractions: fractions of a token accumulate, and refill stops at
// the capacity.
func testRefillFractions(t testing.TB, e env) {
	f := e.bucket(t, "refill-fraction", 5, spigot.PerSecond(2))
	play(t, e, f, "k", []step{
		{0, 5, allow(0, 2500*ms)},
		{250 * ms, 0, allow(0, 2250*ms)}, // 0.5 tokens
		{500 * ms, 1, allow(0, 2500*ms)}, // exactly 1
		{2 * s, 1, allow(2, 1500*ms)},    // 3 tokens, 1 taken
		{10 * s, 0, allow(5, 0)},         // full, not 18
		{10 * s, 5, allow(0, 2500*ms)},
	})
}

// testDeniedTakesNothing: a denied request leaves the bucket as it was.
func testDeniedTakesNothing(t testing.TB, e env) {
	b := e.bucket(t, "denied", 4, spigot.PerSecond(1))
	play(t, e, b, "k", []step{
		{0, 4, allow(0, 4*s)},
		{500 * ms, 1, deny(0, 500*ms, 3500*ms)},
		{500 * ms, 1, deny(0, 500*ms, 3500*ms)},  // the same again: nothing was taken
		{600 * ms, 3, deny(0, 2400*ms, 3400*ms)}, // 0.6 held, 2.4 missing
		{900 * ms, 2, deny(0, 1100*ms, 3100*ms)},
		{1 * s, 1, allow(0, 4*s)}, // exactly 1 token: every denial took nothing
		{3 * s, 3, deny(2, 1*s, 2*s)},
		{3 * s, 2, allow(0, 4*s)},
	})
}

// testCostZero: cost 0 is a peek: always allowed, even on an empty bucket,
// and it takes nothing.
func testCostZero(t testing.TB, e env) {
	b := e.bucket(t, "peek", 3, spigot.PerSecond(1))
	play(t, e, b, "k", []step{
		{0, 0, allow(3, 0)}, // a key never seen is full
		{0, 3, allow(0, 3*s)},
		{0, 0, allow(0, 3*s)}, // empty, still allowed
		{0, 0, allow(0, 3*s)},
		{1500 * ms, 0, allow(1, 1500*ms)},
		{1500 * ms, 2, deny(1, 500*ms, 1500*ms)},
		{2 * s, 2, allow(0, 3*s)}, // the peeks took nothing
		{5 * s, 0, allow(3, 0)},
	})
}

// testCostOverCapacity: a cost above the capacity is denied with
// RetryAfter Never and takes nothing.
func testCostOverCapacity(t testing.TB, e env) {
	b := e.bucket(t, "over", 5, spigot.PerSecond(1))
	play(t, e, b, "k", []step{
		{0, 6, deny(5, spigot.Never, 0)},
		{0, math.MaxInt64, deny(5, spigot.Never, 0)},
		{0, 5, allow(0, 5*s)}, // nothing was taken
		{0, 6, deny(0, spigot.Never, 5*s)},
		{2 * s, 6, deny(2, spigot.Never, 3*s)},
		{5 * s, 5, allow(0, 5*s)},
	})
}

// testCostsPastExact: N past 2^53, which a double cannot hold, on a
// bucket of capacity 2^53 (one unit a token, one a µs): a Take or Peek of
// more than the capacity is Never, a TakeUpTo takes what the bucket holds,
// a Refund fills it.
func testCostsPastExact(t testing.TB, e env) {
	const c = int64(store.MaxExact)
	b := e.bucket(t, "edge", c, spigot.Per(1, time.Microsecond))
	full := 9007199254741 * ms // 2^53 µs, rounded up
	playOps(t, e, b, "k", []opStep{
		{0, spigot.Take, c + 1, deny(c, spigot.Never, 0)},
		{0, spigot.Peek, c + 1, deny(c, spigot.Never, 0)},
		{0, spigot.Peek, math.MaxInt64, deny(c, spigot.Never, 0)},
		{0, spigot.Take, c, took(c, 0, full)},
		{0, spigot.Refund, math.MaxInt64, took(c, c, 0)},
		{0, spigot.TakeUpTo, math.MaxInt64, took(c, 0, full)},
		{1 * ms, spigot.Peek, c + 1, deny(1000, spigot.Never, full-1*ms)}, // 1000 tokens back
		{1 * ms, spigot.TakeUpTo, c + 2, took(1000, 0, full)},
		{1 * ms, spigot.Refund, c + 1, took(c, c, 0)},
		{1 * ms, spigot.Take, c + 1, deny(c, spigot.Never, 0)},
	})
}

// testCapacityZero: a bucket of capacity 0 admits only cost 0.
func testCapacityZero(t testing.TB, e env) {
	b := e.bucket(t, "capacity-0", 0, spigot.PerSecond(1))
	play(t, e, b, "k", []step{
		{0, 0, allow(0, 0)},
		{0, 1, deny(0, spigot.Never, 0)},
		{0, math.MaxInt64, deny(0, spigot.Never, 0)},
		{time.Hour, 1, deny(0, spigot.Never, 0)},
		{time.Hour, 0, allow(0, 0)},
	})
}

// testExactFields7per10s: Remaining, RetryAfter, ResetAfter and
// RefillAfter at fixed instants, at a rate whose token is not a whole
// number of milliseconds: 7 every 10s, one token every 1428.571…ms, 0.7
// tokens a second.
func testExactFields7per10s(t testing.TB, e env) {
	b := e.bucket(t, "fields-7/10s", 7, spigot.Per(7, 10*s))
	r := withRefill
	play(t, e, b, "k", []step{
		{0, 7, r(allow(0, 10*s), 1429*ms)},
		{1 * s, 1, r(deny(0, 429*ms, 9*s), 429*ms)},             // 0.7 held; 0.3 token: 428.57ms; 6.3 tokens: 9s
		{1429 * ms, 1, r(allow(0, 10*s), 1429*ms)},              // 1.0003 held, 0.0003 left; 6.9997 tokens: 9999.57ms; 0.9997 token: 1428.14ms
		{5 * s, 2, r(allow(0, 9286*ms), 715*ms)},                // 0.0003 + 3.571×0.7 = 2.5 held, 0.5 left; 6.5 tokens: 9285.71ms
		{5 * s, 1, r(deny(0, 715*ms, 9286*ms), 715*ms)},         // 0.5 token: 714.29ms
		{5714 * ms, 1, r(deny(0, 1*ms, 8572*ms), 1*ms)},         // 0.9998 held; 0.0002 token: 0.29ms; 6.0002 tokens: 8571.71ms
		{5715 * ms, 1, r(allow(0, 10*s), 1428*ms)},              // 1.0005 held, 0.0005 left; 6.9995 tokens: 9999.29ms; 0.9995 token: 1427.86ms
		{20 * s, 0, r(allow(7, 0), 1429*ms)},                    // full
		{20 * s, 8, r(deny(7, spigot.Never, 0), 1429*ms)},       // over capacity
		{20*s + 1*ms, 7, r(allow(0, 10*s), 1429*ms)},            // nothing was taken
		{20*s + 1*ms, 7, r(deny(0, 10*s, 10*s), 1429*ms)},       // 7 tokens: 10s
		{20*s + 2*ms, 1, r(deny(0, 1428*ms, 9999*ms), 1428*ms)}, // 0.0007 held; 0.9993 token: 1427.57ms; 6.9993 tokens: 9999ms
	})
}

// testExactFields10per13s: the fields at fixed instants for 10 tokens every
// 13s: one token every 1300ms exactly.
func testExactFields10per13s(t testing.TB, e env) {
	b := e.bucket(t, "fields-10/13s", 10, spigot.Per(10, 13*s))
	play(t, e, b, "k", []step{
		{0, 10, allow(0, 13*s)},
		{650 * ms, 1, deny(0, 650*ms, 12350*ms)}, // 0.5 held
		{1300 * ms, 1, allow(0, 13*s)},           // exactly 1 held
		{1300 * ms, 0, allow(0, 13*s)},
		{4 * s, 2, allow(0, 12900*ms)}, // 2.7s of refill held, 0.1s left
		{4 * s, 1, deny(0, 1200*ms, 12900*ms)},
		{5200 * ms, 1, allow(0, 13*s)}, // 0.1s + 1.2s of refill: exactly 1
		{5200*ms + 13*s, 0, allow(10, 0)},
	})
}

// retryAfterCases are the cases that check, for one rate each, that a
// retry after exactly RetryAfter is admitted and one a millisecond earlier
// is not. RetryAfter is the time the bucket needs to hold the cost, rounded
// up to the millisecond, so at RetryAfter−1ms the bucket always holds less.
func retryAfterCases() []testCase {
	var out []testCase
	for _, r := range []struct {
		rate spigot.Rate
		// For capacity 2, emptied at t0: retry is the RetryAfter of one
		// token (1/refill, rounded up), empty the ResetAfter of the empty
		// bucket (2/refill), early the ResetAfter at t0+retry−1ms, and
		// left and later the Remaining and ResetAfter after the retry.
		retry, empty, early time.Duration
		left                int64
		later               time.Duration
	}{
		// 1 token: 333.33ms. At 333ms 0.999 held; at 334ms 1.002, and 0.002 left.
		{spigot.PerSecond(3), 334 * ms, 667 * ms, 334 * ms, 0, 666 * ms},
		// 1 token: 1428.57ms. At 1428ms 0.9996 held; at 1429ms 1.0003.
		{spigot.Per(7, 10*s), 1429 * ms, 2858 * ms, 1430 * ms, 0, 2857 * ms},
		// 1 token: 1300ms exactly.
		{spigot.Per(10, 13*s), 1300 * ms, 2600 * ms, 1301 * ms, 0, 2600 * ms},
		{spigot.Per(1, 3*s), 3 * s, 6 * s, 3001 * ms, 0, 6 * s},
		// 1 token: 1µs. RetryAfter rounds up to 1ms, by which the bucket is
		// full (2) again; t0+retry−1ms is t0 itself.
		{spigot.Per(1000, ms), 1 * ms, 1 * ms, 1 * ms, 1, 1 * ms},
		{spigot.Per(1, 24*time.Hour), 24 * time.Hour, 48 * time.Hour, 24*time.Hour + ms, 0, 48 * time.Hour},
	} {
		name := "retry-after-" + strings.Replace(r.rate.String(), "/", "-per-", 1)
		out = append(out, testCase{name, func(t testing.TB, e env) {
			b := e.bucket(t, "retry-"+r.rate.String(), 2, r.rate)
			play(t, e, b, "k", []step{
				{0, 2, allow(0, r.empty)},
				{0, 1, deny(0, r.retry, r.empty)},
				{r.retry - ms, 1, deny(0, 1*ms, r.early)},
				{r.retry, 1, allow(r.left, r.later)},
			})
		}})
	}
	return out
}

// testReset: Reset fills a bucket again and reports whether it was not
// full.
func testReset(t testing.TB, e env) {
	b := e.bucket(t, "reset", 3, spigot.PerSecond(1))
	for _, k := range []struct {
		key  string
		cost int64
		want spigot.Decision
	}{
		{"used", 2, allow(1, 2*s)},
		{"other", 3, allow(0, 3*s)},
		{"refilled", 1, allow(2, 1*s)},
		{"partial", 1, allow(2, 1*s)},
		{"peeked", 0, allow(3, 0)},
		{"over", 4, deny(3, spigot.Never, 0)},
	} {
		play(t, e, b, k.key, []step{{0, k.cost, k.want}})
	}
	reset(t, e, b, "untouched", 0, false, "the key was never used")
	reset(t, e, b, "peeked", 0, false, "the key was only peeked at (cost 0), so its bucket is full")
	reset(t, e, b, "over", 0, false, "the key's only request cost more than the capacity and took nothing")
	reset(t, e, b, "used", 0, true, "the key took 2 of 3 tokens")
	reset(t, e, b, "used", 0, false, "the key was reset just before")
	play(t, e, b, "used", []step{{0, 0, allow(3, 0)}, {0, 3, allow(0, 3*s)}})
	play(t, e, b, "other", []step{{0, 0, allow(0, 3*s)}}) // resetting "used" left it alone

	reset(t, e, b, "partial", 500*ms, true, "the key took 1 token 500ms before and holds 2.5")
	play(t, e, b, "partial", []step{{500 * ms, 3, allow(0, 3*s)}})
	reset(t, e, b, "refilled", 1*s, false, "the key took 1 token at t0 and refilled it by t0+1s")
	play(t, e, b, "refilled", []step{{1 * s, 0, allow(3, 0)}})
}

// testTakeUpTo: TakeUpTo takes the whole tokens a bucket holds, up to N,
// and is denied, with the RetryAfter of one token, only when it takes none.
func testTakeUpTo(t testing.TB, e env) {
	b := e.bucket(t, "take-up-to", 5, spigot.PerSecond(1))
	playOps(t, e, b, "k", []opStep{
		{0, spigot.TakeUpTo, 3, took(3, 2, 3*s)},
		{0, spigot.TakeUpTo, 5, took(2, 0, 5*s)}, // all it holds
		{0, spigot.TakeUpTo, 1, deny(0, 1*s, 5*s)},
		{1500 * ms, spigot.TakeUpTo, 0, allow(1, 3500*ms)}, // 1.5 tokens
		{1500 * ms, spigot.TakeUpTo, 9, took(1, 0, 4500*ms)},
		{1500 * ms, spigot.TakeUpTo, 1, deny(0, 500*ms, 4500*ms)}, // half a token to go
		{2 * s, spigot.TakeUpTo, 1, took(1, 0, 5*s)},
	})
	empty := e.bucket(t, "take-up-to-cap-0", 0, spigot.PerSecond(1))
	playOps(t, e, empty, "k", []opStep{
		{2 * s, spigot.TakeUpTo, 1, deny(0, spigot.Never, 0)},
		{2 * s, spigot.TakeUpTo, 0, allow(0, 0)},
	})
}

// testRefund: Refund gives tokens back, up to the capacity, and its N says
// how many, rounded up to a whole token.
func testRefund(t testing.TB, e env) {
	b := e.bucket(t, "refund", 5, spigot.PerSecond(1))
	playOps(t, e, b, "k", []opStep{
		{0, spigot.Take, 5, took(5, 0, 5*s)},
		{0, spigot.Refund, 2, took(2, 2, 3*s)},
		{0, spigot.Take, 3, deny(2, 1*s, 3*s)},
		{500 * ms, spigot.Refund, 10, took(3, 5, 0)}, // 2.5 to full: capped, rounded up
		{500 * ms, spigot.Refund, 1, allow(5, 0)},    // full: nothing to give back
		{500 * ms, spigot.Take, 5, took(5, 0, 5*s)},  // and no more than 5 to take
		{500 * ms, spigot.Take, 1, deny(0, 1*s, 5*s)},
	})
	playOps(t, e, b, "unseen", []opStep{{0, spigot.Refund, 3, allow(5, 0)}})
}

// testTakeThenRefund: a Refund of what a Take or TakeUpTo took, at the same
// instant, leaves the bucket as if neither happened: the next operations
// decide exactly as they would have.
func testTakeThenRefund(t testing.TB, e env) {
	b := e.bucket(t, "take-then-refund", 7, spigot.Per(7, 10*s))
	ctx := t.Context()
	do := func(key string, at time.Duration, act spigot.Action, n int64) spigot.Decision {
		t.Helper()
		e.at(at)
		d, err := e.s.Do(ctx, spigot.Op{Limit: b, Key: key, Action: act, N: n})
		if err != nil {
			t.Fatalf("bucket %v, key %q at t0+%v: %v %d: unexpected error: %v", b, key, at, act, n, err)
		}
		return d
	}
	for i, c := range []struct {
		first, at time.Duration // of a Take of 4, then of the operation
		act       spigot.Action
		n         int64
	}{
		{0, 0, spigot.Take, 3},
		{0, 0, spigot.TakeUpTo, 3},
		{0, 1234 * ms, spigot.Take, 2},
		{0, 1234 * ms, spigot.Take, 9}, // denied: N 0, nothing to give back
		{0, 1500 * ms, spigot.TakeUpTo, 7},
		{1500 * ms, 1400 * ms, spigot.Take, 1}, // the clock stepped back
		{0, 20 * s, spigot.Take, 7},
	} {
		// Two keys see the same operations, but the second also sees a
		// Take and its Refund before each.
		plain, twin := fmt.Sprintf("plain-%d", i), fmt.Sprintf("twin-%d", i)
		for _, k := range []string{plain, twin} {
			do(k, c.first, spigot.Take, 4)
		}
		taken := do(twin, c.at, c.act, c.n)
		do(twin, c.at, spigot.Refund, taken.N)
		for _, next := range []struct {
			after time.Duration
			act   spigot.Action
			n     int64
		}{{0, spigot.Peek, 1}, {0, spigot.Take, 3}, {700 * ms, spigot.Take, 2}, {0, spigot.Peek, 7}} {
			want := do(plain, c.at+next.after, next.act, next.n)
			if got := do(twin, c.at+next.after, next.act, next.n); got != want {
				t.Errorf("bucket %v at t0+%v: after %v %d (N %d) then Refund %d, %v %d = %s; want %s, as if neither happened",
					b, c.at+next.after, c.act, c.n, taken.N, taken.N, next.act, next.n, show(got), show(want))
			}
		}
	}
}

// testPeek: Peek decides as a Take of N would, and changes nothing.
func testPeek(t testing.TB, e env) {
	b := e.bucket(t, "peek", 3, spigot.PerSecond(1))
	playOps(t, e, b, "k", []opStep{
		{0, spigot.Peek, 3, allow(3, 0)},
		{0, spigot.Peek, 4, deny(3, spigot.Never, 0)},
		{0, spigot.Take, 2, took(2, 1, 2*s)},
		{0, spigot.Peek, 2, deny(1, 1*s, 2*s)},
		{0, spigot.Peek, 1, allow(1, 2*s)},
		{0, spigot.Peek, 1, allow(1, 2*s)}, // the peek took nothing
		{500 * ms, spigot.Peek, 2, deny(1, 500*ms, 1500*ms)},
		{1 * s, spigot.Take, 2, took(2, 0, 3*s)},
	})
}

// testUnsupported: what a store cannot do is an error that matches
// errors.ErrUnsupported, and changes nothing: an Action it does not know,
// and several operations in one DoMulti if it cannot apply them.
func testUnsupported(t testing.TB, e env) {
	ctx := t.Context()
	b := e.bucket(t, "unsupported", 3, spigot.PerHour(1))
	if e.clk != nil {
		e.at(0)
	}
	peek := func(key string, want int64, why string) {
		t.Helper()
		d, err := e.s.Do(ctx, spigot.Op{Limit: b, Key: key, Action: spigot.Peek})
		if err != nil || d.Remaining != want {
			t.Errorf("bucket %v: Peek(%q) = %s, %v; want Remaining %d: %s", b, key, show(d), err, want, why)
		}
	}
	for _, a := range []spigot.Action{5, 200} {
		d, err := e.s.Do(ctx, spigot.Op{Limit: b, Key: "k", Action: a, N: 1})
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("bucket %v: Do(%v) = %s, %v; want an error matching errors.ErrUnsupported", b, a, show(d), err)
		}
	}
	peek("k", 3, "an action the store does not know must change nothing")

	// One op through DoMulti is that op through Do, or unsupported and
	// nothing done.
	out := make([]spigot.Decision, 1)
	switch err := e.s.DoMulti(ctx, spigot.Independent, []spigot.Op{{Limit: b, Key: "one", N: 2}}, out); {
	case errors.Is(err, errors.ErrUnsupported):
		peek("one", 3, "an unsupported DoMulti must change nothing")
	case err != nil:
		t.Errorf("bucket %v: DoMulti of one Take: %v", b, err)
	case diff(out[0], withRefill(took(2, 1, 2*time.Hour), time.Hour)) != "":
		t.Errorf("bucket %v: DoMulti of one Take: %s", b, diff(out[0], withRefill(took(2, 1, 2*time.Hour), time.Hour)))
	}
	if err := e.s.DoMulti(ctx, spigot.Independent, []spigot.Op{{Limit: b, Key: "bad-out", N: 1}}, nil); err == nil {
		t.Errorf("bucket %v: DoMulti with no room for the decision: no error", b)
	}
	peek("bad-out", 3, "a DoMulti that failed must change nothing")

	// Several: done, or unsupported and nothing done.
	ops := []spigot.Op{{Limit: b, Key: "a", N: 1}, {Limit: b, Key: "b", N: 2}}
	out = make([]spigot.Decision, 2)
	switch err := e.s.DoMulti(ctx, spigot.Independent, ops, out); {
	case errors.Is(err, errors.ErrUnsupported):
		peek("a", 3, "an unsupported DoMulti must change nothing")
		peek("b", 3, "an unsupported DoMulti must change nothing")
	case err != nil:
		t.Errorf("bucket %v: DoMulti of two Takes: %v; want them done, or an error matching errors.ErrUnsupported", b, err)
	default:
		for i, want := range []spigot.Decision{took(1, 2, time.Hour), took(2, 1, 2*time.Hour)} {
			if d := diff(out[i], withRefill(want, time.Hour)); d != "" {
				t.Errorf("bucket %v: DoMulti (Independent) of two Takes: decision %d: %s", b, i, d)
			}
		}
	}
	ops = []spigot.Op{{Limit: b, Key: "c", N: 1}, {Limit: b, Key: "d", N: 4}} // the second can never fit
	switch err := e.s.DoMulti(ctx, spigot.AllOrNothing, ops, out); {
	case err != nil && !errors.Is(err, errors.ErrUnsupported):
		t.Errorf("bucket %v: DoMulti (AllOrNothing): %v; want it done, or an error matching errors.ErrUnsupported", b, err)
	case err == nil && (out[0].N != 0 || out[1].Allowed() || out[1].RetryAfter != spigot.Never):
		t.Errorf("bucket %v: DoMulti (AllOrNothing) with a cost over the capacity = %s, %s; want nothing taken, and the second denied with RetryAfter Never", b, show(out[0]), show(out[1]))
	}
	peek("c", 3, "an all-or-nothing DoMulti that was denied, or unsupported, must take nothing")
}

// testConfigChange: a bucket whose capacity or rate changes under the same
// name keeps each key's tokens, clamped to the new capacity. When the
// change alters the bucket's scale (see spigot.Limit), only whole tokens
// carry over.
func testConfigChange(t testing.TB, e env) {
	const name = "config"
	old := e.bucket(t, name, 10, spigot.PerSecond(1))
	bigger := e.bucket(t, name, 20, spigot.PerSecond(1))
	smaller := e.bucket(t, name, 5, spigot.PerSecond(1))
	faster := e.bucket(t, name, 10, spigot.PerSecond(2)) // another scale
	both := e.bucket(t, name, 4, spigot.PerSecond(2))

	// A raised capacity starts from the tokens held, not full.
	play(t, e, old, "raise", []step{{0, 7, allow(3, 7*s)}})
	play(t, e, bigger, "raise", []step{{0, 0, allow(3, 17*s)}})

	// A lowered capacity clamps the tokens held; going back keeps them.
	play(t, e, old, "lower", []step{{0, 2, allow(8, 2*s)}})
	play(t, e, smaller, "lower", []step{{0, 0, allow(5, 0)}, {0, 5, allow(0, 5*s)}})
	play(t, e, old, "lower", []step{{0, 0, allow(0, 10*s)}})

	// The same scale keeps fractions of a token exactly: 1.5 stays 1.5.
	play(t, e, old, "fraction", []step{{0, 10, allow(0, 10*s)}, {1500 * ms, 0, allow(1, 8500*ms)}})
	play(t, e, bigger, "fraction", []step{{1500 * ms, 0, allow(1, 18500*ms)}})

	// Another scale keeps whole tokens: 2.5 becomes 2.
	play(t, e, old, "rate", []step{{1500 * ms, 10, allow(0, 10*s)}, {4 * s, 0, allow(2, 7500*ms)}})
	play(t, e, faster, "rate", []step{
		{4 * s, 0, allow(2, 4*s)},
		{4 * s, 3, deny(2, 500*ms, 4*s)},
		{4500 * ms, 3, allow(0, 5*s)},
	})
	play(t, e, old, "rate", []step{{4500 * ms, 0, allow(0, 10*s)}})

	// Both at once: 9 tokens clamp to the new capacity of 4.
	play(t, e, old, "both", []step{{4500 * ms, 1, allow(9, 1*s)}})
	play(t, e, both, "both", []step{{4500 * ms, 0, allow(4, 0)}, {4500 * ms, 4, allow(0, 2*s)}})
}

// testClockStepsBack: a clock that steps back adds no tokens and never
// moves a key's stamp back: when it catches up, the bucket refills only
// for the time after the stamp. A RetryAfter counts the time the clock
// has to catch up (as x/time/rate's TestLimiterJumpBackwards checks of
// it, the other way round: x/time/rate moves its stamp back).
func testClockStepsBack(t testing.TB, e env) {
	b := e.bucket(t, "back", 2, spigot.PerSecond(1))
	play(t, e, b, "k", []step{
		{10 * s, 2, allow(0, 2*s)},
		// One second back: nothing refills, and the retry waits for the
		// clock to come back to the stamp, then for a token.
		{9 * s, 1, deny(0, 2*s, 3*s)},
		{9500 * ms, 0, allow(0, 2500*ms)},
		// Back at the stamp: still nothing (a store that moved its stamp
		// to 9s would now hold a token).
		{10 * s, 1, deny(0, 1*s, 2*s)},
		{11 * s, 1, allow(0, 2*s)},
		{12 * s, 1, allow(0, 2*s)},
	})
	// A bucket full again is forgotten, stamp and all: a clock that then
	// steps back starts it again, full, at the earlier instant.
	play(t, e, b, "forgotten", []step{
		{10 * s, 2, allow(0, 2*s)},
		{12 * s, 0, allow(2, 0)},
		{11 * s, 2, allow(0, 2*s)},
		{12 * s, 1, allow(0, 2*s)},
	})
}

// testFullAgainForgets: once a bucket is full again under the config its
// state was stored with, the state counts as absent whatever the config
// has become since, as a store that forgets it then (its time to live is
// ResetAfter) would find: the model, not each store, says so.
func testFullAgainForgets(t testing.TB, e env) {
	const name = "forget"
	fast := e.bucket(t, name, 10, spigot.PerSecond(10))
	slow := e.bucket(t, name, 10, spigot.PerSecond(1))
	// Full again at 1s under 10/s: read under 1/s at 2s, it is full.
	play(t, e, fast, "after", []step{{0, 10, allow(0, 1*s)}})
	play(t, e, slow, "after", []step{{2 * s, 0, allow(10, 0)}, {2 * s, 4, allow(6, 4*s)}})
	// Read under 1/s before 1s, its whole tokens (0) carry over, and the
	// state is stored again under 1/s: full again at 10.5s.
	play(t, e, fast, "before", []step{{0, 10, allow(0, 1*s)}})
	play(t, e, slow, "before", []step{{500 * ms, 0, allow(0, 9500*ms)}, {1 * s, 0, allow(1, 9*s)}})
	play(t, e, fast, "before", []step{{1200 * ms, 0, allow(3, 700*ms)}})
}

// testSlowestExactRate: the slowest rate whose arithmetic is exact, one
// token every 2^53 µs (about 285 years) in a bucket of 1, where a token is
// 2^53 scaled units, the most a bucket may hold: every field is still
// exact to the millisecond (a store computing in doubles is most at risk
// here).
func testSlowestExactRate(t testing.TB, e env) {
	const period = time.Duration(store.MaxExact) * time.Microsecond
	b := e.bucket(t, "slowest", 1, spigot.Per(1, period))
	const full = 9007199254741 * ms // ⌈2^53 µs⌉ in ms
	const half = 1 << 52 * time.Microsecond
	play(t, e, b, "k", []step{
		{0, 1, allow(0, full)},
		{1 * time.Microsecond, 1, deny(0, full, full)},
		{1 * ms, 1, deny(0, full-1*ms, full-1*ms)},
		// Half the period: half a token, 2^52 units.
		{half, 1, deny(0, 4503599627371*ms, 4503599627371*ms)},
		{half, 0, allow(0, 4503599627371*ms)},
	})
}

// testInvalidInput: the zero Limit and a negative cost are errors that
// match spigot's sentinels, and take nothing.
func testInvalidInput(t testing.TB, e env) {
	ctx := t.Context()
	b := e.bucket(t, "invalid", 2, spigot.PerHour(1))
	if e.clk != nil {
		e.at(0)
	}
	if a, err := take(ctx, e.s, b, "k", 1); err != nil || !a.Allowed() || a.Remaining != 1 {
		t.Fatalf("bucket %v: Take(%q, 1) on a full bucket = %s, %v; want allowed, Remaining 1", b, "k", show(a), err)
	}
	for _, c := range []struct {
		what string
		call func() (spigot.Decision, error)
		want error
	}{
		{"Take with the zero Limit", func() (spigot.Decision, error) {
			return take(ctx, e.s, spigot.Limit{}, "k", 1)
		}, spigot.ErrInvalidLimit},
		{"Take of 0 with the zero Limit", func() (spigot.Decision, error) {
			return take(ctx, e.s, spigot.Limit{}, "k", 0)
		}, spigot.ErrInvalidLimit},
		{"Reset with the zero Limit", func() (spigot.Decision, error) {
			return e.s.Do(ctx, spigot.Op{Limit: spigot.Limit{}, Key: "k", Action: spigot.Reset})
		}, spigot.ErrInvalidLimit},
		{"Take of -1", func() (spigot.Decision, error) {
			return take(ctx, e.s, b, "k", -1)
		}, spigot.ErrInvalidCost},
		{"Take of math.MinInt64", func() (spigot.Decision, error) {
			return take(ctx, e.s, b, "k", math.MinInt64)
		}, spigot.ErrInvalidCost},
		{"Take with a key one byte over MaxKeyLen", func() (spigot.Decision, error) {
			return take(ctx, e.s, b, "k"+strings.Repeat("x", spigot.MaxKeyLen), 1)
		}, spigot.ErrInvalidKey},
		{"Reset with a 1 MB key", func() (spigot.Decision, error) {
			return e.s.Do(ctx, spigot.Op{Limit: b, Key: strings.Repeat("k", 1<<20), Action: spigot.Reset})
		}, spigot.ErrInvalidKey},
	} {
		a, err := c.call()
		switch {
		case err == nil:
			t.Errorf("%s: got %s and no error, want an error matching %v", c.what, show(a), c.want)
		case !errors.Is(err, c.want):
			t.Errorf("%s: error %q does not match %v (errors.Is)", c.what, err, c.want)
		}
	}
	// The negative costs added nothing, and nothing was taken.
	if a, err := take(ctx, e.s, b, "k", 0); err != nil || a.Remaining != 1 {
		t.Errorf("bucket %v: after the bad requests, a peek at %q = %s, %v; want Remaining 1 as before them", b, "k", show(a), err)
	}
}

// testCancelledContext: a request with a done context fails with the
// context's error and takes nothing; a reset with one resets nothing.
func testCancelledContext(t testing.TB, e env) {
	b := e.bucket(t, "cancelled", 3, spigot.PerHour(1))
	if e.clk != nil {
		e.at(0)
	}
	live := t.Context()
	if a, err := take(live, e.s, b, "drained", 3); err != nil || !a.Allowed() {
		t.Fatalf("bucket %v: Take(%q, 3) on a full bucket = %s, %v; want allowed", b, "drained", show(a), err)
	}
	cancelled, cancel := context.WithCancel(live)
	cancel()
	expired, cancel := context.WithDeadline(live, time.Unix(0, 0))
	defer cancel()

	for _, c := range []struct {
		what string
		ctx  context.Context
		want error
	}{
		{"a cancelled context", cancelled, context.Canceled},
		{"a context past its deadline", expired, context.DeadlineExceeded},
	} {
		if a, err := take(c.ctx, e.s, b, "k", 1); !errors.Is(err, c.want) {
			t.Errorf("Take with %s = %s, %v; want an error matching %v", c.what, show(a), err, c.want)
		}
		if _, err := resetKey(c.ctx, e.s, b, "drained"); !errors.Is(err, c.want) {
			t.Errorf("Reset with %s: error %v, want one matching %v", c.what, err, c.want)
		}
	}
	if a, err := take(live, e.s, b, "k", 0); err != nil || a.Remaining != 3 {
		t.Errorf("bucket %v: a peek at %q after requests with done contexts = %s, %v; want Remaining 3: they must take nothing", b, "k", show(a), err)
	}
	if a, err := take(live, e.s, b, "drained", 0); err != nil || a.Remaining != 0 {
		t.Errorf("bucket %v: a peek at %q after resets with done contexts = %s, %v; want Remaining 0: they must reset nothing", b, "drained", show(a), err)
	}
}

// testConcurrent: goroutines racing on one key, with the clock frozen,
// are admitted exactly the capacity, each token once.
func testConcurrent(t testing.TB, e env) {
	const goroutines = 16
	for _, c := range []struct {
		capacity, cost int64
		each           int // requests per goroutine
	}{
		{100, 1, 20},
		{100, 3, 10},
	} {
		b := e.bucket(t, fmt.Sprintf("concurrent-cost-%d", c.cost), c.capacity, spigot.PerSecond(1))
		results := race(t, e, goroutines, c.each, func(int, int) (spigot.Limit, string, int64) { return b, "hot", c.cost })
		checkRace(t, b, "hot", c.cost, results)
	}

	// Many keys at once: each is admitted exactly its own capacity.
	b := e.bucket(t, "concurrent-keys", 10, spigot.PerSecond(1))
	const keys = 8
	results := race(t, e, goroutines, 3*keys, func(g, i int) (spigot.Limit, string, int64) {
		return b, fmt.Sprintf("k%d", (g+i)%keys), 1
	})
	byKey := make(map[string][]raced)
	for _, r := range results {
		byKey[r.key] = append(byKey[r.key], r)
	}
	if len(byKey) != keys {
		t.Fatalf("the suite raced on %d keys, want %d", len(byKey), keys)
	}
	for key, rs := range byKey {
		checkRace(t, b, key, 1, rs)
	}
}

// raced is one request of race.
type raced struct {
	key string
	a   spigot.Decision
}

// race runs goroutines goroutines of each requests, the i-th of goroutine
// g made by req(g, i), at once, and returns every admission.
func race(t testing.TB, e env, goroutines, each int, req func(g, i int) (spigot.Limit, string, int64)) []raced {
	t.Helper()
	out := make([][]raced, goroutines)
	errs := make([]error, goroutines)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for i := range each {
				b, key, cost := req(g, i)
				a, err := take(t.Context(), e.s, b, key, cost)
				if err != nil {
					errs[g] = fmt.Errorf("bucket %v: Take(%q, %d): %w", b, key, cost, err)
					return
				}
				out[g] = append(out[g], raced{key, a})
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent requests: unexpected error: %v", err)
	}
	var all []raced
	for _, o := range out {
		all = append(all, o...)
	}
	return all
}

// checkRace checks the admissions of concurrent requests of cost on key of
// a full bucket b: every whole cost is admitted once, each leaving a
// different Remaining, and every denial sees what is left.
func checkRace(t testing.TB, b spigot.Limit, key string, cost int64, results []raced) {
	t.Helper()
	capacity := b.Capacity()
	admits := capacity / cost
	seen := make(map[int64]int)
	var n int64
	for _, r := range results {
		if r.a.Allowed() {
			n++
			seen[r.a.Remaining]++
			continue
		}
		if left := capacity - admits*cost; r.a.Remaining != left {
			t.Errorf("bucket %v, key %q: a concurrent request of cost %d was denied with Remaining %d, want %d: denials come only once the bucket holds less than the cost",
				b, key, cost, r.a.Remaining, left)
			return
		}
	}
	if n != admits {
		t.Errorf("bucket %v, key %q: %d concurrent requests of cost %d admitted %d, want exactly %d: the read, take and write of a key's state must be atomic",
			b, key, len(results), cost, n, admits)
		return
	}
	for i := range admits {
		if rem := capacity - (i+1)*cost; seen[rem] != 1 {
			t.Errorf("bucket %v, key %q: %d concurrent admissions reported Remaining %d, want exactly 1: each admission sees the tokens the ones before it left",
				b, key, seen[rem], rem)
		}
	}
}

// testManyKeys: the keys of one bucket are independent.
func testManyKeys(t testing.TB, e env) {
	b := e.bucket(t, "many", 3, spigot.PerSecond(1))
	const keys = 300
	key := func(i int) string { return fmt.Sprintf("user-%d", i) }
	cost := func(i int) int64 { return int64(i % 4) }
	for i := range keys {
		c := cost(i)
		if !play(t, e, b, key(i), []step{{0, c, allow(3-c, time.Duration(c)*s)}}) {
			return
		}
	}
	for i := range keys {
		c := cost(i)
		if !play(t, e, b, key(i), []step{{1 * s, 0, allow(min(3, 4-c), time.Duration(max(0, c-1))*s)}}) {
			return
		}
	}
}

// oddKeys are keys that a store which builds names out of them (a Redis key,
// a SQL string, a path) could mangle. Each must be a key of its own.
var oddKeys = []string{
	"", " ", "  ", "a", "A", "a ", " a", "a b", "a\tb", "a\nb", "\r\n",
	"{", "}", "{}", "{tag}", "{tag}:x", "x:{tag}", ":", "::", "a:b", "a:", ":b",
	"*", "?", "[a]", "%s%d", "%", `\`, `"`, "'", "`", "/", "..", "a.b", "a/b",
	"\x00", "a\x00b", "\x7f", "\xff\xfe", // invalid UTF-8
	"日本語", "🙂", "é", "e\u0301", // é composed and decomposed: other bytes, other keys
	strings.Repeat("long", spigot.MaxKeyLen/4), strings.Repeat("long", spigot.MaxKeyLen/4-1) + "lone", // the longest keys
}

// testOddKeys: keys with any bytes work and stay distinct.
func testOddKeys(t testing.TB, e env) {
	n := int64(len(oddKeys))
	b := e.bucket(t, "odd-keys", n+1, spigot.PerHour(1))
	// Key i takes i+1 tokens: keys that collide show it in Remaining.
	for i, key := range oddKeys {
		c := int64(i + 1)
		play(t, e, b, key, []step{{0, c, allow(n+1-c, time.Duration(c)*time.Hour)}})
	}
	for i, key := range oddKeys {
		c := int64(i + 1)
		play(t, e, b, key, []step{{0, 0, allow(n+1-c, time.Duration(c)*time.Hour)}})
	}
	for _, key := range oddKeys {
		reset(t, e, b, key, 0, true, "the key took tokens")
		play(t, e, b, key, []step{{0, 0, allow(n+1, 0)}})
	}
}

// testBucketNames: buckets with different names keep different state for
// the same key.
func testBucketNames(t testing.TB, e env) {
	a := e.bucket(t, "names-a", 3, spigot.PerSecond(1))
	b := e.bucket(t, "names-b", 3, spigot.PerSecond(1))
	c := e.bucket(t, "names-a-longer", 5, spigot.PerHour(1))
	play(t, e, a, "k", []step{{0, 3, allow(0, 3*s)}})
	play(t, e, b, "k", []step{{0, 0, allow(3, 0)}, {0, 1, allow(2, 1*s)}})
	play(t, e, c, "k", []step{{0, 0, allow(5, 0)}})
	reset(t, e, a, "k", 0, true, "the key took 3 tokens of this bucket")
	play(t, e, b, "k", []step{{0, 0, allow(2, 1*s)}}) // the reset of another bucket left it alone
	play(t, e, a, "k", []step{{0, 0, allow(3, 0)}})
}

// testNeverMoreThan drives buckets with a long, seeded, random sequence of
// requests and checks every admission against the model, that a retry
// after exactly RetryAfter is admitted, and that no interval of length T
// admits more than capacity + floor(T × refill) tokens.
func testNeverMoreThan(t testing.TB, e env) {
	rng := rand.New(rand.NewPCG(20260102, 30405))
	for _, c := range []struct {
		capacity int64
		rate     spigot.Rate
	}{
		{5, spigot.PerSecond(3)},
		{3, spigot.Per(7, 10*s)},
		{1, spigot.Per(10, 13*s)},
		{12, spigot.Per(1000, ms)},
		{20, spigot.Per(1, 3*s)},
	} {
		b := e.bucket(t, "random-"+c.rate.String(), c.capacity, c.rate)
		if !randomRun(t, e, rng, b) {
			return
		}
	}
}

// randomRun is testNeverMoreThan for one bucket. It reports whether the
// store passed.
func randomRun(t testing.TB, e env, rng *rand.Rand, b spigot.Limit) bool {
	t.Helper()
	const requests = 400
	rate := b.Rate()
	tick := int64(rate.Period/time.Microsecond) / rate.Tokens // µs per token, roughly
	ref := newModel(b.Capacity(), rate)
	start := e.clk.Now()
	var (
		at    []int64 // µs since start
		taken []int64 // tokens admitted
		now   int64
		retry = int64(-1) // the cost to retry at now, or -1
	)
	for i := range requests {
		cost := rng.Int64N(b.Capacity() + 2) // 0 … capacity+1
		switch {
		case retry >= 0:
			cost = retry
		case rng.IntN(4) == 0: // a burst: same instant
		default:
			now += rng.Int64N(2*tick + 1)
		}
		when := start.Add(time.Duration(now) * time.Microsecond)
		e.clk.Set(when)
		got, err := take(t.Context(), e.s, b, "k", cost)
		where := fmt.Sprintf("bucket %v, random request %d (t0+%v, cost %d)", b, i+1, when.Sub(t0), cost)
		if err != nil {
			t.Errorf("%s: Take: unexpected error: %v", where, err)
			return false
		}
		want := refApply(ref, when, spigot.Take, cost)
		if retry >= 0 && !got.Allowed() {
			t.Errorf("%s: a retry after exactly RetryAfter was denied: %s", where, show(got))
			return false
		}
		if d := diff(got, want); d != "" {
			t.Errorf("%s: %s", where, d)
			return false
		}
		at = append(at, now)
		taken = append(taken, 0)
		if got.Allowed() {
			taken[len(taken)-1] = cost
		}
		retry = -1
		if !got.Allowed() && got.RetryAfter != spigot.Never && rng.IntN(2) == 0 {
			now += got.RetryAfter.Microseconds()
			retry = cost
		}
	}
	// No interval [at[i], at[j]] admits more than capacity + floor(T × refill).
	for i := range at {
		sum := int64(0)
		for j := i; j < len(at); j++ {
			sum += taken[j]
			limit := b.Capacity() + (at[j]-at[i])*rate.Tokens/int64(rate.Period/time.Microsecond)
			if sum > limit {
				t.Errorf("bucket %v: requests %d to %d (t0+%v to t0+%v) admitted %d tokens, more than capacity %d + %d refilled",
					b, i+1, j+1, start.Add(time.Duration(at[i])*time.Microsecond).Sub(t0),
					start.Add(time.Duration(at[j])*time.Microsecond).Sub(t0), sum, b.Capacity(), limit-b.Capacity())
				return false
			}
		}
	}
	return true
}

// testRandomOperations drives buckets with a seeded random sequence of
// operations of every action, checking every decision against the model.
func testRandomOperations(t testing.TB, e env) {
	rng := rand.New(rand.NewPCG(20261201, 1))
	actions := []spigot.Action{spigot.Take, spigot.Take, spigot.TakeUpTo, spigot.Refund, spigot.Reset, spigot.Peek}
	for _, c := range []struct {
		capacity int64
		rate     spigot.Rate
	}{
		{5, spigot.PerSecond(3)},
		{3, spigot.Per(7, 10*s)},
		{20, spigot.Per(1, 3*s)},
	} {
		b := e.bucket(t, "random-ops-"+c.rate.String(), c.capacity, c.rate)
		ref := newModel(c.capacity, c.rate)
		tick := int64(c.rate.Period/time.Microsecond) / c.rate.Tokens
		start, now := e.clk.Now(), int64(0)
		for i := range 300 {
			act := actions[rng.IntN(len(actions))]
			n := rng.Int64N(c.capacity + 2)
			switch rng.IntN(5) {
			case 0: // the same instant
			case 1:
				now -= rng.Int64N(tick + 1) // back
			default:
				now += rng.Int64N(2*tick + 1)
			}
			when := start.Add(time.Duration(now) * time.Microsecond)
			e.clk.Set(when)
			got, err := e.s.Do(t.Context(), spigot.Op{Limit: b, Key: "k", Action: act, N: n})
			where := fmt.Sprintf("bucket %v, random operation %d (t0+%v, %v %d)", b, i+1, when.Sub(t0), act, n)
			if err != nil {
				t.Errorf("%s: unexpected error: %v", where, err)
				return
			}
			if d := diff(got, refApply(ref, when, act, n)); d != "" {
				t.Errorf("%s: %s", where, d)
				return
			}
		}
	}
}

// testTTL: a store with Len forgets a key once its bucket is full again,
// and holds it until then.
func testTTL(t testing.TB, e env) {
	l, ok := e.s.(Lener)
	if !ok {
		t.Skipf("%T has no Len() int method (conformance.Lener): it cannot show that idle keys cost nothing", e.s)
	}
	// Keys of a 1/s bucket are full again 1, 2 or 3s after they take 1, 2
	// or 3 tokens; keys of a 7/10s bucket 1428.57ms or 2857.14ms after
	// they take 1 or 2 (ResetAfter 1429ms or 2858ms).
	a := e.bucket(t, "ttl-1/s", 3, spigot.PerSecond(1))
	b := e.bucket(t, "ttl-7/10s", 2, spigot.Per(7, 10*s))
	const keys = 300
	for i := range keys {
		key := fmt.Sprintf("k%d", i)
		ca, cb := int64(1+i%3), int64(1+i%2)
		play(t, e, a, key, []step{{0, ca, allow(3-ca, time.Duration(ca)*s)}})
		play(t, e, b, key, []step{{0, cb, allow(2-cb, []time.Duration{1429 * ms, 2858 * ms}[cb-1])}})
	}
	for _, c := range []struct {
		at   time.Duration
		want int
	}{
		{0, 600},
		{999 * ms, 600},
		{1 * s, 500}, // a's cost-1 keys
		{1428 * ms, 500},
		{1429 * ms, 350}, // b's cost-1 keys
		{2 * s, 250},
		{2857 * ms, 250},
		{2858 * ms, 100},
		{2999 * ms, 100},
		{3 * s, 0},
		{time.Hour, 0},
	} {
		e.at(c.at)
		if got := l.Len(); got != c.want {
			t.Errorf("Len() at t0+%v = %d, want %d: a store holds a key exactly until its bucket is full again (its ResetAfter)", c.at, got, c.want)
		}
	}
	// A forgotten key is a full bucket.
	play(t, e, a, "k0", []step{{time.Hour, 1, allow(2, 1*s)}})
}
