//go:build unix

package spigot_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/bench"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
	redisstore "github.com/spigot-go/spigot/store/redis"
	rueidisstore "github.com/spigot-go/spigot/store/rueidis"
	valkeystore "github.com/spigot-go/spigot/store/valkey"
)

// The Redis-protocol stores, on real servers (started by testserver) with
// the server's clock, next to two baselines in the same run: each client
// library sending EVALSHA itself (the client's own cost), and
// redis-benchmark sending EVALSHA of spigot's script (the server's own
// ceiling). On a shared machine, run the whole set a few times and compare
// medians:
//
//	go test -c -o /tmp/spigot.test . &&
//	for i in 1 2 3 4 5; do
//		/tmp/spigot.test -test.run='^$' -test.bench='RedisStores|ServerCeiling' -test.benchmem -test.benchtime=1s
//	done
//
// Add /server=redis to the pattern to leave out valkey-server. Besides
// ns/op and allocs/op, every benchmark of a client reports its throughput
// as req/s, so that ratios read off directly, and the CPU time that the
// client process (cpu-ns/op) and the server (server-cpu-ns/op) spend per
// request, which the load of other processes changes much less than
// throughput: on a machine where the two share the cores, throughput
// follows their sum.

// deficit is what every benchmark key owes before the timer starts: a
// million tokens of roomy's billion, refilled at 1/s, so that each key keeps
// its state (its TTL is ResetAfter, 11 days) however slowly a walk over
// many keys comes back to it.
const deficit = 1_000_000

// A benchCall sends one request on the i-th key of benchKeys(manyKeys).
type benchCall func(ctx context.Context, i int) error

// A benchClient is one client library: its store and its raw EVALSHA of a
// script by SHA-1, with the same connection settings (the library's
// defaults).
type benchClient struct {
	name  string
	store spigot.Store
	// grouped and ungrouped are stores on the same client with group
	// commit on and off.
	grouped, ungrouped spigot.Store
	raw                func(sha string) benchCall
	// paced returns a store on the same client on clock c, whose keys
	// are named apart from store's (another prefix).
	paced func(c clock.Clock) spigot.Store
}

