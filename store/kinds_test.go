package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// Tables at fixed instants for the fixed window, the sliding window
// counter, the sliding log and the leaky bucket: the examples of their
// docs and of issue 23, each step checked against Apply and against the
// kind's reference model alike.

// A kstep is one operation of a table: act of n at start+at, on l (or the
// limit of the step before when l is the zero Limit), and its decision.
type kstep struct {
	at   time.Duration
	l    spigot.Limit
	act  spigot.Action
	n    int64
	want spigot.Decision
}

// playKinds plays steps on one key from start, and checks each decision of
// Apply and of the model against the table.
func playKinds(t *testing.T, name string, start time.Time, steps []kstep) {
	t.Helper()
	r := newKindRun(steps[0].l)
	r.now, r.step = start.UnixMicro(), -1 // the run numbers its steps from 0, as the table
	for i, st := range steps {
		op := kindOp{dt: start.Add(st.at).UnixMicro() - r.now, act: st.act, n: st.n}
		if st.l != (spigot.Limit{}) && st.l != r.l {
			op.l = &st.l
		}
		if err := r.do(op); err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		want := refilled(spigot.Op{Limit: r.l, Action: st.act, N: st.n}, r.s, start.Add(st.at), st.want)
		if r.last != want {
			t.Errorf("%s: step %d: %v %v %d at +%v: got %+v, want %+v", name, i, r.l, st.act, st.n, st.at, r.last, want)
		}
	}
}

var (
	day  = 24 * time.Hour
	tDay = time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC) // a day's start, and a second's
)

