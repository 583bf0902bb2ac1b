package store_test

// The Redis-protocol stores on a real Redis Cluster and Valkey Cluster
// (three primaries, one replica each), built by the same protoStores rows
// as on one server (go-redis through a UniversalClient, which becomes a
// ClusterClient for several addresses): each request's script touches one
// key, so the cluster routes it by that key's slot.

import (
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/internal/testserver"
)

// TestClusterConformance runs conformance.Run (caller's clock) and
// RunRealTime (server time) for each store on each kind of cluster.
func TestClusterConformance(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			cl := testserver.StartCluster(t, kind)
			for _, ps := range protoStores {
				t.Run(ps.name, func(t *testing.T) {
					t.Run("fake-clock", func(t *testing.T) {
						conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
							return ps.new(t, cl.Addrs(), storeOpts{clock: clk, prefix: prefix(t)})
						})
					})
					t.Run("server-time", func(t *testing.T) {
						conformance.RunRealTime(t, func(t *testing.T) spigot.Store {
							return ps.new(t, cl.Addrs(), storeOpts{})
						})
					})
				})
			}
		})
	}
}