// BenchmarkRedisStores measures each store on each server, named
// server=…/client=…/goroutines=…/keys=…/call=…, where call is
//
//   - spigot: the store's Acquire of one token of roomy, without group
//     commit;
//   - spigot-group-commit: the same, with group commit
//     (WithGroupCommit(true));
//   - evalsha-spigot-script: the same client sending EVALSHA of spigot's
//     script with the same key and arguments, built once: the store's own
//     cost is the difference;
//   - evalsha-noop-script: the same, of bench.NoopScript: the client's own cost,
//     the server doing next to nothing;
//   - spigot-cancelable, evalsha-spigot-script-cancelable: spigot and
//     evalsha-spigot-script on a context that can be cancelled, as a
//     request's is (and as spigot bench's is), where the others have
//     context.Background.
//
// The calls of one configuration run one after the other, so that
// the load of other processes changes little between them. A
// configuration is one goroutine on one key (latency), or 64 or 256
// goroutines on one hot key or on manyKeys keys. Every key holds state
// (see deficit).
//
// The clients keep their libraries' defaults: go-redis keeps a pool of 10
// connections per GOMAXPROCS, one request in flight on each; valkey-go and
// rueidis pipeline every caller's requests over a few shared connections.
// Those two answer a lone caller on its own goroutine until they first see
// concurrent calls, and pipeline for good after that, as a busy service's
// clients do: warm sends them there before any benchmark, so that every
// benchmark of a client runs in the same mode.
//
// Then come the benchmarks of every kind of limit (see redisKinds), the
// token bucket's first: compare each kind with it, in one run, by
// req/s and by server-cpu-ns/op, which moves less with the load of other
// processes:
//
//	/tmp/spigot.test -test.run='^$' -test.benchtime=1s \
//		-test.bench='^BenchmarkRedisStores$/server=/client=/goroutines=64$/kind=/(keys=|denied|limit=)'
func BenchmarkRedisStores(b *testing.B) {
	keys := benchKeys(manyKeys)
	procs := runtime.GOMAXPROCS(0)
	type config struct{ parallelism, goroutines, keys int }
	configs := []config{{0, 1, 1}}
	for _, want := range []int{64, 256} {
		// RunParallel starts parallelism × GOMAXPROCS goroutines: name
		// the benchmark after the number it really starts.
		p := (want + procs - 1) / procs
		configs = append(configs, config{p, p * procs, 1}, config{p, p * procs, manyKeys})
	}

	for _, kind := range testserver.Kinds {
		b.Run("server="+serverName(kind), func(b *testing.B) {
			srv := testserver.Start(b, kind)
			loadScripts(b, srv)
			clients := benchClients(b, []string{srv.Addr}, false, keys)
			fill(b, clients[len(clients)-1].store, keys)
			checkKeys(b, len(keys), srv)
			m := &meter{serving: []string{srv.Addr}}

			kinds := newRedisKinds(b, srv, clients[len(clients)-1].store, keys)

			for _, c := range clients {
				warm(b, c.raw(bench.NoopSHA1))
				calls := []struct {
					name string
					call benchCall
				}{
					{"spigot", acquireCall(c.ungrouped, keys)},
					{"spigot-group-commit", acquireCall(c.grouped, keys)},
					{"evalsha-spigot-script", c.raw(wire.SHA1())},
					{"evalsha-noop-script", c.raw(bench.NoopSHA1)},
					{"spigot-cancelable", cancelable(b, acquireCall(c.ungrouped, keys))},
					{"evalsha-spigot-script-cancelable", cancelable(b, c.raw(wire.SHA1()))},
				}
				for _, cf := range configs {
					name := fmt.Sprintf("client=%s/goroutines=%d/keys=%d", c.name, cf.goroutines, cf.keys)
					b.Run(name, func(b *testing.B) {
						for _, call := range calls {
							b.Run("call="+call.name, func(b *testing.B) {
								if cf.goroutines == 1 {
									benchSerial(b, m, call.call)
								} else {
									benchParallel(b, m, call.call, cf.parallelism, cf.goroutines, cf.keys)
								}
							})
						}
					})
				}
			}
			kinds.run(b, m, clients, procs, keys)
		})
	}
}

// redisKindGoroutines is the number of goroutines of the benchmarks of
// each kind of limit on the Redis-protocol stores.
const redisKindGoroutines = 64

// redisKinds are the benchmarks of each kind of limit on one server,
// named client=…/goroutines=64/kind=…/…, with the kinds of BenchmarkMemory:
//
//   - keys=64: each goroutine sends its own key, mostly admitted, in the
//     steady state of BenchmarkMemory's hot key: the store of each key is
//     on its own pacedClock, a request every hotPace (a sliding log holds
//     L−1 entries, and its oldest leaves at each request); it reports
//     what the server holds for a key then (see reportStored);
//   - keys=100000: the goroutines walk manyKeys keys, every request
//     admitted, on the server's clock; every key holds state, as for roomy
//     (see deficit). The buckets and windows of BenchmarkMemory, with
//     windows of an hour here, so that a key's state lasts between two
//     visits (a sliding log has no such variant: its server's work is
//     keys=64's);
//   - denied: every goroutine on one key whose limit is used up (see
//     useUp), every request denied, on the server's clock.
//
// Each variant reports, besides the metrics of benchParallel, the share of
// requests of the other outcome (denied/op, admitted/op; see reportOther).
// A variant runs on every client library in turn, and they go on from the
// states the one before left.
type redisKinds struct {
	srv    *testserver.Server
	clocks map[string][]*pacedClock // kind name → a clock per key of keys=64
	many   map[string]spigot.Limit  // kind name → its limit of keys=100000
	other  atomic.Int64             // the requests of the other outcome
}

