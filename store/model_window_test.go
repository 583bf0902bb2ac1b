package store_test

import (
	"math"
	"math/big"
	"time"

	"github.com/spigot-go/spigot"
)

// This file holds winRef, the reference model of the fixed window and the
// sliding window counter, written from the docs of NewFixedWindow,
// NewSlidingWindow, Kind and Apply: a count of tokens per fixed window
// (windows at whole multiples of the window since the epoch, plus the
// offset), and a count at any instant that is the window's own, plus, for
// a sliding window, the previous window's weighted by (window − elapsed) /
// window with elapsed in whole milliseconds, as an exact rational. Every
// wait is found by searching for the first instant at which the count
// allows the request (the count never grows with time), not by a formula.

// winRef is the model of one key of a fixed or sliding window.
type winRef struct {
	kind   spigot.Kind
	limit  int64
	w, off int64 // µs
	// counts holds the tokens counted in each window, by the window's
	// start; empty when the model remembers nothing.
	counts map[int64]int64
	latest int64 // the latest window an operation counted in
	full   int64 // from when nothing counts: 0 when nothing is remembered
}

func newWinRef(l spigot.Limit) *winRef {
	return &winRef{kind: l.Kind(), limit: l.Capacity(), w: l.Window().Microseconds(), off: l.Offset().Microseconds(), counts: map[int64]int64{}}
}

// window returns the start of the window of t: the last instant at or
// before t that is a whole number of windows after the epoch plus the
// offset.
func (m *winRef) window(t int64) int64 {
	q := new(big.Int).Div(big.NewInt(t-m.off), big.NewInt(m.w)) // Euclidean: ⌊(t−off)/w⌋ for w > 0
	return q.Int64()*m.w + m.off
}

// at returns the window a request at t counts in (the window of t, or the
// latest one counted in when the clock stepped back), and the count there
// as an exact rational.
func (m *winRef) at(t int64) (start int64, count *big.Rat) {
	start = m.window(t)
	if len(m.counts) > 0 && m.latest > start {
		start = m.latest
	}
	count = refInt(m.counts[start])
	if m.kind == spigot.SlidingWindow {
		wms := m.w / 1000
		e := max(t-start, 0) / 1000 // whole ms elapsed
		weight := big.NewRat(wms-e, wms)
		count.Add(count, new(big.Rat).Mul(refInt(m.counts[start-m.w]), weight))
	}
	return start, count
}

// fits reports whether k more tokens fit at t.
func (m *winRef) fits(t, k int64) bool {
	_, c := m.at(t)
	return c.Add(c, refInt(k)).Cmp(refInt(m.limit)) <= 0
}

// first returns the first instant in [lo, hi] at which ok holds, for ok
// false then true over the interval and true at hi.
func first(lo, hi int64, ok func(int64) bool) int64 {
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// horizon is an instant by which every count the model holds at t no
// longer counts.
func (m *winRef) horizon(t int64) int64 {
	start, _ := m.at(t)
	return start + 2*m.w
}

// retry returns the wait until k more tokens fit, rounded up to the ms.
func (m *winRef) retry(t, k int64) time.Duration {
	return refMs(first(t, m.horizon(t), func(at int64) bool { return m.fits(at, k) }) - t)
}

// refMs returns us rounded up to the millisecond, or Never past what a
// Duration holds.
func refMs(us int64) time.Duration {
	ms := refCeil(big.NewRat(us, 1000))
	if ms.Cmp(big.NewInt(math.MaxInt64/int64(time.Millisecond))) > 0 {
		return spigot.Never
	}
	return time.Duration(ms.Int64()) * time.Millisecond
}

// remaining returns the whole tokens a Take could have at t.
func (m *winRef) remaining(t int64) int64 {
	_, c := m.at(t)
	return max(refFloor(c.Sub(refInt(m.limit), c)).Int64(), 0)
}

func (m *winRef) apply(now int64, act spigot.Action, n int64) spigot.Decision {
	if act == spigot.Peek {
		saved, counts := *m, m.counts
		m.counts = make(map[int64]int64, len(counts))
		for k, v := range counts {
			m.counts[k] = v
		}
		defer func() { *m = saved; m.counts = counts }()
	}
	if m.full != 0 && now >= m.full { // nothing counts any more
		clear(m.counts)
	}
	for k, v := range m.counts { // counts the limit cannot hold
		m.counts[k] = min(max(v, 0), m.limit)
	}
	start, count := m.at(now)
	var d spigot.Decision
	switch act {
	case spigot.Take, spigot.Peek:
		switch {
		case n > m.limit:
			d.RetryAfter = spigot.Never
		case n == 0 || m.fits(now, n):
			if act == spigot.Take {
				m.counts[start] += n
				d.N = n
			}
		default:
			d.RetryAfter = m.retry(now, n)
		}
	case spigot.TakeUpTo:
		switch k := min(n, m.remaining(now)); {
		case k > 0 || n == 0:
			m.counts[start] += k
			d.N = k
		default:
			d.RetryAfter = m.retry(now, 1)
		}
	case spigot.Refund: // this window's first, then the previous one's
		k := min(n, m.counts[start])
		m.counts[start] -= k
		if m.kind == spigot.SlidingWindow {
			j := min(n-k, m.counts[start-m.w])
			m.counts[start-m.w] -= j
			k += j
		}
		d.N = k
	case spigot.Reset:
		d.N = min(refCeil(count).Int64(), m.limit)
		d.Remaining = m.limit
		clear(m.counts)
		m.full = 0
		return d
	}
	m.latest = start
	for k := range m.counts { // older windows no longer count
		if k < start-m.w {
			delete(m.counts, k)
		}
	}
	d.Remaining = m.remaining(now)
	full := first(now, m.horizon(now), func(at int64) bool { _, c := m.at(at); return c.Sign() == 0 })
	if full > now {
		d.ResetAfter = refMs(full - now)
		m.full = full
	} else {
		clear(m.counts)
		m.full = 0
	}
	return d
}

func (m *winRef) fullAt() int64 { return m.full }

// reconfigure makes m the model of l, and reports whether its counts carry
// over: a window of the same kind, length and offset (whatever its limit).
func (m *winRef) reconfigure(l spigot.Limit) bool {
	if l.Kind() != m.kind || l.Window().Microseconds() != m.w || l.Offset().Microseconds() != m.off {
		return false
	}
	m.limit = l.Capacity()
	return true
}

func (m *winRef) check() error { return nil }
