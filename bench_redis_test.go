//go:build unix

package spigot_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/testclient"
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

// noopScript is the baseline's script: it takes the key and arguments of
// spigot's script and does nothing with them, so that what a call costs
// above it is the server's work on the bucket.
const noopScript = "return {1,0,0,0}"

var noopSHA1 = func() string {
	sum := sha1.Sum([]byte(noopScript))
	return hex.EncodeToString(sum[:])
}()

// deficit is what every benchmark key owes before the timer starts: a
// million tokens of roomy's billion, refilled at 1/s, so that each key keeps
// its state (its TTL is ResetAfter, 11 days) however slowly a walk over
// many keys comes back to it.
const deficit = 1_000_000

// hotKey is the index in benchKeys of the key of the one-key benchmarks.
const hotKey = 1

// A benchCall sends one request on the i-th key of benchKeys(manyKeys).
type benchCall func(ctx context.Context, i int) error

// A benchClient is one client library: its store and its raw EVALSHA of a
// script by SHA-1, with the same connection settings (the library's
// defaults).
type benchClient struct {
	name  string
	store spigot.Store
	raw   func(sha string) benchCall
}

// BenchmarkRedisStores measures each store on each server, named
// server=…/client=…/goroutines=…/keys=…/call=…, where call is
//
//   - spigot: the store's Acquire of one token of roomy;
//   - evalsha-spigot-script: the same client sending EVALSHA of spigot's
//     script with the same key and arguments, built once: the store's own
//     cost is the difference;
//   - evalsha-noop-script: the same, of noopScript: the client's own cost,
//     the server doing next to nothing.
//
// The three calls of one configuration run one after the other, so that
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

			for _, c := range clients {
				warm(b, c.raw(noopSHA1))
				calls := []struct {
					name string
					call benchCall
				}{
					{"spigot", acquireCall(c.store, keys)},
					{"evalsha-spigot-script", c.raw(wire.SHA1())},
					{"evalsha-noop-script", c.raw(noopSHA1)},
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
		})
	}
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
func benchParallel(b *testing.B, m *meter, call benchCall, parallelism, goroutines, nkeys int) {
	benchParallelEach(b, m, func() benchCall { return call }, parallelism, goroutines, nkeys)
}