// newRedisKinds, for srv, fills the keys of keys=100000 through s (the server's
// clock), for every kind that has the variant.
func newRedisKinds(tb testing.TB, srv *testserver.Server, s spigot.Store, keys []string) *redisKinds {
	tb.Helper()
	rk := &redisKinds{srv: srv, clocks: map[string][]*pacedClock{}, many: map[string]spigot.Limit{
		"token-bucket":   roomy, // fill has filled its keys
		"leaky-bucket":   spigot.Must(spigot.NewLeakyBucket("bench-leaky", 1_000_000_000, spigot.PerSecond(1))),
		"fixed-window":   spigot.Must(spigot.NewFixedWindow("bench-fixed-hour", spigot.PerHour(1_000_000_000), 0)),
		"sliding-window": spigot.Must(spigot.NewSlidingWindow("bench-sliding-hour", spigot.PerHour(1_000_000_000))),
	}}
	for _, l := range rk.many {
		if l != roomy {
			fillLimit(tb, s, l, keys)
		}
	}
	for _, k := range benchKinds {
		clocks := make([]*pacedClock, redisKindGoroutines)
		for g := range clocks {
			clocks[g] = newPacedClock(hotPace)
		}
		rk.clocks[k.name] = clocks
	}
	return rk
}

// run runs the benchmarks of every kind on every client, one variant of
// a kind on each client in turn, so that the keys of keys=64 keep their
// state from one client to the next (a sliding log's lasts its window).
func (rk *redisKinds) run(b *testing.B, m *meter, clients []benchClient, procs int, keys []string) {
	p := (redisKindGoroutines + procs - 1) / procs
	goroutines := p * procs
	if goroutines != redisKindGoroutines {
		b.Fatalf("goroutines=%d: GOMAXPROCS %d does not divide %d", goroutines, procs, redisKindGoroutines)
	}
	for _, k := range benchKinds {
		name := func(c benchClient, variant string) string {
			return fmt.Sprintf("client=%s/goroutines=%d/kind=%s/%s", c.name, goroutines, k.name, variant)
		}
		// keys=64: a store per key, each on its key's clock, on every
		// client.
		hot := k.admitting(hotPace)
		for _, c := range clients {
			stores := make([]spigot.Store, goroutines)
			for g := range stores {
				stores[g] = c.paced(rk.clocks[k.name][g])
			}
			b.Run(name(c, fmt.Sprintf("keys=%d", goroutines)), func(b *testing.B) {
				steady(b, stores, hot, keys)
				rk.bench(b, m, hot, p, goroutines, goroutines, true, func(ctx context.Context, i int) (spigot.Decision, error) {
					return stores[i].Do(ctx, spigot.Op{Limit: hot, Key: keys[i], N: 1})
				})
				rk.reportStored(b, store.Key(pacedPrefix, hot, keys[0]))
			})
		}
		if l, ok := rk.many[k.name]; ok {
			for _, c := range clients {
				b.Run(name(c, "keys="+strconv.Itoa(len(keys))), func(b *testing.B) {
					rk.bench(b, m, l, p, goroutines, len(keys), true, func(ctx context.Context, i int) (spigot.Decision, error) {
						return c.store.Do(ctx, spigot.Op{Limit: l, Key: keys[i], N: 1})
					})
				})
			}
		}
		for _, c := range clients {
			b.Run(name(c, "denied"), func(b *testing.B) {
				l := k.denying
				useUp(b, c.store, l, keys[hotKey]) // whatever it held
				rk.bench(b, m, l, p, goroutines, 1, false, func(ctx context.Context, i int) (spigot.Decision, error) {
					return c.store.Do(ctx, spigot.Op{Limit: l, Key: keys[i], N: 1})
				})
			})
		}
	}
}

