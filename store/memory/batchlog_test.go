package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
)

// TestDeniedBatchKeepsLog: an all-or-nothing batch that is denied leaves
// a sliding log as it was, though Apply, on the batch's copy of it, dropped
// the entries that had left the window (in the log's array, which the
// copy shared).
func TestDeniedBatchKeepsLog(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(clk))
	ctx := context.Background()
	l := spigot.Must(spigot.NewSlidingLog("log", spigot.Per(3, 3*time.Second)))
	take := func(n int64) spigot.Op { return spigot.Op{Limit: l, Key: "k", N: n} }
	if _, err := s.Do(ctx, take(1)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	if _, err := s.Do(ctx, take(2)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(1500 * time.Millisecond) // the first token has left
	out := make([]spigot.Decision, 2)
	if err := s.DoMulti(ctx, spigot.AllOrNothing, []spigot.Op{take(1), take(9)}, out); err != nil {
		t.Fatal(err)
	}
	for i, want := range []spigot.Decision{
		// With the one that fits taken, the log is full until its oldest
		// leaves, 1.5 s from now.
		{Remaining: 1, ResetAfter: 1500 * time.Millisecond, RefillAfter: 1500 * time.Millisecond},
		{Remaining: 1, ResetAfter: 1500 * time.Millisecond, RefillAfter: 1500 * time.Millisecond},
	} {
		peek := spigot.Op{Limit: l, Key: "k", Action: spigot.Peek, N: 0}
		if got, err := s.Do(ctx, peek); err != nil || got != want {
			t.Errorf("step %d: got %+v, %v; want %+v", i, got, err, want)
		}
	}
}
