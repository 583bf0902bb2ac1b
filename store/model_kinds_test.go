package store_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// This file checks store.Apply on the fixed window, the sliding window
// counter, the sliding log and the leaky bucket against their reference
// models (winRef, logRef, leakyRef), on random and fuzzed sequences of
// every action: every field of every Decision, when the state is forgotten
// (the zero State exactly when the model remembers nothing, and FullAt
// otherwise), that a retry after exactly RetryAfter is admitted and one a
// millisecond earlier is not, that a Take then a Refund at one instant is
// as neither, and each model's own bound (check).

// kindModel is the reference model of one key of a limit of one kind.
type kindModel interface {
	// apply applies an operation at now (µs) and returns its decision.
	apply(now int64, act spigot.Action, n int64) spigot.Decision
	// fullAt returns the FullAt of the state the model remembers, and 0
	// when it remembers nothing.
	fullAt() int64
	// reconfigure makes the model that of l, under the same name, and
	// reports whether its state carries over; if not, the state stored
	// is that of another kind or windows.
	reconfigure(l spigot.Limit) bool
	// check reports a breach of the kind's bound on what it admitted.
	check() error
}

// newKindModel returns the model of a key of l, which has no state yet.
func newKindModel(l spigot.Limit) kindModel {
	switch l.Kind() {
	case spigot.FixedWindow, spigot.SlidingWindow:
		return newWinRef(l)
	case spigot.SlidingLog:
		return newLogRef(l)
	case spigot.LeakyBucket:
		return newLeakyRef(l)
	}
	panic(fmt.Sprintf("no model of %v", l.Kind()))
}

// usedUp is the model of a key whose state is another kind's (or another
// window's) until its FullAt, as Apply's doc says a window or a log reads
// it: the limit used up until then, and a key without state from then on
// (next). Only a Reset forgets it sooner.
type usedUp struct {
	limit int64 // the capacity
	until int64
	next  kindModel
	over  bool // FullAt has come, or a Reset forgot the state: next decides
}

func (m *usedUp) apply(now int64, act spigot.Action, n int64) spigot.Decision {
	if m.over || now >= m.until { // FullAt has come: no state
		if act != spigot.Peek { // a Peek leaves the state, whose FullAt a clock that steps back may not have reached
			m.over = true
		}
		return m.next.apply(now, act, n)
	}
	d := spigot.Decision{ResetAfter: refMs(m.until - now)}
	switch act {
	case spigot.Take, spigot.Peek, spigot.TakeUpTo:
		switch {
		case n == 0:
		case n > m.limit && act != spigot.TakeUpTo:
			d.RetryAfter = spigot.Never
		default:
			d.RetryAfter = refMs(m.until - now)
		}
	case spigot.Reset:
		m.over = true
		return spigot.Decision{N: m.limit, Remaining: m.limit}
	}
	return d
}

func (m *usedUp) fullAt() int64 {
	if m.over {
		return m.next.fullAt()
	}
	return m.until
}

func (m *usedUp) reconfigure(l spigot.Limit) bool {
	if m.over {
		return m.next.reconfigure(l)
	}
	m.limit, m.next = l.Capacity(), newKindModel(l)
	return true // still the other state, until its FullAt
}

func (m *usedUp) check() error { return m.next.check() }

// kindRun drives store.Apply and a kindModel side by side on one key.
type kindRun struct {
	l       spigot.Limit
	s       store.State
	m       kindModel
	now     int64 // µs
	step    int
	last    spigot.Decision
	lastAct spigot.Action
	lastN   int64
	lastNow int64
	history []string
	// stale: the state was stored under a leaky bucket's former config, as
	// its FullAt says; a RetryAfter of the new config may go past it.
	stale bool
}

func newKindRun(l spigot.Limit) *kindRun {
	return &kindRun{l: l, m: newKindModel(l), now: refStart, lastNow: refStart}
}

// kindOp is one step of a sequence.
type kindOp struct {
	dt    int64 // µs to move the clock, possibly back
	ns    int64 // nanoseconds past the µs, which Apply must ignore
	act   spigot.Action
	n     int64
	retry bool          // after exactly the last RetryAfter, the last op again: must be allowed
	l     *spigot.Limit // non-nil: the limit changes to l (same name) first
}

