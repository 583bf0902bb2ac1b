package conformance

import (
	"math/big"
	"time"

	"github.com/spigot-go/spigot"
)

// model is the suite's reference: the model of one key of one bucket,
// written as plainly as the design states it, in exact rationals. It is
// independent of store.Apply, which a store under test may itself call.
// When time goes back it adds nothing and keeps its stamp, and a wait
// counts the time the clock needs to come back to the stamp.
type model struct {
	capacity *big.Rat
	refill   *big.Rat // tokens per microsecond
	tokens   *big.Rat // held at stamp; nil until the first request
	stamp    int64    // µs since the epoch
	fullAt   int64    // µs from which the state counts as absent
	leaky    bool     // a leaky bucket: an admitted request waits its turn (Delay)
}

func newModel(capacity int64, r spigot.Rate) *model {
	return &model{
		capacity: new(big.Rat).SetInt64(capacity),
		refill:   big.NewRat(r.Tokens, r.Period.Microseconds()),
	}
}

// apply applies an operation at now and returns its decision. A Peek
// decides as a Take would, on a copy: it changes nothing.
func (m *model) apply(now time.Time, action spigot.Action, n int64) spigot.Decision {
	if action == spigot.Peek {
		saved := *m
		defer func() { *m = saved }()
	}
	t := now.UnixMicro()
	if m.tokens != nil && t >= m.fullAt { // full again: as if never seen
		m.tokens = nil
	}
	if m.tokens == nil { // never seen: full
		m.tokens, m.stamp = new(big.Rat).Set(m.capacity), t
	}
	if t > m.stamp { // tokens = min(capacity, tokens + elapsed × refill)
		gained := new(big.Rat).SetInt64(t - m.stamp)
		m.tokens = new(big.Rat).Add(m.tokens, gained.Mul(gained, m.refill))
		if m.tokens.Cmp(m.capacity) > 0 {
			m.tokens.Set(m.capacity)
		}
		m.stamp = t
	}
	lag := m.stamp - t // > 0 when the clock went back
	c := new(big.Rat).SetInt64(n)
	d := spigot.Decision{}
	switch action {
	case spigot.Take, spigot.Peek:
		switch {
		case c.Cmp(m.capacity) > 0:
			d.RetryAfter = spigot.Never
		case m.tokens.Cmp(c) >= 0:
			d.Delay = m.delay(lag)
			if action == spigot.Take {
				m.tokens = new(big.Rat).Sub(m.tokens, c)
				d.N = n
			}
		default:
			d.RetryAfter = m.timeFor(lag, new(big.Rat).Sub(c, m.tokens))
		}
	case spigot.TakeUpTo: // the whole tokens it holds, up to n
		k := min(n, floor(m.tokens))
		switch {
		case k > 0 || n == 0:
			d.Delay = m.delay(lag)
			m.tokens = new(big.Rat).Sub(m.tokens, new(big.Rat).SetInt64(k))
			d.N = k
		case m.capacity.Sign() == 0:
			d.RetryAfter = spigot.Never
		default:
			d.RetryAfter = m.timeFor(lag, new(big.Rat).Sub(big.NewRat(1, 1), m.tokens))
		}
	case spigot.Refund: // n more, up to the capacity; N rounded up
		add := new(big.Rat).Sub(m.capacity, m.tokens)
		if c.Cmp(add) < 0 {
			add = c
		}
		m.tokens = new(big.Rat).Add(m.tokens, add)
		d.N = -floor(new(big.Rat).Neg(add))
	case spigot.Reset: // what it lacked, rounded up; then forgotten
		d.N = -floor(new(big.Rat).Sub(m.tokens, m.capacity))
		d.Remaining = floor(m.capacity)
		m.tokens = nil
		return d
	}
	if m.tokens.Cmp(m.capacity) < 0 {
		d.ResetAfter = m.timeFor(lag, new(big.Rat).Sub(m.capacity, m.tokens))
	}
	d.Remaining = floor(m.tokens)
	// Full again under this config, and the clock caught up with the
	// stamp: nothing to remember.
	if m.fullAt = max(t+d.ResetAfter.Microseconds(), m.stamp); m.fullAt <= t {
		m.tokens = nil
	}
	return d
}

// delay returns the Delay of a request a leaky bucket admits now, lag µs
// behind its stamp: lag µs plus the time until it is full, the requests
// queued before it gone, rounded up to the µs; 0 for a token bucket.
func (m *model) delay(lag int64) time.Duration {
	if !m.leaky {
		return 0
	}
	us := new(big.Rat).Quo(new(big.Rat).Sub(m.capacity, m.tokens), m.refill)
	return time.Duration(lag-floor(us.Neg(us))) * time.Microsecond
}

