package testserver

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
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
		c.Nodes = append(c.Nodes, Start(tb, kind, clusterArgs...))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(kind.cli(), args...).CombinedOutput(); err != nil {
		tb.Fatalf("testserver: %s --cluster create: %v\n%s", kind.cli(), err, out)
	}
	c.WaitOK(tb, 30*time.Second)
	return c
}

// clusterArgs are the options of every cluster node.
var clusterArgs = []string{
	"--cluster-enabled", "yes",
	"--cluster-config-file", "nodes.conf",
	"--cluster-node-timeout", "1000",
	"--repl-diskless-sync-delay", "0", // replicas sync at once
}

// StartClusterNode starts one node of kind in cluster mode that serves
// all 16384 slots itself: a cluster with nothing to route between nodes,
// to tell what cluster mode costs from what spreading over nodes costs. It
// stops the node when tb ends.
func StartClusterNode(tb testing.TB, kind Kind) *Cluster {
	tb.Helper()
	c := &Cluster{Kind: kind, Nodes: []*Server{Start(tb, kind, clusterArgs...)}}
	if _, err := c.Nodes[0].Do("CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		tb.Fatalf("testserver: CLUSTER ADDSLOTSRANGE on %s: %v", c.Nodes[0].Addr, err)
	}
	c.WaitOK(tb, 30*time.Second)
	return c
}

// WaitOK waits until every running node reports cluster_state:ok, knows
// all 16384 slots and sees each of them served by a running primary (so
// after a kill it waits for the failover), and every running replica has
// synced with its primary (so it could take over in turn), or fails tb
// after timeout.
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
		repl, err := n.Info("replication")
		if err != nil {
			return err
		}
		if repl["role"] == "slave" && repl["master_link_status"] != "up" {
			// A replica that has not synced with its primary would
			// never be promoted in its place.
			return fmt.Errorf("%s: a replica whose link to its primary is %s", n.Addr, repl["master_link_status"])
		}
		view, err := c.viewFrom(n)
		if err != nil {
			return err
		}
		for addr, v := range view {
			if len(v.slots) > 0 && !c.isRunning(addr) {
				return fmt.Errorf("%s: slots %v are still served by %s, which is down", n.Addr, v.slots, addr)
			}
		}
	}
	return nil
}

func (c *Cluster) isRunning(addr string) bool {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n.running()
		}
	}
	return false
}

// clusterInfo returns the text of CLUSTER INFO from addr.
func clusterInfo(addr string) (string, error) { return Do(addr, "CLUSTER", "INFO") }

// Primaries returns the running nodes that serve slots now, in the order
// of c.Nodes. After a failover a promoted replica is among them and the
// killed primary is not.
func (c *Cluster) Primaries() ([]*Server, error) {
	view, err := c.view()
	if err != nil {
		return nil, err
	}
	var ps []*Server
	for _, n := range c.Nodes {
		if p, ok := view[n.Addr]; ok && p.primary && len(p.slots) > 0 && n.running() {
			ps = append(ps, n)
		}
	}
	return ps, nil
}

// KeySlot returns the slot of key, from CLUSTER KEYSLOT.
func (c *Cluster) KeySlot(key string) (int, error) {
	n, err := c.anyNode()
	if err != nil {
		return 0, err
	}
	reply, err := n.Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(reply)
}

// Owner returns the primary that serves slot in the cluster's current
// view (CLUSTER NODES on a running node).
func (c *Cluster) Owner(slot int) (*Server, error) {
	view, err := c.view()
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if view[n.Addr].serves(slot) {
			return n, nil
		}
	}
	return nil, fmt.Errorf("testserver: no primary serves slot %d", slot)
}

// A nodeView is one line of CLUSTER NODES.
type nodeView struct {
	primary bool     // flags has master and not fail
	slots   [][2]int // served slot ranges, inclusive
}

// serves reports whether the node is a primary that serves slot.
func (v nodeView) serves(slot int) bool {
	return v.primary && slices.ContainsFunc(v.slots, func(r [2]int) bool { return r[0] <= slot && slot <= r[1] })
}

// view parses CLUSTER NODES from a running node, by address.
func (c *Cluster) view() (map[string]nodeView, error) {
	n, err := c.anyNode()
	if err != nil {
		return nil, err
	}
	return c.viewFrom(n)
}

// viewFrom parses CLUSTER NODES from node n.
func (c *Cluster) viewFrom(n *Server) (map[string]nodeView, error) {
	text, err := n.Do("CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	view := make(map[string]nodeView)
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		// <id> <ip:port@cport[,hostname]> <flags> <primary> <ping> <pong> <epoch> <link> <slot>...
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("testserver: CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		if strings.HasPrefix(addr, ":") { // a lone node does not know its own IP
			addr = "127.0.0.1" + addr
		}
		flags := "," + f[2] + ","
		v := nodeView{primary: strings.Contains(flags, ",master,") && !strings.Contains(flags, ",fail")}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot being migrated or imported
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("testserver: CLUSTER NODES slots %q", r)
			}
			v.slots = append(v.slots, [2]int{a, b})
		}
		view[addr] = v
	}
	return view, nil
}

func (c *Cluster) anyNode() (*Server, error) {
	for _, n := range c.Nodes {
		if n.running() {
			return n, nil
		}
	}
	return nil, fmt.Errorf("testserver: no node of the cluster is running")
}

func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Replica returns the replica of primary, from its INFO replication.
func (c *Cluster) Replica(primary *Server) (*Server, error) {
	info, err := primary.Info("replication")
	if err != nil {
		return nil, err
	}
	// slave0:ip=127.0.0.1,port=7005,state=online,offset=42,lag=0
	for _, field := range strings.Split(info["slave0"], ",") {
		if port, ok := strings.CutPrefix(field, "port="); ok {
			for _, n := range c.Nodes {
				if strings.HasSuffix(n.Addr, ":"+port) {
					return n, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("testserver: %s has no known replica (slave0:%s)", primary.Addr, info["slave0"])
}

// WaitOwner waits until every running node's view has want serving slot,
// or fails tb after timeout. It is for a failover that leaves every node
// running (CLUSTER FAILOVER), where WaitOK has nothing to wait for.
func (c *Cluster) WaitOwner(tb testing.TB, slot int, want *Server, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := c.owned(slot, want)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testserver: after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) owned(slot int, want *Server) error {
	for _, n := range c.Nodes {
		if !n.running() {
			continue
		}
		view, err := c.viewFrom(n)
		if err != nil {
			return err
		}
		if !view[want.Addr].serves(slot) {
			return fmt.Errorf("%s does not see %s serve slot %d", n.Addr, want.Addr, slot)
		}
	}
	return nil
}
