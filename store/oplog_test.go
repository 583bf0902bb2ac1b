package store_test

import (
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// TestApplyLogOutOfOrder: a sliding log's entries are read as a store's
// value holds them: the tokens that left are the expired prefix, the
// entries up to the first one still in the window, even in a log out of
// order (which only a stored value can hold; Apply writes its log in
// order), so that the script, which reads a log from its front only as
// far as it must, decides as Apply does.
func TestApplyLogOutOfOrder(t *testing.T) {
	l := spigot.Must(spigot.NewSlidingLog("out-of-order", spigot.Per(3, 10*time.Second)))
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) int64 { return now.Add(d).UnixMicro() }
	for i, c := range []struct {
		action spigot.Action
		want   spigot.Decision
	}{
		{spigot.Peek, spigot.Decision{RetryAfter: 5 * time.Second, ResetAfter: 9 * time.Second, RefillAfter: 5 * time.Second}},
		{spigot.Take, spigot.Decision{RetryAfter: 5 * time.Second, ResetAfter: 9 * time.Second, RefillAfter: 5 * time.Second}},
	} {
		s := store.State{Kind: spigot.SlidingLog, Stamp: at(0), FullAt: at(9 * time.Second),
			Log: []int64{at(-11 * time.Second), at(-5 * time.Second), at(-20 * time.Second), at(-time.Second)}}
		got, err := store.Apply(spigot.Op{Limit: l, Action: c.action, N: 1}, &s, now)
		if err != nil || got != c.want {
			t.Errorf("step %d: got %+v, %v; want %+v", i, got, err, c.want)
		}
	}
}