// reportStored reports what the server holds for the key named full:
// the bytes of its value (value-B/key) and, by MEMORY USAGE, of the key
// whole (stored-B/key).
func (rk *redisKinds) reportStored(b *testing.B, full string) {
	b.Helper()
	for _, q := range []struct{ unit, cmd string }{{"value-B/key", "STRLEN"}, {"stored-B/key", "MEMORY"}} {
		args := []string{q.cmd, full}
		if q.cmd == "MEMORY" {
			args = []string{"MEMORY", "USAGE", full}
		}
		reply, err := rk.srv.Do(args...)
		if err != nil {
			b.Fatalf("%s on %s: %v", strings.Join(args, " "), rk.srv.Addr, err)
		}
		n, err := strconv.Atoi(reply)
		if err != nil {
			b.Fatalf("%s = %q: %v", strings.Join(args, " "), reply, err)
		}
		b.ReportMetric(float64(n), q.unit)
	}
}

// steady sends Takes of one token of l to each of the keys of keys=64 at
// once (keys[g] on stores[g]) until its state is the steady one: a sliding
// log holds Capacity−1 entries after a Take (one is Remaining), which takes
// up to Capacity Takes when it has expired; any other kind needs one.
func steady(tb testing.TB, stores []spigot.Store, l spigot.Limit, keys []string) {
	tb.Helper()
	errs := make(chan error, len(stores))
	for g, s := range stores {
		go func() {
			for range l.Capacity() + 1 {
				d, err := s.Do(context.Background(), spigot.Op{Limit: l, Key: keys[g], N: 1})
				if err != nil || l.Kind() != spigot.SlidingLog || d.Remaining == 1 {
					errs <- err
					return
				}
			}
			errs <- fmt.Errorf("%v: no steady state on %q", l, keys[g])
		}()
	}
	for range stores {
		if err := <-errs; err != nil {
			tb.Fatal(err)
		}
	}
}

// bench runs do from goroutines goroutines over nkeys keys (as
// benchParallel), and reports the share of requests whose outcome was not
// allowed as reportOther does.
func (rk *redisKinds) bench(b *testing.B, m *meter, l spigot.Limit, p, goroutines, nkeys int, allowed bool, do func(context.Context, int) (spigot.Decision, error)) {
	rk.other.Store(0)
	benchParallel(b, m, func(ctx context.Context, i int) error {
		d, err := do(ctx, i)
		if err == nil && d.Allowed() != allowed {
			rk.other.Add(1)
		}
		return err
	}, p, goroutines, nkeys)
	reportOther(b, l, allowed, int(rk.other.Load()), b.N)
}

// cancelable returns call on a context that can be cancelled (and never
// is), as a request's context is, in place of the benchmark's
// context.Background: a store may take another path for a call whose
// context can end (see store/valkey's doc).
func cancelable(tb testing.TB, call benchCall) benchCall {
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	return func(_ context.Context, i int) error { return call(ctx, i) }
}

// acquireCall returns the call of the stores' benchmarks: s's Acquire of
// one token of roomy on keys[i], which must be allowed.
func acquireCall(s spigot.Store, keys []string) benchCall {
	return func(ctx context.Context, i int) error {
		a, err := s.Do(ctx, spigot.Op{Limit: roomy, Key: keys[i], N: 1})
		if err == nil && !a.Allowed() {
			err = fmt.Errorf("Acquire(%q) = %+v; want allowed", keys[i], a)
		}
		return err
	}
}

// warm sends call from many goroutines at once, a few times each,
// goroutine g on the g-th key, so that on a cluster the connections to
// every primary see concurrent calls too.
func warm(tb testing.TB, call benchCall) {
	tb.Helper()
	const goroutines, calls = 64, 16
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			var err error
			for range calls {
				if err = call(context.Background(), g); err != nil {
					break
				}
			}
			errs <- err
		}()
	}
	for range goroutines {
		if err := <-errs; err != nil {
			tb.Fatal(err)
		}
	}
}

// benchSerial runs call from one goroutine on the hot key.
func benchSerial(b *testing.B, m *meter, call benchCall) {
	ctx := context.Background()
	b.ReportAllocs()
	start := m.read(b)
	for b.Loop() {
		if err := call(ctx, hotKey); err != nil {
			b.Fatal(err)
		}
	}
	m.report(b, start)
}