// clone returns a copy of s that shares nothing with it (Apply reuses a
// log's array).
func clone(s store.State) store.State {
	s.Log = slices.Clone(s.Log)
	return s
}

// applyCopy is apply on a copy of s that shares nothing with it.
func applyCopy(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
	return apply(op, clone(s), now)
}

func (r *kindRun) do(op kindOp) error {
	r.step++
	if op.l != nil {
		if !r.m.reconfigure(*op.l) {
			// The state stays until its FullAt, and a clock that steps back
			// may read it again even after a Peek at or past it.
			if full := r.m.fullAt(); full != 0 {
				r.m = &usedUp{limit: op.l.Capacity(), until: full, next: newKindModel(*op.l)}
			} else {
				r.m = newKindModel(*op.l) // forgotten by then
			}
		}
		r.stale = r.l.Kind() == spigot.LeakyBucket && op.l.Kind() == spigot.LeakyBucket && !r.s.IsZero()
		r.l = *op.l
	}
	r.now += op.dt
	now := time.UnixMicro(r.now).Add(time.Duration(op.ns))
	desc := fmt.Sprintf("step %d: t%+dµs (+%dns) %v %d", r.step, r.now-refStart, op.ns, op.act, op.n)
	if op.l != nil {
		desc += fmt.Sprintf(", after a config change to %v", *op.l)
	}
	if len(r.history) == 8 {
		r.history = slices.Delete(r.history, 0, 1)
	}
	r.history = append(r.history, desc)

	o := spigot.Op{Limit: r.l, Key: "k", Action: op.act, N: op.n}
	s, got := applyCopy(o, r.s, now)
	want := r.m.apply(r.now, op.act, op.n)
	want.RefillAfter = refillAfter(r.l, s, now, want.Remaining)
	if got != want {
		return r.fail("got %+v, want %+v", got, want)
	}
	switch full := r.m.fullAt(); {
	case op.act == spigot.Peek:
		if !reflect.DeepEqual(s, r.s) {
			return r.fail("Peek changed the state to %+v", s)
		}
	case full == 0:
		if !s.IsZero() {
			return r.fail("state %+v, want the zero State: the limit remembers nothing", s)
		}
	case s.FullAt != full || s.Kind == 0:
		return r.fail("state %+v: want FullAt t%+dµs", s, full-refStart)
	}
	if err := r.m.check(); err != nil {
		return r.fail("%v", err)
	}
	if op.retry && !got.Allowed() {
		return r.fail("a retry after exactly RetryAfter %v was denied: %+v", r.last.RetryAfter, got)
	}
	// A millisecond before RetryAfter, the same op is still denied; but
	// a bucket's state stored under another config counts only until its
	// FullAt, as Apply's doc says, and a RetryAfter counted at the new
	// rate may go past it.
	if ra := got.RetryAfter; ra > 0 && ra != spigot.Never && op.act != spigot.Peek && !r.stale {
		early := now.Add(ra - time.Millisecond)
		if _, d := applyCopy(o, r.s, early); d.Allowed() {
			return r.fail("RetryAfter %v, but the same op at 1ms before then is allowed: %+v", ra, d)
		}
		if _, d := applyCopy(o, r.s, now.Add(ra)); !d.Allowed() {
			return r.fail("RetryAfter %v, but the same op then is denied: %+v", ra, d)
		}
	}
	// A Take or TakeUpTo, then a Refund of its N, at the same instant,
	// leave the state a Take of 0 would leave.
	if op.act == spigot.Take || op.act == spigot.TakeUpTo {
		back, _ := applyCopy(spigot.Op{Limit: r.l, Key: "k", Action: spigot.Refund, N: got.N}, s, now)
		if none, _ := applyCopy(spigot.Op{Limit: r.l, Key: "k"}, r.s, now); !reflect.DeepEqual(back, none) {
			return r.fail("%v then Refund %d: state %+v, want %+v, as after neither", op.act, got.N, back, none)
		}
	}
	// A store may drop the state once ResetAfter has passed: the zero
	// State then decides as the kept one.
	// (A ResetAfter of Never is one past what a Duration holds.)
	if reset := r.last.ResetAfter; op.l == nil && reset > 0 && reset != spigot.Never && r.now-r.lastNow >= reset.Microseconds() {
		s0, d0 := applyCopy(o, store.State{}, now)
		if op.act == spigot.Peek {
			s0 = s
		}
		if !reflect.DeepEqual(s0, s) || d0 != got {
			return r.fail("%v after ResetAfter %v: the zero State gives %+v %+v, the kept state %+v %+v",
				time.Duration(r.now-r.lastNow)*time.Microsecond, reset, s0, d0, s, got)
		}
	}
	if op.act != spigot.Peek {
		r.s, r.stale = s, false
	}
	r.last, r.lastAct, r.lastN, r.lastNow = got, op.act, op.n, r.now
	return nil
}

