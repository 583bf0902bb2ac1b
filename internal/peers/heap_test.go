package peers

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// liveKeys is how many keys BenchmarkMemoryPerKey fills.
const liveKeys = 100_000

// live is a quota under which a key's state outlives the benchmark: one
// request takes one of 10 tokens refilled at 10 an hour, so no store may
// forget it yet.
var live = quota{Burst: 10, Tokens: 10, Period: time.Hour}

// BenchmarkMemoryPerKey reports, for each in-process peer, the heap that
// liveKeys keys with state hold once filled (one request each under live),
// per key (B/key), after a GC, less the heap before the store was made: the
// map, the state, and any copy of the key's name. The keys' own strings are
// made before and not counted. Each iteration fills a new store; ns/op is
// left out, as it would be the time to fill one.
func BenchmarkMemoryPerKey(b *testing.B) {
	keys := benchKeys(liveKeys)
	ctx := context.Background()
	for _, p := range memoryPeers {
		b.Run("peer="+p.name, func(b *testing.B) {
			var total uint64
			var before, after runtime.MemStats
			for range b.N {
				runtime.GC()
				runtime.ReadMemStats(&before)
				allow := p.start(b, live)
				for _, k := range keys {
					if ok, err := allow(ctx, k); err != nil || !ok {
						b.Fatalf("key %s: got allowed %v, %v; want allowed", k, ok, err)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(allow)
				total += after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(total)/float64(b.N)/liveKeys, "B/key")
		})
	}
}
