package conformance

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
)

// The cases of the fixed window, the sliding window counter, the sliding
// log and the leaky bucket, worked out by hand from their docs (see
// spigot.Kind and each constructor): the examples of their docs and of
// spigot's issue 23, and every action on each kind. t0 is a whole second,
// 3h4m5s into its day (UTC).

// kindCases are the cases of the kinds of limit other than the token
// bucket.
var kindCases = []testCase{
	{"fixed-window-boundary-burst", testFixedWindowBoundaryBurst},
	{"fixed-window-offset", testFixedWindowOffset},
	{"fixed-window-actions", testFixedWindowActions},
	{"sliding-window-weighted", testSlidingWindowWeighted},
	{"sliding-window-actions", testSlidingWindowActions},
	{"sliding-log-password-resets", testSlidingLogPasswordResets},
	{"sliding-log-actions", testSlidingLogActions},
	{"leaky-bucket-queue", testLeakyBucketQueue},
	{"kind-reuse", testKindReuse},
	{"kinds-config-change", testKindsConfigChange},
	{"kinds-random-operations", testKindsRandomOperations},
	{"kinds-ttl", testKindsTTL},
	{"refill-after", testRefillAfter},
}

// kind returns the limit a constructor made of name plus the run's suffix.
func (e env) kind(t testing.TB, name string, make func(name string) (spigot.Limit, error)) spigot.Limit {
	t.Helper()
	l, err := make(name + e.suffix)
	if err != nil {
		t.Fatalf("the suite's limit: %v", err)
	}
	return l
}

func (e env) fixedWindow(t testing.TB, name string, r spigot.Rate, offset time.Duration) spigot.Limit {
	t.Helper()
	return e.kind(t, name, func(name string) (spigot.Limit, error) { return spigot.NewFixedWindow(name, r, offset) })
}

func (e env) slidingWindow(t testing.TB, name string, r spigot.Rate) spigot.Limit {
	t.Helper()
	return e.kind(t, name, func(name string) (spigot.Limit, error) { return spigot.NewSlidingWindow(name, r) })
}

func (e env) slidingLog(t testing.TB, name string, r spigot.Rate) spigot.Limit {
	t.Helper()
	return e.kind(t, name, func(name string) (spigot.Limit, error) { return spigot.NewSlidingLog(name, r) })
}

func (e env) leakyBucket(t testing.TB, name string, capacity int64, r spigot.Rate) spigot.Limit {
	t.Helper()
	return e.kind(t, name, func(name string) (spigot.Limit, error) { return spigot.NewLeakyBucket(name, capacity, r) })
}

// waits is the decision of an admitted request of a leaky bucket that
// moved n, left remaining and must wait delay for its turn.
func waits(n, remaining int64, resetAfter, delay time.Duration) spigot.Decision {
	return spigot.Decision{N: n, Remaining: remaining, ResetAfter: resetAfter, Delay: delay}
}

// testFixedWindowBoundaryBurst: a fixed window of 10/s admits 10 at 0.99s
// and 10 more at 1.01s: 20 in 20ms, twice its limit, as its doc says.
func testFixedWindowBoundaryBurst(t testing.TB, e env) {
	l := e.fixedWindow(t, "fixed-burst", spigot.PerSecond(10), 0)
	var steps []opStep
	for i := range int64(10) {
		steps = append(steps, opStep{990 * ms, spigot.Take, 1, took(1, 9-i, 10*ms)})
	}
	steps = append(steps, opStep{990 * ms, spigot.Take, 1, deny(0, 10*ms, 10*ms)})
	for i := range int64(10) {
		steps = append(steps, opStep{1010 * ms, spigot.Take, 1, took(1, 9-i, 990*ms)})
	}
	steps = append(steps,
		opStep{1010 * ms, spigot.Take, 1, deny(0, 990*ms, 990*ms)},
		opStep{2 * s, spigot.Take, 10, took(10, 0, 1*s)},
	)
	playOps(t, e, l, "k", steps)
}

