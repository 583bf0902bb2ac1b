package testserver

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a real Redis Cluster or Valkey Cluster on loopback ports:
// three primaries with one replica each, no persistence, a short node
// timeout. Its nodes are ordinary Servers, so a test can kill, pause or
// restart any of them.
type Cluster struct {
	Kind  Kind
	Nodes []*Server // the first three are the primaries at creation
}

// Addrs returns every node's address, for a client's seed list.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// cli is the command-line client that ships with kind's server.
func (k Kind) cli() string { return strings.TrimSuffix(string(k), "-server") + "-cli" }

// StartCluster starts six nodes of kind, joins them into a cluster of three
// primaries with one replica each (with redis-cli or valkey-cli --cluster
// create), waits until every node reports cluster_state:ok, and stops the
// nodes when tb ends. It skips or fails like Start when the binaries are
// missing.
func StartCluster(tb testing.TB, kind Kind) *Cluster {
	tb.Helper()
	Binary(tb, kind)
	Binary(tb, Kind(kind.cli()))
	c := &Cluster{Kind: kind}
	for range 6 {
		c.Nodes = append(c.Nodes, Start(tb, kind,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000",
		))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(kind.cli(), args...).CombinedOutput(); err != nil {
		tb.Fatalf("testserver: %s --cluster create: %v\n%s", kind.cli(), err, out)
	}
	c.WaitOK(tb, 30*time.Second)
	return c
}

// WaitOK waits until every running node reports cluster_state:ok and
// knows all 16384 slots, or fails tb after timeout.
func (c *Cluster) WaitOK(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := c.ok()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testserver: cluster not ok after %v: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) ok() error {
	for _, n := range c.Nodes {
		if !n.running() {
			continue
		}
		info, err := clusterInfo(n.Addr)
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return fmt.Errorf("%s: %s", n.Addr, strings.Join(strings.Fields(info), " "))
		}
	}
	return nil
}

// clusterInfo returns the text of CLUSTER INFO from addr.
func clusterInfo(addr string) (string, error) {
	out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", addr[strings.LastIndexByte(addr, ':')+1:], "CLUSTER", "INFO").Output()
	return string(out), err
}

func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}
