// Package testclient builds the clients of the Redis-protocol stores for
// tests and benchmarks, with the settings the stores' documentation
// advises, on one server or on a cluster's seed nodes alike. Each client
// is closed when the test ends. Quiet keeps go-redis's logging out of the
// tests' output.
package testclient

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot/internal/testserver"
)

// Quiet turns off go-redis's logging for the rest of the test binary. By
// default go-redis prints to standard error every dial it retried in vain
// ("redis: connection pool: failed to dial after 5 attempts: …"), which
// floods the output of tests that kill or pause a server on purpose; the
// tests check what the stores return instead. Call it first in the TestMain
// of each package whose tests use go-redis. It changes a process-wide
// setting, which only tests may do: spigot itself leaves go-redis's logger
// to the application.
func Quiet() { goredis.SetLogger(&logging.VoidLogger{}) }

// Main is the TestMain of a package whose tests use these clients: it
// turns off go-redis's logging (Quiet), runs the tests, and says how many
// were skipped for want of a server binary (testserver.Main).
func Main(m *testing.M) {
	Quiet()
	testserver.Main(m)
}

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
