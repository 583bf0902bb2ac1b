package spigot_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
)

// A request limited per address and per user, all or nothing: the user's
// limit denies the fourth request, which takes nothing from the address's,
// whose decision then says what it holds.
func ExampleGroup() {
	clk := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	perIP := spigot.MustBucket("ip", 100, spigot.PerSecond(10))
	perUser := spigot.MustBucket("user", 3, spigot.PerSecond(1))
	g := spigot.NewGroup(memory.New(memory.WithClock(clk)), perIP, perUser)
	ctx := context.Background()

	for range 4 {
		d, err := g.Allow(ctx, "203.0.113.7", "alice")
		if err != nil {
			panic(err) // the store failed: a denial is never an error
		}
		fmt.Printf("allowed=%v retry-after=%v decided-by=%s ip-left=%d\n",
			d.Allowed(), d.RetryAfter, g.Limits()[d.By].Name(), d.Each[0].Remaining)
	}
	// Output:
	// allowed=true retry-after=0s decided-by=user ip-left=99
	// allowed=true retry-after=0s decided-by=user ip-left=98
	// allowed=true retry-after=0s decided-by=user ip-left=97
	// allowed=false retry-after=1s decided-by=user ip-left=97
}

// A batch: many keys decided in one call (one round trip per server in the
// Redis-protocol stores), each on its own.
func ExampleDoMulti() {
	clk := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	quota := spigot.MustBucket("quota", 2, spigot.PerMinute(1))
	store := memory.New(memory.WithClock(clk))
	ops := []spigot.Op{
		{Limit: quota, Key: "tenant-1", N: 1},
		{Limit: quota, Key: "tenant-2", N: 2},
		{Limit: quota, Key: "tenant-3", N: 3},
	}
	out := make([]spigot.Decision, len(ops))
	if err := spigot.DoMulti(context.Background(), store, spigot.Independent, ops, out); err != nil {
		panic(err)
	}
	for i, d := range out {
		fmt.Printf("%s: allowed=%v remaining=%d\n", ops[i].Key, d.Allowed(), d.Remaining)
	}
	// Output:
	// tenant-1: allowed=true remaining=1
	// tenant-2: allowed=true remaining=0
	// tenant-3: allowed=false remaining=2
}