func (r *kindRun) fail(format string, args ...any) error {
	return fmt.Errorf("step %d, %v: %s\n\tfrom state %+v; the last steps (t0 = %v):\n\t%s",
		r.step, r.l, fmt.Sprintf(format, args...), r.s, time.UnixMicro(refStart).UTC(), strings.Join(r.history, "\n\t"))
}

// kindWindows are window lengths for random limits: one ms, odd ones,
// and long ones.
var kindWindows = []time.Duration{ms, 7 * ms, 100 * ms, s, 13 * s, time.Minute, time.Hour, 24 * time.Hour}

// kindLimit returns a random limit of kind k.
func kindLimit(rng *rand.Rand, k spigot.Kind) spigot.Limit {
	tokens := []int64{1, 2, 3, 5, 10, 17, 50}[rng.IntN(7)]
	if k != spigot.LeakyBucket && rng.IntN(10) == 0 {
		tokens = []int64{1000, 1e6}[rng.IntN(2)]
		if k == spigot.SlidingLog {
			tokens = spigot.MaxLog
		}
	}
	w := kindWindows[rng.IntN(len(kindWindows))]
	switch k {
	case spigot.FixedWindow:
		var off time.Duration
		if rng.IntN(2) == 0 {
			off = time.Duration(rng.Int64N(int64(3*w/ms))-int64(w/ms)) * ms
		}
		return spigot.Must(spigot.NewFixedWindow("kinds", spigot.Per(tokens, w), off))
	case spigot.SlidingWindow:
		return spigot.Must(spigot.NewSlidingWindow("kinds", spigot.Per(tokens, w)))
	case spigot.SlidingLog:
		return spigot.Must(spigot.NewSlidingLog("kinds", spigot.Per(tokens, w)))
	}
	r := refRate(rng)
	for r.Period/time.Duration(r.Tokens) > 24*time.Hour { // not ages per request
		r = refRate(rng)
	}
	l, err := spigot.NewLeakyBucket("kinds", min(tokens, refCapacity(rng, r)), r)
	if err != nil {
		return spigot.Must(spigot.NewLeakyBucket("kinds", 3, spigot.PerSecond(100)))
	}
	return l
}

// kindNext returns a random next step for r.
func kindNext(rng *rand.Rand, r *kindRun) kindOp {
	c := r.l.Capacity()
	var op kindOp
	switch rng.IntN(8) {
	case 0:
		op.n = 0
	case 1:
		op.n = c
	case 2:
		op.n = c + 1
	case 3:
		op.n = []int64{c + 1 + rng.Int64N(100), math.MaxInt64}[rng.IntN(2)]
	case 4, 5:
		op.n = rng.Int64N(min(c, 5) + 1)
	default:
		op.n = rng.Int64N(c + 1)
	}
	op.act = refActions[rng.IntN(len(refActions))]
	w := r.l.Window().Microseconds()
	if r.l.Kind() == spigot.LeakyBucket {
		w = max(r.l.Rate().Period.Microseconds()*max(c, 1)/r.l.Rate().Tokens, 1) // from empty to full
	}
	tick := max(w/max(c, 1), 1)
	switch rng.IntN(11) {
	case 0:
		op.dt = 0
	case 1:
		op.dt = 1
	case 2:
		op.dt = rng.Int64N(tick + 1)
	case 3:
		op.dt = rng.Int64N(w + 1)
	case 4, 5:
		if !r.last.Allowed() && r.last.RetryAfter != spigot.Never && r.step > 0 {
			op.dt, op.act, op.n, op.retry = r.last.RetryAfter.Microseconds(), r.lastAct, r.lastN, true
		}
	case 6:
		op.dt = r.last.ResetAfter.Microseconds()
	case 7:
		op.dt = -rng.Int64N(min(r.now-refStart, 2*w) + 1) // back, at most to the start
	case 8:
		op.dt = rng.Int64N(1000) * 1000 // whole ms
	case 9: // to a window's edge, or just before it
		if w >= 1000 {
			op.dt = w - (r.now-r.l.Offset().Microseconds())%w - rng.Int64N(2)
		}
	default:
		op.dt = rng.Int64N(3*w + 1)
	}
	if rng.IntN(4) == 0 {
		op.ns = rng.Int64N(1000)
	}
	return op
}

