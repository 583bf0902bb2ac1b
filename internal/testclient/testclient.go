// Package testclient builds the clients of the Redis-protocol stores for
// tests and benchmarks, with the settings the stores' documentation
// advises, on one server or on a cluster's seed nodes alike. Each client
// is closed when the test ends.
package testclient

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// GoRedis returns a *goredis.Client for one address, or GoRedisCluster's
// client for several, as store/redis advises: with ContextTimeoutEnabled,
// so that a command keeps to its context's deadline.
func GoRedis(tb testing.TB, addrs ...string) goredis.UniversalClient {
	if len(addrs) > 1 {
		return GoRedisCluster(tb, addrs...)
	}
	c := goredis.NewClient(&goredis.Options{Addr: addrs[0], ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	return c
}

// GoRedisCluster returns a *goredis.ClusterClient of the cluster whose
// seed nodes are addrs, as store/redis advises: with ContextTimeoutEnabled
// and a ClusterStateReloadInterval of a second, so that it finds a replica
// promoted after its primary died.
func GoRedisCluster(tb testing.TB, addrs ...string) *goredis.ClusterClient {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{
		Addrs:                      addrs,
		ContextTimeoutEnabled:      true,
		ClusterStateReloadInterval: time.Second,
	})
	tb.Cleanup(func() { c.Close() })
	return c
}

// Valkey returns a valkey-go client of the server or cluster at addrs,
// without client-side caching, which spigot does not use.
func Valkey(tb testing.TB, addrs ...string) valkey.Client {
	tb.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		tb.Fatalf("testclient: valkey-go on %v: %v", addrs, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Rueidis returns a rueidis client of the server or cluster at addrs,
// without client-side caching, which spigot does not use.
func Rueidis(tb testing.TB, addrs ...string) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		tb.Fatalf("testclient: rueidis on %v: %v", addrs, err)
	}
	tb.Cleanup(c.Close)
	return c
}