// dec is a Decision of n moved, remaining left, and the waits.
func dec(n, remaining int64, retry, reset time.Duration) spigot.Decision {
	return spigot.Decision{N: n, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// TestApplyTakeZeroAllowed: a Take (or Peek) of 0 is always allowed, on
// every kind, even when the limit holds more than it may (after its limit
// was lowered, or on a sliding window whose clock stepped back into the
// latest window seen, where the previous window weighs whole).
func TestApplyTakeZeroAllowed(t *testing.T) {
	sw := spigot.Must(spigot.NewSlidingWindow("zero", spigot.PerSecond(10)))
	playKinds(t, "sliding window, clock back", tDay, []kstep{
		{0, sw, spigot.Take, 10, dec(10, 0, 0, 2*s)},
		// 1.9s: the previous window weighs 0.1, 1 token: 9 fit.
		{1900 * ms, sw, spigot.Take, 9, dec(9, 0, 0, 1100*ms)},
		// Back to 1.5s, in the same window: 9 + 10 × 0.5 = 14 counted.
		{1500 * ms, sw, spigot.Take, 0, dec(0, 0, 0, 1500*ms)},
		{1500 * ms, sw, spigot.Peek, 0, dec(0, 0, 0, 1500*ms)},
		{1500 * ms, sw, spigot.TakeUpTo, 0, dec(0, 0, 0, 1500*ms)},
		// 1 more fits once 9 + 10 × (1000 − e)/1000 ≤ 9: in the next window.
		{1500 * ms, sw, spigot.Take, 1, dec(0, 0, 500*ms, 1500*ms)},
		{2 * s, sw, spigot.Take, 1, dec(1, 0, 0, 2*s)},
	})
	log3 := spigot.Must(spigot.NewSlidingLog("zero-log", spigot.PerSecond(3)))
	log1 := spigot.Must(spigot.NewSlidingLog("zero-log", spigot.PerSecond(1)))
	playKinds(t, "sliding log, limit lowered", tDay, []kstep{
		{0, log3, spigot.Take, 3, dec(3, 0, 0, 1*s)},
		{0, log1, spigot.Take, 0, dec(0, 0, 0, 1*s)},
		{0, log1, spigot.Peek, 0, dec(0, 0, 0, 1*s)},
		{0, log1, spigot.Take, 1, dec(0, 0, 1*s, 1*s)},
		{1 * s, log1, spigot.Take, 1, dec(1, 0, 0, 1*s)},
	})
	sw5 := spigot.Must(spigot.NewSlidingWindow("zero-lowered", spigot.PerSecond(5)))
	sw2 := spigot.Must(spigot.NewSlidingWindow("zero-lowered", spigot.PerSecond(2)))
	playKinds(t, "sliding window, limit lowered", tDay, []kstep{
		{0, sw5, spigot.Take, 5, dec(5, 0, 0, 2*s)},
		{1900 * ms, sw5, spigot.Take, 4, dec(4, 0, 0, 1100*ms)}, // 4 + 5 × 0.1
		// 2 + 2 × 0.1 counted (the counts clamp to the limit).
		{1900 * ms, sw2, spigot.Take, 0, dec(0, 0, 0, 1100*ms)},
		{1900 * ms, sw2, spigot.Peek, 0, dec(0, 0, 0, 1100*ms)},
	})
}

// TestApplyLogOtherWindow: a sliding log's state read by a sliding log of
// another window is the limit used up until its FullAt, as for the
// counters (Apply's doc): its tokens counted under the old window cannot
// say what the new one admits, and a RetryAfter counted under the new
// window would not be exact (the state is forgotten at its FullAt).
func TestApplyLogOtherWindow(t *testing.T) {
	perSecond := spigot.Must(spigot.NewSlidingLog("log-window", spigot.PerSecond(5)))
	perMinute := spigot.Must(spigot.NewSlidingLog("log-window", spigot.PerMinute(5)))
	playKinds(t, "sliding log, window changed", tDay, []kstep{
		{0, perSecond, spigot.Take, 3, dec(3, 2, 0, 1*s)},
		{500 * ms, perMinute, spigot.Take, 3, dec(0, 0, 500*ms, 500*ms)},
		{500 * ms, perMinute, spigot.Take, 0, dec(0, 0, 0, 500*ms)},
		{500 * ms, perMinute, spigot.TakeUpTo, 9, dec(0, 0, 500*ms, 500*ms)},
		{500 * ms, perMinute, spigot.Refund, 3, dec(0, 0, 0, 500*ms)},
		{999 * ms, perMinute, spigot.Peek, 1, dec(0, 0, 1*ms, 1*ms)},
		{1 * s, perMinute, spigot.Take, 5, dec(5, 0, 0, time.Minute)},
		// And back: the minute's log is the second's limit used up until
		// it is a minute old.
		{1500 * ms, perSecond, spigot.Take, 1, dec(0, 0, 59500*ms, 59500*ms)},
		{1500 * ms, perSecond, spigot.Reset, 0, dec(5, 5, 0, 0)},
		{1500 * ms, perSecond, spigot.Take, 5, dec(5, 0, 0, 1*s)},
	})
}

// TestFixedWindowBoundaryBurst: a fixed window of 10/s admits 10 at 0.99s
// and 10 more at 1.01s, 20 in 20ms, twice the limit (NewFixedWindow's
// doc); the sliding window counter and the sliding log, under the same
// traffic, do not.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	fixed := spigot.Must(spigot.NewFixedWindow("burst", spigot.PerSecond(10), 0))
	var steps []kstep
	for i := range int64(10) {
		steps = append(steps, kstep{990 * ms, fixed, spigot.Take, 1, dec(1, 9-i, 0, 10*ms)})
	}
	steps = append(steps, kstep{990 * ms, fixed, spigot.Take, 1, dec(0, 0, 10*ms, 10*ms)})
	for i := range int64(10) {
		steps = append(steps, kstep{1010 * ms, fixed, spigot.Take, 1, dec(1, 9-i, 0, 990*ms)})
	}
	steps = append(steps,
		kstep{1010 * ms, fixed, spigot.Take, 1, dec(0, 0, 990*ms, 990*ms)},
		kstep{2 * s, fixed, spigot.Take, 10, dec(10, 0, 0, 1*s)},
	)
	playKinds(t, "fixed window", tDay, steps)
	admitted := int64(0)
	for _, st := range steps {
		if st.at >= 990*ms && st.at <= 1010*ms {
			admitted += st.want.N
		}
	}
	if admitted != 20 {
		t.Errorf("the fixed window admitted %d in [0.99s, 1.01s], want 20: twice its limit", admitted)
	}

	// The sliding window counter: at 1.01s the 10 of the previous window
	// weigh 9.9; one more fits once they weigh 9, at 1.1s.
	sliding := spigot.Must(spigot.NewSlidingWindow("burst-sliding", spigot.PerSecond(10)))
	playKinds(t, "sliding window", tDay, []kstep{
		{990 * ms, sliding, spigot.Take, 10, dec(10, 0, 0, 1010*ms)},
		{1010 * ms, sliding, spigot.Take, 1, dec(0, 0, 90*ms, 990*ms)},
		{1010 * ms, sliding, spigot.TakeUpTo, 10, dec(0, 0, 90*ms, 990*ms)},
		{1099 * ms, sliding, spigot.Take, 1, dec(0, 0, 1*ms, 901*ms)},
		{1100 * ms, sliding, spigot.TakeUpTo, 10, dec(1, 0, 0, 1900*ms)},
	})
	// The sliding log: none until the first 10 are a second old.
	log := spigot.Must(spigot.NewSlidingLog("burst-log", spigot.PerSecond(10)))
	playKinds(t, "sliding log", tDay, []kstep{
		{990 * ms, log, spigot.Take, 10, dec(10, 0, 0, 1*s)},
		{1010 * ms, log, spigot.Take, 1, dec(0, 0, 980*ms, 980*ms)},
		{1989 * ms, log, spigot.Take, 1, dec(0, 0, 1*ms, 1*ms)},
		{1990 * ms, log, spigot.Take, 10, dec(10, 0, 0, 1*s)},
	})
}

// TestSlidingWindowWeightedCount: NewSlidingWindow's example, a limit of
// 10, 8 taken in the previous window and 3 in this one 30% of the way in:
// 3 + 8 × 0.7 = 8.6, so one more is admitted and the next is denied, with
// a RetryAfter exact to the ms, in this window or the next.
func TestSlidingWindowWeightedCount(t *testing.T) {
	l := spigot.Must(spigot.NewSlidingWindow("api", spigot.PerSecond(10)))
	playKinds(t, "sliding window", tDay, []kstep{
		{0, l, spigot.Take, 8, dec(8, 2, 0, 2*s)},
		{1300 * ms, l, spigot.Take, 3, dec(3, 1, 0, 1700*ms)}, // 3 + 5.6
		{1300 * ms, l, spigot.Take, 1, dec(1, 0, 0, 1700*ms)}, // 8.6 + 1 = 9.6
		// 4 + 1 + 8 × (1000 − e)/1000 ≤ 10 from e = 375ms.
		{1300 * ms, l, spigot.Take, 1, dec(0, 0, 75*ms, 1700*ms)},
		{1300 * ms, l, spigot.Peek, 2, dec(0, 0, 200*ms, 1700*ms)}, // e = 500ms
		// 4 + 7 > 10 in this window; in the next, 7 + 4 × (1000 − e)/1000
		// ≤ 10 from e = 250ms: at 2.25s.
		{1300 * ms, l, spigot.Peek, 7, dec(0, 0, 950*ms, 1700*ms)},
		{1374 * ms, l, spigot.Take, 1, dec(0, 0, 1*ms, 1626*ms)}, // 5 + 5.008
		{1375 * ms, l, spigot.Take, 1, dec(1, 0, 0, 1625*ms)},    // 5 + 5 = 10
		// The next window: 7 + 5 × (1000 − e)/1000 ≤ 10 from e = 400ms.
		{2399 * ms, l, spigot.Take, 7, dec(0, 6, 1*ms, 601*ms)}, // 5 × 0.601 = 3.005 counted

		{2400 * ms, l, spigot.Take, 7, dec(7, 0, 0, 1600*ms)},
		// 7 of this window, then 2 of the last: 3 × 0.6 counted, and only
		// until this window ends.
		{2400 * ms, l, spigot.Refund, 9, dec(9, 8, 0, 600*ms)},
		{4 * s, l, spigot.Take, 10, dec(10, 0, 0, 2*s)},
	})
}

// TestLeakyBucketQueue: the seeds' leaky bucket of capacity 3 at 100/s: r1, r2
// and r3 at once are admitted to leave at 0, 10 and 20ms (their Delays),
// r4 and r5 are rejected; at 10ms, r2 leaving, r6 joins the queue behind r3.
func TestLeakyBucketQueue(t *testing.T) {
	l := spigot.Must(spigot.NewLeakyBucket("shaper", 3, spigot.PerSecond(100)))
	delay := func(d spigot.Decision, delay time.Duration) spigot.Decision { d.Delay = delay; return d }
	playKinds(t, "leaky bucket", tDay, []kstep{
		{0, l, spigot.Take, 1, delay(dec(1, 2, 0, 10*ms), 0)},     // r1
		{0, l, spigot.Take, 1, delay(dec(1, 1, 0, 20*ms), 10*ms)}, // r2
		{0, l, spigot.Take, 1, delay(dec(1, 0, 0, 30*ms), 20*ms)}, // r3
		{0, l, spigot.Take, 1, dec(0, 0, 10*ms, 30*ms)},           // r4
		{0, l, spigot.Take, 1, dec(0, 0, 10*ms, 30*ms)},           // r5
		{0, l, spigot.Peek, 1, dec(0, 0, 10*ms, 30*ms)},
		{10 * ms, l, spigot.Peek, 1, delay(dec(0, 1, 0, 20*ms), 20*ms)},
		{10 * ms, l, spigot.Take, 1, delay(dec(1, 0, 0, 30*ms), 20*ms)}, // r6
		{10 * ms, l, spigot.Refund, 1, dec(1, 1, 0, 20*ms)},             // r6 gives its turn back
		{10500 * time.Microsecond, l, spigot.TakeUpTo, 5, delay(dec(1, 0, 0, 30*ms), 19500*time.Microsecond)},
		{10500 * time.Microsecond, l, spigot.Take, 3, dec(0, 0, 30*ms, 30*ms)},
		{40500 * time.Microsecond, l, spigot.Take, 3, delay(dec(3, 0, 0, 30*ms), 0)},
		{40500 * time.Microsecond, l, spigot.Reset, 0, dec(3, 3, 0, 0)},
		{40500 * time.Microsecond, l, spigot.Take, 4, dec(0, 3, spigot.Never, 0)},
	})
}

// TestSlidingLogPasswordResets: "at most 5 password resets in any 24
// hours", NewSlidingLog's example, exactly: the sixth waits until the
// first is a day old, to the ms.
func TestSlidingLogPasswordResets(t *testing.T) {
	l := spigot.Must(spigot.NewSlidingLog("reset", spigot.PerDay(5)))
	steps := []kstep{}
	for i := range int64(5) {
		steps = append(steps, kstep{time.Duration(i) * time.Hour, l, spigot.Take, 1, dec(1, 4-i, 0, day)})
	}
	steps = append(steps, []kstep{
		{5 * time.Hour, l, spigot.Take, 1, dec(0, 0, 19*time.Hour, 23*time.Hour)},
		{5 * time.Hour, l, spigot.Peek, 2, dec(0, 0, 20*time.Hour, 23*time.Hour)},
		{5 * time.Hour, l, spigot.Take, 6, dec(0, 0, spigot.Never, 23*time.Hour)},
		{day - ms, l, spigot.Take, 1, dec(0, 0, 1*ms, 4*time.Hour+ms)},
		{day, l, spigot.Take, 1, dec(1, 0, 0, day)},
		{day, l, spigot.Take, 1, dec(0, 0, 1*time.Hour, day)},
		{day, l, spigot.Refund, 1, dec(1, 1, 0, 4*time.Hour)}, // the reset that just went in gives its place back
		{day, l, spigot.TakeUpTo, 3, dec(1, 0, 0, day)},
		{day + 90*time.Minute, l, spigot.TakeUpTo, 3, dec(1, 0, 0, day)}, // the first is a day old
		{2*day + 90*time.Minute, l, spigot.Peek, 5, dec(0, 5, 0, 0)},
	}...)
	playKinds(t, "sliding log", tDay, steps)
}

// TestFixedWindowOffset: daily windows start at 00:00 UTC, or at 05:00 UTC
// with an offset of 5h; an offset of −1h is 23h.
func TestFixedWindowOffset(t *testing.T) {
	utc := spigot.Must(spigot.NewFixedWindow("export", spigot.PerDay(3), 0))
	five := spigot.Must(spigot.NewFixedWindow("export-5h", spigot.PerDay(3), 5*time.Hour))
	late := spigot.Must(spigot.NewFixedWindow("export-late", spigot.PerDay(3), -time.Hour))
	if got := late.Offset(); got != 23*time.Hour {
		t.Errorf("NewFixedWindow(…, -1h).Offset() = %v, want 23h", got)
	}
	if got := five.Offset(); got != 5*time.Hour {
		t.Errorf("NewFixedWindow(…, 5h).Offset() = %v, want 5h", got)
	}
	playKinds(t, "daily at 00:00 UTC", tDay, []kstep{
		{-ms, utc, spigot.Take, 3, dec(3, 0, 0, 1*ms)},
		{0, utc, spigot.Take, 3, dec(3, 0, 0, day)},
		{5 * time.Hour, utc, spigot.Take, 1, dec(0, 0, 19*time.Hour, 19*time.Hour)},
	})
	playKinds(t, "daily at 05:00 UTC", tDay, []kstep{
		{0, five, spigot.Take, 3, dec(3, 0, 0, 5*time.Hour)},
		{4*time.Hour + 59*time.Minute, five, spigot.Take, 1, dec(0, 0, time.Minute, time.Minute)},
		{5 * time.Hour, five, spigot.Take, 3, dec(3, 0, 0, day)},
		{day + 5*time.Hour - 1*time.Microsecond, five, spigot.Peek, 1, dec(0, 0, 1*ms, 1*ms)},
		{day + 5*time.Hour, five, spigot.Peek, 3, dec(0, 3, 0, 0)},
	})
	playKinds(t, "daily at 23:00 UTC", tDay, []kstep{
		{22 * time.Hour, late, spigot.Take, 3, dec(3, 0, 0, time.Hour)},
		{23*time.Hour - ms, late, spigot.TakeUpTo, 3, dec(0, 0, 1*ms, 1*ms)},
		{23 * time.Hour, late, spigot.TakeUpTo, 3, dec(3, 0, 0, day)},
	})
}

// TestApplyBeforeEpoch: the zero State is a whole limit of every kind at
// instants before the Unix epoch too (such as the zero time.Time), where
// its FullAt of 0, none, is after now; and a window with nothing to keep
// there keeps nothing.
func TestApplyBeforeEpoch(t *testing.T) {
	for _, start := range []time.Time{time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC), {}} {
		name := start.Format(time.DateOnly) + ": "
		fixed := spigot.Must(spigot.NewFixedWindow("old", spigot.PerSecond(3), 0))
		playKinds(t, name+"fixed window", start, []kstep{
			{0, fixed, spigot.Take, 4, dec(0, 3, spigot.Never, 0)}, // nothing to keep
			{0, fixed, spigot.Take, 3, dec(3, 0, 0, 1*s)},
			{0, fixed, spigot.Take, 1, dec(0, 0, 1*s, 1*s)},
		})
		sliding := spigot.Must(spigot.NewSlidingWindow("old-sliding", spigot.PerSecond(3)))
		playKinds(t, name+"sliding window", start, []kstep{
			{0, sliding, spigot.Take, 4, dec(0, 3, spigot.Never, 0)}, // nothing to keep
			{0, sliding, spigot.Take, 3, dec(3, 0, 0, 2*s)},
			{0, sliding, spigot.Take, 1, dec(0, 0, 1334*ms, 2*s)}, // 1 + 3 × (1000 − e)/1000 ≤ 3 from e = 334ms of the next window
		})
		log := spigot.Must(spigot.NewSlidingLog("old-log", spigot.PerSecond(3)))
		playKinds(t, name+"sliding log", start, []kstep{
			{0, log, spigot.Take, 4, dec(0, 3, spigot.Never, 0)}, // nothing to keep
			{0, log, spigot.Take, 3, dec(3, 0, 0, 1*s)},
			{0, log, spigot.Take, 1, dec(0, 0, 1*s, 1*s)},
		})
		leaky := spigot.Must(spigot.NewLeakyBucket("old-leaky", 3, spigot.PerSecond(3)))
		playKinds(t, name+"leaky bucket", start, []kstep{
			{0, leaky, spigot.Take, 4, dec(0, 3, spigot.Never, 0)}, // nothing to keep
			{0, leaky, spigot.Take, 3, dec(3, 0, 0, 1*s)},
			{0, leaky, spigot.Take, 1, dec(0, 0, 334*ms, 1*s)},
		})
	}
}

