package spigot

import (
	"testing"
	"time"
)

// TestApplyFixedWindowHugeLimit: a fixed window of up to MaxExact tokens an
// hour admits and denies by its count alone: limit × window in ms passes
// int64, where the sliding window's weighted comparison would overflow.
func TestApplyFixedWindowHugeLimit(t *testing.T) {
	l := Must(NewFixedWindow("huge", PerHour(MaxExact), 0))
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var s State
	for i, c := range []struct {
		op   Op
		want Decision
	}{
		{Op{Limit: l, Key: "k", N: 1}, Decision{N: 1, Remaining: MaxExact - 1, ResetAfter: (55*time.Minute + 55*time.Second), RefillAfter: (55*time.Minute + 55*time.Second)}},
		{Op{Limit: l, Key: "k", N: MaxExact - 2}, Decision{N: MaxExact - 2, Remaining: 1, ResetAfter: (55*time.Minute + 55*time.Second), RefillAfter: (55*time.Minute + 55*time.Second)}},
		{Op{Limit: l, Key: "k", N: 2}, Decision{Remaining: 1, RetryAfter: (55*time.Minute + 55*time.Second), ResetAfter: (55*time.Minute + 55*time.Second), RefillAfter: (55*time.Minute + 55*time.Second)}},
		{Op{Limit: l, Key: "k", N: 1}, Decision{N: 1, ResetAfter: (55*time.Minute + 55*time.Second), RefillAfter: (55*time.Minute + 55*time.Second)}},
	} {
		got, err := c.op.Apply(&s, t0)
		if err != nil || got != c.want {
			t.Errorf("step %d: %v = %+v, %v; want %+v", i, c.op, got, err, c.want)
		}
	}
}
