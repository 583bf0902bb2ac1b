package store_test

import (
	"fmt"
	"slices"
	"time"

	"github.com/spigot-go/spigot"
)

// This file holds logRef, the reference model of the sliding log, written
// from the docs of NewSlidingLog, Kind and Apply: the instant of every
// token taken, each counting until it is a window old; new tokens take the
// latest instant seen; waits found by trying every instant at which a token
// stops counting. Its check proves, by brute force over every window,
// that no window of the limit's length ever held more than the limit.

// logRef is the model of one key of a sliding log.
type logRef struct {
	limit, w int64
	log      []int64 // the instants of the tokens the log keeps, oldest first
	stamp    int64   // the latest instant an operation saw, while the log is kept
	full     int64   // the FullAt of the kept log: when its last token was a window old when stored
	kept     bool
	// seen is every token admitted since the log was last forgotten or
	// reset or its config changed, net of refunds, for check; done holds
	// the runs before.
	seen []int64
	done []logRun
}

// logRun is a run of tokens admitted under one config.
type logRun struct {
	limit, w int64
	tokens   []int64
}

func newLogRef(l spigot.Limit) *logRef {
	return &logRef{limit: l.Capacity(), w: l.Window().Microseconds()}
}

// count returns the tokens that count at t: those less than a window old.
func (m *logRef) count(t int64) int64 {
	var c int64
	for _, x := range m.log {
		if t-x < m.w {
			c++
		}
	}
	return c
}

// until returns the first instant from t on at which at most k tokens
// count: t itself, or the instant some token becomes a window old.
func (m *logRef) until(t, k int64) int64 {
	if m.count(t) <= k {
		return t
	}
	for _, x := range m.log {
		if at := x + m.w; at > t && m.count(at) <= k {
			return at
		}
	}
	panic("unreachable: no token counts a window after the last")
}

func (m *logRef) apply(now int64, act spigot.Action, n int64) spigot.Decision {
	if act == spigot.Peek {
		saved := *m
		saved.log, saved.seen = append([]int64(nil), m.log...), append([]int64(nil), m.seen...)
		defer func() { *m = saved }()
	}
	if m.kept && now >= m.fullAt() { // nothing counts any more
		m.forget()
	}
	stamp := now
	if m.kept {
		stamp = max(m.stamp, now)
	}
	// The log keeps the tokens of the last window: those a window old at
	// now are gone, even if the clock later steps back.
	var keep []int64
	for _, x := range m.log {
		if now-x < m.w {
			keep = append(keep, x)
		}
	}
	m.log = keep
	count := int64(len(m.log))
	add := func(k int64) {
		for range k {
			m.log = append(m.log, stamp)
			m.seen = append(m.seen, stamp)
		}
	}
	var d spigot.Decision
	switch act {
	case spigot.Take, spigot.Peek:
		switch {
		case n > m.limit:
			d.RetryAfter = spigot.Never
		case n == 0 || count+n <= m.limit:
			if act == spigot.Take {
				add(n)
				d.N = n
			}
		default:
			d.RetryAfter = refMs(m.until(now, m.limit-n) - now)
		}
	case spigot.TakeUpTo:
		switch k := min(n, max(m.limit-count, 0)); {
		case k > 0 || n == 0:
			add(k)
			d.N = k
		default:
			d.RetryAfter = refMs(m.until(now, m.limit-1) - now)
		}
	case spigot.Refund: // the most recent first
		k := min(n, count)
		m.log = m.log[:count-k]
		m.seen = m.seen[:max(int64(len(m.seen))-k, 0)]
		d.N = k
	case spigot.Reset:
		m.forget()
		return spigot.Decision{N: min(count, m.limit), Remaining: m.limit}
	}
	count = int64(len(m.log))
	d.Remaining = max(m.limit-count, 0)
	if full := m.until(now, 0); full > now {
		d.ResetAfter = refMs(full - now)
		m.kept, m.stamp, m.full = true, stamp, full
	} else {
		m.forget()
	}
	return d
}

// forget forgets the log, and starts a new run for check.
func (m *logRef) forget() {
	m.endRun()
	m.log, m.kept, m.stamp, m.full = nil, false, 0, 0
}

// endRun ends the run of tokens that check checks as one.
func (m *logRef) endRun() {
	if len(m.seen) > 0 {
		m.done = append(m.done, logRun{m.limit, m.w, m.seen})
	}
	m.seen = nil
}

func (m *logRef) fullAt() int64 {
	return m.full
}

// reconfigure makes m the model of l: a log carries over to a sliding log
// of the same window, whatever its limit.
func (m *logRef) reconfigure(l spigot.Limit) bool {
	if l.Kind() != spigot.SlidingLog || l.Window().Microseconds() != m.w {
		return false
	}
	m.endRun() // the bound holds under one config
	m.limit, m.w = l.Capacity(), l.Window().Microseconds()
	return true
}

// check checks, by brute force, that no window of the log's length held
// more than the limit: in every run of admitted tokens (net of refunds),
// every window [x, x+w) that starts at one of them.
func (m *logRef) check() error {
	for _, run := range append(m.done, logRun{m.limit, m.w, m.seen}) {
		toks := slices.Clone(run.tokens)
		slices.Sort(toks)
		j := 0 // toks[i:j] are the tokens in [toks[i], toks[i]+w)
		for i, x := range toks {
			for j < len(toks) && toks[j]-x < run.w {
				j++
			}
			if c := int64(j - i); c > run.limit {
				return fmt.Errorf("%d tokens in the window of %v from t%+dµs, more than the limit %d",
					c, time.Duration(run.w)*time.Microsecond, x-refStart, run.limit)
			}
		}
	}
	return nil
}