// TestKindReuse: a limit's name moved to another kind (a deploy that moves
// "login" from a token bucket to a sliding window, and back) never hands a
// key a whole limit before the old state's FullAt: a Take of the whole
// limit is denied until then, and admitted from then on; each decision is
// the models' (usedUp for a window or a log, refModel for a bucket).
func TestKindReuse(t *testing.T) {
	rate := spigot.Per(5, 10*s)
	limits := []spigot.Limit{
		spigot.MustBucket("login", 5, rate),
		spigot.Must(spigot.NewFixedWindow("login", rate, 0)),
		spigot.Must(spigot.NewSlidingWindow("login", rate)),
		spigot.Must(spigot.NewSlidingLog("login", rate)),
		spigot.Must(spigot.NewLeakyBucket("login", 5, rate)),
	}
	op := func(l spigot.Limit, a spigot.Action, n int64) spigot.Op {
		return spigot.Op{Limit: l, Key: "k", Action: a, N: n}
	}
	// model returns what the model of to decides of a on s at at.
	model := func(to spigot.Limit, s store.State, at time.Time, a spigot.Action, n int64) spigot.Decision {
		switch to.Kind() {
		case spigot.TokenBucket, spigot.LeakyBucket:
			m := newRefModel(to.Capacity(), to.Rate())
			m.raw = &s
			d, _ := m.apply(at.UnixMicro(), a, n)
			return d
		}
		m := &usedUp{limit: to.Capacity(), until: s.FullAt, next: newKindModel(to)}
		return m.apply(at.UnixMicro(), a, n)
	}
	for _, from := range limits {
		for _, to := range limits {
			if from.Kind() == to.Kind() {
				continue
			}
			name := fmt.Sprintf("%v to %v", from.Kind(), to.Kind())
			used, d := apply(op(from, spigot.Take, 5), store.State{}, tDay)
			if d.N != 5 || used.FullAt <= tDay.UnixMicro() {
				t.Fatalf("%s: Take 5 of a whole %v = %+v, state %+v", name, from, d, used)
			}
			full := time.UnixMicro(used.FullAt)
			for i, at := range []time.Time{tDay, tDay.Add(1 * ms), tDay.Add(3 * s), full.Add(-ms), full.Add(-time.Microsecond)} {
				for _, a := range []spigot.Action{spigot.Take, spigot.Peek, spigot.TakeUpTo, spigot.Refund} {
					next, got := applyCopy(op(to, a, 5), used, at)
					want := refilled(op(to, a, 5), next, at, model(to, used, at, a, 5))
					if to.Kind() == spigot.LeakyBucket {
						want.Delay = got.Delay // refModel is a token bucket's
					}
					if got != want {
						t.Errorf("%s: step %d: %v 5 at +%v: got %+v, the model %+v", name, i, a, at.Sub(tDay), got, want)
					}
					if (a == spigot.Take || a == spigot.Peek) && got.Allowed() || a == spigot.TakeUpTo && got.N == 5 {
						t.Errorf("%s: step %d: %v 5 at +%v, before the old state's FullAt +%v: %+v, a whole limit", name, i, a, at.Sub(tDay), full.Sub(tDay), got)
					}
				}
			}
			if _, d := applyCopy(op(to, spigot.Take, 5), used, full); d.N != 5 {
				t.Errorf("%s: Take 5 at the old state's FullAt +%v: %+v, want admitted", name, full.Sub(tDay), d)
			}
			// And back, after a Take of 1 under the new kind: the limit is
			// whole again no sooner than the first FullAt.
			moved, _ := applyCopy(op(to, spigot.Take, 1), used, tDay.Add(3*s))
			back := time.UnixMicro(moved.FullAt)
			if moved.IsZero() || back.Before(full) {
				t.Errorf("%s: after a Take of 1 at +3s, the state %+v is kept until +%v, before the first FullAt +%v", name, moved, back.Sub(tDay), full.Sub(tDay))
				continue
			}
			for _, at := range []time.Time{tDay.Add(4 * s), full.Add(-ms), back.Add(-time.Microsecond)} {
				if _, d := applyCopy(op(from, spigot.Take, 5), moved, at); d.Allowed() {
					t.Errorf("%s and back: Take 5 at +%v, before the state's FullAt +%v: %+v, a whole limit", name, at.Sub(tDay), back.Sub(tDay), d)
				}
			}
			if _, d := applyCopy(op(from, spigot.Take, 5), moved, back); d.N != 5 {
				t.Errorf("%s and back: Take 5 at the state's FullAt +%v: %+v, want admitted", name, back.Sub(tDay), d)
			}
		}
	}
}
