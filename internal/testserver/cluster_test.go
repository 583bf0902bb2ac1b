package testserver_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/spigot-go/spigot/internal/testserver"
)

// TestCluster: a started cluster has six nodes, three of them primaries
// that share the 16384 slots, and every node reports cluster_state:ok.
func TestCluster(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			c := testserver.StartCluster(t, kind)
			if n := len(c.Addrs()); n != 6 {
				t.Fatalf("got %d nodes, want 6", n)
			}
			for _, addr := range c.Addrs() {
				port := addr[strings.LastIndexByte(addr, ':')+1:]
				out, err := exec.Command("redis-cli", "-p", port, "CLUSTER", "INFO").Output()
				if err != nil {
					t.Fatal(err)
				}
				info := string(out)
				for _, want := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_size:3", "cluster_known_nodes:6"} {
					if !strings.Contains(info, want) {
						t.Errorf("%s: CLUSTER INFO lacks %q:\n%s", addr, want, info)
					}
				}
			}
		})
	}
}