// testFixedWindowOffset: daily windows start at 00:00 UTC, at 05:00 UTC
// with an offset of 5h, and at 23:00 UTC with one of −1h.
func testFixedWindowOffset(t testing.TB, e env) {
	const h = time.Hour
	toMidnight := 20*h + 55*time.Minute + 55*s // from t0, 03:04:05
	to5 := 1*h + 55*time.Minute + 55*s
	to23 := 19*h + 55*time.Minute + 55*s
	utc := e.fixedWindow(t, "daily", spigot.PerDay(3), 0)
	playOps(t, e, utc, "k", []opStep{
		{0, spigot.Take, 3, took(3, 0, toMidnight)},
		{0, spigot.Take, 1, deny(0, toMidnight, toMidnight)},
		{toMidnight - ms, spigot.Take, 1, deny(0, 1*ms, 1*ms)},
		{toMidnight, spigot.Take, 3, took(3, 0, 24*h)},
	})
	five := e.fixedWindow(t, "daily-5h", spigot.PerDay(3), 5*h)
	playOps(t, e, five, "k", []opStep{
		{0, spigot.Take, 3, took(3, 0, to5)},
		{0, spigot.TakeUpTo, 3, deny(0, to5, to5)},
		{to5, spigot.Take, 3, took(3, 0, 24*h)},
	})
	late := e.fixedWindow(t, "daily-minus-1h", spigot.PerDay(3), -h)
	playOps(t, e, late, "k", []opStep{
		{0, spigot.Take, 2, took(2, 1, to23)},
		{to23 - time.Microsecond, spigot.Take, 2, deny(1, 1*ms, 1*ms)},
		{to23, spigot.Take, 3, took(3, 0, 24*h)},
	})
}

// testFixedWindowActions: every action on a fixed window, and a clock
// that steps back, which counts in the latest window seen.
func testFixedWindowActions(t testing.TB, e env) {
	l := e.fixedWindow(t, "fixed-actions", spigot.PerSecond(5), 0)
	playOps(t, e, l, "k", []opStep{
		{0, spigot.TakeUpTo, 3, took(3, 2, 1*s)},
		{0, spigot.Peek, 3, deny(2, 1*s, 1*s)},
		{0, spigot.Peek, 2, allow(2, 1*s)},
		{0, spigot.Take, 6, deny(2, spigot.Never, 1*s)},
		{250 * ms, spigot.Refund, 1, took(1, 3, 750*ms)},
		{250 * ms, spigot.TakeUpTo, 9, took(3, 0, 750*ms)},
		{250 * ms, spigot.TakeUpTo, 1, deny(0, 750*ms, 750*ms)},
		{250 * ms, spigot.Take, 0, allow(0, 750*ms)},
		{500 * ms, spigot.Reset, 0, took(5, 5, 0)},
		{500 * ms, spigot.Take, 5, took(5, 0, 500*ms)},
		{1 * s, spigot.Take, 5, took(5, 0, 1*s)}, // a new window
		{1 * s, spigot.Refund, 9, took(5, 5, 0)}, // nothing counted: forgotten
		{999 * ms, spigot.Take, 1, took(1, 4, 1*ms)},
		{1 * s, spigot.Peek, 5, allow(5, 0)},
		{2 * s, spigot.Take, 5, took(5, 0, 1*s)},
		// Back to 1.5s: still the window of 2s.
		{1500 * ms, spigot.Take, 1, deny(0, 1500*ms, 1500*ms)},
		{1500 * ms, spigot.TakeUpTo, 0, allow(0, 1500*ms)},
		{3 * s, spigot.Take, 5, took(5, 0, 1*s)},
	})
}

