package store

import (
	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/core"
)

// applyWindow is Apply for a fixed or sliding window, at t µs since the
// epoch. The package doc says what each action does.
func applyWindow(b *core.Config, s *State, action spigot.Action, n, t int64) spigot.Decision {
	w, limit := b.Window, b.Capacity
	startT := t - mod(t-b.Offset, w) // the window of t
	start, stamp := startT, t
	var cur, prev int64
	switch {
	case absent(s, t): // as if never seen
	case s.Kind == kind(b) && s.Window == w && mod(s.Start-b.Offset, w) == 0:
		stamp = max(s.Stamp, t)
		switch s.Start - start {
		case 0:
			cur, prev = s.Count, s.Prev
		case -w: // the previous window
			prev = s.Count
		default:
			if s.Start > start { // the clock stepped back: still its window
				start, cur, prev = s.Start, s.Count, s.Prev
			}
		}
		cur, prev = min(max(cur, 0), limit), min(max(prev, 0), limit)
		if kind(b) == spigot.FixedWindow {
			prev = 0
		}
	default: // another kind or window: used up until its FullAt
		return blocked(b, s, action, n, t)
	}
	// The weighted count, in tokens × ms: cur×wms + prev×(wms−e) ≤ limit×wms
	// (for a fixed window prev is 0). e is the whole ms since start; the
	// clock may be behind start, and then e is 0.
	wms := w / 1000
	e := min(max(t-start, 0)/1000, wms)
	// used returns the whole tokens the counts stand for: cur, and prev's
	// weight rounded up.
	used := cur + ceilDiv(prev*(wms-e), wms)
	// admits reports whether k more tokens fit now. (With prev at 0, as
	// for every fixed window, free alone decides: a fixed window's limit ×
	// wms may pass int64.)
	admits := func(k int64) bool {
		free := limit - cur - k
		return free >= 0 && (prev == 0 || prev*(wms-e) <= free*wms)
	}
	retry := func(k int64) int64 { return windowRetry(b, start, t, cur, prev, k) }

	var d spigot.Decision
	switch action {
	case spigot.Take, spigot.Peek:
		switch {
		case n > limit:
			d.RetryAfter = spigot.Never
		case n == 0 || admits(n): // a Take of 0 is allowed, even over the limit
			if action == spigot.Take {
				cur += n
				d.N = n
			}
		default:
			d.RetryAfter = ceilMs(0, retry(n))
		}
	case spigot.TakeUpTo:
		switch k := min(n, max(limit-used, 0)); {
		case k > 0 || n == 0:
			cur += k
			d.N = k
		default:
			d.RetryAfter = ceilMs(0, retry(1))
		}
	case spigot.Refund:
		k := min(n, cur)
		cur -= k
		j := min(n-k, prev)
		prev -= j
		d.N = k + j
	case spigot.Reset:
		*s = State{}
		return spigot.Decision{N: min(used, limit), Remaining: limit, RefillAfter: fresh(b, t)}
	}
	d.Remaining = max(limit-cur-ceilDiv(prev*(wms-e), wms), 0)
	full := t // the instant the counts no longer matter: now, when none count
	switch {
	case cur > 0 && kind(b) == spigot.SlidingWindow:
		full = start + 2*w
	case cur > 0 || prev > 0 && e < wms:
		full = start + w
	}
	if full > t {
		d.ResetAfter = ceilMs(0, full-t)
	}
	// RefillAfter: one more token after the Remaining ones, counted in the
	// window of the state left behind (none is the window of t).
	if full <= t && action != spigot.Peek {
		start = startT
	}
	d.RefillAfter = ceilMs(0, windowRetry(b, start, t, cur+d.Remaining, prev, 1))
	if action == spigot.Peek {
		return d
	}
	if full > t {
		if s.Kind != kind(b) || s.Tokens|s.Scale != 0 || s.Log != nil {
			*s = State{}
		}
		s.Kind, s.Stamp, s.FullAt, s.Start, s.Window, s.Count, s.Prev = kind(b), stamp, full, start, w, cur, prev
	} else {
		*s = State{}
	}
	return d
}

// windowRetry returns the µs from t until k ≤ limit more tokens fit in a
// window (of b's kind) that started at start and counts cur, after a
// previous window that counted prev, when they do not fit at t.
func windowRetry(b *core.Config, start, t, cur, prev, k int64) int64 {
	wms := b.Window / 1000
	if free := b.Capacity - cur - k; free >= 0 { // prev's weight falls enough in this window
		return start + (wms-free*wms/prev)*1000 - t
	}
	// In the next window cur is the previous one's; a fixed window starts
	// again.
	if kind(b) == spigot.FixedWindow {
		return start + b.Window - t
	}
	return start + b.Window + (wms-(b.Capacity-k)*wms/cur)*1000 - t
}
