package peers

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// A quota is the limit every peer of a cell applies to each key, in the
// terms all of them share: Burst requests at once, then Tokens every Period.
type quota struct {
	Burst  int64
	Tokens int64
	Period time.Duration
}

// The two limits of the matrix.
var (
	// admitted is so high that no request is denied: a billion at once and a
	// billion a second. A key's bucket is full again long before a walk over
	// many keys comes back to it, the case of many users each well under
	// their limit: a store that forgets full buckets forgets it.
	admitted = quota{Burst: 1e9, Tokens: 1e9, Period: time.Second}
	// denied is exhausted before the timer starts (one request an hour, taken
	// by exhaust), so every measured request is denied.
	denied = quota{Burst: 1, Tokens: 1, Period: time.Hour}
)

// An allowFunc makes one request of one token on key and says whether it
// was admitted.
type allowFunc func(ctx context.Context, key string) (bool, error)

// A peer is one limiter under test. start returns its allowFunc applying q,
// on state of its own (a fresh store, or keys named apart), and releases
// what it started when tb ends.
type peer struct {
	name  string
	start func(tb testing.TB, q quota) allowFunc
}

// The cells of the matrix.
var (
	keyCounts  = []int{1, 100_000}
	goroutines = []int{1, 64, 256}
	outcomes   = []struct {
		name string
		q    quota
	}{{"admitted", admitted}, {"denied", denied}}
)

// benchKeys returns n distinct keys, built before the timer starts so that
// no request allocates its key.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	return keys
}

func keysName(n int) string {
	if n == 1 {
		return "hot"
	}
	return fmt.Sprint(n)
}

// exhaust makes requests on every key until one is denied, with up to 64
// goroutines, so that every later request of the denied quota is denied.
func exhaust(tb testing.TB, allow allowFunc, keys []string) {
	tb.Helper()
	ctx := context.Background()
	var next atomic.Int64
	errs := make(chan error, 64)
	for range min(64, len(keys)) {
		go func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) {
					errs <- nil
					return
				}
				for n := 0; ; n++ {
					ok, err := allow(ctx, keys[i])
					if err != nil {
						errs <- err
						return
					}
					if !ok {
						break
					}
					if n > 10 {
						errs <- fmt.Errorf("key %s: still admitted after %d requests", keys[i], n)
						return
					}
				}
			}
		}()
	}
	for range min(64, len(keys)) {
		if err := <-errs; err != nil {
			tb.Fatal(err)
		}
	}
}

// stride is the step of each goroutine's walk over the keys: a prime, so
// that a walk visits every key of 100 000 once before it comes back.
const stride = 7919

// run measures allow over keys with g goroutines, each request expected to
// be admitted or not as want says. One goroutine runs a plain loop; more
// run b.RunParallel with g/GOMAXPROCS goroutines per P (at least one).
func run(b *testing.B, allow allowFunc, keys []string, g int, want bool) {
	ctx := context.Background()
	n := len(keys)
	var wrong, failed atomic.Int64
	var firstErr atomic.Value
	b.ReportAllocs()
	if g == 1 {
		b.ResetTimer()
		j := 0
		for range b.N {
			ok, err := allow(ctx, keys[j])
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			} else if ok != want {
				wrong.Add(1)
			}
			if j += stride; j >= n {
				j %= n
			}
		}
	} else {
		b.SetParallelism(max(1, g/runtime.GOMAXPROCS(0)))
		var start atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			j := int(start.Add(12_345)) % n
			var w, f int64
			for pb.Next() {
				ok, err := allow(ctx, keys[j])
				if err != nil {
					f++
					firstErr.CompareAndSwap(nil, err)
				} else if ok != want {
					w++
				}
				if j += stride; j >= n {
					j %= n
				}
			}
			wrong.Add(w)
			failed.Add(f)
		})
	}
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d requests failed, the first with %v", f, b.N, firstErr.Load())
	}
	if w := wrong.Load(); w > 0 {
		b.Fatalf("%d of %d requests: got allowed %v, want %v", w, b.N, !want, want)
	}
}

// benchMatrix runs every cell of the matrix for every peer, named
// keys=…/goroutines=…/outcome=…/peer=…, the peers of a cell one after the
// other, so that the load of the machine changes little between them. For
// each number of keys and outcome, reset (if not nil) clears what the
// previous cells left, then each peer's state is set up once (and exhausted,
// for denied) before its goroutine counts run. With serverCPU (the CPU time
// the server process has used so far), each cell also reports the server's
// CPU time per request, server-µs/op: at one goroutine, where a request
// waits for the server, it says how much of ns/op is the server's work.
func benchMatrix(b *testing.B, peers []peer, reset func(testing.TB), serverCPU func(testing.TB) time.Duration) {
	for _, nk := range keyCounts {
		keys := benchKeys(nk)
		b.Run("keys="+keysName(nk), func(b *testing.B) {
			for _, o := range outcomes {
				if reset != nil {
					reset(b)
				}
				allows := make([]allowFunc, len(peers))
				for i, p := range peers {
					allows[i] = p.start(b, o.q)
					if o.q == denied {
						exhaust(b, allows[i], keys)
					}
				}
				for _, g := range goroutines {
					for i, p := range peers {
						b.Run(fmt.Sprintf("goroutines=%d/outcome=%s/peer=%s", g, o.name, p.name), func(b *testing.B) {
							var cpu0 time.Duration
							if serverCPU != nil {
								cpu0 = serverCPU(b)
							}
							run(b, allows[i], keys, g, o.q == admitted)
							if serverCPU != nil {
								b.ReportMetric(float64(serverCPU(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "server-µs/op")
							}
						})
					}
				}
			}
		})
	}
}
