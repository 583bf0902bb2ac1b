package spigot_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
)

// A login limiter: 20 attempts per IP address, refilled one every 3 s. A
// failed password costs an attempt; a successful login resets the bucket.
func Example_login() {
	clk := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	login := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	limiter := spigot.New(memory.New(memory.WithClock(clk)), login)
	ctx := context.Background()

	for range 20 {
		limiter.Allow(ctx, "203.0.113.7") // 20 wrong passwords
	}
	a, err := limiter.Allow(ctx, "203.0.113.7")
	if err != nil {
		panic(err) // the store failed: a denial is never an error
	}
	if !a.Allowed() {
		// Retry-After is in whole seconds: round up, never down.
		secs := int64(math.Ceil(a.RetryAfter.Seconds()))
		fmt.Println(http.StatusTooManyRequests, "Retry-After:", strconv.FormatInt(secs, 10))
	}

	clk.Advance(3 * time.Second)
	a, _ = limiter.Allow(ctx, "203.0.113.7") // the right password, at last
	fmt.Println("allowed:", a.Allowed())
	d, _ := limiter.Reset(ctx, "203.0.113.7")
	fmt.Println("reset gave back:", d.N)
	// Output:
	// 429 Retry-After: 3
	// allowed: true
	// reset gave back: 20
}

// Weighted costs: an export quota of 10 000 rows, refilled at 50 rows per
// second, charged by the rows each export returns.
func ExampleLimiter_AllowN() {
	clk := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rows := spigot.MustBucket("export-rows", 10_000, spigot.PerSecond(50))
	limiter := spigot.New(memory.New(memory.WithClock(clk)), rows)
	ctx := context.Background()

	for _, n := range []int64{4000, 4000, 3000} {
		d, _ := limiter.AllowN(ctx, "account-42", n)
		fmt.Printf("%d rows: allowed=%v remaining=%d retry-after=%v\n", n, d.Allowed(), d.Remaining, d.RetryAfter)
	}
	// Output:
	// 4000 rows: allowed=true remaining=6000 retry-after=0s
	// 4000 rows: allowed=true remaining=2000 retry-after=0s
	// 3000 rows: allowed=false remaining=2000 retry-after=20s
}

// Work that can be done in part takes what the limit holds; work that
// could not be served gives its tokens back.
func ExampleLimiter_TakeUpTo() {
	clk := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rows := spigot.MustBucket("export-rows", 10_000, spigot.PerSecond(50))
	limiter := spigot.New(memory.New(memory.WithClock(clk)), rows)
	ctx := context.Background()

	limiter.AllowN(ctx, "account-42", 9000)
	d, _ := limiter.TakeUpTo(ctx, "account-42", 2500)
	fmt.Println("export", d.N, "of 2500 rows now")

	d, _ = limiter.AllowN(ctx, "account-42", 0) // what is left
	fmt.Println("remaining:", d.Remaining)
	d, _ = limiter.Refund(ctx, "account-42", 400) // 400 rows failed to export
	fmt.Println("refunded:", d.N, "remaining:", d.Remaining)
	// Output:
	// export 1000 of 2500 rows now
	// remaining: 0
	// refunded: 400 remaining: 400
}

// Wait blocks until the tokens are taken; with a fake clock it waits for the
// test to move the clock.
func ExampleLimiter_Wait() {
	clk := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	b := spigot.MustBucket("jobs", 1, spigot.PerSecond(2))
	limiter := spigot.New(memory.New(memory.WithClock(clk)), b, spigot.WithClock(clk))
	ctx := context.Background()

	limiter.Allow(ctx, "worker")
	go func() {
		clk.BlockUntil(1) // the Wait below is sleeping
		clk.Advance(500 * time.Millisecond)
	}()
	d, err := limiter.Wait(ctx, "worker")
	fmt.Println(d.Allowed(), err)

	_, err = limiter.WaitN(ctx, "worker", 2)
	fmt.Println(err)
	// Output:
	// true <nil>
	// spigot: cost exceeds the limit's capacity and can never be admitted: 2 tokens, capacity 1
}

func ExampleParseRate() {
	r, err := spigot.ParseRate("20/3s")
	fmt.Println(r.Tokens, r.Period, err)
	fmt.Println(spigot.Per(7, 10*time.Second), spigot.PerMinute(60), spigot.Per(1000, time.Millisecond))
	// Output:
	// 20 3s <nil>
	// 7/10s 60/m 1000/ms
}

func ExampleNewBucket() {
	_, err := spigot.NewBucket("login", 20, spigot.Per(0, time.Second))
	fmt.Println(err)
	// Output:
	// spigot: invalid limit "login": rate 0/s: a rate must refill at least one token
}

// Four replicas that each enforce Split(4) of a bucket admit together
// about what the bucket admits: a quarter of the capacity and of the rate
// each, as store/hybrid's local fallback while Redis is down.
func ExampleLimit_Split() {
	login := spigot.MustBucket("login", 20, spigot.Per(20, 3*time.Second))
	fmt.Println(login.Split(4))
	fmt.Println(spigot.MustBucket("small", 3, spigot.PerSecond(3)).Split(4)) // never 0 tokens
	// Output:
	// login(cap 5, 5/3s)
	// small(cap 1, 3/4s)
}
