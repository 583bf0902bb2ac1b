package store_test

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// This file checks store.Apply against refModel, an independent statement of
// the model (the docs of Limit and Apply) in exact rational arithmetic
// (math/big), on random and fuzzed sequences of operations of every
// action: every field of every Decision, the tokens left, and the interval
// bound capacity + floor(T × refill) on what was taken net of refunds.

// refModel is the model of one key, written from its formulas with
// tokens as an exact rational number of tokens and time in whole
// microseconds. It shares nothing with op.go but the formulas.
type refModel struct {
	capacity int64
	refill   *big.Rat // tokens per microsecond: Rate.Tokens / period in µs
	tokens   *big.Rat // nil: no state yet (a full bucket)
	stamp    int64    // µs of the last update; never moves back
	fullAt   int64    // µs from which the state no longer matters: full again, and now ≥ stamp; 0: unknown
	denom    *big.Int // the refill's denominator when the state was stored
	// raw is a State the model was started from and has not read yet (see
	// read): any State at all, as a store may hand Apply a corrupt one or
	// one of another kind.
	raw *store.State
}

func newRefModel(capacity int64, r spigot.Rate) *refModel {
	return &refModel{capacity: capacity, refill: refRefill(r)}
}

// refRefill returns r as tokens per microsecond, in lowest terms.
func refRefill(r spigot.Rate) *big.Rat {
	return big.NewRat(r.Tokens, int64(r.Period/time.Microsecond))
}

// reconfigure applies a config change under the same name. The state is
// read under the new config at the next operation (see carry).
func (m *refModel) reconfigure(capacity int64, r spigot.Rate) {
	m.capacity, m.refill = capacity, refRefill(r)
}

// carry reads the stored tokens under the current config: they carry over,
// clamped to [0, capacity]; when the scale (the denominator of the refill
// in lowest terms) changed since they were stored, only whole tokens carry
// over.
func (m *refModel) carry() {
	if m.denom.Cmp(m.refill.Denom()) != 0 {
		m.tokens = new(big.Rat).SetInt(refFloor(m.tokens))
	}
	m.tokens = refMin(m.tokens, refInt(m.capacity))
	if m.tokens.Sign() < 0 {
		m.tokens = new(big.Rat)
	}
}

// read reads m.raw at now, as Apply's doc says a State reads: a state
// without a Kind, or whose FullAt has come, is no state; a token bucket's
// with a Scale above 0 is its Tokens/Scale tokens at its Stamp (which carry
// then clamps), and with none it is no state; a state of another kind is
// the bucket that is full again exactly at its FullAt, and no sooner: it
// holds what refilling at the rate to be full then leaves, or, when that
// would take longer than refilling from empty, nothing until the refill
// time before FullAt (its stamp is then ahead of now).
func (m *refModel) read(now int64) {
	s := *m.raw
	m.raw, m.tokens = nil, nil
	switch {
	case s.Kind == 0 || now >= s.FullAt:
	case s.Kind == spigot.TokenBucket:
		if s.Scale > 0 {
			m.tokens, m.stamp, m.fullAt, m.denom = big.NewRat(s.Tokens, s.Scale), s.Stamp, s.FullAt, big.NewInt(s.Scale)
		}
	default:
		capacity := refInt(m.capacity)
		fill := new(big.Rat).Quo(capacity, m.refill) // µs to refill from empty
		m.fullAt, m.denom = s.FullAt, m.refill.Denom()
		if until := refInt(s.FullAt - now); until.Cmp(fill) <= 0 {
			m.tokens, m.stamp = new(big.Rat).Sub(capacity, new(big.Rat).Mul(until, m.refill)), now
		} else {
			m.tokens, m.stamp = new(big.Rat), s.FullAt-refCeil(fill).Int64()
		}
	}
}

// take applies a Take of cost tokens at now (µs).
func (m *refModel) take(now, cost int64) spigot.Decision {
	d, _ := m.apply(now, spigot.Take, cost)
	return d
}

// apply applies an operation at now (µs), and returns its decision and the
// exact tokens it gave back (Refund) or took (Take, TakeUpTo; negative).
// Its RefillAfter is the definition's, by brute force: on a copy of the
// model after the operation, a Take of the Remaining tokens, then the
// RetryAfter of a Take of one, at now.
func (m *refModel) apply(now int64, action spigot.Action, n int64) (spigot.Decision, *big.Rat) {
	d, moved := m.decide(now, action, n)
	c := *m // the model's rationals are never changed in place
	c.decide(now, spigot.Take, d.Remaining)
	one, _ := c.decide(now, spigot.Take, 1)
	d.RefillAfter = one.RetryAfter
	return d, moved
}

// decide is apply without RefillAfter.
func (m *refModel) decide(now int64, action spigot.Action, n int64) (spigot.Decision, *big.Rat) {
	if action == spigot.Peek { // decides on a copy: nothing changes
		saved := *m
		defer func() { *m = saved }()
	}
	capacity := refInt(m.capacity)
	if m.raw != nil {
		m.read(now)
	}
	if m.tokens != nil && m.fullAt != 0 && now >= m.fullAt { // full again: as if never seen
		m.tokens = nil
	}
	if m.tokens == nil {
		m.tokens, m.stamp = capacity, now
	} else {
		m.carry()
	}
	m.denom = m.refill.Denom()
	var lag int64 // > 0 when the clock is behind the stamp
	if now > m.stamp {
		elapsed := new(big.Rat).Sub(refInt(now), refInt(m.stamp)) // a raw stamp may be far in the past
		gain := new(big.Rat).Mul(elapsed, m.refill)
		m.tokens = refMin(new(big.Rat).Add(m.tokens, gain), capacity)
		m.stamp = now
	} else {
		lag = m.stamp - now
	}
	d := spigot.Decision{}
	moved := new(big.Rat)
	c := refInt(n)
	switch action {
	case spigot.Take, spigot.Peek:
		switch {
		case n > m.capacity:
			d.RetryAfter = spigot.Never
		case m.tokens.Cmp(c) >= 0:
			if action == spigot.Take {
				m.tokens = new(big.Rat).Sub(m.tokens, c)
				d.N, moved = n, new(big.Rat).Neg(c)
			}
		default:
			d.RetryAfter = m.wait(lag, new(big.Rat).Sub(c, m.tokens))
		}
	case spigot.TakeUpTo: // the whole tokens held, up to n
		k := min(n, refFloor(m.tokens).Int64())
		switch {
		case k > 0 || n == 0:
			m.tokens = new(big.Rat).Sub(m.tokens, refInt(k))
			d.N, moved = k, refInt(-k)
		case m.capacity == 0:
			d.RetryAfter = spigot.Never
		default:
			d.RetryAfter = m.wait(lag, new(big.Rat).Sub(refInt(1), m.tokens))
		}
	case spigot.Refund: // n more, up to the capacity
		moved = refMin(c, new(big.Rat).Sub(capacity, m.tokens))
		m.tokens = new(big.Rat).Add(m.tokens, moved)
		d.N = refCeil(moved).Int64()
	case spigot.Reset: // what it lacked, rounded up; then forgotten
		d.N = refCeil(new(big.Rat).Sub(capacity, m.tokens)).Int64()
		d.Remaining = m.capacity
		m.tokens = nil
		return d, new(big.Rat)
	}
	if deficit := new(big.Rat).Sub(capacity, m.tokens); deficit.Sign() > 0 {
		d.ResetAfter = m.wait(lag, deficit)
	}
	d.Remaining = refFloor(m.tokens).Int64()
	m.fullAt = max(now+d.ResetAfter.Microseconds(), m.stamp)
	if m.fullAt <= now { // full, and nothing to remember
		m.tokens = nil
	}
	return d, moved
}

