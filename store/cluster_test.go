package store_test

// The Redis-protocol stores on a real Redis Cluster and Valkey Cluster
// (three primaries, one replica each): each request's script touches one
// key, so the cluster routes it by that key's slot.

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"
	rueidisgo "github.com/redis/rueidis"
	valkeygo "github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/redis"
	"github.com/spigot-go/spigot/store/rueidis"
	"github.com/spigot-go/spigot/store/valkey"
)

// clusterStores builds each store on a cluster client seeded with addrs.
var clusterStores = []struct {
	name string
	new  func(t *testing.T, addrs []string, opts storeOpts) spigot.Store
}{
	{"go-redis", func(t *testing.T, addrs []string, opts storeOpts) spigot.Store {
		c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return redis.New(c, options(opts, redis.WithClock, redis.WithPrefix)...)
	}},
	{"valkey-go", func(t *testing.T, addrs []string, opts storeOpts) spigot.Store {
		c, err := valkeygo.NewClient(valkeygo.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return valkey.New(c, options(opts, valkey.WithClock, valkey.WithPrefix)...)
	}},
	{"rueidis", func(t *testing.T, addrs []string, opts storeOpts) spigot.Store {
		c, err := rueidisgo.NewClient(rueidisgo.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return rueidis.New(c, options(opts, rueidis.WithClock, rueidis.WithPrefix)...)
	}},
}

// TestClusterConformance runs conformance.Run (caller's clock) and
// RunRealTime (server time) for each store on each kind of cluster.
func TestClusterConformance(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			cl := testserver.StartCluster(t, kind)
			for _, cs := range clusterStores {
				t.Run(cs.name, func(t *testing.T) {
					t.Run("fake-clock", func(t *testing.T) {
						conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
							return cs.new(t, cl.Addrs(), storeOpts{clock: clk, prefix: prefix(t)})
						})
					})
					t.Run("server-time", func(t *testing.T) {
						conformance.RunRealTime(t, func(t *testing.T) spigot.Store {
							return cs.new(t, cl.Addrs(), storeOpts{})
						})
					})
				})
			}
		})
	}
}
