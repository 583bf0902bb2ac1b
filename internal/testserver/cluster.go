package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a real Redis Cluster or Valkey Cluster on loopback ports:
// three primaries with one replica each, no persistence, and no failover
// unless a test allows it (see StartCluster). Its nodes are ordinary
// Servers, so a test can kill, pause or restart any of them.
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
// missing, and skips under go test -short (see SkipShort). If tb fails,
// each node's CLUSTER NODES and log are logged before the nodes stop.
//
// No replica takes over on its own (cluster-replica-no-failover), and a
// node is taken for failed only after NodeTimeout without an answer: a node
// starved of CPU on a loaded machine neither makes the cluster answer
// CLUSTERDOWN nor is failed over. A test that kills a primary to see it
// fail over calls AllowFailover first; CLUSTER FAILOVER works without it.
func StartCluster(tb testing.TB, kind Kind) *Cluster {
	tb.Helper()
	SkipShort(tb, "starts a cluster")
	Binary(tb, kind)
	Binary(tb, Kind(kind.cli()))
	c := &Cluster{Kind: kind}
	for range 6 {
		c.Nodes = append(c.Nodes, Start(tb, kind, clusterArgs...))
	}
	c.logOnFailure(tb)
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command(kind.cli(), args...).CombinedOutput(); err != nil {
		tb.Fatalf("testserver: %s --cluster create: %v\n%s", kind.cli(), err, out)
	}
	c.WaitOK(tb, 30*time.Second)
	return c
}

// NodeTimeout is the cluster-node-timeout of the nodes StartCluster and
// StartClusterNode start (Redis's default). A node that has not answered
// another's ping for this long is taken for failed (PFAIL), and a node
// that sees a primary failed, or most primaries unreachable, answers
// CLUSTERDOWN: with the 1 s a failover test wants, a node starved of CPU
// for a second on a loaded machine would be, in a test that kills nothing.
// The price is fewer pings: after a failover, the other nodes learn of a
// node's new role within NodeTimeout/2 (WaitOK waits for that).
const NodeTimeout = 15 * time.Second

// FailoverNodeTimeout is the cluster-node-timeout that AllowFailover sets
// on every running node: a killed primary's replica takes over about two
// seconds after the kill.
const FailoverNodeTimeout = time.Second

// clusterArgs are the options of every cluster node.
var clusterArgs = []string{
	"--cluster-enabled", "yes",
	"--cluster-config-file", "nodes.conf",
	"--cluster-node-timeout", strconv.FormatInt(NodeTimeout.Milliseconds(), 10),
	"--cluster-replica-no-failover", "yes", // until AllowFailover
	"--repl-diskless-sync-delay", "0", // replicas sync at once
	"--loglevel", "notice", // failure reports, failovers, state changes
}

// AllowFailover prepares the cluster for primary's failure: it lets
// primary's replica take over on its own (cluster-replica-no-failover no)
// and sets cluster-node-timeout to FailoverNodeTimeout on every running
// node, so that once primary stops answering, its replica is promoted
// about two seconds later, as in a cluster configured for fast failover.
// It returns the replica. Every other replica still never takes over on
// its own. Call it just before killing or pausing primary, then wait for
// the failover with WaitOK. A node started again by Restart has
// NodeTimeout again.
func (c *Cluster) AllowFailover(tb testing.TB, primary *Server) *Server {
	tb.Helper()
	replica, err := c.Replica(primary)
	if err != nil {
		tb.Fatal(err)
	}
	for _, n := range c.Nodes {
		if n.running() {
			c.configSet(tb, n, "cluster-node-timeout", strconv.FormatInt(FailoverNodeTimeout.Milliseconds(), 10))
		}
	}
	c.configSet(tb, replica, "cluster-replica-no-failover", "no")
	return replica
}

func (c *Cluster) configSet(tb testing.TB, n *Server, name, value string) {
	tb.Helper()
	if reply, err := n.Do("CONFIG", "SET", name, value); err != nil || reply != "OK" {
		tb.Fatalf("testserver: CONFIG SET %s %s on %s = %q, %v", name, value, n.Addr, reply, err)
	}
}

