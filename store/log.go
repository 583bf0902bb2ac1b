package store

import (
	"slices"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/core"
)

// applyLog is Apply for a sliding log, at t µs since the epoch. The
// package doc says what each action does.
func applyLog(b *core.Config, s *State, action spigot.Action, n, t int64) spigot.Decision {
	w, limit := b.Window, b.Capacity
	var log []int64
	stamp := t
	switch {
	case absent(s, t): // as if never seen
	case s.Kind == spigot.SlidingLog && (len(s.Log) == 0 || s.FullAt-s.Log[len(s.Log)-1] == w): // a log of this window
		stamp = max(s.Stamp, t)
		log = s.Log
		// The tokens older than a window have left it: the entries at or
		// before t−w, the first ones, since the log is in order. (The
		// expired prefix, read one by one: each entry leaves once, and a
		// log out of order, which only a store's value can hold, is read
		// as the script reads it, by its prefix.)
		old := 0
		for old < len(log) && log[old] <= t-w {
			old++
		}
		if old > 0 && action != spigot.Peek {
			log = log[:copy(log, log[old:])]
		} else {
			log = log[old:]
		}
	default: // another kind or window: used up until its FullAt
		return blocked(b, s, action, n, t)
	}
	count := int64(len(log))
	// retry returns the µs from t until k ≤ limit more tokens fit: until
	// the entry that must leave for them has been in the log a window.
	retry := func(k int64) int64 { return log[count+k-limit-1] + w - t }

	var d spigot.Decision
	switch action {
	case spigot.Take, spigot.Peek:
		switch {
		case n > limit:
			d.RetryAfter = spigot.Never
		case n == 0 || count+n <= limit: // a Take of 0 is allowed, even over the limit
			if action == spigot.Take {
				log = appendN(log, stamp, n)
				d.N = n
			}
		default:
			d.RetryAfter = ceilMs(0, retry(n))
		}
	case spigot.TakeUpTo:
		switch k := min(n, max(limit-count, 0)); {
		case k > 0 || n == 0:
			log = appendN(log, stamp, k)
			d.N = k
		default:
			d.RetryAfter = ceilMs(0, retry(1))
		}
	case spigot.Refund:
		k := min(n, count)
		log = log[:count-k]
		d.N = k
	case spigot.Reset:
		*s = State{}
		return spigot.Decision{N: min(count, limit), Remaining: limit, RefillAfter: fresh(b, t)}
	}
	count = int64(len(log))
	d.Remaining = max(limit-count, 0)
	// RefillAfter: with the Remaining tokens taken, the log holds the limit
	// (or more), and one more fits when its oldest entry past the excess
	// leaves; an empty log's oldest is the first taken, at the stamp of
	// the state left behind (none is t).
	if count > 0 {
		d.ResetAfter = ceilMs(0, log[count-1]+w-t)
		d.RefillAfter = ceilMs(0, log[max(count-limit, 0)]+w-t)
	} else if action == spigot.Peek {
		d.RefillAfter = ceilMs(0, stamp+w-t)
	} else {
		d.RefillAfter = ceilMs(0, w)
	}
	if action == spigot.Peek {
		return d
	}
	if count > 0 {
		*s = State{Kind: spigot.SlidingLog, Stamp: stamp, FullAt: log[count-1] + w, Log: log}
	} else {
		*s = State{}
	}
	return d
}

// appendN appends n copies of x to log.
func appendN(log []int64, x, n int64) []int64 {
	log = slices.Grow(log, int(n))
	for range n {
		log = append(log, x)
	}
	return log
}
