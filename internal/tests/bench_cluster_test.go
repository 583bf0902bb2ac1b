//go:build unix

package spigot_test

import (
	"context"
	"math"
	"runtime"
	"slices"
	"testing"

	"github.com/redis/rueidis"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/bench"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

// clusterGoroutines is the number of goroutines that BenchmarkCluster
// sends requests from.
const clusterGoroutines = 64

// maxShareDev is how far, in percentage points, the share of the requests
// that one primary of a three-primary cluster serves may stray from a
// third.
const maxShareDev = 5

// BenchmarkCluster measures each store on a cluster of three primaries
// (one replica each) beside the same store on one server of the same kind
// and on one node in cluster mode that serves every slot itself, named
// server=…/client=…/topology=single, …/topology=cluster-node and
// …/topology=cluster; the three run one after the other, so that the load
// of other processes changes little between them. Each sends Acquire of
// one token of roomy from 64 goroutines over the manyKeys keys of
// benchKeys, as the 64-goroutine many-key benchmarks of
// BenchmarkRedisStores do; every key holds state (see deficit), filled
// through the topology's own client (go-redis's a ClusterClient on both
// clusters). On a shared machine, run it a few times and compare medians:
//
//	go test -c -o /tmp/spigot.test . &&
//	for i in 1 2 3; do
//		SPIGOT_REQUIRE_SERVERS=1 /tmp/spigot.test -test.run='^$' -test.bench='^BenchmarkCluster$' -test.benchmem -test.benchtime=2s
//	done
//
// Where the client and all the servers share a machine's few cores,
// throughput (req/s) follows their total CPU time and cannot show a
// cluster scaling out. Read instead, per server and client, the clusters'
// metrics against the single server's:
//
//   - server-cpu-ns/op, the CPU time of the servers that serve requests
//     (the single server, the one node, or the three primaries) per
//     request: within 1.3× of the single server's, so that redirections
//     and the cluster's own bookkeeping stay cheap. cluster-node isolates
//     those costs; on the three-primary cluster, seven busy processes on
//     two cores also run the same work slower, which script-ns/op shows;
//   - script-ns/op, the time the serving servers spent inside the script
//     per request, by their own clocks: the same Lua work everywhere, so
//     it grows only when the servers compete for cores and caches, and
//     server-cpu-ns/op minus script-ns/op is what the rest (network,
//     parsing, routing) costs;
//   - primary1-%, primary2-%, primary3-%, the share of the scripts that
//     each primary ran (from INFO commandstats), and max-share-dev-%, the
//     largest distance of one from a third: at most 5 points, so that the
//     work really spreads;
//   - allocs/op, the client's: on a cluster, no more than on one server,
//     but for what the client library allocates more itself for a raw
//     EVALSHA on a cluster (TestClusterSpreadsBenchKeys checks it).
//
// The cluster also reports replica-cpu-ns/op, what its replicas spend
// per request (the single server has none); scripts/op, the scripts its
// primaries ran per request (1 unless a client resends); and
// redirects/op, the requests they rejected (with MOVED or ASK) per request.
// cpu-ns/op is the client process's CPU time per request, as in
// BenchmarkRedisStores.
func BenchmarkCluster(b *testing.B) {
	keys := benchKeys(manyKeys)
	// RunParallel starts parallelism × GOMAXPROCS goroutines.
	procs := runtime.GOMAXPROCS(0)
	p := (clusterGoroutines + procs - 1) / procs
	for _, kind := range testserver.Kinds {
		b.Run("server="+serverName(kind), func(b *testing.B) {
			srv := testserver.Start(b, kind)
			cl := testserver.StartCluster(b, kind)
			node := testserver.StartClusterNode(b, kind)
			primaries, replicas := clusterRoles(b, cl)
			topologies := []*topology{
				newTopology(b, "single", []string{srv.Addr}, false, []*testserver.Server{srv}, nil, keys),
				newTopology(b, "cluster-node", node.Addrs(), true, node.Nodes, nil, keys),
				newTopology(b, "cluster", cl.Addrs(), true, primaries, replicas, keys),
			}
			for i, c := range topologies[0].clients {
				for _, t := range topologies {
					b.Run("client="+c.name+"/topology="+t.name, func(b *testing.B) {
						benchParallel(b, t.meter, acquireCall(t.clients[i].store, keys), p, p*procs, len(keys))
					})
				}
			}
		})
	}
}

// A topology is where one benchmark's requests go: one server, or a
// cluster's primaries.
type topology struct {
	name    string
	clients []benchClient
	meter   *meter
}

// newTopology loads the scripts on the primaries (so that no benchmark
// meets a NOSCRIPT reply), connects each client of benchClients to addrs,
// fills keys through the last one, checks that the primaries hold them, and
// warms every client. The meter meters the primaries, and the replicas
// apart.
func newTopology(tb testing.TB, name string, addrs []string, cluster bool, primaries, replicas []*testserver.Server, keys []string) *topology {
	tb.Helper()
	t := &topology{name: name, meter: &meter{serving: serverAddrs(primaries), replicas: serverAddrs(replicas)}}
	for _, p := range primaries {
		loadScripts(tb, p)
	}
	t.clients = benchClients(tb, addrs, cluster, keys)
	fill(tb, t.clients[len(t.clients)-1].store, keys)
	checkKeys(tb, len(keys), primaries...)
	for _, c := range t.clients {
		warm(tb, acquireCall(c.store, keys))
	}
	return t
}

// clusterRoles returns the cluster's three primaries and the other nodes,
// its replicas, in the order of c.Nodes.
func clusterRoles(tb testing.TB, c *testserver.Cluster) (primaries, replicas []*testserver.Server) {
	tb.Helper()
	primaries, err := c.Primaries()
	if err != nil {
		tb.Fatalf("the cluster's primaries: %v", err)
	}
	if len(primaries) != 3 {
		tb.Fatalf("the cluster has %d primaries serving slots; want 3", len(primaries))
	}
	for _, n := range c.Nodes {
		if !slices.Contains(primaries, n) {
			replicas = append(replicas, n)
		}
	}
	return primaries, replicas
}

func serverAddrs(srvs []*testserver.Server) []string {
	var addrs []string
	for _, s := range srvs {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// TestClusterSpreadsBenchKeys checks, without timing anything, on a
// cluster of each kind, what BenchmarkCluster relies on: that the requests
// on the benchmark's keys spread evenly over the three primaries, each
// running a third of them give or take maxShareDev points, and every
// request exactly one script; and that no store allocates more per Acquire
// on the cluster than on one server, beyond what its client library itself
// allocates more for a raw EVALSHA on a cluster.
func TestClusterSpreadsBenchKeys(t *testing.T) {
	keys := benchKeys(manyKeys)
	for _, kind := range testserver.Kinds {
		t.Run("server="+serverName(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			cl := testserver.StartCluster(t, kind)
			primaries, _ := clusterRoles(t, cl)
			loadScripts(t, srv)
			for _, p := range primaries {
				loadScripts(t, p)
			}

			m := &meter{serving: serverAddrs(primaries)}
			start := m.read(t)
			sendAcquires(t, cl.Addrs(), keys)
			c := bench.Per(start, m.read(t), int64(len(keys)))
			if c.ScriptsPerOp != 1 {
				t.Errorf("the primaries ran %v scripts per request for %d requests; want one each", c.ScriptsPerOp, len(keys))
			}
			if c.MaxShareDev > maxShareDev {
				t.Errorf("the primaries ran %.1f%% of the scripts; want each within %d points of a third", c.Shares, maxShareDev)
			}

			single := benchClients(t, []string{srv.Addr}, false, keys)
			cluster := benchClients(t, cl.Addrs(), true, keys)
			for i := range single {
				s, c := single[i], cluster[i]
				// What else the process allocates meanwhile (the client's
				// background work, the race detector's) only adds to a
				// count, and a loaded machine adds up to about an
				// allocation a call in a round (go-redis's raw EVALSHA read
				// 13.06 in most rounds, 13.94 in one): keep each count's
				// least over up to three rounds, and stop once spigot's
				// share holds.
				sStore, sRaw, cStore, cRaw := math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)
				for range 3 {
					sa := allocsPerCall(t, len(keys), acquireCall(s.store, keys), s.raw(wire.SHA1()))
					ca := allocsPerCall(t, len(keys), acquireCall(c.store, keys), c.raw(wire.SHA1()))
					sStore, sRaw, cStore, cRaw = min(sStore, sa[0]), min(sRaw, sa[1]), min(cStore, ca[0]), min(cRaw, ca[1])
					if cStore-cRaw <= sStore-sRaw+0.5 {
						break
					}
				}
				if cStore-cRaw > sStore-sRaw+0.5 { // half an allocation a call: the noise of a loaded machine
					t.Errorf("%s: Acquire allocates %.2f times on the cluster against %.2f for its raw EVALSHA, %.2f on one server against %.2f; want spigot's share no higher on the cluster",
						s.name, cStore, cRaw, sStore, sRaw)
				}
				t.Logf("%s: allocations per Acquire: %.2f on one server, %.2f on the cluster; per raw EVALSHA: %.2f and %.2f", s.name, sStore, cStore, sRaw, cRaw)
			}
		})
	}
}

// sendAcquires sends the requests of BenchmarkCluster on keys to the
// cluster at addrs, one on each key, as the stores send them: EVALSHA of
// spigot's script on the key's full name, taking one token of roomy. It
// sends them in batches with rueidis's DoMulti, which the race detector
// slows much less than a store's one call per request.
func sendAcquires(t *testing.T, addrs []string, keys []string) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatalf("rueidis on %v: %v", addrs, err)
	}
	defer c.Close()
	argv := wire.NewArgs(nil).Op(spigot.Op{Limit: roomy, N: 1})
	const batch = 1000
	cmds := make(rueidis.Commands, 0, batch)
	for i, k := range keys {
		full := store.Key(store.DefaultPrefix, roomy, k)
		cmds = append(cmds, c.B().Evalsha().Sha1(wire.SHA1()).Numkeys(1).Key(full).Arg(argv[:]...).Build())
		if len(cmds) < batch && i < len(keys)-1 {
			continue
		}
		for j, r := range c.DoMulti(context.Background(), cmds...) {
			if v, err := r.ToArray(); err != nil || len(v) != wire.Fields {
				t.Fatalf("EVALSHA on %q = %v, %v; want %d values", keys[i-len(cmds)+1+j], v, err, wire.Fields)
			}
		}
		cmds = cmds[:0]
	}
}

// allocsPerCall warms each call and returns its allocations, each run on
// the next of nkeys keys, from one goroutine: the least of five rounds of
// 1000 runs, the calls taking turns in each round, as a fraction (not
// truncated, as testing.AllocsPerRun's). The client's own goroutines
// allocate too, more or less with how the scheduler batches their work on
// a loaded machine, and a burst of background work (a refresh of a
// cluster's topology, the race detector's own) would count; taking turns
// shows every call the client in the same states.
func allocsPerCall(t *testing.T, nkeys int, calls ...benchCall) []float64 {
	t.Helper()
	least := make([]float64, len(calls))
	for j, call := range calls {
		warm(t, call)
		least[j] = math.Inf(1)
	}
	var err error
	const runs = 1000
	for range 5 {
		for j, call := range calls {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := range runs {
				if e := call(context.Background(), i%nkeys); e != nil && err == nil {
					err = e
				}
			}
			runtime.ReadMemStats(&after)
			least[j] = min(least[j], float64(after.Mallocs-before.Mallocs)/runs)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return least
}