// benchParallel runs call from goroutines goroutines. With one key they all
// send the hot key; with more, goroutine g walks keys g, g+goroutines,
// g+2×goroutines…, so no two goroutines share a key and all nkeys are used.
// Besides the meter's metrics, it reports the 99th percentile of the
// calls' latency (p99-ns).
func benchParallel(b *testing.B, m *meter, call benchCall, parallelism, goroutines, nkeys int) {
	benchParallelEach(b, m, func() benchCall { return call }, parallelism, goroutines, nkeys)
}

// benchParallelEach is benchParallel for a call that holds buffers of its
// own, such as a DoMulti's ops: each goroutine sends the call that one call
// of each returns to it.
func benchParallelEach(b *testing.B, m *meter, each func() benchCall, parallelism, goroutines, nkeys int) {
	ctx := context.Background()
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies []time.Duration
	)
	b.SetParallelism(parallelism)
	b.ReportAllocs()
	start := m.read(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := int(next.Add(1)-1) % goroutines
		call := each()
		i := g
		if nkeys == 1 {
			i = hotKey
		}
		var mine []time.Duration
		defer func() {
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		}()
		for pb.Next() {
			t := time.Now()
			err := call(ctx, i)
			mine = append(mine, time.Since(t))
			if err != nil {
				b.Error(err)
				return
			}
			if nkeys > 1 {
				if i += goroutines; i >= nkeys {
					i = g
				}
			}
		}
	})
	b.StopTimer()
	m.report(b, start)
	if len(latencies) > 0 {
		slices.Sort(latencies)
		b.ReportMetric(float64(latencies[len(latencies)*99/100]), "p99-ns")
	}
}

// A meter is a bench.Meter for the benchmarks: it fails the benchmark
// when it cannot read a server. A meter of no servers (for a store in
// this process) reads the client only.
type meter struct {
	serving  []string // the addresses of the servers that serve requests
	replicas []string // a cluster's replicas, metered apart
}

func (m *meter) read(tb testing.TB) bench.Reading {
	tb.Helper()
	r, err := (&bench.Meter{Serving: m.serving, Replicas: m.replicas}).Read()
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// report reports the benchmark's throughput in requests per second, and
// the CPU time per request that the client spent since start (cpu-ns/op:
// the whole process, with the client library's own goroutines) and that
// the serving servers spent (server-cpu-ns/op), and the time they spent
// inside the script by their own clocks (script-ns/op: the same work
// everywhere, so it grows only when the servers wait for a core); a meter
// of no servers reports only the first two. With replicas it reports
// theirs (replica-cpu-ns/op). With several serving servers it reports the
// share of the scripts that the n-th one ran (primaryn-%), the largest
// distance of a share from an even split (max-share-dev-%), the scripts
// run per request (scripts/op: 1 unless a client resends) and the calls
// redirected per request (redirects/op: the ones a server rejected).
func (m *meter) report(b *testing.B, start bench.Reading) {
	b.Helper()
	end := m.read(b)
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "req/s")
	}
	c := bench.Per(start, end, int64(b.N))
	b.ReportMetric(float64(c.ClientCPU), "cpu-ns/op")
	if len(m.serving) == 0 { // a store in this process
		return
	}
	b.ReportMetric(float64(c.ServerCPU), "server-cpu-ns/op")
	b.ReportMetric(float64(c.ScriptTime), "script-ns/op")
	if len(m.replicas) > 0 {
		b.ReportMetric(float64(c.ReplicaCPU), "replica-cpu-ns/op")
	}
	if len(m.serving) > 1 {
		for i, s := range c.Shares {
			b.ReportMetric(s, fmt.Sprintf("primary%d-%%", i+1))
		}
		b.ReportMetric(c.MaxShareDev, "max-share-dev-%")
		b.ReportMetric(c.ScriptsPerOp, "scripts/op")
		b.ReportMetric(c.RedirectsPerOp, "redirects/op")
	}
}

func serverName(k testserver.Kind) string {
	if k == testserver.Valkey {
		return "valkey"
	}
	return "redis"
}

