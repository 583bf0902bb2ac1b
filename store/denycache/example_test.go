package denycache_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/denycache"
	"github.com/spigot-go/spigot/store/memory"
)

// calls counts the requests that reach a store: here a memory store
// stands in for Redis.
type calls struct {
	spigot.Store
	n atomic.Int64
}

func (c *calls) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	c.n.Add(1)
	return c.Store.Do(ctx, op)
}

// A flood on one key: once the store has denied it, the Store answers the
// flood itself until the instant the store said to retry, and a Reset
// through it is seen at once.
func Example() {
	clk := clocktest.New(time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC))
	remote := &calls{Store: memory.New(memory.WithClock(clk))} // redis.New(rdb), say
	store := denycache.New(remote, denycache.WithClock(clk))
	login := spigot.New(store, spigot.MustBucket("login", 3, spigot.Per(1, 20*time.Second)))
	ctx := context.Background()

	flood := func(n int) {
		admitted, denied := 0, time.Duration(0)
		for range n {
			d, err := login.Allow(ctx, "203.0.113.7")
			if err != nil {
				fmt.Println("error:", err)
				return
			}
			if d.Allowed() {
				admitted++
			} else {
				denied = d.RetryAfter
			}
		}
		fmt.Printf("%s: %d of %d admitted, retry in %v; store calls so far: %d\n",
			clk.Now().Format(time.TimeOnly), admitted, n, denied, remote.n.Load())
	}
	flood(1000)
	clk.Advance(5 * time.Second)
	flood(1000)
	clk.Advance(15 * time.Second)
	flood(1000)
	login.Reset(ctx, "203.0.113.7") // forgets the denial here too
	flood(1000)
	// Output:
	// 09:00:00: 3 of 1000 admitted, retry in 20s; store calls so far: 3
	// 09:00:05: 0 of 1000 admitted, retry in 15s; store calls so far: 3
	// 09:00:20: 1 of 1000 admitted, retry in 20s; store calls so far: 4
	// 09:00:20: 3 of 1000 admitted, retry in 20s; store calls so far: 8
}