// testSlidingWindowWeighted: spigot.NewSlidingWindow's example, a limit of
// 10, 8 taken in the previous window and 3 in this one 30% of the way in:
// 3 + 8 × 0.7 = 8.6, so one more is admitted and the next denied, with a
// RetryAfter exact to the ms, in this window or the next.
func testSlidingWindowWeighted(t testing.TB, e env) {
	l := e.slidingWindow(t, "sliding-weighted", spigot.PerSecond(10))
	playOps(t, e, l, "k", []opStep{
		{0, spigot.Take, 8, took(8, 2, 2*s)},
		{1300 * ms, spigot.Take, 3, took(3, 1, 1700*ms)}, // 3 + 5.6
		{1300 * ms, spigot.Take, 1, took(1, 0, 1700*ms)}, // 8.6 + 1
		// 4 + 1 + 8 × (1000 − e)/1000 ≤ 10 from e = 375ms.
		{1300 * ms, spigot.Take, 1, deny(0, 75*ms, 1700*ms)},
		{1300 * ms, spigot.Peek, 2, deny(0, 200*ms, 1700*ms)}, // from e = 500ms
		// 4 + 7 > 10 in this window; in the next, 7 + 4 × (1000 − e)/1000
		// ≤ 10 from e = 250ms.
		{1300 * ms, spigot.Peek, 7, deny(0, 950*ms, 1700*ms)},
		{1374 * ms, spigot.Take, 1, deny(0, 1*ms, 1626*ms)}, // 5 + 5.008
		{1375 * ms, spigot.Take, 1, took(1, 0, 1625*ms)},    // 5 + 5
		// The next window: 7 + 5 × (1000 − e)/1000 ≤ 10 from e = 400ms.
		{2399 * ms, spigot.Take, 7, deny(6, 1*ms, 601*ms)},
		{2400 * ms, spigot.Take, 7, took(7, 0, 1600*ms)},
		{4 * s, spigot.Take, 10, took(10, 0, 2*s)},
	})
}

// testSlidingWindowActions: every action on a sliding window counter; a
// Refund uncounts this window's tokens first; a clock that steps back
// counts in the latest window seen, where the previous one weighs more.
func testSlidingWindowActions(t testing.TB, e env) {
	l := e.slidingWindow(t, "sliding-actions", spigot.PerSecond(10))
	playOps(t, e, l, "k", []opStep{
		{0, spigot.Take, 10, took(10, 0, 2*s)},
		{1900 * ms, spigot.TakeUpTo, 10, took(9, 0, 1100*ms)}, // 10 × 0.1 counted
		// Back to 1.5s: 9 + 10 × 0.5 = 14 counted.
		{1500 * ms, spigot.Take, 0, allow(0, 1500*ms)},
		{1500 * ms, spigot.Take, 1, deny(0, 500*ms, 1500*ms)},
		{1500 * ms, spigot.TakeUpTo, 1, deny(0, 500*ms, 1500*ms)},
		// 9 of this window, then 2 of the last: 8 × 0.5 counted.
		{1500 * ms, spigot.Refund, 11, took(11, 6, 500*ms)},
		{1500 * ms, spigot.Peek, 6, allow(6, 500*ms)},
		{1500 * ms, spigot.Reset, 0, took(4, 10, 0)},
		{1500 * ms, spigot.Take, 10, took(10, 0, 1500*ms)},
		{2 * s, spigot.Peek, 1, deny(0, 100*ms, 1*s)}, // 10 weigh 10 at 2s, 9 from 2.1s
	})
}

// testSlidingLogPasswordResets: "at most 5 password resets in any 24
// hours", spigot.NewSlidingLog's example, exactly.
func testSlidingLogPasswordResets(t testing.TB, e env) {
	const h, day = time.Hour, 24 * time.Hour
	l := e.slidingLog(t, "password-reset", spigot.PerDay(5))
	var steps []opStep
	for i := range int64(5) {
		steps = append(steps, opStep{time.Duration(i) * h, spigot.Take, 1, took(1, 4-i, day)})
	}
	steps = append(steps, []opStep{
		{5 * h, spigot.Take, 1, deny(0, 19*h, 23*h)},
		{5 * h, spigot.Peek, 2, deny(0, 20*h, 23*h)},
		{5 * h, spigot.Take, 6, deny(0, spigot.Never, 23*h)},
		{day - ms, spigot.Take, 1, deny(0, 1*ms, 4*h+ms)},
		{day, spigot.Take, 1, took(1, 0, day)},
		{day, spigot.Take, 1, deny(0, 1*h, day)},
		{day, spigot.Refund, 1, took(1, 1, 4*h)},
		{day, spigot.TakeUpTo, 3, took(1, 0, day)},
		{day + 90*time.Minute, spigot.TakeUpTo, 3, took(1, 0, day)},
		{2*day + 90*time.Minute, spigot.Peek, 5, allow(5, 0)},
	}...)
	playOps(t, e, l, "k", steps)
}