// kindSequence runs one random sequence of kind k from seed; with
// reconfig, the limit changes now and then under the same name (to
// another limit, window or kind).
func kindSequence(seed uint64, k spigot.Kind, reconfig bool) error {
	rng := rand.New(rand.NewPCG(seed, 0x71d05))
	r := newKindRun(kindLimit(rng, k))
	for range rng.IntN(50) + 1 {
		op := kindNext(rng, r)
		if reconfig && rng.IntN(6) == 0 {
			op.retry = false
			var l spigot.Limit
			switch rng.IntN(4) {
			case 0: // the same windows, another limit
				rate := spigot.Per(kindLimit(rng, k).Capacity(), r.l.Rate().Period)
				var err error
				switch r.l.Kind() {
				case spigot.FixedWindow:
					l, err = spigot.NewFixedWindow("kinds", rate, r.l.Offset())
				case spigot.SlidingWindow:
					l, err = spigot.NewSlidingWindow("kinds", rate)
				case spigot.SlidingLog:
					l, err = spigot.NewSlidingLog("kinds", rate)
				default:
					l = r.l
				}
				if err != nil {
					l = r.l
				}
			case 1:
				l = kindLimit(rng, r.l.Kind())
			default:
				l = kindLimit(rng, []spigot.Kind{spigot.FixedWindow, spigot.SlidingWindow, spigot.SlidingLog, spigot.LeakyBucket}[rng.IntN(4)])
			}
			if l.Kind() == spigot.LeakyBucket && r.l.Kind() != spigot.LeakyBucket {
				// A leaky bucket reads another kind's state as a token
				// bucket does (refModel proves it): not here.
				l = r.l
			}
			if u, ok := r.m.(*usedUp); ok && !u.over {
				l = r.l // one other state at a time
			}
			if l != r.l {
				op.l = &l
			}
		}
		if err := r.do(op); err != nil {
			return err
		}
	}
	return nil
}

// TestApplyKindsModel checks Apply on every new kind against its model on
// random sequences of every action, with and without config changes.
func TestApplyKindsModel(t *testing.T) {
	for _, k := range []spigot.Kind{spigot.FixedWindow, spigot.SlidingWindow, spigot.SlidingLog, spigot.LeakyBucket} {
		t.Run(k.String(), func(t *testing.T) {
			for seed := range uint64(250) {
				if err := kindSequence(uint64(k)<<32+seed, k, seed%2 == 1); err != nil {
					t.Fatalf("seed %d: %v", uint64(k)<<32+seed, err)
				}
			}
		})
	}
}

