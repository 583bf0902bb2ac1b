package testserver_test

import (
	"slices"
	"strings"
	"testing"
	"time"

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

			owner.Kill()
			c.WaitOK(t, 30*time.Second)
			promoted, err := c.Owner(0)
			if err != nil || promoted == owner || slices.Contains(c.Nodes[:3], promoted) {
				t.Fatalf("after killing %s, Owner(0) = %v, %v; want its replica", owner.Addr, promoted, err)
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

func addrs(ss []*testserver.Server) []string {
	var a []string
	for _, s := range ss {
		a = append(a, s.Addr)
	}
	return a
}
