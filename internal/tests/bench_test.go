package spigot_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/bench"
	"github.com/spigot-go/spigot/store/memory"
)

// Compare the memory store's kinds of limit with one another, and with
// x/time/rate, which keeps one limiter and no keys, in one run:
//
//	go test -run='^$' -bench='Memory|Clock|XTimeRate' -benchmem -count=5 .

// manyKeys is the number of distinct keys of the many-key benchmarks.
const manyKeys = 100_000

// hotKey is the index in benchKeys of the key of the one-key benchmarks.
const hotKey = 1

// benchKeys returns n distinct keys, made before the timer starts.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "10.0." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&0xff)
	}
	return keys
}

// roomy is a bucket that admits every request of the benchmarks (a billion
// tokens) and refills slowly (1/s), so that every key keeps its state
// between two visits of a walk over many keys: the benchmarks measure a
// keyed update, not an insert.
var roomy = spigot.MustBucket("bench", 1_000_000_000, spigot.PerSecond(1))

// A benchKind is one kind of limit of the benchmarks, in the two steady
// states that matter: requests mostly admitted, each key keeping its state
// between them; and every request denied, as for a key under attack.
type benchKind struct {
	name string // as in kind=token-bucket, or kind=sliding-log/limit=100
	// admitting returns a limit that admits a key's requests of one token
	// when they come every interval, and keeps the key's state between
	// them.
	admitting func(interval time.Duration) spigot.Limit
	// denying is a limit that denies every request of one token, for an
	// hour, once Capacity Takes of one token have used it up (see useUp).
	denying spigot.Limit
	// logLimit is a sliding log's limit, and 0 for other kinds.
	logLimit int
}

// maxLogEntries bounds the entries that the sliding logs of a many-key
// benchmark hold between them (80 MB): a log of limit 1000 runs on fewer
// keys than the others.
const maxLogEntries = 10_000_000

// logLimits are the limits of the sliding logs of the benchmarks: a log's
// state, and what a request reads of it, grows with its limit.
var logLimits = []int64{10, 100, 1000}

// benchKinds are the kinds of limit of the benchmarks, the token bucket
// (roomy) first: the others compare with it.
//
// The buckets and the windows admit a billion tokens, far more than any
// benchmark takes, and the windows are a second long, so that a key's
// windows turn over during a run (for a sliding window, the previous
// window's count weighs on every request). A sliding log of limit L
// admits L in a window of L−1 intervals: the log holds L−1 entries, and
// its oldest leaves it at each request, its steady state under a load at
// its limit (with an interval to spare, so that a request that overtakes
// another in parallel finds room too).
var benchKinds = func() []benchKind {
	bucket := func(time.Duration) spigot.Limit { return roomy }
	leaky := spigot.Must(spigot.NewLeakyBucket("bench-leaky", 1_000_000_000, spigot.PerSecond(1)))
	fixed := spigot.Must(spigot.NewFixedWindow("bench-fixed", spigot.PerSecond(1_000_000_000), 0))
	sliding := spigot.Must(spigot.NewSlidingWindow("bench-sliding", spigot.PerSecond(1_000_000_000)))
	kinds := []benchKind{
		{"token-bucket", bucket, spigot.MustBucket("bench-denied", 1, spigot.PerHour(1)), 0},
		{"leaky-bucket", func(time.Duration) spigot.Limit { return leaky },
			spigot.Must(spigot.NewLeakyBucket("bench-leaky-denied", 1, spigot.PerHour(1))), 0},
		{"fixed-window", func(time.Duration) spigot.Limit { return fixed },
			spigot.Must(spigot.NewFixedWindow("bench-fixed-denied", spigot.PerHour(100), 0)), 0},
		{"sliding-window", func(time.Duration) spigot.Limit { return sliding },
			spigot.Must(spigot.NewSlidingWindow("bench-sliding-denied", spigot.PerHour(100))), 0},
	}
	for _, n := range logLimits {
		name := "bench-log-" + strconv.FormatInt(n, 10)
		kinds = append(kinds, benchKind{
			"sliding-log/limit=" + strconv.FormatInt(n, 10),
			func(interval time.Duration) spigot.Limit {
				return spigot.Must(spigot.NewSlidingLog(name, spigot.Per(n, time.Duration(n-1)*interval)))
			},
			spigot.Must(spigot.NewSlidingLog(name+"-denied", spigot.PerHour(n))),
			int(n),
		})
	}
	return kinds
}()