// loadScripts loads spigot's script and the no-op baseline on srv (see
// bench.LoadScripts).
func loadScripts(tb testing.TB, srv *testserver.Server) {
	tb.Helper()
	if err := bench.LoadScripts(srv.Addr); err != nil {
		tb.Fatal(err)
	}
}

// fill takes deficit tokens from roomy on every key, from 64 goroutines.
func fill(tb testing.TB, s spigot.Store, keys []string) {
	tb.Helper()
	fillLimit(tb, s, roomy, keys)
}

// fillLimit takes deficit tokens from limit, which must hold them, on
// every key, from 64 goroutines.
func fillLimit(tb testing.TB, s spigot.Store, limit spigot.Limit, keys []string) {
	tb.Helper()
	const workers = 64
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				a, err := s.Do(context.Background(), spigot.Op{Limit: limit, Key: keys[i], N: deficit})
				if err == nil && !a.Allowed() {
					err = fmt.Errorf("Acquire(%q, %d) = %+v; want allowed", keys[i], deficit, a)
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		tb.Fatal(first)
	}
}

// checkKeys checks that the servers (one server, or a cluster's primaries)
// hold at least n keys between them: the state that fill wrote, which the
// benchmarks update rather than create.
func checkKeys(tb testing.TB, n int, srvs ...*testserver.Server) {
	tb.Helper()
	total := 0
	for _, srv := range srvs {
		reply, err := srv.Do("DBSIZE")
		if err != nil {
			tb.Fatalf("DBSIZE on %s: %v", srv.Addr, err)
		}
		size, err := strconv.Atoi(reply)
		if err != nil {
			tb.Fatalf("DBSIZE on %s = %q: %v", srv.Addr, reply, err)
		}
		total += size
	}
	if total < n {
		tb.Fatalf("DBSIZE = %d after filling %d keys", total, n)
	}
}

// benchClients returns the three client libraries, each connected to the
// server or cluster at addrs as bench.Clients builds them (go-redis as a
// ClusterClient when cluster is true), with their stores and their raw
// EVALSHA on the i-th of keys, sent as the stores send a Take of one
// token of roomy with the server's clock, which must be admitted.
func benchClients(tb testing.TB, addrs []string, cluster bool, keys []string) []benchClient {
	tb.Helper()
	clients, closeAll, err := bench.Clients(addrs, cluster)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(closeAll)
	out := make([]benchClient, len(clients))
	for i, c := range clients {
		out[i] = benchClient{c.Name, c.Store, c.Grouped, c.Ungrouped, func(sha string) benchCall {
			raw := c.Raw(sha, roomy, 1, keys)
			return func(ctx context.Context, i int) error {
				ok, err := raw(ctx, i)
				if err == nil && !ok {
					err = bench.ErrDenied
				}
				return err
			}
		}, pacedStores(tb, c.Name, addrs, keys)}
	}
	return out
}

// pacedPrefix names the keys of the stores on a pacedClock apart from
// those of the stores on the server's clock.
const pacedPrefix = "spigot-paced:"

// pacedStores returns the paced func of the client library named lib on
// the server at addrs[0]: its stores are on one more client of the
// library, made at the first call with the settings of bench.Clients, and
// warmed as warm does, with Peeks on keys.
func pacedStores(tb testing.TB, lib string, addrs []string, keys []string) func(clock.Clock) spigot.Store {
	var (
		once     sync.Once
		newStore func(clock.Clock) spigot.Store
	)
	return func(c clock.Clock) spigot.Store {
		once.Do(func() {
			switch lib {
			case "go-redis":
				cl := testclient.GoRedis(tb, addrs[0])
				newStore = func(c clock.Clock) spigot.Store {
					return redisstore.New(cl, store.WithClock(c), store.WithPrefix(pacedPrefix))
				}
			case "valkey-go":
				cl := testclient.Valkey(tb, addrs[0])
				newStore = func(c clock.Clock) spigot.Store {
					return valkeystore.New(cl, store.WithClock(c), store.WithPrefix(pacedPrefix))
				}
			case "rueidis":
				cl := testclient.Rueidis(tb, addrs[0])
				newStore = func(c clock.Clock) spigot.Store {
					return rueidisstore.New(cl, store.WithClock(c), store.WithPrefix(pacedPrefix))
				}
			default:
				tb.Fatalf("no paced store for the client library %s", lib)
			}
			s := newStore(clock.System())
			warm(tb, func(ctx context.Context, i int) error {
				_, err := s.Do(ctx, spigot.Op{Limit: roomy, Key: keys[i], Action: spigot.Peek, N: 1})
				return err
			})
		})
		return newStore(c)
	}
}

