package redis_test

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/redis"
)

// An API limit of 5 calls a second per key, on Redis through go-redis.
// ContextTimeoutEnabled makes go-redis keep to each call's deadline rather
// than its own ReadTimeout of 3 s. The decision's fields are the rate-limit
// headers of the response.
//
// WithClock makes the example's output fixed. In production leave it out:
// the store then reads the server's TIME, one clock for every replica.
func Example() {
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer rdb.Close() // the store never closes it

	clk := clocktest.New(time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC))
	api := spigot.New(redis.New(rdb, store.WithClock(clk)), spigot.MustBucket("api", 5, spigot.PerSecond(5)))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()

	d, err := api.AllowN(ctx, "key-1", 4)
	fmt.Printf("allowed=%v remaining=%d reset=%v err=%v\n", d.Allowed(), d.Remaining, d.ResetAfter, err)
	d, err = api.AllowN(ctx, "key-1", 3)
	fmt.Printf("allowed=%v remaining=%d retry=%v err=%v\n", d.Allowed(), d.Remaining, d.RetryAfter, err)
	ttl, err := rdb.PTTL(ctx, "spigot:api:key-1").Result()
	fmt.Println("the key expires within a minute of reset:", ttl > 0 && ttl <= time.Minute+d.ResetAfter, err)
	// Output:
	// allowed=true remaining=1 reset=800ms err=<nil>
	// allowed=false remaining=1 retry=400ms err=<nil>
	// the key expires within a minute of reset: true <nil>
}

// On a Redis Cluster, build the ClusterClient with NewClusterClient, so
// that ClusterStateReloadInterval can be set: the client then finds a
// replica promoted after its primary died within about a second rather
// than a minute. With ReadOnly, a Peek (an EVALSHA_RO) may be served by a
// replica. Each request touches one key, so it runs on any slot; a Group's
// limits over several slots are taken slot by slot (see spigot.DoMulti).
func Example_cluster() {
	rdb := goredis.NewClusterClient(&goredis.ClusterOptions{
		Addrs:                      []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ContextTimeoutEnabled:      true,
		ClusterStateReloadInterval: time.Second,
		ReadOnly:                   true,
	})
	defer rdb.Close()
	api := spigot.New(redis.New(rdb), spigot.MustBucket("api", 100, spigot.PerSecond(10)))
	d, err := api.Allow(context.Background(), "key-1")
	fmt.Println(d.Allowed(), err)
}
