package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	spigotvalkey "github.com/spigot-go/spigot/store/valkey"
)

// A login limiter shared by every replica that uses the same server: 3
// attempts per address, then one more every 20 seconds.
//
// The example runs on miniredis with a fake clock, so that its output is
// fixed. In production, connect to your server with valkey-go's default
// options and leave out WithClock: the store then reads the server's TIME,
// one clock for every replica. (miniredis cannot track keys, so its client
// needs DisableCache; the store does not use client-side caching.)
func Example() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:  []string{srv.Addr()},
		DisableCache: true,
	})
	if err != nil {
		panic(err)
	}
	defer client.Close() // the store never closes it

	clk := clocktest.New(time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC))
	store := spigotvalkey.New(client, spigotvalkey.WithClock(clk))
	login := spigot.MustBucket("login", 3, spigot.Per(1, 20*time.Second))
	limiter := spigot.New(store, login)
	ctx := context.Background()

	attempt := func() {
		d, err := limiter.Allow(ctx, "203.0.113.7")
		switch {
		case err != nil:
			fmt.Println("error:", err)
		case d.Allowed():
			fmt.Printf("%s allowed, %d left\n", clk.Now().Format(time.TimeOnly), d.Remaining)
		default:
			fmt.Printf("%s denied, retry in %v\n", clk.Now().Format(time.TimeOnly), d.RetryAfter)
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
// after a successful login, say, the address starts afresh. The Decision's
// N is the tokens it gave back, 0 for a bucket that was full. WithPrefix
// names the keys.
func Example_reset() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	clk := clocktest.New(time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC))
	store := spigotvalkey.New(client, spigotvalkey.WithClock(clk), spigotvalkey.WithPrefix("app:"))
	login := spigot.New(store, spigot.MustBucket("login", 3, spigot.Per(1, 20*time.Second)))
	ctx := context.Background()

	if _, err := login.AllowN(ctx, "alice", 2); err != nil {
		fmt.Println("error:", err)
	}
	fmt.Println("keys:", srv.Keys())
	d, err := login.Reset(ctx, "alice")
	fmt.Println("reset gave back:", d.N, err)
	fmt.Println("keys:", srv.Keys())
	d, err = login.Allow(ctx, "alice")
	fmt.Println("allowed:", d.Allowed(), "remaining:", d.Remaining, err)
	// Output:
	// keys: [app:login:alice]
	// reset gave back: 2 <nil>
	// keys: []
	// allowed: true remaining: 2 <nil>
}

// An export limit of 100 rows a minute per account. TakeUpTo serves a
// large request in part, and reports how many rows it may export in N; a
// request that AllowN allowed but that then failed gives its tokens back
// with Refund.
func Example_partialWork() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	clk := clocktest.New(time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC))
	store := spigotvalkey.New(client, spigotvalkey.WithClock(clk))
	rows := spigot.New(store, spigot.MustBucket("export", 100, spigot.PerMinute(100)))
	ctx := context.Background()
	export := func(n int64) error { return errors.New("the database is down") }

	d, _ := rows.TakeUpTo(ctx, "acme", 150)
	fmt.Println("may export:", d.N, "of 150 rows; left:", d.Remaining)

	clk.Advance(30 * time.Second)
	d, _ = rows.AllowN(ctx, "acme", 40)
	fmt.Println("40 rows allowed:", d.Allowed(), "left:", d.Remaining)
	if err := export(d.N); err != nil {
		d, _ = rows.Refund(ctx, "acme", d.N) // nothing was served
		fmt.Println("refunded:", d.N, "left:", d.Remaining)
	}
	// Output:
	// may export: 100 of 150 rows; left: 0
	// 40 rows allowed: true left: 10
	// refunded: 40 left: 50
}