// BenchmarkServerCeiling is what each server itself can do with spigot's
// script (script=spigot), and with bench.NoopScript for comparison:
// redis-benchmark, from 50 connections, sending EVALSHA with the arguments
// the stores send (roomy, cost 1, the server's clock) one at a time (P=1)
// or 32 per round trip (P=32), on one key or on manyKeys keys chosen at
// random. The req/s metric is redis-benchmark's own count, and
// server-cpu-ns/op the server's CPU time per request; ns/op is the wall
// time per request, with the start of redis-benchmark.
//
// Beside them, with the same connections, depth and keys, what the
// script's work costs without the script: commands=get+time+set is GET,
// TIME and SET of the key's value (with a TTL, as the script sets it),
// three runs of redis-benchmark, one a command, whose server-cpu-ns/op is
// the three commands' (one request is one of each, sent each in its own
// round trip when P=1); script=get-time-set is getTimeSetScript, which
// sends the same three commands from Lua and replies as spigot's script
// does: the least any script that reads a key, the server's clock and
// writes the key costs. spigot's script over each is its cost for the
// model:
//
//	/tmp/spigot.test -test.run='^$' -test.benchtime=200000x \
//		-test.bench='^BenchmarkServerCeiling$/server=redis/(script=(spigot|get-time-set)|commands)/P=32/keys=1$'
func BenchmarkServerCeiling(b *testing.B) {
	tool, err := exec.LookPath("redis-benchmark")
	if err != nil {
		if os.Getenv(testserver.RequireEnv) == "1" {
			b.Fatalf("redis-benchmark is not installed and %s=1", testserver.RequireEnv)
		}
		b.Skip("redis-benchmark is not installed")
	}
	args := wire.NewArgs(nil).Op(spigot.Op{Limit: roomy, N: 1})
	argv := args[:]
	// redis-benchmark replaces __rand_int__ with 12 digits, a random
	// number below -r.
	keys := make([]string, manyKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("ceiling:%012d", i)
	}
	for _, kind := range testserver.Kinds {
		b.Run("server="+serverName(kind), func(b *testing.B) {
			srv := testserver.Start(b, kind)
			loadScripts(b, srv)
			getTimeSet, err := srv.Do("SCRIPT", "LOAD", getTimeSetScript)
			if err != nil {
				b.Fatal(err)
			}
			fill(b, rueidisstore.New(testclient.Rueidis(b, srv.Addr)), keys)
			checkKeys(b, len(keys), srv)
			// The value SET writes: the state the script left on the hot key.
			value, err := srv.Do("GET", store.Key(store.DefaultPrefix, roomy, keys[hotKey]))
			if err != nil {
				b.Fatal(err)
			}
			m := &meter{serving: []string{srv.Addr}}
			host, port, err := net.SplitHostPort(srv.Addr)
			if err != nil {
				b.Fatal(err)
			}
			// run runs redis-benchmark with cmd, n times, as p and nkeys say.
			run := func(b *testing.B, p, nkeys, n int, cmd ...string) float64 {
				args := []string{
					"-h", host, "-p", port,
					"-c", "50", "-P", strconv.Itoa(p), "-n", strconv.Itoa(n),
					"--csv",
				}
				if nkeys > 1 {
					args = append(args, "-r", strconv.Itoa(nkeys))
				}
				rps, err := bench.RedisBenchmark(tool, append(args, cmd...))
				if err != nil {
					b.Fatal(err)
				}
				return rps
			}
			scripts := []struct{ name, sha string }{{"spigot", wire.SHA1()}, {"noop", bench.NoopSHA1}, {"get-time-set", getTimeSet}}
			for _, p := range []int{1, 32} {
				for _, nkeys := range []int{1, manyKeys} {
					key := keys[hotKey]
					if nkeys > 1 {
						key = "ceiling:__rand_int__"
					}
					key = store.Key(store.DefaultPrefix, roomy, key)
					for _, script := range scripts {
						b.Run(fmt.Sprintf("script=%s/P=%d/keys=%d", script.name, p, nkeys), func(b *testing.B) {
							n := max(b.N, 1)
							start := m.read(b)
							rps := run(b, p, nkeys, n, append([]string{"EVALSHA", script.sha, "1", key}, argv...)...)
							end := m.read(b)
							b.ReportMetric(rps, "req/s")
							b.ReportMetric(float64(bench.Per(start, end, int64(n)).ServerCPU), "server-cpu-ns/op")
						})
					}
					b.Run(fmt.Sprintf("commands=get+time+set/P=%d/keys=%d", p, nkeys), func(b *testing.B) {
						n := max(b.N, 1)
						start := m.read(b)
						var secs float64 // per request: one of each command
						for _, cmd := range [][]string{{"GET", key}, {"TIME"}, {"SET", key, value, "PX", getTimeSetTTL}} {
							secs += 1 / run(b, p, nkeys, n, cmd...)
						}
						end := m.read(b)
						b.ReportMetric(1/secs, "req/s")
						b.ReportMetric(float64(bench.Per(start, end, int64(n)).ServerCPU), "server-cpu-ns/op")
					})
				}
			}
		})
	}
}

