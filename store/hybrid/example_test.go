package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// A limiter on Redis that keeps limiting in process when Redis is
// unavailable: spigot.New(hybrid.New(remote, local), bucket) is all it
// takes. The remote is store/redis's Store on a go-redis client made as
// its doc advises,
//
//	rdb := goredis.NewClient(&goredis.Options{
//		Addr:                  "localhost:6379",
//		ContextTimeoutEnabled: true, // honour the hybrid store's deadline
//	})
//	remote := redis.New(rdb) // the stores never close rdb
//
// or any other spigot.Store; here a memory store stands in for it.
func Example() {
	remote := memory.New()
	store := hybrid.New(remote, memory.New(),
		// While Redis is unavailable, each of 3 replicas admits a third
		// of the limit.
		hybrid.WithLocalLimit(func(b spigot.Limit) spigot.Limit {
			return spigot.MustBucket(b.Name(), b.Capacity()/3, spigot.Per(b.Rate().Tokens, 3*b.Rate().Period))
		}),
		hybrid.WithPolicy(hybrid.Local), // the default; or FailOpen, FailClosed
		hybrid.WithTimeout(50*time.Millisecond),
		hybrid.WithBreaker(5, 5*time.Second),
	)
	limiter := spigot.New(store, spigot.MustBucket("search", 30, spigot.PerMinute(30)))

	a, err := limiter.Allow(context.Background(), "alice")
	if err != nil {
		panic(err)
	}
	fmt.Println("allowed:", a.Allowed())
	fmt.Println("breaker:", store.Circuit())
	// Output:
	// allowed: true
	// breaker: closed
}

// down is a remote store whose server cannot be reached.
type down struct{}

var errRefused = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (down) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	return spigot.Decision{}, errRefused
}

func (down) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return errRefused
}

// An Observer that counts decisions by path, remote errors and breaker
// transitions, as a Prometheus counter vector would (inc on a label), while
// the remote store is down: the local store decides, the breaker opens after
// 3 failures, and its probe 5 seconds later fails again.
func ExampleObserver() {
	var decisions [hybrid.PathGuard + 1]atomic.Int64 // by Path
	var remoteErrors atomic.Int64
	observer := hybrid.Observer{
		Decision: func(_ context.Context, _ spigot.Op, p hybrid.Path, _ spigot.Decision) {
			decisions[p].Add(1)
		},
		RemoteError: func(context.Context, spigot.Op, error, time.Duration) {
			remoteErrors.Add(1)
		},
		Transition: func(_ context.Context, from, to hybrid.Circuit) {
			fmt.Printf("breaker: %v -> %v\n", from, to)
		},
	}

	clk := clocktest.New(time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC))
	store := hybrid.New(down{}, memory.New(memory.WithClock(clk)),
		hybrid.WithClock(clk),
		hybrid.WithBreaker(3, 5*time.Second),
		hybrid.WithObserver(observer))
	limiter := spigot.New(store, spigot.MustBucket("api", 4, spigot.PerSecond(1)))

	allow := func() {
		a, err := limiter.Allow(context.Background(), "alice")
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("%s allowed %v, %d left\n", clk.Now().Format(time.TimeOnly), a.Allowed(), a.Remaining)
	}
	for range 5 {
		allow()
	}
	clk.Advance(5 * time.Second)
	allow()

	for p := hybrid.PathRemote; p <= hybrid.PathGuard; p++ {
		fmt.Printf("decisions{path=%q}: %d\n", p, decisions[p].Load())
	}
	fmt.Println("remote errors:", remoteErrors.Load())
	// Output:
	// 09:00:00 allowed true, 3 left
	// 09:00:00 allowed true, 2 left
	// breaker: closed -> open
	// 09:00:00 allowed true, 1 left
	// 09:00:00 allowed true, 0 left
	// 09:00:00 allowed false, 0 left
	// breaker: open -> half-open
	// breaker: half-open -> open
	// 09:00:05 allowed true, 3 left
	// decisions{path="remote"}: 0
	// decisions{path="local"}: 6
	// decisions{path="fail-open"}: 0
	// decisions{path="fail-closed"}: 0
	// decisions{path="guard"}: 0
	// remote errors: 4
}
