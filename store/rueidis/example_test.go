package rueidis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	spigotrueidis "github.com/spigot-go/spigot/store/rueidis"
)

// A login limiter shared by every replica that uses the same server: 3
// attempts per address, then one more every 20 seconds.
//
// The example runs on miniredis with a fake clock, so that its output is
// fixed. In production, connect to your server with rueidis' default
// options and leave out WithClock: the store then reads the server's TIME,
// one clock for every replica. (miniredis cannot track keys, so its client
// needs DisableCache; the store does not use client-side caching.)
func Example() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{srv.Addr()},
		DisableCache: true,
	})
	if err != nil {
		panic(err)
	}
	defer client.Close() // the store never closes it

	clk := clocktest.New(time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC))
	store := spigotrueidis.New(client, spigotrueidis.WithClock(clk))
	login := spigot.MustBucket("login", 3, spigot.Per(1, 20*time.Second))
	limiter := spigot.New(store, login)
	ctx := context.Background()

	attempt := func() {
		a, err := limiter.Allow(ctx, "203.0.113.7")
		switch {
		case err != nil:
			fmt.Println("error:", err)
		case a.Allowed:
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

	fmt.Println("state kept in", srv.Keys())
	// Output:
	// 09:00:00 allowed, 2 left
	// 09:00:00 allowed, 1 left
	// 09:00:00 allowed, 0 left
	// 09:00:00 denied, retry in 20s
	// 09:00:05 denied, retry in 15s
	// 09:00:20 allowed, 0 left
	// state kept in [spigot:login:203.0.113.7]
}

// Reset fills a bucket at once, in one round trip, and deletes its key:
// after a successful login, say, the address starts afresh. It reports
// whether the bucket was not full. WithPrefix names the keys.
func ExampleStore_Reset() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	clk := clocktest.New(time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC))
	store := spigotrueidis.New(client, spigotrueidis.WithClock(clk), spigotrueidis.WithPrefix("app:"))
	login := spigot.MustBucket("login", 3, spigot.Per(1, 20*time.Second))
	ctx := context.Background()

	if _, err := store.Acquire(ctx, login, "alice", 2); err != nil {
		fmt.Println("error:", err)
	}
	fmt.Println("keys:", srv.Keys())
	wasNotFull, err := store.Reset(ctx, login, "alice")
	fmt.Println("reset:", wasNotFull, err)
	fmt.Println("keys:", srv.Keys())
	a, err := store.Acquire(ctx, login, "alice", 1)
	fmt.Println("allowed:", a.Allowed, "remaining:", a.Remaining, err)
	// Output:
	// keys: [app:login:alice]
	// reset: true <nil>
	// keys: []
	// allowed: true remaining: 2 <nil>
}