// A pacedClock is a clock on which step passes at every reading: a store
// on it sees a request every step, however fast the machine runs them, so
// that each kind of limit stays in the steady state its benchmark chose.
// It starts at a whole hour, so that windows of an hour or less start
// with it. Reading it costs an atomic add, where the system clock costs a
// system call or a read of the hardware clock (see BenchmarkClock).
type pacedClock struct {
	t    atomic.Int64 // µs since the Unix epoch
	step int64
}

func newPacedClock(step time.Duration) *pacedClock {
	c := &pacedClock{step: step.Microseconds()}
	c.t.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	return c
}

func (c *pacedClock) Now() time.Time { return time.UnixMicro(c.t.Add(c.step)) }

// The paces of the memory store's benchmarks: one key gets a request
// every hotPace (a thousand a second), and each of manyKeys keys one every
// manyKeys × keysPace (ten a second).
const (
	hotPace  = time.Millisecond
	keysPace = time.Microsecond
)

// BenchmarkMemory measures the memory store's Do of one token, for each
// kind of limit (kind=…): on one key, mostly admitted (hot-key) and always
// denied (denied), and over manyKeys keys, mostly admitted, from one
// goroutine (serial) and from GOMAXPROCS (parallel). The store is on a
// pacedClock, so that each kind stays in one steady state whatever the
// speed of the machine; a store on the system clock adds the cost of
// reading it (BenchmarkClock) to every request. Besides ns/op and
// allocations, each reports the share of requests that had the other
// outcome (denied/op in the admitted variants, admitted/op in the denied
// ones): in parallel, a request may read the clock before one that
// overtakes it in the key's lock, and a full sliding log then denies it.
//
// On a shared machine, compare kinds within one run, and run the whole
// set a few times rather than each benchmark several times in a row:
//
//	go test -c -o /tmp/tests.test . &&
//	for i in 1 2 3 4 5 6; do
//		/tmp/tests.test -test.run='^$' -test.bench='^Benchmark(Memory|Clock)$' -test.benchtime=0.5s
//	done
//
// spigot.Decision had four fields so that the compiler kept it in
// registers on the way from store.Apply to the caller: a struct of more than
// four fields is copied through memory at every call, which cost hot-key
// about a seventh of its time. Delay made it five, and RefillAfter six.
func BenchmarkMemory(b *testing.B) {
	keys := benchKeys(manyKeys)
	for _, k := range benchKinds {
		b.Run("kind="+k.name, func(b *testing.B) {
			hot := k.admitting(hotPace)
			b.Run("hot-key/serial", func(b *testing.B) {
				s := memory.New(memory.WithClock(newPacedClock(hotPace)))
				benchMemorySerial(b, s, hot, func(int) string { return keys[hotKey] }, true)
			})
			var hotStore *memory.Store // one for every run of the parallel benchmark
			b.Run("hot-key/parallel", func(b *testing.B) {
				if hotStore == nil {
					hotStore = memory.New(memory.WithClock(newPacedClock(hotPace)))
				}
				benchMemoryParallel(b, hotStore, hot, keys[hotKey:hotKey+1], 0, true)
			})

			denied := func() *memory.Store {
				s := memory.New(memory.WithClock(newPacedClock(keysPace)))
				useUp(b, s, k.denying, keys[hotKey])
				return s
			}
			b.Run("denied/serial", func(b *testing.B) {
				benchMemorySerial(b, denied(), k.denying, func(int) string { return keys[hotKey] }, false)
			})
			var deniedStore *memory.Store
			b.Run("denied/parallel", func(b *testing.B) {
				if deniedStore == nil {
					deniedStore = denied()
				}
				benchMemoryParallel(b, deniedStore, k.denying, keys[hotKey:hotKey+1], 0, false)
			})

			// One store for both, and one walk: the parallel walks go on
			// from where the serial one stopped, so that every key stays in
			// the steady state.
			keys := keys
			if k.logLimit > 0 {
				keys = keys[:min(manyKeys, maxLogEntries/k.logLimit)]
			}
			many := k.admitting(time.Duration(len(keys)) * keysPace)
			var keysStore *memory.Store
			var walk int       // the next key of the walk over keys
			var perKey float64 // the heap that the store holds per key
			fillKeys := func() *memory.Store {
				if keysStore == nil {
					before := liveHeap()
					keysStore = fillWalks(b, many, keys)
					perKey = float64(liveHeap()-before) / float64(len(keys))
				}
				return keysStore
			}
			name := "keys=" + strconv.Itoa(len(keys))
			b.Run(name+"/serial", func(b *testing.B) {
				s, start := fillKeys(), walk
				n := benchMemorySerial(b, s, many, func(i int) string { return keys[(start+i)%len(keys)] }, true)
				walk = (start + n) % len(keys)
				b.ReportMetric(perKey, "heap-B/key")
			})
			b.Run(name+"/parallel", func(b *testing.B) {
				walk = benchMemoryParallel(b, fillKeys(), many, keys, walk, true)
			})
		})
	}
}

