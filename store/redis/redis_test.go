package redis_test

import (
	"reflect"
	"testing"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/redis"
)

func client(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformanceMiniredis(t *testing.T) {
	conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
		return redis.New(client(t, miniredis.RunT(t).Addr()), redis.WithClock(clk))
	})
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

func TestConformanceServers(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			c := client(t, srv.Addr)
			t.Run("fake-clock", func(t *testing.T) {
				conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
					return redis.New(c, redis.WithClock(clk), redis.WithPrefix(t.Name()+":"))
				})
			})
			t.Run("server-time", func(t *testing.T) {
				conformance.RunRealTime(t, func(t *testing.T) spigot.Store { return redis.New(c) })
			})
		})
	}
}

// TestConformanceRing: on a go-redis Ring of two servers, which shards
// keys by their hash tag, several keys are taken shard by shard.
func TestConformanceRing(t *testing.T) {
	a, b := testserver.Start(t, testserver.Redis), testserver.Start(t, testserver.Redis)
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
	t.Cleanup(func() { ring.Close() })
	conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
		return redis.New(ring, redis.WithClock(clk), redis.WithPrefix(t.Name()+":"))
	})
	// Both shards hold keys: the ring spread the suite over them.
	for _, srv := range []*testserver.Server{a, b} {
		if n, err := srv.Do("DBSIZE"); err != nil || n == "0" {
			t.Errorf("%s holds %s keys (%v); want some on each shard", srv.Addr, n, err)
		}
	}
}