// kindFuzzStep decodes the steps of the FuzzApply* targets of the new
// kinds: five bytes a step, [a, k, x₁, x₀, c], with x = x₁x₀ as a uint16
// and
//
//	a%8        the action, as in FuzzApply
//	k&7        the clock: 0 stays; 1 +1µs; 2 +x µs; 3 +x<<(5×(k>>5)) µs;
//	           4 +RetryAfter with the last action and N (a retry);
//	           5 +ResetAfter; 6 −x<<(5×(k>>5)) µs; 7 +x ms and c×4 ns
//	(k>>3)&3   N: 0 c; 1 limit−c; 2 limit+c; 3 0, and if c is not 0 a
//	           config change first (see kindFuzzConfig)
func kindFuzz(t *testing.T, l spigot.Limit, ops []byte) {
	t.Helper()
	r := newKindRun(l)
	for len(ops) >= 5 && r.step < 64 {
		op := kindOp{act: refFuzzActions[ops[0]%8]}
		k, x, c := ops[1], int64(ops[2])<<8|int64(ops[3]), int64(ops[4])
		ops = ops[5:]
		switch limit := r.l.Capacity(); (k >> 3) & 3 {
		case 0:
			op.n = c
		case 1:
			op.n = max(limit-c, 0)
		case 2:
			op.n = limit + c
		default:
			if c != 0 {
				if nl, ok := kindFuzzConfig(r, x, c); ok {
					op.l = &nl
				}
			}
		}
		shift := 5 * (k >> 5)
		switch k & 7 {
		case 1:
			op.dt = 1
		case 2:
			op.dt = x
		case 3:
			op.dt = x << shift
		case 4:
			if !r.last.Allowed() && r.last.RetryAfter != spigot.Never && r.step > 0 && op.l == nil {
				op.dt, op.act, op.n, op.retry = r.last.RetryAfter.Microseconds(), r.lastAct, r.lastN, true
			}
		case 5:
			op.dt = r.last.ResetAfter.Microseconds()
		case 6:
			op.dt = -(x << shift)
		case 7:
			op.dt, op.ns = x*1000, c*4%1000
		}
		// After the epoch: a window that ends exactly at it would keep a
		// FullAt of 0, which reads as none (TestApplyBeforeEpoch is the
		// rest of what happens before it).
		if r.now+op.dt > refLimit || r.now+op.dt < 1 {
			op.dt, op.retry = 0, false
		}
		if err := r.do(op); err != nil {
			t.Fatal(err)
		}
	}
}

// kindFuzzConfig returns a config for r's limit's name made from x and c:
// with c&1, the same kind and windows with a limit of x%64+1; otherwise a
// fixed window, sliding window or sliding log (by (c>>1)&3) of x%64+1
// tokens in a window of r's (its refill from empty, for a leaky bucket)
// times (c>>3)+1, with the offset x ms for a fixed window. A leaky bucket
// is never the new config: it reads another config's state as a token
// bucket does, which refModel proves.
func kindFuzzConfig(r *kindRun, x, c int64) (spigot.Limit, bool) {
	tokens := x%64 + 1
	w := r.l.Window()
	if r.l.Kind() == spigot.LeakyBucket {
		w = (r.l.Rate().Period*time.Duration(max(r.l.Capacity(), 1))/time.Duration(r.l.Rate().Tokens) + ms - 1) / ms * ms
	}
	kind := r.l.Kind()
	if kind == spigot.LeakyBucket && c&1 != 0 { // another capacity and rate
		l, err := spigot.NewLeakyBucket(r.l.Name(), x%64, spigot.Per(c>>1&7+1, time.Duration(x+1)*ms))
		return l, err == nil && l != r.l
	}
	if c&1 == 0 {
		kind = []spigot.Kind{spigot.FixedWindow, spigot.SlidingWindow, spigot.SlidingLog, spigot.SlidingWindow}[(c>>1)&3]
		if w > math.MaxInt64/time.Duration(c>>3+1) {
			return spigot.Limit{}, false
		}
		w *= time.Duration(c>>3 + 1)
	}
	var l spigot.Limit
	var err error
	switch kind {
	case spigot.FixedWindow:
		off := r.l.Offset()
		if c&1 == 0 {
			off = time.Duration(x) * ms
		}
		l, err = spigot.NewFixedWindow(r.l.Name(), spigot.Per(tokens, w), off)
	case spigot.SlidingWindow:
		l, err = spigot.NewSlidingWindow(r.l.Name(), spigot.Per(tokens, w))
	case spigot.SlidingLog:
		l, err = spigot.NewSlidingLog(r.l.Name(), spigot.Per(tokens, w))
	default:
		return spigot.Limit{}, false
	}
	if u, ok := r.m.(*usedUp); err != nil || l == r.l || ok && !u.over {
		return spigot.Limit{}, false
	}
	return l, true
}