// testSlidingLogActions: every action on a sliding log; a Refund forgets
// the most recent tokens; a clock that steps back counts every token of
// the log, and new ones take the latest instant seen.
func testSlidingLogActions(t testing.TB, e env) {
	l := e.slidingLog(t, "log-actions", spigot.PerSecond(3))
	playOps(t, e, l, "k", []opStep{
		{0, spigot.Take, 2, took(2, 1, 1*s)},
		{100 * ms, spigot.TakeUpTo, 5, took(1, 0, 1*s)},
		{200 * ms, spigot.Peek, 1, deny(0, 800*ms, 900*ms)},
		{200 * ms, spigot.Take, 2, deny(0, 800*ms, 900*ms)},
		{200 * ms, spigot.Take, 3, deny(0, 900*ms, 900*ms)},
		{200 * ms, spigot.Refund, 1, took(1, 1, 800*ms)},
		{200 * ms, spigot.Take, 1, took(1, 0, 1*s)},
		{50 * ms, spigot.Take, 1, deny(0, 950*ms, 1150*ms)}, // back
		{50 * ms, spigot.Take, 0, allow(0, 1150*ms)},
		{1 * s, spigot.TakeUpTo, 3, took(2, 0, 1*s)}, // the 2 of t0 are a second old
		{1 * s, spigot.Reset, 0, took(3, 3, 0)},
		{1 * s, spigot.Take, 3, took(3, 0, 1*s)},
	})
}

// testLeakyBucketQueue: the leaky bucket of capacity 3 at 100/s: r1, r2 and
// r3 at once are admitted to leave at 0, 10 and 20ms (their Delays), r4
// and r5 are denied; at 10ms, as r2 leaves, r6 joins the queue behind r3;
// and every other action.
func testLeakyBucketQueue(t testing.TB, e env) {
	l := e.leakyBucket(t, "shaper", 3, spigot.PerSecond(100))
	us := time.Microsecond
	playOps(t, e, l, "k", []opStep{
		{0, spigot.Take, 1, waits(1, 2, 10*ms, 0)},     // r1
		{0, spigot.Take, 1, waits(1, 1, 20*ms, 10*ms)}, // r2
		{0, spigot.Take, 1, waits(1, 0, 30*ms, 20*ms)}, // r3
		{0, spigot.Take, 1, deny(0, 10*ms, 30*ms)},     // r4
		{0, spigot.Take, 1, deny(0, 10*ms, 30*ms)},     // r5
		{0, spigot.Peek, 1, deny(0, 10*ms, 30*ms)},
		{10 * ms, spigot.Peek, 1, waits(0, 1, 20*ms, 20*ms)},
		{10 * ms, spigot.Take, 1, waits(1, 0, 30*ms, 20*ms)}, // r6
		{10 * ms, spigot.Refund, 1, took(1, 1, 20*ms)},       // r6 gives its turn back
		{10500 * us, spigot.TakeUpTo, 5, waits(1, 0, 30*ms, 19500*us)},
		{10500 * us, spigot.Take, 3, deny(0, 30*ms, 30*ms)},
		{10500 * us, spigot.Take, 4, deny(0, spigot.Never, 30*ms)},
		{40500 * us, spigot.Take, 3, took(3, 0, 30*ms)},
		{40500 * us, spigot.Reset, 0, took(3, 3, 0)},
		{40500 * us, spigot.Take, 0, allow(3, 0)},
	})
}