// wait returns ceil_ms(lag + deficit/refill), or Never past what a Duration
// holds.
func (m *refModel) wait(lag int64, deficit *big.Rat) time.Duration {
	us := new(big.Rat).Add(refInt(lag), new(big.Rat).Quo(deficit, m.refill))
	ms := refCeil(new(big.Rat).Quo(us, refInt(1000)))
	if ms.Cmp(big.NewInt(math.MaxInt64/int64(time.Millisecond))) > 0 {
		return spigot.Never
	}
	return time.Duration(ms.Int64()) * time.Millisecond
}

func refInt(n int64) *big.Rat { return new(big.Rat).SetInt64(n) }

func refMin(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) <= 0 {
		return a
	}
	return b
}

// refFloor returns ⌊x⌋ (Int.Div rounds toward -∞ for a positive divisor).
func refFloor(x *big.Rat) *big.Int { return new(big.Int).Div(x.Num(), x.Denom()) }

// refCeil returns ⌈x⌉.
func refCeil(x *big.Rat) *big.Int {
	return new(big.Int).Neg(refFloor(new(big.Rat).Neg(x)))
}

// refStart is the instant the sequences start from.
var refStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMicro()

// refLimit bounds the sequences' clock (µs) far from int64 overflow.
const refLimit = 1 << 61

// refOp is one step of a sequence.
type refOp struct {
	dt    int64         // µs to move the clock, possibly back
	ns    int64         // sub-microsecond nanoseconds of the new instant, which Take must ignore
	act   spigot.Action // what the step does
	cost  int64         // its N
	retry bool          // dt is the last RetryAfter, act and cost the last ones: must be allowed
	b     *spigot.Limit // non-nil: the config changes to b before the step
}

// refEvent is one step, for the interval check.
type refEvent struct {
	at    int64    // the model's stamp after the step
	taken *big.Rat // the tokens taken, net of those given back
}

// refPast is a step done, for failure messages.
type refPast struct {
	step, now int64
	op        refOp
}

func (p refPast) String() string {
	s := fmt.Sprintf("step %d: t%+dµs (+%dns) %v %d", p.step, p.now-refStart, p.op.ns, p.op.act, p.op.cost)
	if p.op.b != nil {
		s = fmt.Sprintf("%s, after a config change to %v", s, *p.op.b)
	}
	return s
}

// refRun drives store.Apply and refModel side by side.
type refRun struct {
	b        spigot.Limit
	s        store.State
	m        *refModel
	now      int64 // µs
	step     int
	last     spigot.Decision
	lastAct  spigot.Action
	lastCost int64
	lastNow  int64
	seg      []refEvent // the steps since the last config change
	history  []refPast  // the last steps, for failure messages
}

func newRefRun(b spigot.Limit) (*refRun, error) {
	if err := refCheckBucket(b); err != nil {
		return nil, err
	}
	return &refRun{b: b, m: newRefModel(b.Capacity(), b.Rate()), now: refStart, lastNow: refStart}, nil
}

// newRefRunFrom is newRefRun with the key's state s to start from: any
// State, as a store may hand Apply.
func newRefRunFrom(b spigot.Limit, s store.State) (*refRun, error) {
	r, err := newRefRun(b)
	if err != nil {
		return nil, err
	}
	r.s, r.m.raw = s, &s
	return r, nil
}

// refCheckBucket checks that b's scaled units are what Limit's doc says: the
// refill Rate.Tokens/period in lowest terms is Refill()/Scale().
func refCheckBucket(b spigot.Limit) error {
	r := refRefill(b.Rate())
	if r.Denom().Cmp(big.NewInt(scaleOf(b))) != 0 || r.Num().Cmp(big.NewInt(refillOf(b))) != 0 {
		return fmt.Errorf("%v: Refill()/Scale() = %d/%d, want %v tokens per µs in lowest terms", b, refillOf(b), scaleOf(b), r)
	}
	return nil
}

