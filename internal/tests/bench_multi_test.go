//go:build unix

package spigot_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/memory"
)

// The benchmarks of DoMulti: a request limited three ways at
// once, all or nothing, against one take and three; and a batch against
// as many single calls. On a shared machine run the whole set a few times,
// each run interleaving the variants of one configuration (-count=6 would
// run each variant six times in a row instead), and compare the variants
// with benchstat:
//
//	go test -c -o /tmp/spigot.test . &&
//	for i in 1 2 3 4 5 6; do
//		/tmp/spigot.test -test.run='^$' -test.bench='^BenchmarkMulti$' -test.benchtime=1s
//	done >/tmp/multi.txt &&
//	benchstat -col /op -filter '/op:(one OR all3 OR seq3)' /tmp/multi.txt &&
//	benchstat -col /op -filter '/op:(seq100 OR batch100)' /tmp/multi.txt
//
// Add /store=memory, or /server=redis, to the pattern for one of them.

// perUser and perEndpoint are, with roomy per address, the three limits
// that a request of the all-or-nothing benchmarks takes from, as a service
// limits a login per address, per user and per endpoint: each of its own
// name and rate, and each admitting every request of the benchmarks.
var (
	perUser     = spigot.MustBucket("bench-user", 1_000_000_000, spigot.PerSecond(2))
	perEndpoint = spigot.MustBucket("bench-endpoint", 1_000_000_000, spigot.PerMinute(600))
)

// The users and endpoints of requests: many users, and a few endpoints
// that many requests share.
const (
	benchUsers     = manyKeys / 10
	benchEndpoints = 16
)

// batch is the number of ops in one DoMulti of the batch benchmarks.
const batch = 100

// requests are the keys of the all-or-nothing benchmarks' requests:
// request i comes from address addrs[i] (the keys of benchKeys), as user
// users[i%benchUsers], to endpoint endpoints[i%benchEndpoints].
type requests struct {
	addrs, users, endpoints []string
}

func newRequests() requests {
	r := requests{
		addrs:     benchKeys(manyKeys),
		users:     make([]string, benchUsers),
		endpoints: make([]string, benchEndpoints),
	}
	for i := range r.users {
		r.users[i] = "user-" + strconv.Itoa(i)
	}
	for i := range r.endpoints {
		r.endpoints[i] = "POST /v1/resource-" + strconv.Itoa(i)
	}
	return r
}

// take3 returns request i's takes of one token from each of its limits,
// per address, per user and per endpoint.
func (r requests) take3(i int) [3]spigot.Op {
	return [3]spigot.Op{
		{Limit: roomy, Key: r.addrs[i], Action: spigot.Take, N: 1},
		{Limit: perUser, Key: r.users[i%len(r.users)], Action: spigot.Take, N: 1},
		{Limit: perEndpoint, Key: r.endpoints[i%len(r.endpoints)], Action: spigot.Take, N: 1},
	}
}

// fill gives every key of every limit of r state in s (see deficit), and
// returns the number of keys.
func (r requests) fill(tb testing.TB, s spigot.Store) int {
	tb.Helper()
	fill(tb, s, r.addrs)
	fillLimit(tb, s, perUser, r.users)
	fillLimit(tb, s, perEndpoint, r.endpoints)
	return len(r.addrs) + len(r.users) + len(r.endpoints)
}

// A multiOp is one variant of the benchmarks: each goroutine sends the
// call that one call of each returns to it, which may hold buffers of its
// own; each call makes decisions decisions on decisions keys of the limit
// per address (or on one, for 1), so that n of them walk n×decisions keys.
type multiOp struct {
	name      string
	each      func() benchCall
	decisions int
}

// shared returns each of a call that holds no buffers, for every goroutine.
func shared(call benchCall) func() benchCall {
	return func() benchCall { return call }
}

// requestOps returns the variants that decide request i of r in s:
//
//   - one: a take of one token on its address (acquireCall), as in
//     BenchmarkRedisStores: the baseline;
//   - all3: s.DoMulti of its three takes, all or nothing, with the ops and
//     decisions allocated once per goroutine, so that allocs/op is the
//     store's own;
//   - seq3: the three takes, each with s.Do, one after the other: what a
//     caller without DoMulti does (and is not all or nothing).
func requestOps(s spigot.Store, r requests) []multiOp {
	return []multiOp{
		{"one", shared(acquireCall(s, r.addrs)), 1},
		{"all3", func() benchCall {
			var ops [3]spigot.Op
			var out [3]spigot.Decision
			return func(ctx context.Context, i int) error {
				ops = r.take3(i)
				if err := s.DoMulti(ctx, spigot.AllOrNothing, ops[:], out[:]); err != nil {
					return err
				}
				return checkAllAllowed(ops[:], out[:])
			}
		}, 1},
		{"seq3", shared(func(ctx context.Context, i int) error {
			for _, op := range r.take3(i) {
				d, err := s.Do(ctx, op)
				if err != nil {
					return err
				}
				if err := checkAllowed(op, d); err != nil {
					return err
				}
			}
			return nil
		}), 1},
	}
}