// benchParallelEach is benchParallel for a call that holds buffers of its
// own, such as a DoMulti's ops: each goroutine sends the call that one call
// of each returns to it.
func benchParallelEach(b *testing.B, m *meter, each func() benchCall, parallelism, goroutines, nkeys int) {
	ctx := context.Background()
	var next atomic.Int64
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
		for pb.Next() {
			if err := call(ctx, i); err != nil {
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
}

// A meter reads the CPU time that the client (this process) and the
// servers have spent, for metrics that the load of other processes on a
// shared machine changes much less than throughput. On a machine whose
// cores the client and the servers share, throughput follows their sum.
// With several serving servers (a cluster's primaries) it also counts the
// scripts each one ran, to show how the requests spread.
type meter struct {
	serving  []string // the addresses of the servers that serve requests
	replicas []string // a cluster's replicas, metered apart
}

// A reading is what a meter read at one instant.
type reading struct {
	client   time.Duration // this process's CPU time
	server   time.Duration // the serving servers' CPU time
	replicas time.Duration // the replicas' CPU time
	// The serving servers' time inside EVALSHA and EVAL, by their own
	// clocks.
	scriptTime time.Duration
	// With several serving servers, each one's EVALSHA and EVAL calls,
	// the ones that ran and the ones it rejected (redirections).
	scripts, rejected []int64
}

func (m *meter) read(tb testing.TB) reading {
	tb.Helper()
	r := reading{client: cpuTime()}
	for _, addr := range m.serving {
		r.server += serverCPU(tb, addr)
		ran, rejected, usec := scriptCalls(tb, addr)
		r.scriptTime += time.Duration(usec) * time.Microsecond
		if len(m.serving) > 1 {
			r.scripts = append(r.scripts, ran)
			r.rejected = append(r.rejected, rejected)
		}
	}
	for _, addr := range m.replicas {
		r.replicas += serverCPU(tb, addr)
	}
	return r
}

// report reports the benchmark's throughput in requests per second, and
// the CPU time per request that the client spent since start (cpu-ns/op:
// the whole process, with the client library's own goroutines) and that
// the serving servers spent (server-cpu-ns/op), and the time they spent
// inside the script by their own clocks (script-ns/op: the same work
// everywhere, so it grows only when the servers wait for a core); a meter
// of no servers (for a store in this process) reports only the first two.
// With replicas it reports theirs (replica-cpu-ns/op). With several
// serving servers it reports the share of the scripts that the n-th one
// ran (primaryn-%), the largest distance of a share from an even split
// (max-share-dev-%), the scripts run per request (scripts/op: 1 unless a
// client resends) and the calls redirected per request (redirects/op: the
// ones a server rejected).
func (m *meter) report(b *testing.B, start reading) {
	b.Helper()
	end := m.read(b)
	n := float64(b.N)
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(n/s, "req/s")
	}
	b.ReportMetric(float64((end.client-start.client).Nanoseconds())/n, "cpu-ns/op")
	if len(m.serving) == 0 { // a store in this process
		return
	}
	b.ReportMetric(float64((end.server-start.server).Nanoseconds())/n, "server-cpu-ns/op")
	b.ReportMetric(float64((end.scriptTime-start.scriptTime).Nanoseconds())/n, "script-ns/op")
	if len(m.replicas) > 0 {
		b.ReportMetric(float64((end.replicas-start.replicas).Nanoseconds())/n, "replica-cpu-ns/op")
	}
	if len(m.serving) > 1 {
		shares, dev, ran := spread(start, end)
		for i, s := range shares {
			b.ReportMetric(s, fmt.Sprintf("primary%d-%%", i+1))
		}
		b.ReportMetric(dev, "max-share-dev-%")
		b.ReportMetric(float64(ran)/n, "scripts/op")
		var rejected int64
		for i := range end.rejected {
			rejected += end.rejected[i] - start.rejected[i]
		}
		b.ReportMetric(float64(rejected)/n, "redirects/op")
	}
}

// spread returns each serving server's share (in percent) of the scripts
// run between two readings, the largest distance of a share from an even
// split (in points), and the number of scripts run.
func spread(start, end reading) (shares []float64, dev float64, ran int64) {
	for i := range end.scripts {
		ran += end.scripts[i] - start.scripts[i]
	}
	even := 100 / float64(len(end.scripts))
	for i := range end.scripts {
		s := 0.0
		if ran > 0 {
			s = 100 * float64(end.scripts[i]-start.scripts[i]) / float64(ran)
		}
		shares = append(shares, s)
		dev = max(dev, math.Abs(s-even))
	}
	return shares, dev, ran
}

// serverCPU returns the CPU time, system and user, of the server at addr
// so far, from INFO cpu.
func serverCPU(tb testing.TB, addr string) time.Duration {
	tb.Helper()
	info, err := testserver.Info(addr, "cpu")
	if err != nil {
		tb.Fatalf("INFO cpu on %s: %v", addr, err)
	}
	var d time.Duration
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		sec, err := strconv.ParseFloat(info[f], 64)
		if err != nil {
			tb.Fatalf("INFO cpu on %s: %s: %v", addr, f, err)
		}
		d += time.Duration(sec * float64(time.Second))
	}
	return d
}

