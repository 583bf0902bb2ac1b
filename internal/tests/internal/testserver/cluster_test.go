package testserver_test

import (
	"context"
	"flag"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot/internal/testserver"
)

// TestCluster: a started cluster has six nodes, three of them primaries
// that share the 16384 slots, and every node reports cluster_state:ok.
// When a primary is killed its replica takes its slots over; restarted,
// the old primary comes back as a replica.
func TestCluster(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			c := testserver.StartCluster(t, kind)
			if n := len(c.Addrs()); n != 6 {
				t.Fatalf("got %d nodes, want 6", n)
			}
			for _, n := range c.Nodes {
				info, err := n.Do("CLUSTER", "INFO")
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_size:3", "cluster_known_nodes:6"} {
					if !strings.Contains(info, want) {
						t.Errorf("%s: CLUSTER INFO lacks %q:\n%s", n.Addr, want, info)
					}
				}
			}
			primaries, err := c.Primaries()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(primaries, c.Nodes[:3]) {
				t.Fatalf("Primaries() = %v; want the first three nodes %v", addrs(primaries), addrs(c.Nodes[:3]))
			}
			for _, n := range primaries {
				if info, err := n.Info("replication"); err != nil || info["role"] != "master" || info["connected_slaves"] != "1" {
					t.Errorf("%s: INFO replication = %v, %v; want role master with one replica", n.Addr, info, err)
				}
			}

			// A hash tag: only the part in braces decides the slot.
			s1, err1 := c.KeySlot("{user1000}.following")
			s2, err2 := c.KeySlot("user1000")
			if err1 != nil || err2 != nil || s1 != s2 || s1 != 3443 {
				t.Errorf("KeySlot = %d, %d (%v, %v); want 3443 for both", s1, s2, err1, err2)
			}
			owner, err := c.Owner(0)
			if err != nil || owner != c.Nodes[0] {
				t.Fatalf("Owner(0) = %v, %v; want %s", owner, err, c.Nodes[0].Addr)
			}

			// Until AllowFailover, no replica would take over on its own
			// and no node takes another for failed for NodeTimeout.
			for _, n := range c.Nodes {
				want := map[string]string{"cluster-node-timeout": "15000", "cluster-replica-no-failover": "yes"}
				if got := configGet(t, n, "cluster-node-timeout", "cluster-replica-no-failover"); !maps.Equal(got, want) {
					t.Errorf("%s: CONFIG GET = %v; want %v", n.Addr, got, want)
				}
			}
			replica := c.AllowFailover(t, owner)
			for _, n := range c.Nodes {
				want := map[string]string{"cluster-node-timeout": "1000", "cluster-replica-no-failover": "yes"}
				if n == replica {
					want["cluster-replica-no-failover"] = "no"
				}
				if got := configGet(t, n, "cluster-node-timeout", "cluster-replica-no-failover"); !maps.Equal(got, want) {
					t.Errorf("%s: after AllowFailover(%s), CONFIG GET = %v; want %v", n.Addr, owner.Addr, got, want)
				}
			}
			owner.Kill()
			c.WaitOK(t, 30*time.Second)
			promoted, err := c.Owner(0)
			if err != nil || promoted != replica {
				t.Fatalf("after killing %s, Owner(0) = %v, %v; want its replica %s", owner.Addr, promoted, err, replica.Addr)
			}
			owner.Restart()
			c.WaitOK(t, 30*time.Second)
			if info, err := owner.Info("replication"); err != nil || info["role"] != "slave" {
				t.Errorf("restarted old primary: INFO replication = %v, %v; want role slave", info, err)
			}
			if primaries, err := c.Primaries(); err != nil || len(primaries) != 3 || slices.Contains(primaries, owner) {
				t.Errorf("Primaries() = %v, %v; want three without %s", addrs(primaries), err, owner.Addr)
			}
		})
	}
}

// TestClusterNode: one node in cluster mode serves every slot.
func TestClusterNode(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			c := testserver.StartClusterNode(t, kind)
			info, err := c.Nodes[0].Do("CLUSTER", "INFO")
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_size:1", "cluster_known_nodes:1"} {
				if !strings.Contains(info, want) {
					t.Errorf("CLUSTER INFO lacks %q:\n%s", want, info)
				}
			}
			if owner, err := c.Owner(16383); err != nil || owner != c.Nodes[0] {
				t.Errorf("Owner(16383) = %v, %v; want the one node", owner, err)
			}
		})
	}
}

// configGet returns the values of CONFIG GET for names on n.
func configGet(t *testing.T, n *testserver.Server, names ...string) map[string]string {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: n.Addr})
	defer c.Close()
	got := make(map[string]string)
	for _, name := range names {
		m, err := c.ConfigGet(context.Background(), name).Result()
		if err != nil {
			t.Fatalf("%s: CONFIG GET %s: %v", n.Addr, name, err)
		}
		maps.Copy(got, m)
	}
	return got
}

// TestShort: under go test -short, StartCluster and StartClusterNode skip
// the test before starting anything, and so does SkipShort;
// without -short, SkipShort does nothing.
func TestShort(t *testing.T) {
	short := testing.Short()
	defer flag.Set("test.short", strconv.FormatBool(short))
	for _, c := range []struct {
		name string
		f    func(t *testing.T)
	}{
		{"SkipShort", func(t *testing.T) { testserver.SkipShort(t, "it kills a server") }},
		{"StartCluster", func(t *testing.T) { testserver.StartCluster(t, testserver.Redis) }},
		{"StartClusterNode", func(t *testing.T) { testserver.StartClusterNode(t, testserver.Redis) }},
	} {
		if err := flag.Set("test.short", "true"); err != nil {
			t.Fatal(err)
		}
		var inner *testing.T
		returned := false
		t.Run(c.name+"/short", func(t *testing.T) {
			inner = t
			c.f(t)
			returned = true
		})
		if !inner.Skipped() || returned {
			t.Errorf("%s under -short: skipped %v, returned %v; want it skipped", c.name, inner.Skipped(), returned)
		}
	}
	if err := flag.Set("test.short", "false"); err != nil {
		t.Fatal(err)
	}
	var inner *testing.T
	t.Run("SkipShort/long", func(t *testing.T) { inner = t; testserver.SkipShort(t, "it kills a server") })
	if inner.Skipped() {
		t.Errorf("SkipShort without -short skipped the test")
	}
}

func addrs(ss []*testserver.Server) []string {
	var a []string
	for _, s := range ss {
		a = append(a, s.Addr)
	}
	return a
}
