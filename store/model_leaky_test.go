package store_test

import (
	"fmt"
	"math/big"
	"time"

	"github.com/spigot-go/spigot"
)

// This file holds leakyRef, the reference model of the leaky bucket as a
// queue, written from the docs of NewLeakyBucket, Kind and Decision.Delay in
// exact rationals: requests leave one emission interval (Rate.Period /
// Rate.Tokens) per place apart, each admitted request's departure is the
// previous one's plus the places that one took times the interval, and
// never before now; a request waits (Delay) until its departure; one that
// would find more than Capacity − N places taken (the requests queued,
// counting the one leaving now, by the latest instant seen) is denied.

// leakyRef is the model of one key of a leaky bucket.
type leakyRef struct {
	size     int64
	interval *big.Rat // µs between two departures of one place each
	// next is when the next admitted request may leave: the queue is empty
	// from then on. It is meaningful while kept.
	next  *big.Rat
	stamp int64 // the latest instant seen, while kept
	full  int64 // when the state stops mattering, while kept
	kept  bool
	// deps are the departures (instant, places) of the requests admitted
	// since the last Refund, Reset or step back of the clock, for check.
	deps []leakyDep
	err  error
}

type leakyDep struct {
	at     int64 // now + Delay, µs
	places int64
}

func newLeakyRef(l spigot.Limit) *leakyRef {
	r := l.Rate()
	return &leakyRef{size: l.Capacity(), interval: big.NewRat(int64(r.Period/time.Microsecond), r.Tokens)}
}

// queued returns the places taken in the queue at instant t: the time
// until the queue is empty, in intervals.
func (m *leakyRef) queued(t int64) *big.Rat {
	q := new(big.Rat).Sub(m.next, refInt(t))
	if q.Sign() < 0 {
		return new(big.Rat)
	}
	return q.Quo(q, m.interval)
}

// wait returns the time from now until the queue, as seen from the latest
// instant, has k free places, rounded up to the ms.
func (m *leakyRef) wait(now, k int64) time.Duration {
	// The queue has k free places once next − t ≤ (size − k) × interval.
	at := new(big.Rat).Sub(m.next, new(big.Rat).Mul(refInt(m.size-k), m.interval))
	us := at.Sub(at, refInt(now))
	return refMs(refCeil(us).Int64())
}

// delay returns the Delay of a request admitted at now: until its
// departure, the next one, to the µs above.
func (m *leakyRef) delay(now int64) time.Duration {
	us := new(big.Rat).Sub(m.next, refInt(now))
	return time.Duration(refCeil(us).Int64()) * time.Microsecond
}

func (m *leakyRef) apply(now int64, act spigot.Action, n int64) spigot.Decision {
	if act == spigot.Peek {
		saved := *m
		defer func() { *m = saved }()
	}
	if m.kept && now >= m.full {
		m.kept = false
	}
	if !m.kept { // no state: a clock that stepped back starts again
		m.next, m.stamp, m.deps = refInt(now), now, m.deps[:0]
	}
	if now < m.stamp {
		m.deps = m.deps[:0] // departures are spaced from the latest instant
	}
	m.stamp = max(m.stamp, now)
	if m.next.Cmp(refInt(m.stamp)) < 0 { // never before the latest instant
		m.next = refInt(m.stamp)
	}
	queued := m.queued(m.stamp)
	free := new(big.Rat).Sub(refInt(m.size), queued)
	admit := func(k int64) spigot.Decision {
		d := spigot.Decision{N: k, Delay: m.delay(now)}
		if act == spigot.Peek {
			d.N = 0
			return d
		}
		if k > 0 {
			m.depart(now+d.Delay.Microseconds(), k)
		}
		m.next = new(big.Rat).Add(m.next, new(big.Rat).Mul(refInt(k), m.interval))
		return d
	}
	var d spigot.Decision
	switch act {
	case spigot.Take, spigot.Peek:
		switch {
		case n > m.size:
			d.RetryAfter = spigot.Never
		case free.Cmp(refInt(n)) >= 0:
			d = admit(n)
		default:
			d.RetryAfter = m.wait(now, n)
		}
	case spigot.TakeUpTo:
		switch k := min(n, refFloor(free).Int64()); {
		case k > 0 || n == 0:
			d = admit(k)
		case m.size == 0:
			d.RetryAfter = spigot.Never
		default:
			d.RetryAfter = m.wait(now, 1)
		}
	case spigot.Refund: // frees up to n places
		back := refMin(refInt(n), queued)
		m.next = new(big.Rat).Sub(m.next, new(big.Rat).Mul(back, m.interval))
		d.N = refCeil(back).Int64()
		m.deps = m.deps[:0]
	case spigot.Reset:
		m.kept, m.deps = false, m.deps[:0]
		return spigot.Decision{N: refCeil(queued).Int64(), Remaining: m.size}
	}
	d.Remaining = refFloor(new(big.Rat).Sub(refInt(m.size), m.queued(m.stamp))).Int64()
	if m.next.Cmp(refInt(m.stamp)) > 0 {
		d.ResetAfter = refMs(refCeil(new(big.Rat).Sub(m.next, refInt(now))).Int64())
	}
	m.full = max(now+d.ResetAfter.Microseconds(), m.stamp)
	m.kept = m.full > now
	return d
}

// depart records a departure, and checks that it leaves at least the
// places of the one before it times the interval after it (less the µs
// that rounding the Delays up may take).
func (m *leakyRef) depart(at, places int64) {
	if k := len(m.deps); k > 0 && m.err == nil {
		prev := m.deps[k-1]
		gap := new(big.Rat).Mul(refInt(prev.places), m.interval)
		if refInt(at-prev.at+1).Cmp(gap) < 0 {
			m.err = fmt.Errorf("a request of %d left at t%+dµs, %dµs after the one before it, of %d; want at least %v µs",
				places, at-refStart, at-prev.at, prev.places, gap)
		}
	}
	m.deps = append(m.deps, leakyDep{at, places})
}

func (m *leakyRef) fullAt() int64 {
	if !m.kept {
		return 0
	}
	return m.full
}

// reconfigure makes m the model of l: a leaky bucket's queue carries over
// to another leaky bucket as a token bucket's tokens do (its free places
// at the latest instant seen, whole ones only when the scale, the refill's
// denominator, changes, clamped to the new size).
func (m *leakyRef) reconfigure(l spigot.Limit) bool {
	if l.Kind() != spigot.LeakyBucket {
		return false
	}
	r := l.Rate()
	interval := big.NewRat(int64(r.Period/time.Microsecond), r.Tokens)
	if m.kept {
		free := new(big.Rat).Sub(refInt(m.size), m.queued(m.stamp))
		if new(big.Rat).Inv(interval).Denom().Cmp(new(big.Rat).Inv(m.interval).Denom()) != 0 {
			free = new(big.Rat).SetInt(refFloor(free))
		}
		free = refMin(free, refInt(l.Capacity()))
		if free.Sign() < 0 {
			free = new(big.Rat)
		}
		taken := new(big.Rat).Sub(refInt(l.Capacity()), free)
		m.next = new(big.Rat).Add(refInt(m.stamp), taken.Mul(taken, interval))
		m.deps = m.deps[:0]
	}
	m.size, m.interval = l.Capacity(), interval
	return true
}

func (m *leakyRef) check() error { return m.err }
