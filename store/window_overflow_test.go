package store_test

import (
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// TestApplyFixedWindowHugeLimit: a fixed window of up to MaxExact tokens an
// hour admits and denies by its count alone: limit × window in ms passes
// int64, where the sliding window's weighted comparison would overflow.
func TestApplyFixedWindowHugeLimit(t *testing.T) {
	l := spigot.Must(spigot.NewFixedWindow("huge", spigot.PerHour(store.MaxExact), 0))
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	const left = 55*time.Minute + 55*time.Second
	var s store.State
	for i, c := range []struct {
		op   spigot.Op
		want spigot.Decision
	}{
		{spigot.Op{Limit: l, Key: "k", N: 1}, spigot.Decision{N: 1, Remaining: store.MaxExact - 1, ResetAfter: left, RefillAfter: left}},
		{spigot.Op{Limit: l, Key: "k", N: store.MaxExact - 2}, spigot.Decision{N: store.MaxExact - 2, Remaining: 1, ResetAfter: left, RefillAfter: left}},
		{spigot.Op{Limit: l, Key: "k", N: 2}, spigot.Decision{Remaining: 1, RetryAfter: left, ResetAfter: left, RefillAfter: left}},
		{spigot.Op{Limit: l, Key: "k", N: 1}, spigot.Decision{N: 1, ResetAfter: left, RefillAfter: left}},
	} {
		got, err := store.Apply(c.op, &s, t0)
		if err != nil || got != c.want {
			t.Errorf("step %d: %v = %+v, %v; want %+v", i, c.op, got, err, c.want)
		}
	}
}
