package lease_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
	"github.com/spigot-go/spigot/store/redis"
	"github.com/spigot-go/spigot/store/rueidis"
)

// BenchmarkShare compares the ways to share one limit across replicas, in
// one run: the central store (store=central: a redis-server through
// store/rueidis, which pipelines, or store/redis on go-redis, which does
// not), a lease Store in front of it (store=lease), and the hybrid store in
// front of it (store=hybrid, with store/memory as its local store), with
// the memory store (store=memory) as the baseline:
//
//	go test -run '^$' -bench Share -benchtime 1s -count 3 ./internal/tests/lease/
//
// Every request takes one token of a limit far above the requests, so
// that all are admitted, on one hot key (keys=1) or on 10 000 keys in turn
// (keys=10000). The limit's refill is either far above the requests too
// (refill=fast: the remote's bucket stays full, as for a key under its
// limit, and its refill overtakes a lease within about a millisecond), or
// far below them (refill=slow: the bucket drains as a key's at its limit
// does, but holds more than a run takes). With goroutines=1, a lone caller, ns/op is a request's
// latency, and p50-ns and p99-ns its percentiles (each includes one read
// of the clock); with goroutines=64, ns/op is the inverse of the
// throughput. store=lease/replicas=3 is three lease Stores, replicas of
// one another, over one remote, the 64 goroutines spread among them.
//
// calls/op is what reaches the remote per request: 1 for the memory store
// and the central store, the hybrid store's own calls, and a lease Store's
// TakeUpTos and its sweeper's Refunds while the benchmark runs (not those
// of Close). The hybrid store has a timeout of a second and a breaker that
// does not open, so that it decides on the remote path even through a
// loaded machine's stalls, which the central store waits out too; local/op
// is the share of its requests that timed out all the same and were
// decided by its local store.
func BenchmarkShare(b *testing.B) {
	srv := testserver.Start(b, testserver.Redis)
	clients := []struct {
		name string
		new  func(b *testing.B, prefix string) spigot.Store
	}{
		{"rueidis", func(b *testing.B, p string) spigot.Store {
			return rueidis.New(testclient.Rueidis(b, srv.Addr), store.WithPrefix(p))
		}},
		{"go-redis", func(b *testing.B, p string) spigot.Store {
			return redis.New(testclient.GoRedis(b, srv.Addr), store.WithPrefix(p))
		}},
	}
	// p goroutines per P: 64 goroutines, or the next multiple of
	// GOMAXPROCS.
	procs := runtime.GOMAXPROCS(0)
	p := (64 + procs - 1) / procs
	for _, l := range []struct {
		keys   int
		refill string
		limit  spigot.Limit
	}{
		{1, "fast", roomy},
		{1, "slow", draining},
		{10_000, "fast", roomy},
	} {
		w := load{shareKeys(l.keys), l.limit}
		for _, goroutines := range []int{1, p * procs} {
			cell := fmt.Sprintf("keys=%d/refill=%s/goroutines=%d/", l.keys, l.refill, goroutines)
			b.Run(cell+"store=memory", func(b *testing.B) {
				counted := countstore.New(memory.New())
				share(b, w, goroutines, counted, counted)
			})
			for _, c := range clients {
				for _, way := range []string{"central", "lease", "hybrid"} {
					b.Run(cell+"client="+c.name+"/store="+way, func(b *testing.B) {
						counted := countstore.New(c.new(b, uniquePrefix()))
						switch way {
						case "central":
							share(b, w, goroutines, counted, counted)
						case "lease":
							ls := lease.New(counted)
							share(b, w, goroutines, counted, ls)
							closeLeases(b, ls)
						case "hybrid":
							var local atomic.Int64
							h := hybrid.New(counted, memory.New(),
								hybrid.WithTimeout(time.Second), hybrid.WithBreaker(1<<30, time.Second),
								hybrid.WithObserver(hybrid.Observer{
									RemoteError: func(context.Context, spigot.Op, error, time.Duration) { local.Add(1) },
								}))
							share(b, w, goroutines, counted, h)
							b.ReportMetric(float64(local.Load())/float64(b.N), "local/op")
						}
					})
				}
				if goroutines == 1 {
					continue
				}
				b.Run(cell+"client="+c.name+"/store=lease/replicas=3", func(b *testing.B) {
					counted := countstore.New(c.new(b, uniquePrefix()))
					replicas := []*lease.Store{lease.New(counted), lease.New(counted), lease.New(counted)}
					share(b, w, goroutines, counted, replicas[0], replicas[1], replicas[2])
					closeLeases(b, replicas...)
				})
			}
		}
	}
}