// testRefillAfter: Decision.RefillAfter on every kind and action, worked
// out by hand: once the Remaining tokens are taken, the time until one
// more is admitted. (The random cases check it on every step against the
// models, which take Remaining and then one more on a copy.)
func testRefillAfter(t testing.TB, e env) {
	r := withRefill
	// A token bucket of 3, a token every 2 s: a full one's is a token's
	// interval; a fraction left refills to a whole token; a clock behind
	// the stamp adds its lag.
	playOps(t, e, e.bucket(t, "refill-bucket", 3, spigot.Per(1, 2*s)), "k", []opStep{
		{0, spigot.Take, 0, r(allow(3, 0), 2*s)},
		{0, spigot.Peek, 4, r(deny(3, spigot.Never, 0), 2*s)},
		{0, spigot.Take, 3, r(took(3, 0, 6*s), 2*s)},
		{500 * ms, spigot.Take, 1, r(deny(0, 1500*ms, 5500*ms), 1500*ms)},
		{2500 * ms, spigot.TakeUpTo, 5, r(took(1, 0, 5500*ms), 1500*ms)}, // 1.25: one taken
		{2500 * ms, spigot.Refund, 2, r(took(2, 2, 1500*ms), 1500*ms)},
		{2500 * ms, spigot.Reset, 0, r(took(1, 3, 0), 2*s)},
		{10 * s, spigot.Take, 3, r(took(3, 0, 6*s), 2*s)},
		{9 * s, spigot.Take, 0, r(allow(0, 7*s), 3*s)}, // 1 s behind the stamp
	})
	playOps(t, e, e.bucket(t, "refill-none", 0, spigot.PerSecond(1)), "k", []opStep{
		{0, spigot.Take, 0, r(allow(0, 0), spigot.Never)},
	})
	// A leaky bucket of 2 places, one a second: the next place.
	playOps(t, e, e.leakyBucket(t, "refill-leaky", 2, spigot.PerSecond(1)), "k", []opStep{
		{0, spigot.Take, 1, r(took(1, 1, 1*s), 1*s)},
		{0, spigot.Take, 1, r(waits(1, 0, 2*s, 1*s), 1*s)},
		{250 * ms, spigot.Take, 1, r(deny(0, 750*ms, 1750*ms), 750*ms)},
	})
	// A fixed window of 10 a second: the next window.
	playOps(t, e, e.fixedWindow(t, "refill-fixed", spigot.PerSecond(10), 0), "k", []opStep{
		{300 * ms, spigot.Take, 0, r(allow(10, 0), 700*ms)},
		{300 * ms, spigot.Take, 4, r(took(4, 6, 700*ms), 700*ms)},
		{400 * ms, spigot.Take, 7, r(deny(6, 600*ms, 600*ms), 600*ms)},
		{400 * ms, spigot.Reset, 0, r(took(4, 10, 0), 600*ms)},
	})
	// A sliding window of 10 a second, 8 taken in the previous window: at
	// 30% of this one 4 fit, and with them taken one more fits once 4 + 8
	// × (1000 − e)/1000 ≤ 9, at e = 375 ms.
	playOps(t, e, e.slidingWindow(t, "refill-sliding", spigot.PerSecond(10)), "k", []opStep{
		{0, spigot.Take, 8, r(took(8, 2, 2*s), 1100*ms)}, // next window, 10 × (1000 − e)/1000 ≤ 9
		{1300 * ms, spigot.Take, 4, r(took(4, 0, 1700*ms), 75*ms)},
		{1300 * ms, spigot.Take, 1, r(deny(0, 75*ms, 1700*ms), 75*ms)},
		{1400 * ms, spigot.Refund, 5, r(took(5, 5, 600*ms), 29*ms)}, // 0 + 7 × 0.6: once 5 + 7 × (1000 − e)/1000 ≤ 9
	})
	// A sliding log of 3 in 10 s: the oldest entry left leaving; an empty
	// log's, the window.
	playOps(t, e, e.slidingLog(t, "refill-log", spigot.Per(3, 10*s)), "k", []opStep{
		{0, spigot.Take, 0, r(allow(3, 0), 10*s)},
		{0, spigot.Take, 1, r(took(1, 2, 10*s), 10*s)},
		{4 * s, spigot.Take, 1, r(took(1, 1, 10*s), 6*s)},
		{11 * s, spigot.Peek, 0, r(allow(2, 3*s), 3*s)}, // the first has left
		{11 * s, spigot.Take, 2, r(took(2, 0, 10*s), 3*s)},
		{11 * s, spigot.Take, 1, r(deny(0, 3*s, 10*s), 3*s)},
		{11 * s, spigot.Reset, 0, r(took(3, 3, 0), 10*s)},
	})
	// Another kind's state: used up until its FullAt, 5 s ahead; a Reset
	// forgets it, and the minute's window (t0 is 5 s into one) ends 55 s
	// after t0.
	other := e.bucket(t, "refill-other", 5, spigot.PerSecond(1))
	playOps(t, e, other, "k", []opStep{{0, spigot.Take, 5, r(took(5, 0, 5*s), 1*s)}})
	playOps(t, e, e.fixedWindow(t, "refill-other", spigot.PerMinute(10), 0), "k", []opStep{
		{2 * s, spigot.Take, 1, r(deny(0, 3*s, 3*s), 3*s)},
		{2 * s, spigot.Reset, 0, r(took(10, 10, 0), 53*s)},
	})
}