// FuzzApplyFixedWindow checks Apply on a fixed window of tokens a window of
// windowMs ms, offset by offsetMs ms, against winRef; see kindFuzz for ops.
func FuzzApplyFixedWindow(f *testing.F) {
	f.Add(int64(10), int64(1000), int64(0), []byte{ // the boundary burst, then a retry
		0, 7, 0x03, 0xde, 10, 0, 2, 0x4e, 0x20, 10, 0, 2, 0, 1, 1, 0, 4, 0, 0, 0, 4, 5, 0, 0, 1,
	})
	f.Add(int64(3), int64(86_400_000), int64(5*3_600_000), []byte{0, 0o10, 0, 0, 0, 6, 0, 0, 0, 0, 5, 0o6, 0x10, 0, 2, 7, 3, 0x30, 0, 3})
	f.Add(int64(2), int64(7), int64(-1), []byte{4, 0, 0, 0, 9, 5, 0o30, 0, 9, 1, 0, 4, 0, 0, 0, 7, 0o26, 0, 3, 2})
	f.Fuzz(func(t *testing.T, tokens, windowMs, offsetMs int64, ops []byte) {
		if windowMs < 1 || windowMs > 1<<40 || offsetMs < -1<<40 || offsetMs > 1<<40 {
			return
		}
		l, err := spigot.NewFixedWindow("fuzz", spigot.Per(tokens, time.Duration(windowMs)*ms), time.Duration(offsetMs)*ms)
		if err != nil {
			return
		}
		kindFuzz(t, l, ops)
	})
}

// FuzzApplySlidingWindow is FuzzApplyFixedWindow for the sliding window
// counter (whose windows have no offset).
func FuzzApplySlidingWindow(f *testing.F) {
	f.Add(int64(10), int64(1000), []byte{ // 8 in a window, 3 in the next at 30%: 8.6, one more, then a retry
		0, 0, 0, 0, 8, 0, 7, 0x03, 0xe8, 3, 0, 7, 0x01, 0x2c, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 4, 0, 0, 0,
	})
	f.Add(int64(5), int64(60_000), []byte{0, 0o10, 0, 0, 0, 6, 0o6, 0x10, 0, 2, 4, 3, 0x30, 0, 3, 5, 0o30, 0, 5, 3})
	f.Add(int64(1_000_000), int64(3_600_000), []byte{0, 0o10, 0, 0, 0, 7, 0o343, 0, 1, 0, 0, 4, 0, 0, 0})
	f.Fuzz(func(t *testing.T, tokens, windowMs int64, ops []byte) {
		if windowMs < 1 || windowMs > 1<<40 {
			return
		}
		l, err := spigot.NewSlidingWindow("fuzz", spigot.Per(tokens, time.Duration(windowMs)*ms))
		if err != nil {
			return
		}
		kindFuzz(t, l, ops)
	})
}

// FuzzApplySlidingLog is FuzzApplyFixedWindow for the sliding log (whose
// windows have no offset), with at most 64 tokens.
func FuzzApplySlidingLog(f *testing.F) {
	f.Add(int64(5), int64(86_400_000), []byte{ // 5 resets, a sixth denied, retried
		0, 0, 0, 0, 1, 0, 7, 0x0e, 0x10, 1, 0, 7, 0x0e, 0x10, 3, 0, 7, 0, 1, 1, 0, 0, 0, 0, 1, 0, 4, 0, 0, 0,
	})
	f.Add(int64(3), int64(7), []byte{4, 0, 0, 0, 9, 5, 2, 0x10, 0, 1, 7, 6, 0x10, 0, 0, 0, 0o30, 0, 9, 7, 4, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, tokens, windowMs int64, ops []byte) {
		if windowMs < 1 || windowMs > 1<<40 || tokens > 64 {
			return
		}
		l, err := spigot.NewSlidingLog("fuzz", spigot.Per(tokens, time.Duration(windowMs)*ms))
		if err != nil {
			return
		}
		kindFuzz(t, l, ops)
	})
}