// A load is what the requests of a benchmark take: one token of limit, on
// keys in turn.
type load struct {
	keys  []string
	limit spigot.Limit
}

// share sends b.N requests of w, from
// goroutines goroutines spread over stores (goroutine g on stores[g %
// len(stores)]), and reports the calls that reached counted per request.
// A lone goroutine also reports the latency percentiles.
func share(b *testing.B, w load, goroutines int, counted *countstore.Store, stores ...spigot.Store) {
	ctx := context.Background()
	take := func(s spigot.Store, key string) bool {
		d, err := s.Do(ctx, spigot.Op{Limit: w.limit, Key: key, N: 1})
		if err != nil || !d.Allowed() {
			b.Errorf("key %s: got %+v, %v; want admitted", key, d, err)
			return false
		}
		return true
	}
	b.ReportAllocs()
	before := counted.Calls()
	if goroutines == 1 {
		// One read of the clock per request: a request's latency is the
		// time from the end of the one before it to its own end.
		h := hdrhistogram.New(1, int64(10*time.Second), 3)
		s := stores[0]
		b.ResetTimer()
		last := time.Now()
		for i := range b.N {
			if !take(s, w.keys[i%len(w.keys)]) {
				return
			}
			now := time.Now()
			if err := h.RecordValue(int64(now.Sub(last))); err != nil {
				b.Fatal(err)
			}
			last = now
		}
		b.StopTimer()
		b.ReportMetric(float64(h.ValueAtQuantile(50)), "p50-ns")
		b.ReportMetric(float64(h.ValueAtQuantile(99)), "p99-ns")
	} else {
		// Each goroutine walks every key from a point of its own, so that
		// on 10 000 keys each key comes back to every replica, and at
		// about the same interval.
		var next atomic.Int64
		b.SetParallelism(goroutines / runtime.GOMAXPROCS(0))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			g := int(next.Add(1) - 1)
			s := stores[g%len(stores)]
			i := g * len(w.keys) / goroutines
			for pb.Next() {
				if !take(s, w.keys[i]) {
					return
				}
				if i++; i == len(w.keys) {
					i = 0
				}
			}
		})
		b.StopTimer()
	}
	b.ReportMetric(float64(counted.Calls()-before)/float64(b.N), "calls/op")
}

// roomy admits every request of the benchmarks: a trillion tokens,
// refilled at a trillion a second.
var roomy = spigot.MustBucket("share", 1e12, spigot.Per(1e12, time.Second))

// draining admits every request of the benchmarks too (a billion tokens),
// but refills one token a second: the requests drain it.
var draining = spigot.MustBucket("share-draining", 1e9, spigot.PerSecond(1))

// shareKeys returns n distinct keys, made before the timer starts.
func shareKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
	}
	return keys
}

// uniquePrefix returns a key prefix of its own for each run, so that no
// run finds a key another has used.
func uniquePrefix() string { return fmt.Sprintf("share%d:", time.Now().UnixNano()) }

// closeLeases closes stores, which gives their unspent tokens back.
func closeLeases(b *testing.B, stores ...*lease.Store) {
	b.Helper()
	for _, s := range stores {
		if err := s.Close(context.Background()); err != nil {
			b.Error(err)
		}
	}
}