// testKindReuse: a limit's name moved to another kind (a deploy that
// moves "login" from a token bucket to a window, and back) never hands a
// key a whole limit before its state's FullAt. A window or log reads
// another kind's state as its limit used up until then; a bucket reads it
// as the bucket that is full again then, not sooner.
func testKindReuse(t testing.TB, e env) {
	rate := spigot.Per(5, 10*s) // a token every 2s; t0 is 5s into its 10s window
	bucket := e.bucket(t, "login", 5, rate)
	for _, c := range []struct {
		key  string
		l    spigot.Limit
		took spigot.Decision // of a Take of 5 at 10s
		back spigot.Decision // of the bucket's Take of 1 at 11s
	}{
		// Windows [5s, 15s) and the one after; the log's tokens count until 20s.
		// The bucket: full again at 15s, 3 tokens at 11s.
		{"fixed", e.fixedWindow(t, "login", rate, 0), took(5, 0, 5*s), took(1, 2, 6*s)},
		// Full again at 25s, empty until 15s.
		{"sliding", e.slidingWindow(t, "login", rate), took(5, 0, 15*s), deny(0, 6*s, 14*s)},
		// Full again at 20s, half a token at 11s.
		{"log", e.slidingLog(t, "login", rate), took(5, 0, 10*s), deny(0, 1*s, 9*s)},
	} {
		playOps(t, e, bucket, c.key, []opStep{{0, spigot.Take, 5, took(5, 0, 10*s)}})
		playOps(t, e, c.l, c.key, []opStep{
			{3 * s, spigot.Take, 1, deny(0, 7*s, 7*s)},
			{3 * s, spigot.Take, 0, allow(0, 7*s)},
			{3 * s, spigot.Peek, 6, deny(0, spigot.Never, 7*s)},
			{3 * s, spigot.TakeUpTo, 6, deny(0, 7*s, 7*s)},
			{3 * s, spigot.Refund, 5, allow(0, 7*s)},
			{10*s - ms, spigot.Take, 1, deny(0, 1*ms, 1*ms)},
			{10 * s, spigot.Take, 5, c.took},
		})
		playOps(t, e, bucket, c.key, []opStep{{11 * s, spigot.Take, 1, c.back}})
	}
	// A Reset forgets the other kind's state.
	log := e.slidingLog(t, "login", rate)
	playOps(t, e, bucket, "reset", []opStep{{0, spigot.Take, 5, took(5, 0, 10*s)}})
	playOps(t, e, log, "reset", []opStep{
		{1 * s, spigot.Reset, 0, took(5, 5, 0)},
		{1 * s, spigot.Take, 5, took(5, 0, 10*s)},
	})
	// A leaky bucket reads a token bucket's state as another kind's: full
	// again at its FullAt, 10s, refilling to be so; 1.5 places free at 3s.
	leaky := e.leakyBucket(t, "login", 5, rate)
	playOps(t, e, bucket, "leaky", []opStep{{0, spigot.Take, 5, took(5, 0, 10*s)}})
	playOps(t, e, leaky, "leaky", []opStep{
		{3 * s, spigot.Take, 5, deny(1, 7*s, 7*s)},
		{3 * s, spigot.Take, 1, waits(1, 0, 9*s, 7*s)},
		{10 * s, spigot.Take, 5, deny(4, 2*s, 2*s)},
		{12 * s, spigot.Take, 5, took(5, 0, 10*s)},
	})
}