// logOnFailure logs, when tb ends failed and before the nodes stop, each
// node's view of the cluster and its log, which tells a failure the test
// did not expect (a node taken for failed, a failover) from a bug.
func (c *Cluster) logOnFailure(tb testing.TB) {
	tb.Cleanup(func() {
		if !tb.Failed() {
			return
		}
		for _, n := range c.Nodes {
			nodes, err := n.Do("CLUSTER", "NODES")
			if err != nil {
				nodes = err.Error()
			}
			log, err := os.ReadFile(filepath.Join(n.dir, "server.log"))
			if err != nil {
				log = []byte(err.Error())
			}
			tb.Logf("testserver: node %s: CLUSTER NODES:\n%s\nserver.log:\n%s", n.Addr, nodes, log)
		}
	})
}

// StartClusterNode starts one node of kind in cluster mode that serves
// all 16384 slots itself: a cluster with nothing to route between nodes,
// to tell what cluster mode costs from what spreading over nodes costs. It
// stops the node when tb ends, and skips under go test -short.
func StartClusterNode(tb testing.TB, kind Kind) *Cluster {
	tb.Helper()
	SkipShort(tb, "starts a cluster node")
	c := &Cluster{Kind: kind, Nodes: []*Server{Start(tb, kind, clusterArgs...)}}
	if _, err := c.Nodes[0].Do("CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		tb.Fatalf("testserver: CLUSTER ADDSLOTSRANGE on %s: %v", c.Nodes[0].Addr, err)
	}
	c.logOnFailure(tb)
	c.WaitOK(tb, 30*time.Second)
	return c
}

// WaitOK waits until every running node reports cluster_state:ok, knows
// all 16384 slots and sees each of them served by a running primary (so
// after a kill it waits for the failover), every running replica has
// synced with its primary (so it could take over in turn), and every
// running node sees each running node in the role, primary or replica of
// whom, that the node itself reports (a primary votes for a replica's
// failover only if it knows it for a replica), or fails tb after timeout.
// Nodes learn of a role change from the node itself, in a ping or its
// answer, which after a failover takes up to half the node timeout.
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
	views := make(map[*Server]map[string]nodeView)
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
		if err := n.shardIDsSettled(); err != nil {
			return err
		}
		views[n] = view
	}
	for n, view := range views {
		for m, mView := range views {
			self, seen := mView[m.Addr], view[m.Addr]
			if _, ok := view[m.Addr]; !ok {
				return fmt.Errorf("%s does not know %s", n.Addr, m.Addr)
			}
			if seen.replicaOf != self.replicaOf {
				return fmt.Errorf("%s sees %s as %s; it is %s", n.Addr, m.Addr, seen.role(), self.role())
			}
		}
	}
	return nil
}

// shardIDsSettled checks that n's nodes.conf gives every replica the
// shard id of its primary. Until the shard ids have spread through the
// cluster they may differ, and a node killed then cannot start again:
// valkey-server 8.0 rejects its own nodes.conf as corrupted (valkey
// issues 774 and 2171, fixed in later versions). Servers that write no
// shard ids pass.
func (n *Server) shardIDsSettled() error {
	conf, err := os.ReadFile(filepath.Join(n.dir, "nodes.conf"))
	if err != nil {
		return err
	}
	shard := make(map[string]string)   // node id → shard id
	primary := make(map[string]string) // replica id → its primary's id
	for _, line := range strings.Split(string(conf), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] == "vars" {
			continue
		}
		if _, id, ok := strings.Cut(f[1], "shard-id="); ok {
			shard[f[0]], _, _ = strings.Cut(id, ",")
		}
		if f[3] != "-" {
			primary[f[0]] = f[3]
		}
	}
	for replica, p := range primary {
		if shard[replica] != shard[p] {
			return fmt.Errorf("%s: nodes.conf gives replica %s shard id %q and its primary %s %q", n.Addr, replica, shard[replica], p, shard[p])
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
	primary   bool     // flags has master and not fail
	replicaOf string   // the ID of its primary if flags has slave, "" if master
	slots     [][2]int // served slot ranges, inclusive
}

func (v nodeView) role() string {
	if v.replicaOf == "" {
		return "a primary"
	}
	return "a replica of " + v.replicaOf
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
		if strings.Contains(flags, ",slave,") {
			v.replicaOf = f[3]
		}
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