// fillWalks returns a memory store on a pacedClock of keysPace where each
// of keys holds the state that walks over keys, a request of one token of
// l a key, have left: one walk, or Capacity walks to fill a sliding log.
// It sends each key's requests of every walk in a row, with the clock set
// to when the walks would have sent them, so that the key's state stays
// in the processor's cache.
func fillWalks(tb testing.TB, l spigot.Limit, keys []string) *memory.Store {
	tb.Helper()
	clk := newPacedClock(keysPace)
	s := memory.New(memory.WithClock(clk))
	walks := int64(1)
	if l.Kind() == spigot.SlidingLog {
		walks = l.Capacity()
	}
	start, step, n := clk.t.Load(), clk.step, int64(len(keys))
	for i, key := range keys {
		for w := range walks {
			clk.t.Store(start + (w*n+int64(i))*step) // Now adds a step
			mustTake(tb, s, l, key, 1)
		}
	}
	clk.t.Store(start + walks*n*step)
	return s
}

// useUp sends Capacity Takes of one token of l on key, one after the other,
// so that a sliding log holds that many instants (as it does under
// attack), where one Take of them all would hold one instant (a run of
// them, on Redis).
func useUp(tb testing.TB, s spigot.Store, l spigot.Limit, key string) {
	tb.Helper()
	for range l.Capacity() {
		if _, err := s.Do(context.Background(), spigot.Op{Limit: l, Key: key, N: 1}); err != nil {
			tb.Fatal(err)
		}
	}
	if d, err := s.Do(context.Background(), spigot.Op{Limit: l, Key: key, Action: spigot.Peek, N: 1}); err != nil || d.Allowed() {
		tb.Fatalf("%v: Peek(%q, 1) = %+v, %v after %d Takes; want denied", l, key, d, err, l.Capacity())
	}
}

// liveHeap returns the bytes of the heap's live objects, after a
// collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// benchMemorySerial runs Do of one token of l on key(i), for i from 0,
// reports the share of requests whose outcome was not allowed, and
// returns how many it ran.
func benchMemorySerial(b *testing.B, s *memory.Store, l spigot.Limit, key func(i int) string, allowed bool) int {
	ctx := context.Background()
	b.ReportAllocs()
	i, other := 0, 0
	cpu := bench.CPUTime()
	for b.Loop() {
		d, err := s.Do(ctx, spigot.Op{Limit: l, Key: key(i), N: 1})
		if err != nil {
			b.Fatal(err)
		}
		if d.Allowed() != allowed {
			other++
		}
		i++
	}
	reportCPU(b, cpu, i)
	reportOther(b, l, allowed, other, i)
	return i
}