// testKindsRandomOperations drives a limit of each kind with a seeded
// random sequence of operations of every action, the clock moving either
// way, and checks every decision against the suite's model.
func testKindsRandomOperations(t testing.TB, e env) {
	rng := rand.New(rand.NewPCG(20261202, 5))
	actions := []spigot.Action{spigot.Take, spigot.Take, spigot.TakeUpTo, spigot.Refund, spigot.Reset, spigot.Peek}
	for _, l := range []spigot.Limit{
		e.fixedWindow(t, "random-fixed", spigot.PerSecond(5), 300*ms),
		e.fixedWindow(t, "random-fixed-7ms", spigot.Per(3, 7*ms), 0),
		e.slidingWindow(t, "random-sliding", spigot.PerSecond(5)),
		e.slidingWindow(t, "random-sliding-13s", spigot.Per(7, 13*s)),
		e.slidingLog(t, "random-log", spigot.PerSecond(5)),
		e.slidingLog(t, "random-log-7ms", spigot.Per(3, 7*ms)),
		e.leakyBucket(t, "random-leaky", 3, spigot.PerSecond(100)),
		e.leakyBucket(t, "random-leaky-7/10s", 5, spigot.Per(7, 10*s)),
	} {
		ref := newKeyModel(l)
		w := l.Window().Microseconds()
		if w == 0 {
			w = l.Rate().Period.Microseconds() * l.Capacity() / l.Rate().Tokens
		}
		tick := w / l.Capacity()
		start, now := e.clk.Now(), int64(0)
		for i := range 200 {
			act := actions[rng.IntN(len(actions))]
			n := rng.Int64N(l.Capacity() + 2)
			switch rng.IntN(6) {
			case 0: // the same instant
			case 1:
				now -= rng.Int64N(tick + 1) // back
			case 2:
				now += rng.Int64N(3 * w)
			default:
				now += rng.Int64N(2*tick + 1)
			}
			when := start.Add(time.Duration(now) * time.Microsecond)
			e.clk.Set(when)
			got, err := e.s.Do(t.Context(), spigot.Op{Limit: l, Key: "k", Action: act, N: n})
			where := fmt.Sprintf("limit %v, random operation %d (t0+%v, %v %d)", l, i+1, when.Sub(t0), act, n)
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

// testKindsTTL: a store with Len forgets a key of any kind once its state
// no longer matters (its ResetAfter), and holds it until then.
func testKindsTTL(t testing.TB, e env) {
	l, ok := e.s.(Lener)
	if !ok {
		t.Skipf("%T has no Len() int method (conformance.Lener): it cannot show that idle keys cost nothing", e.s)
	}
	fixed := e.fixedWindow(t, "ttl-fixed", spigot.PerSecond(2), 0)
	sliding := e.slidingWindow(t, "ttl-sliding", spigot.PerSecond(2))
	log := e.slidingLog(t, "ttl-log", spigot.PerSecond(2))
	leaky := e.leakyBucket(t, "ttl-leaky", 2, spigot.Per(1, 3*s))
	const keys = 100
	for i := range keys {
		key := fmt.Sprintf("k%d", i)
		playOps(t, e, fixed, key, []opStep{{0, spigot.Take, 1, took(1, 1, 1*s)}})
		playOps(t, e, sliding, key, []opStep{{0, spigot.Take, 1, took(1, 1, 2*s)}})
		playOps(t, e, log, key, []opStep{{500 * ms, spigot.Take, 1, took(1, 1, 1*s)}})
		playOps(t, e, leaky, key, []opStep{{500 * ms, spigot.Take, 1, took(1, 1, 3*s)}})
	}
	for _, c := range []struct {
		at   time.Duration
		want int
	}{
		{999 * ms, 400},
		{1 * s, 300}, // the fixed window's
		{1499 * ms, 300},
		{1500 * ms, 200}, // the log's
		{1999 * ms, 200},
		{2 * s, 100}, // the sliding window's
		{3499 * ms, 100},
		{3500 * ms, 0}, // the leaky bucket's
	} {
		e.at(c.at)
		if got := l.Len(); got != c.want {
			t.Errorf("Len() at t0+%v = %d, want %d: a store holds a key exactly until its state no longer matters (its ResetAfter)", c.at, got, c.want)
		}
	}
}

// testKindsConfigChange: a window or log whose limit changes under the same
// name keeps its counts (a Take of 0 is allowed even above the lowered
// limit); one whose window changes reads the old state as its limit used
// up until that state's FullAt.
func testKindsConfigChange(t testing.TB, e env) {
	log3 := e.slidingLog(t, "log-lowered", spigot.PerSecond(3))
	log1 := e.slidingLog(t, "log-lowered", spigot.PerSecond(1))
	playOps(t, e, log3, "k", []opStep{{0, spigot.Take, 3, took(3, 0, 1*s)}})
	playOps(t, e, log1, "k", []opStep{
		{0, spigot.Take, 0, allow(0, 1*s)},
		{0, spigot.Peek, 0, allow(0, 1*s)},
		{0, spigot.Take, 1, deny(0, 1*s, 1*s)},
		{1 * s, spigot.Take, 1, took(1, 0, 1*s)},
	})
	sw5 := e.slidingWindow(t, "sliding-lowered", spigot.PerSecond(5))
	sw2 := e.slidingWindow(t, "sliding-lowered", spigot.PerSecond(2))
	playOps(t, e, sw5, "k", []opStep{
		{0, spigot.Take, 5, took(5, 0, 2*s)},
		{1900 * ms, spigot.Take, 4, took(4, 0, 1100*ms)}, // 4 + 5 × 0.1
	})
	playOps(t, e, sw2, "k", []opStep{
		{1900 * ms, spigot.Take, 0, allow(0, 1100*ms)}, // 2 + 2 × 0.1, clamped to the limit
		// 2 + 1 > 2 in this window; in the next, 1 + 2 × (1000 − e)/1000 ≤ 2
		// from e = 500ms.
		{1900 * ms, spigot.Take, 1, deny(0, 600*ms, 1100*ms)},
		{2500 * ms, spigot.Take, 1, took(1, 0, 1500*ms)},
	})
	perSecond := e.slidingLog(t, "log-window", spigot.PerSecond(5))
	perMinute := e.slidingLog(t, "log-window", spigot.PerMinute(5))
	playOps(t, e, perSecond, "k", []opStep{{0, spigot.Take, 3, took(3, 2, 1*s)}})
	playOps(t, e, perMinute, "k", []opStep{
		{500 * ms, spigot.Take, 3, deny(0, 500*ms, 500*ms)},
		{500 * ms, spigot.Take, 0, allow(0, 500*ms)},
		{500 * ms, spigot.TakeUpTo, 9, deny(0, 500*ms, 500*ms)},
		{500 * ms, spigot.Refund, 3, allow(0, 500*ms)},
		{999 * ms, spigot.Peek, 1, deny(0, 1*ms, 1*ms)},
		{1 * s, spigot.Take, 5, took(5, 0, time.Minute)},
	})
	playOps(t, e, perSecond, "k", []opStep{
		{1500 * ms, spigot.Take, 1, deny(0, 59500*ms, 59500*ms)},
		{1500 * ms, spigot.Reset, 0, took(5, 5, 0)},
		{1500 * ms, spigot.Take, 5, took(5, 0, 1*s)},
	})
	fixed := e.fixedWindow(t, "fixed-offset-changed", spigot.PerSecond(5), 0)
	moved := e.fixedWindow(t, "fixed-offset-changed", spigot.PerSecond(5), 500*ms)
	playOps(t, e, fixed, "k", []opStep{{0, spigot.Take, 1, took(1, 4, 1*s)}})
	playOps(t, e, moved, "k", []opStep{
		{600 * ms, spigot.Take, 1, deny(0, 400*ms, 400*ms)},
		{1 * s, spigot.Take, 5, took(5, 0, 500*ms)},
	})
}
