package memory_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
)

// A login limiter: 3 attempts per address, then one more every 20 seconds.
// The fake clock stands in for the system clock, which New uses by default.
func Example() {
	clk := clocktest.New(time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clk))
	login := spigot.MustBucket("login", 3, spigot.Per(1, 20*time.Second))
	limiter := spigot.New(store, login)
	ctx := context.Background()

	attempt := func() {
		a, err := limiter.Allow(ctx, "203.0.113.7")
		switch {
		case err != nil:
			fmt.Println("error:", err)
		case a.Allowed():
			fmt.Printf("%s allowed, %d left\n", clk.Now().Format(time.TimeOnly), a.Remaining)
		default:
			fmt.Printf("%s denied, retry in %v\n", clk.Now().Format(time.TimeOnly), a.RetryAfter)
		}
	}
	for range 4 {
		attempt()
	}
	clk.Advance(5 * time.Second)
	attempt()
	clk.Advance(15 * time.Second)
	attempt()

	fmt.Println("keys held:", store.Len())
	clk.Advance(time.Minute) // the bucket is full again: its state no longer counts
	fmt.Println("keys held a minute later:", store.Len())
	// Output:
	// 09:00:00 allowed, 2 left
	// 09:00:00 allowed, 1 left
	// 09:00:00 allowed, 0 left
	// 09:00:00 denied, retry in 20s
	// 09:00:05 denied, retry in 15s
	// 09:00:20 allowed, 0 left
	// keys held: 1
	// keys held a minute later: 0
}

// WithMaxKeys bounds the store under a flood of distinct keys. The key that
// is being limited hardest, with an empty bucket, is the last one evicted,
// so it stays denied.
func ExampleWithMaxKeys() {
	clk := clocktest.New(time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clk), memory.WithMaxKeys(100))
	limiter := spigot.New(store, spigot.MustBucket("login", 5, spigot.PerMinute(1)))
	ctx := context.Background()

	limiter.AllowN(ctx, "attacker", 5) // empties its bucket
	for i := range 10_000 {
		limiter.Allow(ctx, "198.51.100."+strconv.Itoa(i))
	}
	a, _ := limiter.Allow(ctx, "attacker")
	fmt.Println("keys held:", store.Len())
	fmt.Println("evicted before full:", store.Evictions())
	fmt.Println("attacker allowed:", a.Allowed())
	// Output:
	// keys held: 100
	// evicted before full: 9901
	// attacker allowed: false
}