// benchMemoryParallel runs Do of one token of l from GOMAXPROCS goroutines
// on keys, in turn from keys[start] (with one key, every goroutine sends
// it): as in a serial walk, each key comes back every len(keys) requests,
// however fast each goroutine runs. It reports the share of requests whose
// outcome was not allowed, and returns the key after the last it sent.
func benchMemoryParallel(b *testing.B, s *memory.Store, l spigot.Limit, keys []string, start int, allowed bool) (next int) {
	ctx := context.Background()
	var walk, other atomic.Int64
	walk.Store(int64(start))
	b.ReportAllocs()
	cpu := bench.CPUTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			i := 0
			if len(keys) > 1 {
				i = int((walk.Add(1) - 1) % int64(len(keys)))
			}
			d, err := s.Do(ctx, spigot.Op{Limit: l, Key: keys[i], N: 1})
			if err != nil {
				b.Error(err)
				return
			}
			if d.Allowed() != allowed {
				n++
			}
		}
		other.Add(int64(n))
	})
	b.StopTimer()
	reportCPU(b, cpu, b.N)
	reportOther(b, l, allowed, int(other.Load()), b.N)
	return int(walk.Load()) % len(keys)
}

// reportCPU reports the CPU time that the process spent per request since
// it was cpu, in n requests (cpu-ns/op): on a machine that other processes
// keep busy, it moves much less than ns/op.
func reportCPU(b *testing.B, cpu time.Duration, n int) {
	if n > 0 {
		b.ReportMetric(float64(bench.CPUTime()-cpu)/float64(n), "cpu-ns/op")
	}
}

// reportOther reports the share of n requests of l whose outcome was not
// allowed (denied/op when allowed is true, admitted/op otherwise), and
// fails the benchmark when it is more than half: the limit is not in the
// steady state the benchmark is for.
func reportOther(b *testing.B, l spigot.Limit, allowed bool, other, n int) {
	b.Helper()
	if n == 0 {
		return
	}
	unit := "denied/op"
	if !allowed {
		unit = "admitted/op"
	}
	share := float64(other) / float64(n)
	b.ReportMetric(share, unit)
	if share > 0.5 {
		b.Fatalf("%v: %d of %d requests %s; want allowed %v", l, other, n, strings.TrimSuffix(unit, "/op"), allowed)
	}
}

// BenchmarkClock is what a store on the system clock spends reading it, at
// every request, besides what BenchmarkMemory measures on a pacedClock.
func BenchmarkClock(b *testing.B) {
	b.Run("clock=system", func(b *testing.B) {
		c := clock.System()
		b.ReportAllocs()
		var t int64
		for b.Loop() {
			t += c.Now().UnixMicro()
		}
		clockSink = t
	})
	b.Run("clock=paced", func(b *testing.B) {
		c := newPacedClock(hotPace)
		b.ReportAllocs()
		var t int64
		for b.Loop() {
			t += c.Now().UnixMicro()
		}
		clockSink = t
	})
}

var clockSink int64

// BenchmarkXTimeRate is the baseline: one x/time/rate Limiter, always
// allowing, read at time.Now() as a caller would.
func BenchmarkXTimeRate(b *testing.B) {
	b.Run("hot-key", func(b *testing.B) {
		// The same bucket as roomy: a finite rate (rate.Inf would skip
		// the arithmetic), never empty.
		l := rate.NewLimiter(rate.Limit(1), 1_000_000_000)
		b.ReportAllocs()
		for b.Loop() {
			if !l.AllowN(time.Now(), 1) {
				b.Fatal("AllowN = false; want true")
			}
		}
	})
}

// mustTake takes cost tokens of l on key, and fails unless s admits them.
func mustTake(tb testing.TB, s spigot.Store, l spigot.Limit, key string, cost int64) {
	tb.Helper()
	d, err := s.Do(context.Background(), spigot.Op{Limit: l, Key: key, N: cost})
	if err != nil {
		tb.Fatal(err)
	}
	if !d.Allowed() {
		tb.Fatalf("%v: Take(%q, %d) = %+v; want allowed", l, key, cost, d)
	}
}