// FuzzApplyLeakyBucket is FuzzApplyFixedWindow for a leaky bucket of
// capacity places that lets tokens leave every periodUs µs.
func FuzzApplyLeakyBucket(f *testing.F) {
	f.Add(int64(100), int64(1_000_000), int64(3), []byte{ // r1…r5 at once: 0, 10, 20 ms, then denied
		0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 4, 0, 0, 0,
	})
	f.Add(int64(7), int64(10_000_000), int64(2), []byte{4, 0o20, 0, 0, 0, 5, 2, 0x10, 0, 1, 7, 4, 0, 0, 0, 6, 6, 0x10, 0, 0})
	f.Fuzz(func(t *testing.T, tokens, periodUs, capacity int64, ops []byte) {
		if periodUs < 1 || periodUs > 1<<40 {
			return
		}
		l, err := spigot.NewLeakyBucket("fuzz", capacity, spigot.Per(tokens, time.Duration(periodUs)*time.Microsecond))
		if err != nil {
			return
		}
		kindFuzz(t, l, ops)
	})
}

// FuzzApplyKindsState applies an op of every kind to any State at all, as
// a store may hand Apply a corrupt one, and checks what must hold of any
// decision: no panic, N within what the op asked, Remaining within the
// limit, waits not negative, Delay only on a leaky bucket, and a Peek
// that changes nothing.
func FuzzApplyKindsState(f *testing.F) {
	f.Add(uint8(2), int64(5), int64(1000), uint8(0), int64(1), uint8(2), int64(0), int64(0), int64(0), int64(0), int64(1000000), int64(3), int64(0), int64(0), int64(0))
	f.Add(uint8(3), int64(5), int64(1000), uint8(4), int64(2), uint8(3), int64(math.MaxInt64), int64(math.MaxInt64), int64(0), int64(math.MaxInt64-1000000), int64(1000000), int64(-3), int64(9), int64(0), int64(0))
	f.Add(uint8(4), int64(3), int64(1000), uint8(0), int64(1), uint8(4), int64(1), int64(2), int64(0), int64(0), int64(0), int64(0), int64(0), int64(5), int64(-7))
	f.Add(uint8(5), int64(3), int64(1000), uint8(0), int64(1), uint8(5), int64(math.MinInt64), int64(1), int64(-5), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, kind uint8, tokens, windowMs int64, act uint8, n int64, sKind uint8, stamp, fullAt, sTokens, start, window, count, prev, log0, logStep int64) {
		if windowMs < 1 || windowMs > 1<<40 || tokens > spigot.MaxLog || n < 0 {
			return
		}
		r := spigot.Per(tokens, time.Duration(windowMs)*ms)
		var l spigot.Limit
		var err error
		switch kind % 4 {
		case 0:
			l, err = spigot.NewFixedWindow("fuzz", r, time.Duration(windowMs/3)*ms)
		case 1:
			l, err = spigot.NewSlidingWindow("fuzz", r)
		case 2:
			l, err = spigot.NewSlidingLog("fuzz", r)
		default:
			l, err = spigot.NewLeakyBucket("fuzz", tokens, r)
		}
		if err != nil {
			return
		}
		s := store.State{Kind: spigot.Kind(sKind), Stamp: stamp, FullAt: fullAt, Tokens: sTokens, Scale: max(sTokens%7, 0),
			Start: start, Window: window, Count: count, Prev: prev}
		for i := range int64(max(min(count, 8), 0)) {
			s.Log = append(s.Log, log0+i*logStep)
		}
		before := clone(s)
		a := refFuzzActions[act%8]
		now := time.UnixMicro(refStart)
		s2, d := applyCopy(spigot.Op{Limit: l, Key: "k", Action: a, N: n}, s, now)
		switch {
		case d.N < 0 || d.N > max(n, l.Capacity()) || a == spigot.Take && d.N != 0 && d.N != n:
			t.Errorf("%v on %v from %+v: N %d", a, l, before, d.N)
		case d.Remaining < 0 || d.Remaining > l.Capacity():
			t.Errorf("%v on %v from %+v: Remaining %d", a, l, before, d.Remaining)
		case d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0:
			t.Errorf("%v on %v from %+v: %+v: a negative wait", a, l, before, d)
		case d.Delay != 0 && (l.Kind() != spigot.LeakyBucket || !d.Allowed()):
			t.Errorf("%v on %v from %+v: %+v: a Delay", a, l, before, d)
		case a == spigot.Peek && !reflect.DeepEqual(s2, before):
			t.Errorf("Peek on %v from %+v left %+v", l, before, s2)
		case a == spigot.Take && n == 0 && !d.Allowed():
			t.Errorf("Take 0 on %v from %+v: %+v", l, before, d)
		}
	})
}