// timeFor returns lag µs plus how long the bucket takes to gain n tokens,
// rounded up to the millisecond.
func (m *model) timeFor(lag int64, n *big.Rat) time.Duration {
	ms := n.Quo(n, m.refill)                                    // µs
	ms.Add(ms, new(big.Rat).SetInt64(lag))                      // µs
	ms.Quo(ms, big.NewRat(1000, 1))                             // ms
	return time.Duration(-floor(ms.Neg(ms))) * time.Millisecond // ⌈x⌉ = -⌊-x⌋
}

// floor returns ⌊x⌋.
func floor(x *big.Rat) int64 {
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if r.Sign() < 0 {
		q.Sub(q, big.NewInt(1))
	}
	return q.Int64()
}

// The models of the other kinds, as plainly as their docs state them (see
// spigot.Kind, spigot.NewFixedWindow, spigot.NewSlidingWindow,
// spigot.NewSlidingLog and spigot.NewLeakyBucket). A leaky bucket is model
// with leaky set: a token bucket whose admitted requests wait (Delay) until
// it would be full before them.

// A modelEntry is a key's model, and the limit it models.
type modelEntry struct {
	l spigot.Limit
	m keyModel
}

// carry returns the model of a key of l whose model was e: the state
// carries over to a limit of the same kind (and windows), is another
// kind's otherwise, and is none once its FullAt has come.
func carry(e modelEntry, l spigot.Limit, now time.Time) keyModel {
	switch w := e.m.(type) { // a state of another kind that is not written over is still there
	case *usedUpModel:
		if w.full != 0 {
			return carry(w.prev, l, now)
		}
		e.m = w.next
	case *fullAtModel:
		if w.full != 0 {
			return carry(w.prev, l, now)
		}
		e.m = w.next
	}
	from := e.l
	sameWindows := from.Window() == l.Window() && from.Offset() == l.Offset()
	switch {
	case from == l:
		return e.m
	case from.Kind() != l.Kind():
	case l.Kind() == spigot.TokenBucket || l.Kind() == spigot.LeakyBucket:
		// Whole tokens carry over when the refill's denominator (the scale)
		// changes, all of them otherwise; clamped.
		m := e.m.(*model)
		next := newKeyModel(l).(*model)
		if m.tokens != nil {
			tokens := m.tokens
			if m.refill.Denom().Cmp(next.refill.Denom()) != 0 {
				tokens = new(big.Rat).SetInt64(floor(tokens))
			}
			if tokens.Cmp(next.capacity) > 0 {
				tokens = new(big.Rat).Set(next.capacity)
			}
			next.tokens, next.stamp, next.fullAt = tokens, m.stamp, m.fullAt
		}
		return next
	case sameWindows && l.Kind() == spigot.SlidingLog:
		m := e.m.clone().(*logModel)
		m.l = l
		return m
	case sameWindows:
		m := e.m.clone().(*winModel)
		m.l = l
		return m
	}
	full, kept := e.m.until()
	if !kept || now.UnixMicro() >= full {
		return newKeyModel(l)
	}
	if l.Kind() == spigot.TokenBucket || l.Kind() == spigot.LeakyBucket {
		return &fullAtModel{l: l, full: full, next: newKeyModel(l).(*model), prev: e}
	}
	return &usedUpModel{capacity: l.Capacity(), full: full, next: newKeyModel(l), prev: e}
}

// refApply applies an operation to m at now and returns its decision, with
// the RefillAfter of its definition, by brute force: on a copy of the
// model after the operation (unchanged by a Peek), a Take of the Remaining
// tokens, then the RetryAfter of a Take of one, at now.
func refApply(m keyModel, now time.Time, action spigot.Action, n int64) spigot.Decision {
	d := m.apply(now, action, n)
	c := m.clone()
	c.apply(now, spigot.Take, d.Remaining)
	d.RefillAfter = c.apply(now, spigot.Take, 1).RetryAfter
	return d
}

// A keyModel is the model of one key of a limit of any kind.
type keyModel interface {
	apply(now time.Time, action spigot.Action, n int64) spigot.Decision
	// until returns the instant (µs) from which the key's state no longer
	// matters, and whether the model keeps a state at all.
	until() (int64, bool)
	clone() keyModel
}

func (m *model) until() (int64, bool) { return m.fullAt, m.tokens != nil }
func (m *model) clone() keyModel      { c := *m; return &c }

// newKeyModel returns the model of a key of l without state.
func newKeyModel(l spigot.Limit) keyModel {
	switch l.Kind() {
	case spigot.FixedWindow, spigot.SlidingWindow:
		return &winModel{l: l, counts: map[int64]int64{}}
	case spigot.SlidingLog:
		return &logModel{l: l}
	}
	m := newModel(l.Capacity(), l.Rate())
	m.leaky = l.Kind() == spigot.LeakyBucket
	return m
}