// getTimeSetScript is BenchmarkServerCeiling's baseline script: what
// spigot's script asks of the server (GET of the key, TIME, SET of the
// key with a TTL), and a reply of as many integers, without the model.
var getTimeSetScript = `local v = redis.call('GET', KEYS[1])
redis.call('TIME')
redis.call('SET', KEYS[1], v, 'PX', ` + getTimeSetTTL + `)
return {1` + strings.Repeat(", 0", wire.Fields-1) + `}`

// getTimeSetTTL is the TTL in ms of the baseline's SET: 11 days, about
// the ResetAfter of a key of roomy that owes deficit tokens.
const getTimeSetTTL = "1000000000"

// BenchmarkGroupCommitLatency measures what group commit costs a lone
// caller: one goroutine sends a Take of one token of roomy on the hot key
// through the store without group commit and through the store with it,
// on the same client, in turns (each first every other time), so that the
// load of other processes falls on both alike. It reports the median latency of each
// (off-ns/call, on-ns/call) and their ratio (on/off):
//
//	/tmp/spigot.test -test.run='^$' -test.bench=GroupCommitLatency -test.benchtime=20000x -test.count=3
func BenchmarkGroupCommitLatency(b *testing.B) {
	keys := benchKeys(manyKeys)
	srv := testserver.Start(b, testserver.Redis)
	loadScripts(b, srv)
	for _, c := range benchClients(b, []string{srv.Addr}, false, keys) {
		b.Run("server=redis/client="+c.name, func(b *testing.B) {
			off, on := acquireCall(c.ungrouped, keys), acquireCall(c.grouped, keys)
			ctx := context.Background()
			times := [2][]time.Duration{make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)}
			b.ReportAllocs()
			calls := []benchCall{off, on}
			for n := 0; b.Loop(); n++ {
				for j := range calls {
					i := j ^ n&1 // off first, then on first
					t := time.Now()
					if err := calls[i](ctx, hotKey); err != nil {
						b.Fatal(err)
					}
					times[i] = append(times[i], time.Since(t))
				}
			}
			var median [2]float64
			for i := range times {
				slices.Sort(times[i])
				median[i] = float64(times[i][len(times[i])/2])
			}
			b.ReportMetric(median[0], "off-ns/call")
			b.ReportMetric(median[1], "on-ns/call")
			b.ReportMetric(median[1]/median[0], "on/off")
		})
	}
}