// do runs one step on both and reports the first difference.
func (r *refRun) do(op refOp) error {
	r.step++
	if op.b != nil {
		if err := refCheckBucket(*op.b); err != nil {
			return err
		}
		if err := r.checkIntervals(); err != nil {
			return err
		}
		r.b, r.seg = *op.b, r.seg[:0]
		r.m.reconfigure(r.b.Capacity(), r.b.Rate())
	}
	r.now += op.dt
	if r.s.IsZero() && len(r.seg) > 0 && r.now < r.seg[len(r.seg)-1].at {
		// The bucket was full and forgotten, and the clock has stepped
		// back behind its stamp: the bucket restarts, full, at the earlier
		// instant (Take's doc), so the interval bound starts again.
		if err := r.checkIntervals(); err != nil {
			return err
		}
		r.seg = r.seg[:0]
	}
	now := time.UnixMicro(r.now).Add(time.Duration(op.ns))
	r.note(refPast{int64(r.step), r.now, op})

	o := spigot.Op{Limit: r.b, Key: "k", Action: op.act, N: op.cost}
	s, got := apply(o, r.s, now)
	want, moved := r.m.apply(r.now, op.act, op.cost)
	if got != want {
		return r.fail("got %+v, want %+v", got, want)
	}
	switch {
	case op.act == spigot.Peek:
		if !reflect.DeepEqual(s, r.s) {
			return r.fail("Peek changed the state to %+v", s)
		}
	case r.m.tokens == nil: // forgotten
		if !s.IsZero() {
			return r.fail("state %+v, want the zero State: the bucket is full", s)
		}
	case s.Kind != spigot.TokenBucket || s.Scale != scaleOf(r.b) || s.Stamp != r.m.stamp || s.FullAt != r.m.fullAt:
		return r.fail("state %+v: want Kind TokenBucket, Scale %d, Stamp %d, FullAt %d", s, scaleOf(r.b), r.m.stamp, r.m.fullAt)
	case big.NewRat(s.Tokens, s.Scale).Cmp(r.m.tokens) != 0:
		return r.fail("state %+v holds %v tokens, want %v", s, big.NewRat(s.Tokens, s.Scale), r.m.tokens)
	}
	if op.retry && !got.Allowed() {
		return r.fail("a retry after exactly RetryAfter %v was denied: %+v", r.last.RetryAfter, got)
	}
	// A Refund of what a Take or TakeUpTo took, at the same instant, leaves
	// the state a Take of 0 leaves: as if neither happened.
	if op.act == spigot.Take || op.act == spigot.TakeUpTo {
		back, _ := apply(spigot.Op{Limit: r.b, Key: "k", Action: spigot.Refund, N: got.N}, s, now)
		if none, _ := apply((spigot.Op{Limit: r.b, Key: "k"}), r.s, now); !reflect.DeepEqual(back, none) {
			return r.fail("%v then Refund %d: state %+v, want %+v, as after neither", op.act, got.N, back, none)
		}
	}
	// A store may drop the state once ResetAfter has passed (it is the TTL):
	// a zero State must then decide exactly as the kept one. (A ResetAfter
	// of Never is one that saturated, after the clock stepped back years.)
	if reset := r.last.ResetAfter; op.b == nil && reset > 0 && reset != spigot.Never && r.now-r.lastNow >= reset.Microseconds() {
		s0, a0 := apply(o, store.State{}, now)
		if op.act == spigot.Peek {
			s0 = s // a Peek keeps whatever it was given
		}
		if !reflect.DeepEqual(s0, s) || a0 != got {
			return r.fail("%v after ResetAfter %v: the zero State gives %+v %+v, the kept state %+v %+v",
				now.Sub(time.UnixMicro(r.lastNow)), r.last.ResetAfter, s0, a0, s, got)
		}
	}

	if op.act == spigot.Reset { // the bound starts again from a full bucket
		if err := r.checkIntervals(); err != nil {
			return err
		}
		r.seg = r.seg[:0]
	} else {
		r.seg = append(r.seg, refEvent{at: r.m.stamp, taken: new(big.Rat).Neg(moved)})
	}
	if op.act != spigot.Peek {
		r.s = s
	}
	r.last, r.lastAct, r.lastCost, r.lastNow = got, op.act, op.cost, r.now
	return nil
}

// checkIntervals checks that no run of steps i…j of the current config
// took more than capacity + (t_j - t_i) × refill tokens, net of refunds.
func (r *refRun) checkIntervals() error {
	c := refInt(r.b.Capacity())
	sum, excess, span := new(big.Rat), new(big.Rat), new(big.Rat)
	for i := range r.seg {
		sum.SetInt64(0)
		for j := i; j < len(r.seg); j++ {
			sum.Add(sum, r.seg[j].taken)
			if sum.Cmp(c) <= 0 {
				continue // within the burst alone
			}
			excess.Sub(sum, c)
			span.SetInt64(r.seg[j].at - r.seg[i].at)
			if excess.Cmp(span.Mul(span, r.m.refill)) > 0 {
				return fmt.Errorf("%v: the steps at t%+dµs…t%+dµs took %v tokens net of refunds, more than %v + ⌊%v⌋",
					r.b, r.seg[i].at-refStart, r.seg[j].at-refStart, sum, c, span)
			}
		}
	}
	return nil
}

func (r *refRun) note(p refPast) {
	const keep = 8
	if len(r.history) == keep {
		r.history = append(r.history[:0], r.history[1:]...)
	}
	r.history = append(r.history, p)
}

func (r *refRun) fail(format string, args ...any) error {
	var past strings.Builder
	for _, p := range r.history {
		fmt.Fprintf(&past, "\n\t%v", p)
	}
	return fmt.Errorf("step %d, %v: %s\n\tfrom state %+v; the last steps (t0 = %v):%s",
		r.step, r.b, fmt.Sprintf(format, args...), r.s, time.UnixMicro(refStart).UTC(), past.String())
}

// refRates are common rates, rates whose period does not divide evenly
// and extreme ones; refRate adds random ones.
var refRates = []spigot.Rate{
	spigot.PerSecond(3),
	spigot.Per(7, 10*time.Second),
	spigot.Per(10, 13*time.Second),
	spigot.Per(1, 3*time.Second),
	spigot.Per(1000, time.Millisecond),
	spigot.Per(1, 24*time.Hour),
	spigot.Per(20, 3*time.Second),
	spigot.Per(1, time.Microsecond),
	spigot.PerSecond(50),
	spigot.PerMinute(7),
}

// refLogUniform returns an int64 in [1, n], log-uniformly.
func refLogUniform(rng *rand.Rand, n int64) int64 {
	l := rng.IntN(bits.Len64(uint64(n))) // a bit length below n's, less one
	return min(int64(1)<<l+rng.Int64N(int64(1)<<l), n)
}

func refRate(rng *rand.Rand) spigot.Rate {
	if rng.IntN(2) == 0 {
		return refRates[rng.IntN(len(refRates))]
	}
	return spigot.Per(refLogUniform(rng, 1e9), time.Duration(refLogUniform(rng, 1e12))*time.Microsecond)
}

// refSameScale returns a rate with b's scale, so that a config change to it
// carries b's tokens over exactly.
func refSameScale(rng *rand.Rand, b spigot.Limit) spigot.Rate {
	for {
		n := refLogUniform(rng, 1e6)
		if new(big.Int).GCD(nil, nil, big.NewInt(n), big.NewInt(scaleOf(b))).Int64() == 1 {
			return spigot.Per(n, time.Duration(scaleOf(b))*time.Microsecond)
		}
	}
}