// ceilMs returns us µs rounded up to the millisecond.
func ceilMs(us int64) time.Duration {
	return time.Duration(-floor(big.NewRat(-us, 1000))) * time.Millisecond
}

// winModel is a fixed window, or a sliding window counter: the tokens
// counted in each window, by its start.
type winModel struct {
	l      spigot.Limit
	counts map[int64]int64
	latest int64 // the latest window counted in: a clock that steps back counts there
	full   int64 // µs; 0: no state
}

func (m *winModel) clone() keyModel {
	c := *m
	c.counts = make(map[int64]int64, len(m.counts))
	for k, v := range m.counts {
		c.counts[k] = v
	}
	return &c
}

func (m *winModel) until() (int64, bool) { return m.full, m.full != 0 }

// count returns the window a request at t counts in, and the count there:
// its own tokens, and for a sliding window the previous window's weighted
// by (window − elapsed) / window, elapsed in whole ms.
func (m *winModel) count(t int64) (int64, *big.Rat) {
	w, off := m.l.Window().Microseconds(), m.l.Offset().Microseconds()
	start := t - ((t-off)%w+w)%w
	if m.full != 0 && m.latest > start {
		start = m.latest
	}
	c := new(big.Rat).SetInt64(m.counts[start])
	if m.l.Kind() == spigot.SlidingWindow {
		e := max(t-start, 0) / 1000 * 1000
		prev := big.NewRat(m.counts[start-w]*(w-e), w)
		c.Add(c, prev)
	}
	return start, c
}

