package lease_test

// Counting admissions by aligned window when only an interval of each is
// known: the wall-clock instants just before and just after its call.

import (
	"cmp"
	"container/heap"
	"slices"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
)

// A span is the aligned windows, by index, in which an admission may have
// been decided: from first to last. The server runs on this machine, so
// its TIME and time.Now read the same clock, and an admission whose call
// began at a and returned at b was decided in a window that holds an
// instant of [a, b].
type span struct{ first, last int64 }

// spanOf returns the span of a call that began at a and returned at b, in
// µs since the epoch, among the windows of l (laid end to end from its
// Offset).
func spanOf(l spigot.Limit, a, b int64) span {
	return span{windowOf(l, a), windowOf(l, b)}
}

// windowOf returns the index of l's window that holds the instant us (µs
// since the epoch): windows start at l.Offset() past a multiple of
// l.Window().
func windowOf(l spigot.Limit, us int64) int64 {
	w, off := l.Window().Microseconds(), l.Offset().Microseconds()
	i := (us - off) / w
	if (us-off)%w < 0 {
		i-- // floor, for an instant before the epoch's first window
	}
	return i
}

// windowStart returns the instant (µs since the epoch) at which l's window
// i starts.
func windowStart(l spigot.Limit, i int64) time.Time {
	return time.UnixMicro(i*l.Window().Microseconds() + l.Offset().Microseconds()).UTC()
}

// fit reports whether every admission can be put in one window of its
// span so that no window holds more than limit; if not, it returns the
// first window that cannot hold the admissions that must be in it by
// then. It puts, window by window from the earliest, the admissions whose
// span ends first (earliest deadline first, which is exact for unit jobs
// with release times and deadlines): fit fails only when no assignment
// exists, that is on a provable violation.
func fit(spans []span, limit int64) (ok bool, window int64) {
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b span) int { return cmp.Compare(a.first, b.first) })
	var open lasts // the spans started and not yet put, by their last window
	for i := 0; i < len(s) || open.Len() > 0; {
		w := s[min(i, len(s)-1)].first
		if open.Len() > 0 {
			w = open.w
		}
		for ; i < len(s) && s[i].first <= w; i++ {
			heap.Push(&open, s[i].last)
		}
		for n := int64(0); n < limit && open.Len() > 0; n++ {
			heap.Pop(&open)
		}
		if open.Len() > 0 && open.ints[0] <= w {
			return false, w
		}
		open.w = w + 1
	}
	return true, 0
}

// lasts is a min-heap of windows' indices, and the window fit is at.
type lasts struct {
	ints []int64
	w    int64
}

func (h *lasts) Len() int           { return len(h.ints) }
func (h *lasts) Less(i, j int) bool { return h.ints[i] < h.ints[j] }
func (h *lasts) Swap(i, j int)      { h.ints[i], h.ints[j] = h.ints[j], h.ints[i] }
func (h *lasts) Push(x any)         { h.ints = append(h.ints, x.(int64)) }
func (h *lasts) Pop() any {
	x := h.ints[len(h.ints)-1]
	h.ints = h.ints[:len(h.ints)-1]
	return x
}

// windowCounts returns, for the windows the spans touch, how many
// admissions lie inside each (first == last), the most of them in one
// window, and how many straddle a boundary.
func windowCounts(spans []span) (inside map[int64]int64, most, straddlers int64) {
	inside = make(map[int64]int64)
	for _, s := range spans {
		if s.first != s.last {
			straddlers++
			continue
		}
		inside[s.first]++
		most = max(most, inside[s.first])
	}
	return inside, most, straddlers
}

// TestFit: fit finds an assignment of the straddlers whenever one exists,
// and fails at the first window that cannot hold what must be in it.
func TestFit(t *testing.T) {
	for i, c := range []struct {
		spans  []span
		limit  int64
		ok     bool
		window int64
	}{
		{nil, 1, true, 0},
		{[]span{{0, 0}, {0, 0}, {0, 0}}, 3, true, 0},
		{[]span{{0, 0}, {0, 0}, {0, 0}}, 2, false, 0},
		{[]span{{5, 5}, {7, 7}, {7, 7}}, 1, false, 7},
		// A straddler goes to the later window when the earlier is full.
		{[]span{{0, 0}, {0, 0}, {0, 1}}, 2, true, 0},
		{[]span{{0, 0}, {0, 0}, {0, 1}, {1, 1}}, 2, true, 0},
		{[]span{{0, 0}, {0, 0}, {0, 1}, {1, 1}, {1, 1}}, 2, false, 1},
		// The straddler listed first must not take the place of one that
		// can only be in the earlier window.
		{[]span{{0, 1}, {0, 0}}, 1, true, 0},
		{[]span{{0, 1}, {1, 2}, {1, 1}, {2, 2}}, 1, false, 2},
		{[]span{{0, 1}, {1, 2}, {1, 1}}, 1, true, 0},
		// A call longer than a window may be in any window it touches.
		{[]span{{0, 3}, {0, 0}, {1, 1}, {2, 2}, {3, 3}}, 1, false, 3},
		{[]span{{0, 4}, {0, 0}, {1, 1}, {2, 2}, {3, 3}}, 1, true, 0},
		{[]span{{-2, -1}, {-2, -2}}, 1, true, 0},
	} {
		ok, w := fit(c.spans, c.limit)
		if ok != c.ok || !ok && w != c.window {
			t.Errorf("step %d: fit(%v, %d) = %v, window %d; want %v, window %d", i, c.spans, c.limit, ok, w, c.ok, c.window)
		}
	}
	l := spigot.Must(spigot.NewFixedWindow("w", spigot.Per(1, 200*time.Millisecond), 30*time.Millisecond))
	for i, c := range []struct {
		us     int64
		window int64
	}{
		{30_000, 0}, {229_999, 0}, {230_000, 1}, {29_999, -1}, {-170_000, -1}, {-170_001, -2},
	} {
		if got := windowOf(l, c.us); got != c.window {
			t.Errorf("step %d: windowOf(%v, %d µs) = %d; want %d", i, l, c.us, got, c.window)
		}
	}
}