// refCapacity returns a capacity NewBucket accepts at rate r.
func refCapacity(rng *rand.Rand, r spigot.Rate) int64 {
	limit := store.MaxExact / refRefill(r).Denom().Int64()
	var c int64
	switch rng.IntN(7) {
	case 0:
		c = 0
	case 1:
		c = 1
	case 2:
		c = rng.Int64N(50) + 2
	case 3:
		c = limit - rng.Int64N(4) // at the limit
	case 4:
		c = rng.Int64N(1000)
	default:
		c = refLogUniform(rng, max(limit, 1))
	}
	return max(0, min(c, limit))
}

func refBucket(name string, capacity int64, r spigot.Rate) (spigot.Limit, bool) {
	b, err := spigot.NewBucket(name, capacity, r)
	return b, err == nil
}

// refActions weighs the actions of random steps: Take most often.
var refActions = []spigot.Action{spigot.Take, spigot.Take, spigot.Take, spigot.TakeUpTo, spigot.TakeUpTo, spigot.Refund, spigot.Refund, spigot.Reset, spigot.Peek}

// refNext returns a random next step for r: a Take, or with withActions an
// operation of any action.
func refNext(rng *rand.Rand, r *refRun, withActions bool) refOp {
	c := r.b.Capacity()
	var op refOp
	switch rng.IntN(8) {
	case 0:
		op.cost = 0
	case 1:
		op.cost = c
	case 2:
		op.cost = c + 1
	case 3:
		if rng.IntN(8) == 0 {
			op.cost = math.MaxInt64
		} else {
			op.cost = c + 1 + rng.Int64N(100)
		}
	case 4, 5:
		op.cost = rng.Int64N(min(c, 5) + 1)
	default:
		op.cost = rng.Int64N(c + 1)
	}

	if withActions {
		op.act = refActions[rng.IntN(len(refActions))]
	}

	token := max(1, refCeil(new(big.Rat).Inv(r.m.refill)).Int64()) // µs per token
	fill := max(1, refCeil(new(big.Rat).Quo(refInt(c), r.m.refill)).Int64())
	switch rng.IntN(10) {
	case 0:
		op.dt = 0
	case 1:
		op.dt = 1
	case 2:
		op.dt = rng.Int64N(token + 1)
	case 3:
		op.dt = rng.Int64N(min(fill, refLimit/1024) + 1)
	case 4, 5:
		if !r.last.Allowed() && r.last.RetryAfter != spigot.Never && r.step > 0 {
			op.dt, op.act, op.cost, op.retry = r.last.RetryAfter.Microseconds(), r.lastAct, r.lastCost, true
		}
	case 6:
		op.dt = r.last.ResetAfter.Microseconds()
	case 7:
		op.dt = -rng.Int64N(min(r.now-refStart, 4*token) + 1) // back, at most to the start
	case 8:
		op.dt = rng.Int64N(1000)
	default:
		op.dt = rng.Int64N(min(2*fill, refLimit/1024) + 1)
	}
	if r.now+op.dt > refLimit {
		op.dt, op.retry = 0, false
	}
	if rng.IntN(4) == 0 {
		op.ns = rng.Int64N(1000)
	}
	return op
}

// refSequence runs one random sequence from seed; with reconfig, the
// bucket's capacity and rate change now and then under the same name; with
// actions, its steps are operations of every action, not only Take.
func refSequence(seed uint64, reconfig, actions bool) error {
	return refSequenceFrom(seed, reconfig, actions, false)
}

// refSequenceFrom is refSequence; with fromState, the key starts from a
// random State (refState) rather than from none.
func refSequenceFrom(seed uint64, reconfig, actions, fromState bool) error {
	rng := rand.New(rand.NewPCG(seed, 0x5b160))
	var b spigot.Limit
	for ok := false; !ok; {
		r := refRate(rng)
		b, ok = refBucket("model", refCapacity(rng, r), r)
	}
	var s0 store.State
	if fromState {
		s0 = refState(rng, b, refStart)
	}
	run, err := newRefRunFrom(b, s0)
	if err != nil {
		return err
	}
	for range rng.IntN(60) + 1 {
		op := refNext(rng, run, actions)
		if reconfig && rng.IntN(6) == 0 {
			op.retry = false
			nb := run.reconfigure(rng)
			op.b = &nb
		}
		if err := run.do(op); err != nil {
			return err
		}
	}
	return run.checkIntervals()
}

// reconfigure returns a new config for r's bucket: another capacity, another
// rate (sometimes with the same scale), or both.
func (r *refRun) reconfigure(rng *rand.Rand) spigot.Limit {
	for {
		rate, capacity := r.b.Rate(), r.b.Capacity()
		switch rng.IntN(4) {
		case 0:
			capacity = refCapacity(rng, rate)
		case 1:
			rate = refSameScale(rng, r.b)
		case 2:
			rate = refRate(rng)
		default:
			rate = refRate(rng)
			capacity = refCapacity(rng, rate)
		}
		if b, ok := refBucket(r.b.Name(), capacity, rate); ok {
			return b
		}
	}
}

