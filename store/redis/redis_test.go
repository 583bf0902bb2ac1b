package redis_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/internal/scriptstore/storetest"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/redis"
)

// client returns a client of the server at addr, as store/redis advises
// (ContextTimeoutEnabled), closed when tb ends.
func client(tb testing.TB, o *goredis.Options) *goredis.Client {
	o.ContextTimeoutEnabled = true
	c := goredis.NewClient(o)
	tb.Cleanup(func() { c.Close() })
	return c
}

// TestStore runs the shared tests of the Redis-protocol stores that apply
// to go-redis: all but those of a paused server (a call waits for its
// context's deadline, as the package doc says) and of a client that sends
// reads to a replica (go-redis has one for a cluster only).
func TestStore(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Name: "redis",
		Kind: testserver.Redis,
		Dial: func(tb testing.TB, addr string, o storetest.Options) storetest.Client {
			c := client(tb, &goredis.Options{Addr: addr, Protocol: 3 - b2i(o.RESP2)})
			return storetest.Client{
				New: func(opts ...store.Option) spigot.Store { return redis.New(c, opts...) },
				Do:  func(ctx context.Context, args ...string) error { return c.Do(ctx, anys(args)...).Err() },
			}
		},
		ServerError: func(err error) bool { var e goredis.Error; return errors.As(err, &e) },
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func anys(ss []string) []any {
	a := make([]any, len(ss))
	for i, s := range ss {
		a[i] = s
	}
	return a
}

// TestNoPipeline: New takes a UniversalClient, which a pipeline or a
// transaction is not, so redis.New(rdb.Pipeline()), which could only
// queue requests, does not compile.
func TestNoPipeline(t *testing.T) {
	universal := reflect.TypeFor[goredis.UniversalClient]()
	for _, typ := range []reflect.Type{reflect.TypeFor[goredis.Pipeliner](), reflect.TypeFor[*goredis.Pipeline]()} {
		if typ.Implements(universal) {
			t.Errorf("%v implements goredis.UniversalClient: redis.New would take a pipeline", typ)
		}
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[*goredis.Client](), reflect.TypeFor[*goredis.ClusterClient](), reflect.TypeFor[*goredis.Ring]()} {
		if !typ.Implements(universal) {
			t.Errorf("%v does not implement goredis.UniversalClient: redis.New would not take it", typ)
		}
	}
}

// TestConformanceRing: on a go-redis Ring of two servers, which shards
// keys by their hash tag, several keys are taken shard by shard.
func TestConformanceRing(t *testing.T) {
	a, b := testserver.Start(t, testserver.Redis), testserver.Start(t, testserver.Redis)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	t.Cleanup(func() { ring.Close() })
	conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
		return redis.New(ring, store.WithClock(clk), store.WithPrefix(t.Name()+":"))
	})
	// Both shards hold keys: the ring spread the suite over them.
	for _, srv := range []*testserver.Server{a, b} {
		if n, err := srv.Do("DBSIZE"); err != nil || n == "0" {
			t.Errorf("%s holds %s keys (%v); want some on each shard", srv.Addr, n, err)
		}
	}
}