// batchOps returns the variants that take one token of roomy on each of
// keys[i*batch:(i+1)*batch] in s, all of which must be allowed:
//
//   - seq100: one s.Do after another (acquireCall), the baseline;
//   - batch100: one s.DoMulti of them, Independent, with the ops and
//     decisions allocated once per goroutine.
//
// Both report decisions/s, batch decisions per op.
func batchOps(s spigot.Store, keys []string) []multiOp {
	one := acquireCall(s, keys)
	return []multiOp{
		{fmt.Sprintf("seq%d", batch), shared(func(ctx context.Context, i int) error {
			for j := range batch {
				if err := one(ctx, i*batch+j); err != nil {
					return err
				}
			}
			return nil
		}), batch},
		{fmt.Sprintf("batch%d", batch), func() benchCall {
			ops := make([]spigot.Op, batch)
			out := make([]spigot.Decision, batch)
			return func(ctx context.Context, i int) error {
				for j := range ops {
					ops[j] = spigot.Op{Limit: roomy, Key: keys[i*batch+j], Action: spigot.Take, N: 1}
				}
				if err := s.DoMulti(ctx, spigot.Independent, ops, out); err != nil {
					return err
				}
				return checkAllAllowed(ops, out)
			}
		}, batch},
	}
}

// checkAllowed checks that op was allowed, as every op of the benchmarks
// must be.
func checkAllowed(op spigot.Op, d spigot.Decision) error {
	if !d.Allowed() || d.N != op.N {
		return fmt.Errorf("%v = %+v; want allowed", op, d)
	}
	return nil
}

// checkAllAllowed checks that every op was allowed: out[j] decided ops[j].
func checkAllAllowed(ops []spigot.Op, out []spigot.Decision) error {
	for j, d := range out {
		if err := checkAllowed(ops[j], d); err != nil {
			return err
		}
	}
	return nil
}

// A multiConfig is where a benchmark's calls come from: one goroutine on
// the hot key (call i=hotKey), or goroutines goroutines, parallelism each
// per GOMAXPROCS, walking nkeys keys of the limit per address (see
// benchParallel); the name says the keys that it touches.
type multiConfig struct {
	parallelism, goroutines, nkeys int
}

// run runs ops in turn in configuration cf, each named
// goroutines=…/keys=…/op=… and metered by m; an op of several decisions
// also reports decisions/s.
func (cf multiConfig) run(b *testing.B, m *meter, ops []multiOp) {
	for _, op := range ops {
		// The walk is over calls, each on op.decisions keys.
		nkeys := max(cf.nkeys/op.decisions, 1)
		name := fmt.Sprintf("goroutines=%d/keys=%d/op=%s", cf.goroutines, nkeys*op.decisions, op.name)
		b.Run(name, func(b *testing.B) {
			if cf.goroutines == 1 {
				benchSerial(b, m, op.each())
			} else {
				benchParallelEach(b, m, op.each, cf.parallelism, cf.goroutines, nkeys)
			}
			if s := b.Elapsed().Seconds(); op.decisions > 1 && s > 0 {
				b.ReportMetric(float64(b.N*op.decisions)/s, "decisions/s")
			}
		})
	}
}

// BenchmarkMulti measures DoMulti in the memory store and in each
// Redis-protocol store on real servers, named
// store=memory/goroutines=…/keys=…/op=… and
// server=…/client=…/goroutines=…/keys=…/op=…, keys being the number of
// keys of the limit per address that a benchmark touches. Each
// configuration runs its variants one after the other, so that the load of
// other processes changes little between them:
//
//   - op=one, op=all3 and op=seq3 (see requestOps), from one goroutine on
//     one request's keys (latency: ns/op), and from 64 on them or walking
//     manyKeys requests, whose per-endpoint keys stay few and hot
//     (throughput: req/s). The targets: all3 within 1.3× of
//     one's latency on a server (4× in memory, with no allocation), and
//     within 1.5× of its throughput at 64 goroutines.
//   - op=seq100 and op=batch100 (see batchOps), on the Redis-protocol
//     stores only, from one goroutine on 100 keys and from 64 goroutines
//     walking manyKeys: the target, batch100 at 10× seq100's decisions/s.
//
// Every key holds state before the timer starts (see deficit). The stores
// and their clients are set up as in BenchmarkRedisStores, whose metrics
// (req/s, cpu-ns/op, server-cpu-ns/op, script-ns/op) every variant reports.
func BenchmarkMulti(b *testing.B) {
	reqs := newRequests()
	procs := runtime.GOMAXPROCS(0)
	p := (64 + procs - 1) / procs // RunParallel starts p × GOMAXPROCS goroutines
	serial := multiConfig{0, 1, 1}
	hot, many := multiConfig{p, p * procs, 1}, multiConfig{p, p * procs, manyKeys}

	b.Run("store=memory", func(b *testing.B) {
		s := memory.New()
		reqs.fill(b, s)
		m := &meter{}
		ops := requestOps(s, reqs)
		for _, cf := range []multiConfig{serial, hot, many} {
			cf.run(b, m, ops)
		}
	})

	for _, kind := range testserver.Kinds {
		b.Run("server="+serverName(kind), func(b *testing.B) {
			srv := testserver.Start(b, kind)
			loadScripts(b, srv)
			clients := benchClients(b, []string{srv.Addr}, false, reqs.addrs)
			checkKeys(b, reqs.fill(b, clients[len(clients)-1].store), srv)
			m := &meter{serving: []string{srv.Addr}}
			for _, c := range clients {
				warm(b, acquireCall(c.store, reqs.addrs))
				ops, batches := requestOps(c.store, reqs), batchOps(c.store, reqs.addrs)
				b.Run("client="+c.name, func(b *testing.B) {
					serial.run(b, m, ops)
					serial.run(b, m, batches)
					hot.run(b, m, ops)
					many.run(b, m, slices.Concat(ops, batches))
				})
			}
		})
	}
}