// scriptCalls returns the EVALSHA and EVAL calls that the server at addr
// ran, those it rejected (with a MOVED reply, on a cluster), and the
// microseconds it spent in them, so far, from INFO commandstats.
func scriptCalls(tb testing.TB, addr string) (ran, rejected, usec int64) {
	tb.Helper()
	info, err := testserver.Info(addr, "commandstats")
	if err != nil {
		tb.Fatalf("INFO commandstats on %s: %v", addr, err)
	}
	for _, cmd := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
		// calls=3,usec=…,usec_per_call=…,rejected_calls=0,failed_calls=0;
		// a command never called has no line.
		for f := range strings.SplitSeq(info[cmd], ",") {
			k, v, _ := strings.Cut(f, "=")
			var sum *int64
			switch k {
			case "calls":
				sum = &ran
			case "rejected_calls":
				sum = &rejected
			case "usec":
				sum = &usec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatalf("INFO commandstats on %s: %s:%s: %v", addr, cmd, info[cmd], err)
			}
			*sum += n
		}
	}
	return ran, rejected, usec
}

// cpuTime returns the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func serverName(k testserver.Kind) string {
	if k == testserver.Valkey {
		return "valkey"
	}
	return "redis"
}

// loadScripts loads spigot's script and the no-op baseline on srv, so that
// no benchmark meets a NOSCRIPT reply, and checks that the server names
// them by the SHA-1s that the stores and the raw calls send.
func loadScripts(tb testing.TB, srv *testserver.Server) {
	tb.Helper()
	for _, sc := range []struct{ src, sha string }{{wire.Script(), wire.SHA1()}, {noopScript, noopSHA1}} {
		sha, err := srv.Do("SCRIPT", "LOAD", sc.src)
		if err != nil {
			tb.Fatalf("SCRIPT LOAD on %s: %v", srv.Addr, err)
		}
		if sha != sc.sha {
			tb.Fatalf("SCRIPT LOAD on %s = %q; want %s", srv.Addr, sha, sc.sha)
		}
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

// checkReply checks that a raw call got the integers the stores decode.
func checkReply(n int, err error) error {
	if err == nil && n != wire.Fields {
		err = fmt.Errorf("EVALSHA replied %d values; want %d", n, wire.Fields)
	}
	return err
}

// benchClients returns the three client libraries, each connected to the
// server or cluster at addrs as testclient builds them (go-redis as a
// ClusterClient when cluster is true), with their stores and their raw
// EVALSHA on the i-th of keys, sent as the stores send Acquire of one
// token of roomy with the server's clock.
func benchClients(tb testing.TB, addrs []string, cluster bool, keys []string) []benchClient {
	// The cheapest calls the libraries offer: keys and arguments built once.
	full := make([]string, len(keys)) // the names the stores give keys
	keysets := make([][]string, len(keys))
	for i, k := range keys {
		full[i] = store.Key(store.DefaultPrefix, roomy, k)
		keysets[i] = []string{full[i]}
	}
	argv := wire.NewArgs(nil).Op(spigot.Op{Limit: roomy, N: 1})
	args := make([]any, len(argv))
	for i, a := range argv {
		args[i] = a
	}
	var gr goredis.UniversalClient
	if cluster {
		gr = testclient.GoRedisCluster(tb, addrs...)
	} else {
		gr = testclient.GoRedis(tb, addrs...)
	}
	vk := testclient.Valkey(tb, addrs...)
	rc := testclient.Rueidis(tb, addrs...)
	return []benchClient{
		{"go-redis", redisstore.New(gr), func(sha string) benchCall {
			return func(ctx context.Context, i int) error {
				v, err := gr.EvalSha(ctx, sha, keysets[i], args...).Slice()
				return checkReply(len(v), err)
			}
		}},
		{"valkey-go", valkeystore.New(vk), func(sha string) benchCall {
			return func(ctx context.Context, i int) error {
				return checkInts(vk.Do(ctx, vk.B().Evalsha().Sha1(sha).Numkeys(1).Key(full[i]).Arg(argv[:]...).Build()).ToArray())
			}
		}},
		{"rueidis", rueidisstore.New(rc), func(sha string) benchCall {
			return func(ctx context.Context, i int) error {
				return checkInts(rc.Do(ctx, rc.B().Evalsha().Sha1(sha).Numkeys(1).Key(full[i]).Arg(argv[:]...).Build()).ToArray())
			}
		}},
	}
}

// checkInts checks that a raw call of valkey-go or rueidis got the
// integers the stores decode.
func checkInts[M any, P interface {
	*M
	AsInt64() (int64, error)
}](v []M, err error) error {
	for j := range v {
		if _, e := P(&v[j]).AsInt64(); e != nil {
			return e
		}
	}
	return checkReply(len(v), err)
}

// BenchmarkServerCeiling is what each server itself can do with spigot's
// script (script=spigot), and with noopScript for comparison:
// redis-benchmark, from 50 connections, sending EVALSHA with the arguments
// the stores send (roomy, cost 1, the server's clock) one at a time (P=1)
// or 32 per round trip (P=32), on one key or on manyKeys keys chosen at
// random. The req/s metric is redis-benchmark's own count, and
// server-cpu-ns/op the server's CPU time per request; ns/op is the wall
// time per request, with the start of redis-benchmark.
func BenchmarkServerCeiling(b *testing.B) {
	bench, err := exec.LookPath("redis-benchmark")
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
			fill(b, rueidisstore.New(testclient.Rueidis(b, srv.Addr)), keys)
			checkKeys(b, len(keys), srv)
			m := &meter{serving: []string{srv.Addr}}
			for _, script := range []struct{ name, sha string }{{"spigot", wire.SHA1()}, {"noop", noopSHA1}} {
				for _, p := range []int{1, 32} {
					for _, nkeys := range []int{1, manyKeys} {
						key, extra := keys[hotKey], []string(nil)
						if nkeys > 1 {
							key, extra = "ceiling:__rand_int__", []string{"-r", strconv.Itoa(nkeys)}
						}
						name := fmt.Sprintf("script=%s/P=%d/keys=%d", script.name, p, nkeys)
						b.Run(name, func(b *testing.B) {
							host, port, err := net.SplitHostPort(srv.Addr)
							if err != nil {
								b.Fatal(err)
							}
							args := []string{
								"-h", host, "-p", port,
								"-c", "50", "-P", strconv.Itoa(p), "-n", strconv.Itoa(max(b.N, 1)),
								"--csv",
							}
							args = append(args, extra...)
							args = append(args, "EVALSHA", script.sha, "1", store.Key(store.DefaultPrefix, roomy, key))
							args = append(args, argv...)
							start := m.read(b)
							rps, err := redisBenchmark(bench, args)
							if err != nil {
								b.Fatal(err)
							}
							end := m.read(b)
							b.ReportMetric(rps, "req/s")
							b.ReportMetric(float64((end.server-start.server).Nanoseconds())/float64(max(b.N, 1)), "server-cpu-ns/op")
						})
					}
				}
			}
		})
	}
}

// redisBenchmark runs redis-benchmark with args (which include --csv) and
// returns the requests per second it reports.
func redisBenchmark(path string, args []string) (float64, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("redis-benchmark: %v\n%s%s", err, stdout.Bytes(), stderr.Bytes())
	}
	if stderr.Len() > 0 { // e.g. "Error from server: NOSCRIPT …"
		return 0, fmt.Errorf("redis-benchmark: %s", stderr.Bytes())
	}
	r := csv.NewReader(&stdout)
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: reading its CSV: %v", err)
	}
	for _, rec := range recs {
		if len(rec) >= 2 && rec[0] != "test" {
			rps, err := strconv.ParseFloat(rec[1], 64)
			if err != nil {
				return 0, fmt.Errorf("redis-benchmark: rps %q: %v", rec[1], err)
			}
			return rps, nil
		}
	}
	return 0, errors.New("redis-benchmark: no result in its output")
}