// first returns the first instant from t at which ok holds, for ok that
// stays true once true and holds two windows after t.
func (m *winModel) first(t int64, ok func(int64) bool) int64 {
	lo, hi := t, max(t, m.latest)+3*m.l.Window().Microseconds()
	for lo < hi {
		if mid := lo + (hi-lo)/2; ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func (m *winModel) apply(now time.Time, action spigot.Action, n int64) spigot.Decision {
	if action == spigot.Peek {
		defer func(saved keyModel) { *m = *saved.(*winModel) }(m.clone())
	}
	t, limit := now.UnixMicro(), m.l.Capacity()
	if m.full != 0 && t >= m.full {
		m.full, m.counts = 0, map[int64]int64{}
	}
	for k, v := range m.counts {
		m.counts[k] = min(max(v, 0), limit)
	}
	fits := func(at, k int64) bool {
		_, c := m.count(at)
		return c.Add(c, big.NewRat(k, 1)).Cmp(big.NewRat(limit, 1)) <= 0
	}
	left := func() int64 {
		_, c := m.count(t)
		return max(floor(c.Sub(big.NewRat(limit, 1), c)), 0)
	}
	wait := func(k int64) time.Duration {
		return ceilMs(m.first(t, func(at int64) bool { return fits(at, k) }) - t)
	}
	start, c := m.count(t)
	var d spigot.Decision
	switch action {
	case spigot.Take, spigot.Peek:
		switch {
		case n > limit:
			d.RetryAfter = spigot.Never
		case n == 0 || fits(t, n):
			if action == spigot.Take {
				m.counts[start] += n
				d.N = n
			}
		default:
			d.RetryAfter = wait(n)
		}
	case spigot.TakeUpTo:
		if k := min(n, left()); k > 0 || n == 0 {
			m.counts[start] += k
			d.N = k
		} else {
			d.RetryAfter = wait(1)
		}
	case spigot.Refund: // this window's first
		k := min(n, m.counts[start])
		m.counts[start] -= k
		if m.l.Kind() == spigot.SlidingWindow {
			prev := start - m.l.Window().Microseconds()
			j := min(n-k, m.counts[prev])
			m.counts[prev] -= j
			k += j
		}
		d.N = k
	case spigot.Reset:
		m.full, m.counts = 0, map[int64]int64{}
		return spigot.Decision{N: min(-floor(new(big.Rat).Neg(c)), limit), Remaining: limit}
	}
	m.latest = start
	d.Remaining = left()
	m.full = 0
	if full := m.first(t, func(at int64) bool { _, c := m.count(at); return c.Sign() == 0 }); full > t {
		d.ResetAfter = ceilMs(full - t)
		m.full = full
	}
	return d
}

// logModel is a sliding log: the instant of each token it keeps.
type logModel struct {
	l     spigot.Limit
	log   []int64 // µs, oldest first
	stamp int64   // the latest instant seen, which new tokens take
	full  int64   // µs; 0: no state
}

func (m *logModel) clone() keyModel {
	c := *m
	c.log = append([]int64(nil), m.log...)
	return &c
}

func (m *logModel) until() (int64, bool) { return m.full, m.full != 0 }

func (m *logModel) apply(now time.Time, action spigot.Action, n int64) spigot.Decision {
	if action == spigot.Peek {
		defer func(saved keyModel) { *m = *saved.(*logModel) }(m.clone())
	}
	t, limit, w := now.UnixMicro(), m.l.Capacity(), m.l.Window().Microseconds()
	if m.full != 0 && t >= m.full {
		m.full, m.log = 0, nil
	}
	stamp := t
	if m.full != 0 {
		stamp = max(m.stamp, t)
	}
	// A token counts until it is a window old; the log forgets it then.
	var kept []int64
	for _, x := range m.log {
		if t-x < w {
			kept = append(kept, x)
		}
	}
	m.log = kept
	count := int64(len(m.log))
	// wait returns the time until at most k tokens count: until the
	// (count−k)-th oldest is a window old.
	wait := func(k int64) time.Duration { return ceilMs(m.log[count-k-1] + w - t) }
	add := func(k int64) {
		for range k {
			m.log = append(m.log, stamp)
		}
	}
	var d spigot.Decision
	switch action {
	case spigot.Take, spigot.Peek:
		switch {
		case n > limit:
			d.RetryAfter = spigot.Never
		case n == 0 || count+n <= limit:
			if action == spigot.Take {
				add(n)
				d.N = n
			}
		default:
			d.RetryAfter = wait(limit - n)
		}
	case spigot.TakeUpTo:
		if k := min(n, max(limit-count, 0)); k > 0 || n == 0 {
			add(k)
			d.N = k
		} else {
			d.RetryAfter = wait(limit - 1)
		}
	case spigot.Refund: // the most recent first
		k := min(n, count)
		m.log = m.log[:count-k]
		d.N = k
	case spigot.Reset:
		m.full, m.log = 0, nil
		return spigot.Decision{N: min(count, limit), Remaining: limit}
	}
	count = int64(len(m.log))
	d.Remaining = max(limit-count, 0)
	m.full = 0
	if count > 0 {
		m.full, m.stamp = m.log[count-1]+w, stamp
		d.ResetAfter = ceilMs(m.full - t)
	}
	return d
}

// usedUpModel is a key whose state is of another kind, or of other
// windows, than its window or log: the limit used up until that state's
// FullAt, and without state from then on (next).
type usedUpModel struct {
	capacity, full int64
	next           keyModel
	prev           modelEntry // the key's model when the state was stored
}

func (m *usedUpModel) clone() keyModel {
	c := *m
	c.next = m.next.clone()
	return &c
}

func (m *usedUpModel) until() (int64, bool) {
	if m.full == 0 {
		return m.next.until()
	}
	return m.full, true
}

func (m *usedUpModel) apply(now time.Time, action spigot.Action, n int64) spigot.Decision {
	t := now.UnixMicro()
	if m.full == 0 || t >= m.full {
		if action != spigot.Peek {
			m.full = 0
		}
		return m.next.apply(now, action, n)
	}
	d := spigot.Decision{ResetAfter: ceilMs(m.full - t)}
	switch action {
	case spigot.Take, spigot.Peek, spigot.TakeUpTo:
		switch {
		case n == 0:
		case n > m.capacity && action != spigot.TakeUpTo:
			d.RetryAfter = spigot.Never
		default:
			d.RetryAfter = d.ResetAfter
		}
	case spigot.Reset:
		m.full = 0
		return spigot.Decision{N: m.capacity, Remaining: m.capacity}
	}
	return d
}

// fullAtModel is a key of a token or leaky bucket whose state is of
// another kind: the bucket that is full again at that state's FullAt and
// not sooner, refilling at its rate to be full then, or empty until its
// refill time from empty before then.
type fullAtModel struct {
	l    spigot.Limit
	full int64
	next *model
	prev modelEntry // the key's model when the state was stored
}

func (m *fullAtModel) clone() keyModel {
	c := *m
	c.next = m.next.clone().(*model)
	return &c
}

func (m *fullAtModel) until() (int64, bool) {
	if m.full == 0 {
		return m.next.until()
	}
	return m.full, true
}

func (m *fullAtModel) apply(now time.Time, action spigot.Action, n int64) spigot.Decision {
	t := now.UnixMicro()
	if m.full != 0 && t < m.full {
		// The bucket as it stands now: full at m.full.
		b := m.next.clone().(*model)
		fill := new(big.Rat).Quo(b.capacity, b.refill) // µs from empty to full
		if us := big.NewRat(m.full-t, 1); us.Cmp(fill) <= 0 {
			b.tokens, b.stamp = new(big.Rat).Sub(b.capacity, us.Mul(us, b.refill)), t
		} else {
			b.tokens, b.stamp = new(big.Rat), m.full+floor(new(big.Rat).Neg(fill))
		}
		b.fullAt = m.full
		if action == spigot.Peek {
			return b.apply(now, action, n)
		}
		m.next = b
	}
	if action != spigot.Peek {
		m.full = 0
	}
	return m.next.apply(now, action, n)
}
