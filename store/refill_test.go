package store_test

import (
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// TestRefillAfter pins Decision.RefillAfter, on every kind and action, to
// values worked out by hand at fixed instants from tDay: the time, once
// the Remaining tokens are taken, until one more would be admitted. Each
// step also checks Remaining and RetryAfter, and that RefillAfter is the
// RetryAfter of a Take of one after a Take of Remaining on a copy of the
// state the step left (refillAfter).
func TestRefillAfter(t *testing.T) {
	bucket := spigot.MustBucket("bucket", 3, spigot.Per(1, 2*s)) // a token every 2 s
	none := spigot.MustBucket("none", 0, spigot.PerSecond(1))
	leaky := spigot.Must(spigot.NewLeakyBucket("leaky", 2, spigot.PerSecond(1)))
	fixed := spigot.Must(spigot.NewFixedWindow("fixed", spigot.PerSecond(10), 0))
	sliding := spigot.Must(spigot.NewSlidingWindow("sliding", spigot.PerSecond(10)))
	log := spigot.Must(spigot.NewSlidingLog("log", spigot.Per(3, 10*s)))
	// other stores a token bucket's state, which a fixed window of its
	// name reads as used up until the bucket's FullAt.
	other := spigot.MustBucket("other", 5, spigot.PerSecond(1))
	otherFixed := spigot.Must(spigot.NewFixedWindow("other", spigot.PerMinute(10), 0))
	const (
		take   = spigot.Take
		upTo   = spigot.TakeUpTo
		refund = spigot.Refund
		reset  = spigot.Reset
		peek   = spigot.Peek
	)
	never := spigot.Never
	steps := []struct {
		at        time.Duration
		l         spigot.Limit
		act       spigot.Action
		n         int64
		remaining int64
		retry     time.Duration
		refill    time.Duration
	}{
		// A token bucket: a full one's is one token's interval, 2 s.
		{0, bucket, take, 0, 3, 0, 2 * s},
		{0, bucket, peek, 4, 3, never, 2 * s},
		{0, bucket, take, 3, 0, 0, 2 * s}, // empty: the next token
		// +500ms: a quarter token; a denial of one waits for the rest, and
		// so does the next token.
		{500 * ms, bucket, take, 1, 0, 1500 * ms, 1500 * ms},
		{500 * ms, bucket, peek, 2, 0, 3500 * ms, 1500 * ms},
		// +2.5s: 1.25 tokens; TakeUpTo takes the whole one, and the quarter
		// left still needs 1.5 s.
		{2500 * ms, bucket, upTo, 5, 0, 0, 1500 * ms},
		{2500 * ms, bucket, refund, 2, 2, 0, 1500 * ms}, // 2.25: 2, and a quarter
		{2500 * ms, bucket, reset, 0, 3, 0, 2 * s},      // no state: as a full bucket
		{10 * s, bucket, take, 3, 0, 0, 2 * s},
		// +9s: the clock stepped back 1 s behind the stamp: the lag counts.
		{9 * s, bucket, take, 0, 0, 0, 3 * s},
		{9 * s, bucket, take, 1, 0, 3 * s, 3 * s},
		// A capacity of 0 never admits a token.
		{0, none, take, 0, 0, 0, never},
		{0, none, reset, 0, 0, 0, never},

		// A leaky bucket: the next place in the queue.
		{0, leaky, take, 1, 1, 0, 1 * s},
		{0, leaky, take, 1, 0, 0, 1 * s},
		{250 * ms, leaky, take, 1, 0, 750 * ms, 750 * ms},
		{250 * ms, leaky, refund, 1, 1, 0, 750 * ms}, // 1.25 places: one, and the rest
		{250 * ms, leaky, reset, 0, 2, 0, 1 * s},

		// A fixed window of 10 a second: the next window, whatever the count.
		{300 * ms, fixed, take, 0, 10, 0, 700 * ms}, // a count of 0, nothing kept
		{300 * ms, fixed, take, 4, 6, 0, 700 * ms},
		{400 * ms, fixed, take, 7, 6, 600 * ms, 600 * ms},
		{400 * ms, fixed, refund, 2, 8, 0, 600 * ms},
		{400 * ms, fixed, reset, 0, 10, 0, 600 * ms},
		{900 * ms, fixed, peek, 1, 10, 0, 100 * ms},
		{1 * s, fixed, take, 10, 0, 0, 1 * s},

		// A sliding window of 10 a second. 8 taken in [0, 1s): with the 2
		// left taken, one more fits once 10 × (1000 − e)/1000 ≤ 9 in the
		// next window, at e = 100 ms.
		{0, sliding, take, 8, 2, 0, 1100 * ms},
		// +1.3s: the previous window weighs 8 × 0.7 = 5.6, 4 fit; with them
		// taken, one more once 4 + 8 × (1000 − e)/1000 ≤ 9, at e = 375 ms.
		{1300 * ms, sliding, take, 0, 4, 0, 75 * ms},
		{1300 * ms, sliding, take, 4, 0, 0, 75 * ms},
		{1300 * ms, sliding, take, 1, 0, 75 * ms, 75 * ms}, // a denial of one: its RetryAfter
		{1300 * ms, sliding, peek, 1, 0, 75 * ms, 75 * ms},
		// +1.4s: 4 + 8 × 0.6 = 8.8 counted, 1 fits; with it taken, one more
		// once 5 + 8 × (1000 − e)/1000 ≤ 9, at e = 500 ms.
		{1400 * ms, sliding, peek, 0, 1, 0, 100 * ms},
		// A Refund of 5: this window's 4, then one of the previous: 7 ×
		// 0.6 = 4.2 counted, 5 fit; with them taken, one more once 5 + 7 ×
		// (1000 − e)/1000 ≤ 9, at e = 428.57…, in whole ms 429.
		{1400 * ms, sliding, refund, 5, 5, 0, 29 * ms},
		{1400 * ms, sliding, reset, 0, 10, 0, 700 * ms}, // the limit taken at 1.4s: one more at 2.1s

		// A sliding log of 3 in 10 s: an empty log's is the window.
		{0, log, take, 0, 3, 0, 10 * s},
		{0, log, take, 1, 2, 0, 10 * s},
		{4 * s, log, take, 1, 1, 0, 6 * s}, // the oldest, at 0, leaves at 10s
		// +11s: the first token has left (a log partly expired): the one
		// at 4s is the oldest.
		{11 * s, log, peek, 0, 2, 0, 3 * s},
		{11 * s, log, take, 2, 0, 0, 3 * s},
		{11 * s, log, take, 1, 0, 3 * s, 3 * s},
		{11 * s, log, refund, 1, 1, 0, 3 * s},
		{11 * s, log, reset, 0, 3, 0, 10 * s},
		{12 * s, log, peek, 1, 3, 0, 10 * s},

		// A state of another kind: used up until its FullAt, t0+5s.
		{0, other, take, 5, 0, 0, 1 * s},
		{2 * s, otherFixed, take, 1, 0, 3 * s, 3 * s},
		{2 * s, otherFixed, peek, 0, 0, 0, 3 * s},
		{2 * s, otherFixed, reset, 0, 10, 0, 58 * s}, // forgotten: the minute's window ends at +60s
	}
	states := map[string]store.State{}
	for i, st := range steps {
		now := tDay.Add(st.at)
		op := spigot.Op{Limit: st.l, Key: "k", Action: st.act, N: st.n}
		next, got := applyCopy(op, states[st.l.Name()], now)
		if got.Remaining != st.remaining || got.RetryAfter != st.retry || got.RefillAfter != st.refill {
			t.Errorf("step %d: %v %v %d at +%v: got %+v; want Remaining %d, RetryAfter %v, RefillAfter %v",
				i, st.l, st.act, st.n, st.at, got, st.remaining, st.retry, st.refill)
		}
		if def := refillAfter(st.l, next, now, got.Remaining); got.RefillAfter != def {
			t.Errorf("step %d: %v %v %d at +%v: RefillAfter %v, but a Take of %d then one more waits %v",
				i, st.l, st.act, st.n, st.at, got.RefillAfter, got.Remaining, def)
		}
		states[st.l.Name()] = next
	}
}

// TestRefillAfterDegraded: a decision that does not come from the key's
// state has no RefillAfter, and Combine gives the deciding limit's.
func TestRefillAfterDegraded(t *testing.T) {
	if d := spigot.Undecided(); d.RefillAfter != 0 {
		t.Errorf("Undecided().RefillAfter = %v, want 0", d.RefillAfter)
	}
	for i, c := range []struct {
		each []spigot.Decision
		want time.Duration
	}{
		// Allowed: the fewest remaining decide.
		{[]spigot.Decision{{Remaining: 5, RefillAfter: 1 * s}, {Remaining: 2, RefillAfter: 3 * s}}, 3 * s},
		// Denied: the longest RetryAfter decides, not the longest RefillAfter.
		{[]spigot.Decision{{RetryAfter: 2 * s, RefillAfter: 2 * s}, {Remaining: 4, RefillAfter: 9 * s}, {RetryAfter: 5 * s, RefillAfter: 5 * s}}, 5 * s},
		// Degraded decides when allowed: Remaining -1 is the fewest.
		{[]spigot.Decision{{Remaining: 5, RefillAfter: 1 * s}, {Remaining: -1}}, 0},
	} {
		if got, by := spigot.Combine(c.each); got.RefillAfter != c.want || got.RefillAfter != c.each[by].RefillAfter {
			t.Errorf("step %d: Combine(%+v) = %+v by %d; want RefillAfter %v, the deciding limit's", i, c.each, got, by, c.want)
		}
	}
}

// TestRefillAfterEmptyLogAhead: a sliding log's state without entries,
// stamped ahead of the clock (a store's value; Apply never writes one),
// keeps its stamp through a Peek, where the first token taken would go,
// and is forgotten by any other action.
func TestRefillAfterEmptyLogAhead(t *testing.T) {
	l := spigot.Must(spigot.NewSlidingLog("log", spigot.Per(3, 10*s)))
	T := tDay.UnixMicro()
	ahead := store.State{Kind: spigot.SlidingLog, Stamp: T + 2e6, FullAt: T + 5e6}
	for i, c := range []struct {
		act  spigot.Action
		want time.Duration
	}{
		{spigot.Peek, 12 * s}, // taken at the stamp, 2 s ahead: a window after it
		{spigot.Take, 10 * s}, // a Take of 0 leaves no state: taken now
		{spigot.Refund, 10 * s},
	} {
		op := spigot.Op{Limit: l, Key: "k", Action: c.act}
		next, got := applyCopy(op, ahead, tDay)
		if got.Remaining != 3 || got.RefillAfter != c.want || got.RefillAfter != refillAfter(l, next, tDay, 3) {
			t.Errorf("step %d: %v 0 = %+v; want Remaining 3, RefillAfter %v, the definition's %v", i, c.act, got, c.want, refillAfter(l, next, tDay, 3))
		}
	}
}
