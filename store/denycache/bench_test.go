package denycache_test

import (
	"context"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/store/denycache"
	"github.com/spigot-go/spigot/store/memory"
)

// BenchmarkFlood: a flood on one key whose limit admits a token every
// period, on the system clock, from every goroutine. store=memory is the
// memory store alone (the baseline); store=denycache is the same memory
// store behind a denycache.Store, with the calls that reach it per period
// (at most about 2: the Take admitted when the token comes back, which
// leaves 0, and the first denial after it, which the Store then
// remembers; in a run shorter than a period, those two).
func BenchmarkFlood(b *testing.B) {
	for _, period := range []time.Duration{10 * time.Millisecond, time.Hour} {
		l := spigot.MustBucket("flood", 1, spigot.Per(1, period))
		op := spigot.Op{Limit: l, Key: "203.0.113.7", N: 1}
		b.Run("period="+period.String()+"/store=memory", func(b *testing.B) {
			s := memory.New()
			flood(b, s, op)
		})
		b.Run("period="+period.String()+"/store=denycache", func(b *testing.B) {
			mem := countstore.New(memory.New())
			s := denycache.New(mem)
			start := time.Now()
			flood(b, s, op)
			elapsed := time.Since(start)
			b.ReportMetric(float64(mem.Calls())/max(float64(elapsed)/float64(period), 1), "calls/period")
		})
	}
}

func flood(b *testing.B, s spigot.Store, op spigot.Op) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Do(ctx, op); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
