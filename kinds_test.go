package spigot_test

import (
	"testing"
	"time"

	"github.com/spigot-go/spigot"
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
		if r.last != st.want {
			t.Errorf("%s: step %d: %v %v %d at +%v: got %+v, want %+v", name, i, r.l, st.act, st.n, st.at, r.last, st.want)
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