// TestTakeModel checks Take against refModel on random sequences of
// requests on one bucket.
func TestTakeModel(t *testing.T) {
	for seed := range uint64(1000) {
		if err := refSequence(seed, false, false); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// TestTakeModelConfigChange checks Take against refModel on random
// sequences whose bucket changes capacity and rate under the same name.
func TestTakeModelConfigChange(t *testing.T) {
	for seed := range uint64(700) {
		if err := refSequence(1<<32+seed, true, false); err != nil {
			t.Fatalf("seed %d: %v", 1<<32+seed, err)
		}
	}
}

// TestApplyModel checks Apply against refModel on random sequences of
// operations of every action, with and without config changes.
func TestApplyModel(t *testing.T) {
	for seed := range uint64(2000) {
		if err := refSequence(seed, seed%2 == 1, true); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// refState returns a random State for a key of b at now: a token bucket's
// (of b's scale or another, with or without a kind), corrupt ones (tokens
// out of range, stamps far off, scales of 0 or less) and states of another
// kind, whose FullAt is before now, soon, or beyond b's refill from empty.
func refState(rng *rand.Rand, b spigot.Limit, now int64) store.State {
	pick := func(v ...int64) int64 { return v[rng.IntN(len(v))] }
	fill := b.Capacity() * scaleOf(b) / refillOf(b) // µs to refill from empty, less a fraction
	// off returns an offset from now, of any size, either way.
	off := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return rng.Int64N(2*fill+3) - fill - 1
		case 1:
			return pick(0, 1, -1, fill, fill+1, -fill, 2*fill+7, 1<<40, -(1 << 40), 1<<53, -(1 << 53))
		case 2:
			return (rng.Int64N(1<<50) - 1<<49) >> rng.IntN(50)
		}
		return pick(math.MaxInt64-now, math.MinInt64, math.MinInt64+1) // the extremes, as absolute instants
	}
	at := func() int64 {
		o := off()
		if o > math.MaxInt64-now || o < math.MinInt64+now+1 {
			return pick(math.MaxInt64, math.MinInt64)
		}
		return now + o
	}
	s := store.State{Kind: spigot.Kind(pick(0, 1, 1, 1, 7, 255)), Stamp: at(), FullAt: at()}
	switch rng.IntN(6) {
	case 0:
		s.FullAt = 0
	case 1:
		s.FullAt = max(s.FullAt, s.Stamp)
	}
	s.Scale = pick(scaleOf(b), scaleOf(b), scaleOf(b), 1, 3, scaleOf(b)*2, scaleOf(b)+1, 0, -1, math.MinInt64, math.MaxInt64, 1<<53, rng.Int64N(1<<20)+1)
	sc := max(s.Scale, 1)
	top := b.Capacity() * sc // the bucket's capacity in the state's units
	if b.Capacity() != 0 && top/b.Capacity() != sc {
		top = math.MaxInt64 / 2
	}
	s.Tokens = pick(0, 1, -1, top, top+1, top/2, -top, math.MinInt64, math.MaxInt64, -(1 << 62), 1<<53, -(1 << 53), rng.Int64N(top/2+1)*2-top/2)
	return s
}

// TestApplyModelStates checks Apply against refModel on random sequences
// that start from random States: corrupt ones and other kinds'.
func TestApplyModelStates(t *testing.T) {
	for seed := range uint64(3000) {
		if err := refSequenceFrom(1<<33+seed, seed%3 == 1, true, true); err != nil {
			t.Fatalf("seed %d: %v", 1<<33+seed, err)
		}
	}
}

// TestApplyCorruptStates: a token bucket's state no bucket could hold
// (tokens far out of range under another scale, a stamp from the far past
// or future) reads as the doc of Apply says, at fixed instants; so does
// refModel.
func TestApplyCorruptStates(t *testing.T) {
	b := spigot.MustBucket("b", 10, spigot.PerSecond(1)) // scale 1000000, refill 1
	T := t0.UnixMicro()
	take1 := spigot.Op{Limit: b, Key: "k", N: 1}
	tests := []struct {
		name  string
		state store.State
		want  spigot.Decision // of a Take of 1 at t0
	}{
		// Negative whole tokens under another scale: none, not a full bucket.
		{"-2^62 tokens of scale 3", store.State{Kind: spigot.TokenBucket, Tokens: -(1 << 62), Stamp: T, Scale: 3, FullAt: T + 10e6},
			spigot.Decision{RetryAfter: 1 * s, ResetAfter: 10 * s, RefillAfter: 1 * s}},
		// Without a Kind, or a FullAt that has come: no state, a full bucket.
		{"-2^62 tokens of scale 3, without a kind", store.State{Tokens: -(1 << 62), Stamp: T, Scale: 3, FullAt: T + 10e6},
			spigot.Decision{N: 1, Remaining: 9, ResetAfter: 1 * s, RefillAfter: 1 * s}},
		{"-2^62 tokens of scale 3, without a FullAt", store.State{Kind: spigot.TokenBucket, Tokens: -(1 << 62), Stamp: T, Scale: 3},
			spigot.Decision{N: 1, Remaining: 9, ResetAfter: 1 * s, RefillAfter: 1 * s}},
		{"MinInt64 tokens of scale 7", store.State{Kind: spigot.TokenBucket, Tokens: math.MinInt64, Stamp: T, Scale: 7, FullAt: T + 10e6},
			spigot.Decision{RetryAfter: 1 * s, ResetAfter: 10 * s, RefillAfter: 1 * s}},
		{"-2^53 tokens of scale 2", store.State{Kind: spigot.TokenBucket, Tokens: -(1 << 53), Stamp: T, Scale: 2, FullAt: T + 10e6},
			spigot.Decision{RetryAfter: 1 * s, ResetAfter: 10 * s, RefillAfter: 1 * s}},
		{"MaxInt64 tokens of scale 3", store.State{Kind: spigot.TokenBucket, Tokens: math.MaxInt64, Stamp: T, Scale: 3, FullAt: T + 10e6},
			spigot.Decision{N: 1, Remaining: 9, ResetAfter: 1 * s, RefillAfter: 1 * s}},
		// A stamp so far in the past that the time since overflows an int64:
		// full, as after any long wait.
		{"stamp MinInt64", store.State{Kind: spigot.TokenBucket, Stamp: math.MinInt64, Scale: 1e6, FullAt: T + 10e6},
			spigot.Decision{N: 1, Remaining: 9, ResetAfter: 1 * s, RefillAfter: 1 * s}},
		{"stamp MinInt64+1, negative tokens", store.State{Kind: spigot.TokenBucket, Tokens: -5, Stamp: math.MinInt64 + 1, Scale: 1e6, FullAt: T + 10e6},
			spigot.Decision{N: 1, Remaining: 9, ResetAfter: 1 * s, RefillAfter: 1 * s}},
		// A stamp at the end of time: empty, and waiting for it is Never.
		{"stamp MaxInt64", store.State{Kind: spigot.TokenBucket, Stamp: math.MaxInt64, Scale: 1e6, FullAt: math.MaxInt64},
			spigot.Decision{RetryAfter: spigot.Never, ResetAfter: spigot.Never, RefillAfter: spigot.Never}},
	}
	for i, tt := range tests {
		st, got := apply(take1, tt.state, t0)
		if got != tt.want {
			t.Errorf("step %d: %s: Take 1 at t0 on %+v: got %+v, want %+v", i, tt.name, tt.state, got, tt.want)
		}
		if !reflect.DeepEqual(st, tt.state) && st.Kind != spigot.TokenBucket && !st.IsZero() {
			t.Errorf("step %d: %s: the new state %+v is not a token bucket's", i, tt.name, st)
		}
		m := newRefModel(b.Capacity(), b.Rate())
		m.raw = &tt.state
		if d, _ := m.apply(T, spigot.Take, 1); d != tt.want {
			t.Errorf("step %d: %s: refModel: got %+v, want %+v", i, tt.name, d, tt.want)
		}
	}
}

// TestApplyOtherKindFullAt: a state of another kind whose FullAt is
// further off than the bucket takes to refill from empty holds the bucket
// empty until that refill time before FullAt (its stamp ahead of now), so
// the bucket is full at FullAt, not sooner; the state each step leaves is
// forgotten no sooner than FullAt. Steps at fixed instants, on one key,
// against Apply and refModel alike.
func TestApplyOtherKindFullAt(t *testing.T) {
	const day = 24 * time.Hour
	b := spigot.MustBucket("b", 10, spigot.PerSecond(1))   // 10 s from empty
	odd := spigot.MustBucket("b", 10, spigot.PerSecond(3)) // 3.33… s from empty: scale 1000000, refill 3
	none := spigot.MustBucket("b", 0, spigot.PerSecond(1))
	T := t0.UnixMicro()
	op := func(l spigot.Limit, a spigot.Action, n int64) spigot.Op {
		return spigot.Op{Limit: l, Key: "k", Action: a, N: n}
	}
	type step struct {
		at   time.Duration // since t0
		op   spigot.Op
		want spigot.Decision
	}
	for _, c := range []struct {
		name  string
		state store.State
		steps []step
	}{
		{"full again in a day", store.State{Kind: 7, FullAt: T + day.Microseconds()}, []step{
			// Empty until FullAt-10s.
			{0, op(b, spigot.Peek, 1), spigot.Decision{RetryAfter: day - 9*s, ResetAfter: day}},
			{0, op(b, spigot.Take, 0), spigot.Decision{ResetAfter: day}},
			{0, op(b, spigot.TakeUpTo, 5), spigot.Decision{RetryAfter: day - 9*s, ResetAfter: day}},
			{day - 11*s, op(b, spigot.Take, 1), spigot.Decision{RetryAfter: 2 * s, ResetAfter: 11 * s}},
			{day - 9*s, op(b, spigot.Take, 1), spigot.Decision{N: 1, ResetAfter: 10 * s}},
			{day - 1*s, op(b, spigot.Peek, 10), spigot.Decision{Remaining: 8, RetryAfter: 2 * s, ResetAfter: 2 * s}},
			{day + 1*s, op(b, spigot.Take, 10), spigot.Decision{N: 10, ResetAfter: 10 * s}},
		}},
		{"full again in a day, read by a Reset", store.State{Kind: 7, FullAt: T + day.Microseconds()}, []step{
			{0, op(b, spigot.Reset, 0), spigot.Decision{N: 10, Remaining: 10}},
			{0, op(b, spigot.Take, 10), spigot.Decision{N: 10, ResetAfter: 10 * s}},
		}},
		{"full again in a day, a Refund", store.State{Kind: 7, FullAt: T + day.Microseconds()}, []step{
			// 3 tokens given back, held from now; the stamp stays ahead.
			{0, op(b, spigot.Refund, 3), spigot.Decision{N: 3, Remaining: 3, ResetAfter: day - 3*s}},
			{0, op(b, spigot.Take, 3), spigot.Decision{N: 3, ResetAfter: day}},
		}},
		{"full again in 5 s, at 3/s", store.State{Kind: 7, FullAt: T + 5e6}, []step{
			// 10 tokens take 3333334 µs: empty until t0+1666666µs.
			{0, op(odd, spigot.Peek, 1), spigot.Decision{RetryAfter: 2 * s, ResetAfter: 5 * s}},
			{0, op(odd, spigot.Take, 0), spigot.Decision{ResetAfter: 5 * s}},
			{1666666 * time.Microsecond, op(odd, spigot.Peek, 0), spigot.Decision{ResetAfter: 3334 * ms}},
			{1999999 * time.Microsecond, op(odd, spigot.Take, 1), spigot.Decision{RetryAfter: 1 * ms, ResetAfter: 3001 * ms}},
			{2 * s, op(odd, spigot.Take, 1), spigot.Decision{N: 1, ResetAfter: 3334 * ms}},
		}},
		{"full again in 2 s: refilled along the way", store.State{Kind: 7, FullAt: T + 2e6}, []step{
			{0, op(b, spigot.Take, 1), spigot.Decision{N: 1, Remaining: 7, ResetAfter: 3 * s}},
		}},
		{"capacity 0: kept until FullAt", store.State{Kind: 7, FullAt: T + 5e6}, []step{
			{0, op(none, spigot.Take, 0), spigot.Decision{}},
			{0, op(none, spigot.Take, 1), spigot.Decision{RetryAfter: spigot.Never}},
		}},
	} {
		st := c.state
		m := newRefModel(c.steps[0].op.Limit.Capacity(), c.steps[0].op.Limit.Rate())
		m.raw = &c.state
		for i, step := range c.steps {
			now := t0.Add(step.at)
			before := st
			var got spigot.Decision
			st, got = apply(step.op, st, now)
			want := refilled(step.op, st, now, step.want)
			if got != want {
				t.Errorf("%s: step %d: at t0+%v, %v: got %+v, want %+v", c.name, i, step.at, step.op, got, want)
			}
			if m.capacity != step.op.Limit.Capacity() {
				t.Fatalf("%s: the steps change the bucket", c.name)
			}
			if d, _ := m.apply(now.UnixMicro(), step.op.Action, step.op.N); d != want {
				t.Errorf("%s: step %d: at t0+%v, %v: refModel: got %+v, want %+v", c.name, i, step.at, step.op, d, want)
			}
			// Until a Refund or a Reset adds tokens, the state is kept until
			// the old FullAt at least.
			if before.Kind == 7 && step.op.Action != spigot.Refund && step.op.Action != spigot.Reset && st.FullAt < before.FullAt {
				t.Errorf("%s: step %d: %v left %+v: forgotten before the old FullAt %d", c.name, i, step.op, st, before.FullAt)
			}
		}
	}
}

// TestRefModel pins refModel (and Take) to values worked out by hand from
// the model's docs, so that the model cannot drift along with Take.
func TestRefModel(t *testing.T) {
	const (
		s  = int64(time.Second / time.Microsecond)
		ms = int64(time.Millisecond / time.Microsecond)
	)
	// capacity 2, 7 tokens every 10 s: 0.7 token per second.
	b := spigot.MustBucket("model", 2, spigot.Per(7, 10*time.Second))
	steps := []struct {
		at   int64 // µs after t0
		cost int64
		want spigot.Decision
	}{
		// t0: full; 2/0.7 s = 2.857142…s to refill, 1/0.7 s = 1428.57…ms
		// to one token.
		{0, 2, spigot.Decision{N: 2, Remaining: 0, ResetAfter: 2858 * time.Millisecond, RefillAfter: 1429 * time.Millisecond}},
		// t1 = t0+1s: 0.7 tokens; 0.3/0.7 s = 428.57…ms to 1.
		{1 * s, 1, spigot.Decision{RetryAfter: 429 * time.Millisecond, ResetAfter: 1858 * time.Millisecond, RefillAfter: 429 * time.Millisecond}},
		// t2 = t1+429ms: 0.7 + 0.3003 = 1.0003 tokens, takes 1, 0.0003 left:
		// 0.9997/0.7 s = 1428.14…ms to 1.
		{1*s + 429*ms, 1, spigot.Decision{N: 1, ResetAfter: 2857 * time.Millisecond, RefillAfter: 1429 * time.Millisecond}},
		// t3 = t1: the clock steps back 429ms; no refill, and the wait
		// counts from the stamp: 429ms + 1.9997/0.7 s = 3285.71…ms to
		// full, 429ms + 0.9997/0.7 s = 1857.14…ms to 1 token.
		{1 * s, 0, spigot.Decision{ResetAfter: 3286 * time.Millisecond, RefillAfter: 1858 * time.Millisecond}},
		{1 * s, 1, spigot.Decision{RetryAfter: 1858 * time.Millisecond, ResetAfter: 3286 * time.Millisecond, RefillAfter: 1858 * time.Millisecond}},
		// t4 = t2+2857ms: full again; with the 2 taken, one more in 1/0.7 s.
		{1*s + 429*ms + 2857*ms, 3, spigot.Decision{Remaining: 2, RetryAfter: spigot.Never, RefillAfter: 1429 * time.Millisecond}},
	}
	m := newRefModel(b.Capacity(), b.Rate())
	var st store.State
	for i, step := range steps {
		if got := m.take(refStart+step.at, step.cost); got != step.want {
			t.Errorf("step %d: model: got %+v, want %+v", i, got, step.want)
		}
		var got spigot.Decision
		st, got = take(b, st, time.UnixMicro(refStart+step.at), step.cost)
		if got != step.want {
			t.Errorf("step %d: Take: got %+v, want %+v", i, got, step.want)
		}
	}
}

// FuzzTake checks Apply's Take against refModel on a bucket of rate tokens per
// period µs holding capacity, and a sequence of up to 64 steps encoded in ops,
// four bytes a step: [k, x₁, x₀, c], with x = x₁x₀ as a uint16 and
//
//	k&7        the clock: 0 stays; 1 +1µs; 2 +x µs; 3 +x<<(5×(k>>5)) µs;
//	           4 +RetryAfter with the last cost (a retry); 5 +ResetAfter;
//	           6 −x<<(5×(k>>5)) µs; 7 +x µs and c×4 ns
//	(k>>3)&3   the cost: 0 c; 1 capacity−c; 2 capacity+c; 3 zero if c is 0,
//	           else 1 after a config change (see refFuzzConfig)
func FuzzTake(f *testing.F) {
	f.Add(int64(1), int64(3_000_000), int64(20), []byte{
		0, 0, 0, 1, 0, 0, 0, 19, 0, 0, 0, 1, 4, 0, 0, 0, 0o20, 0, 0, 0, 5, 0, 0, 0,
	})
	f.Add(int64(7), int64(10_000_000), int64(2), []byte{
		0o20, 0, 0, 0, 2, 0x10, 0, 1, 4, 0, 0, 0, 6, 0x10, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0,
	})
	f.Add(int64(10), int64(13_000_000), int64(0), []byte{0o30, 0, 0, 0, 0o10, 0, 0, 0, 1, 0, 0, 1, 3, 0, 0, 0})
	f.Add(int64(1000), int64(1000), int64(1<<53), []byte{0o10, 0, 0, 0, 0o323, 0xff, 0xff, 1, 0o10, 0, 0, 7, 4, 0, 0, 0, 7, 0, 1, 0xff})
	f.Add(int64(1), int64(86_400_000_000), int64(104249), []byte{0o10, 0, 0, 0, 0o343, 0, 1, 0, 0o16, 0x20, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0})
	f.Add(int64(3), int64(1_000_000), int64(1), []byte{2, 0, 1, 1, 2, 0, 1, 1, 4, 0, 0, 0, 0o26, 0, 7, 2, 0o27, 1, 2, 3})
	f.Add(int64(3), int64(1_000_000), int64(20), []byte{ // config changes: same scale, then another
		0o10, 0, 0, 0, 2, 0x10, 0, 5, 0o30, 0, 5, 0x24, 4, 0, 0, 0, 0o30, 0, 0, 0x23, 5, 0, 0, 0, 0o12, 0x40, 0, 0,
	})
	f.Fuzz(func(t *testing.T, tokens, periodUs, capacity int64, ops []byte) {
		refFuzz(t, tokens, periodUs, capacity, ops, false)
	})
}

// FuzzApply is FuzzTake with every action: five bytes a step, [a, k, x₁,
// x₀, c], where a%8 is the action (0…3 Take, 4 TakeUpTo, 5 Refund, 6
// Reset, 7 Peek) and the other four are FuzzTake's (the cost is N).
func FuzzApply(f *testing.F) {
	f.Add(int64(1), int64(1_000_000), int64(3), []byte{
		0, 0, 0, 0, 3, 5, 0, 0, 0, 2, 4, 0, 0, 0, 9, 7, 4, 0, 0, 1, 6, 2, 0x01, 0xf4, 0, 4, 0, 0, 0, 2,
	})
	f.Add(int64(7), int64(10_000_000), int64(2), []byte{
		4, 0o20, 0, 0, 0, 5, 2, 0x10, 0, 1, 7, 4, 0, 0, 0, 4, 4, 0, 0, 0, 6, 6, 0x10, 0, 0, 5, 0, 0, 0, 3,
	})
	f.Add(int64(3), int64(1_000_000), int64(20), []byte{ // a config change, then a refund and a reset
		0, 0o10, 0, 0, 0, 5, 0o30, 0, 5, 0x24, 4, 4, 0, 0, 0, 6, 5, 0, 0, 0,
	})
	f.Fuzz(func(t *testing.T, tokens, periodUs, capacity int64, ops []byte) {
		refFuzz(t, tokens, periodUs, capacity, ops, true)
	})
}

// FuzzApplyState is FuzzApply from any State: its kind, tokens and scale,
// and its stamp and FullAt as µs from the sequence's start (saturated; a
// FullAt of 0 is none).
func FuzzApplyState(f *testing.F) {
	day := int64(86_400_000_000)
	f.Add(int64(1), int64(1_000_000), int64(10), uint8(7), int64(0), int64(0), day, int64(0), []byte{
		7, 0, 0, 0, 1, 0, 0, 0, 0, 1, 4, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 1, 5, 0, 0, 0, 3,
	})
	f.Add(int64(3), int64(1_000_000), int64(10), uint8(255), int64(5), int64(-3), int64(5_000_000), int64(9), []byte{
		7, 0, 0, 0, 1, 0, 2, 0x40, 0, 1, 4, 0, 0, 0, 0, 0, 5, 0, 0, 0,
	})
	f.Add(int64(1), int64(1_000_000), int64(10), uint8(1), int64(-1<<62), int64(0), int64(10_000_000), int64(3), []byte{0, 0, 0, 0, 1})
	f.Add(int64(1), int64(1_000_000), int64(10), uint8(0), int64(0), int64(math.MinInt64), int64(0), int64(1_000_000), []byte{0, 0, 0, 0, 1})
	f.Add(int64(1), int64(2), int64(1<<52), uint8(1), int64(1<<53), int64(math.MaxInt64), int64(math.MaxInt64), int64(2), []byte{4, 0, 0, 0, 9, 5, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, tokens, periodUs, capacity int64, kind uint8, sTokens, sStamp, sFullAt, sScale int64, ops []byte) {
		at := func(off int64) int64 {
			switch {
			case off > math.MaxInt64-refStart:
				return math.MaxInt64
			case off < math.MinInt64+refStart:
				return math.MinInt64
			}
			return refStart + off
		}
		s := store.State{Kind: spigot.Kind(kind), Tokens: sTokens, Stamp: at(sStamp), Scale: sScale}
		if sFullAt != 0 {
			s.FullAt = at(sFullAt)
		}
		refFuzzFrom(t, tokens, periodUs, capacity, ops, true, s)
	})
}

// refFuzzActions maps the action byte of FuzzApply's steps.
var refFuzzActions = [8]spigot.Action{spigot.Take, spigot.Take, spigot.Take, spigot.Take, spigot.TakeUpTo, spigot.Refund, spigot.Reset, spigot.Peek}

// refFuzz runs the steps encoded in ops (see FuzzTake and FuzzApply).
func refFuzz(t *testing.T, tokens, periodUs, capacity int64, ops []byte, actions bool) {
	t.Helper()
	refFuzzFrom(t, tokens, periodUs, capacity, ops, actions, store.State{})
}

// refFuzzFrom is refFuzz from the key's state s0.
func refFuzzFrom(t *testing.T, tokens, periodUs, capacity int64, ops []byte, actions bool, s0 store.State) {
	t.Helper()
	if periodUs < 1 || periodUs > math.MaxInt64/int64(time.Microsecond) {
		return // not a Duration
	}
	b, err := spigot.NewBucket("fuzz", capacity, spigot.Per(tokens, time.Duration(periodUs)*time.Microsecond))
	if err != nil {
		return
	}
	run, err := newRefRunFrom(b, s0)
	if err != nil {
		t.Fatal(err)
	}
	size := 4
	if actions {
		size = 5
	}
	for len(ops) >= size && run.step < 64 {
		var op refOp
		if actions {
			op.act, ops = refFuzzActions[ops[0]%8], ops[1:]
		}
		k, x, c := ops[0], int64(ops[1])<<8|int64(ops[2]), int64(ops[3])
		ops = ops[4:]
		switch full := run.b.Capacity(); (k >> 3) & 3 {
		case 0:
			op.cost = c
		case 1:
			op.cost = max(full-c, 0)
		case 2:
			op.cost = full + c
		default:
			if c != 0 {
				op.b, op.cost = refFuzzConfig(b, x, c), 1
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
			if !run.last.Allowed() && run.last.RetryAfter != spigot.Never && run.step > 0 {
				op.dt, op.act, op.cost, op.retry = run.last.RetryAfter.Microseconds(), run.lastAct, run.lastCost, true
			}
		case 5:
			op.dt = run.last.ResetAfter.Microseconds()
		case 6:
			op.dt = -(x << shift)
		case 7:
			op.dt, op.ns = x, c*4%1000
		}
		if run.now+op.dt > refLimit || run.now+op.dt < -refLimit {
			op.dt, op.retry = 0, false
		}
		if op.b != nil {
			op.retry = false // the config changed: RetryAfter no longer holds
		}
		if err := run.do(op); err != nil {
			t.Fatal(err)
		}
	}
	if err := run.checkIntervals(); err != nil {
		t.Fatal(err)
	}
}

// refFuzzConfig returns a config for b's name made from x and c: capacity x
// (or b's when c is odd), and b's rate with its tokens times 1…8 and its
// period times 1…8. It returns nil if NewBucket rejects that.
func refFuzzConfig(b spigot.Limit, x, c int64) *spigot.Limit {
	capacity, r := x, b.Rate()
	if c&1 != 0 {
		capacity = b.Capacity()
	}
	tm, pm := (c>>1)&7+1, (c>>4)&7+1
	if r.Tokens > math.MaxInt64/tm || r.Period > math.MaxInt64/time.Duration(pm) {
		return nil
	}
	nb, err := spigot.NewBucket(b.Name(), capacity, spigot.Per(r.Tokens*tm, r.Period*time.Duration(pm)))
	if err != nil {
		return nil
	}
	return &nb
}

// scaleOf and refillOf return a bucket's scaled units (see store.Scaled).
func scaleOf(l spigot.Limit) int64  { s, _ := store.Scaled(l); return s }
func refillOf(l spigot.Limit) int64 { _, r := store.Scaled(l); return r }
