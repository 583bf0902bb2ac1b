package store_test

import (
	"math"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// TestAnswer: what an Answer tells of a bucket at fixed instants after
// it, and that, where the answer's durations are whole milliseconds, its
// Held and Credit decide as Apply does on the bucket itself with the held
// tokens refunded to it.
func TestAnswer(t *testing.T) {
	b := spigot.MustBucket("answer", 10, spigot.PerSecond(1))
	var st store.State
	taken, _ := store.Apply(spigot.Op{Limit: b, Key: "k", N: 4}, &st, t0) // 6 left, full again in 4 s
	a := store.Answer{Limit: b, At: t0, Decision: taken}
	for i, c := range []struct {
		at    time.Duration // since t0
		held  int64
		lacks int64
		want  spigot.Decision // of Held(held, 1, t0+at)
	}{
		{0, 0, 4, spigot.Decision{N: 1, Remaining: 6, ResetAfter: 4 * s, RefillAfter: 1 * s}},
		{0, 3, 4, spigot.Decision{N: 1, Remaining: 9, ResetAfter: 1 * s, RefillAfter: 1 * s}},
		{500 * ms, 2, 3, spigot.Decision{N: 1, Remaining: 8, ResetAfter: 1500 * ms, RefillAfter: 500 * ms}},
		{3999 * ms, 0, 0, spigot.Decision{N: 1, Remaining: 9, ResetAfter: 1 * ms, RefillAfter: 1 * ms}},
		{4 * s, 0, 0, spigot.Decision{N: 1, Remaining: 10, RefillAfter: 1 * s}},
		{time.Hour, 0, 0, spigot.Decision{N: 1, Remaining: 10, RefillAfter: 1 * s}},
	} {
		now := t0.Add(c.at)
		if got := a.Lacks(now); got != c.lacks {
			t.Errorf("step %d: Lacks(t0+%v) = %d; want %d", i, c.at, got, c.lacks)
		}
		got := a.Held(c.held, 1, now)
		if got != c.want {
			t.Errorf("step %d: Held(%d, 1, t0+%v) = %+v; want %+v", i, c.held, c.at, got, c.want)
		}
		// The bucket itself, refilled to now, with the held tokens back.
		s := st
		model, _ := store.Apply(spigot.Op{Limit: b, Key: "k", Action: spigot.Refund, N: c.held}, &s, now)
		model.N = 1
		if got != model {
			t.Errorf("step %d: Held(%d, 1, t0+%v) = %+v; Apply of a Refund of %d decides %+v", i, c.held, c.at, got, c.held, model)
		}
	}

	// Credit counts held tokens in a store's own decision.
	s := st
	peek, _ := store.Apply(spigot.Op{Limit: b, Key: "k", Action: spigot.Peek, N: 1}, &s, t0)
	refunded, _ := store.Apply(spigot.Op{Limit: b, Key: "k", Action: spigot.Refund, N: 3}, &s, t0)
	refunded.N = 0
	if got := store.Credit(peek, b, 3); got != refunded {
		t.Errorf("Credit(%+v, 3) = %+v; want %+v, Apply's after a Refund of 3", peek, got, refunded)
	}
	if got := store.Credit(peek, b, 0); got != peek {
		t.Errorf("Credit of 0 changed %+v to %+v", peek, got)
	}

	// An answer that tells nothing.
	var none store.Answer
	none.Limit = b
	if got := none.Lacks(t0); got != math.MaxInt64 {
		t.Errorf("the zero Answer's Lacks = %d; want MaxInt64", got)
	}
	never := store.Answer{Limit: b, At: t0, Decision: spigot.Decision{Remaining: 2, ResetAfter: spigot.Never, RefillAfter: 700 * ms}}
	if got, want := never.Held(1, 1, t0.Add(1200*ms)), (spigot.Decision{N: 1, Remaining: 3, ResetAfter: spigot.Never, RefillAfter: 500 * ms}); got != want {
		t.Errorf("an answer of ResetAfter Never, 1.2 s on: Held = %+v; want %+v (the next token 1 s after the one 700 ms on)", got, want)
	}
}
