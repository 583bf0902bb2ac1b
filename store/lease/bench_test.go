package lease_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
)

// hitLimit refills far faster than BenchmarkHit's requests.
var hitLimit = spigot.MustBucket("lease-bench", 1e9, spigot.PerSecond(1e9))

// BenchmarkHit: Takes of one token that a lease holds, from every
// goroutine, on one key (keys=1) or on 10 000 keys in turn, with a memory
// store as the remote; store=memory is that store alone, the baseline.
// The limit refills far faster than the requests, so that a lease serves
// most of them (calls/op is what reaches the remote per request):
//
//	go test -run '^$' -bench Hit -benchtime 1s -count 3 ./store/lease/
func BenchmarkHit(b *testing.B) {
	for _, n := range []int{1, 10_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "key-" + strconv.Itoa(i)
		}
		b.Run("keys="+strconv.Itoa(n)+"/store=memory", func(b *testing.B) {
			s := memory.New()
			warm(s, hitLimit, keys)
			hit(b, s, hitLimit, keys)
		})
		b.Run("keys="+strconv.Itoa(n)+"/store=lease", func(b *testing.B) {
			remote := countstore.New(memory.New())
			s := lease.New(remote, lease.WithIdle(time.Hour))
			defer s.Close(context.Background())
			warm(s, hitLimit, keys)
			before := remote.Calls()
			hit(b, s, hitLimit, keys)
			b.ReportMetric(float64(remote.Calls()-before)/float64(b.N), "calls/op")
		})
	}
}

// warm sends two Takes on each key: a first request, then a lease.
func warm(s spigot.Store, l spigot.Limit, keys []string) {
	for _, k := range keys {
		for range 2 {
			s.Do(context.Background(), spigot.Op{Limit: l, Key: k, N: 1})
		}
	}
}

// hit runs parallel Takes of one token of l, the i-th of a goroutine on
// keys[start+i], where each goroutine starts at a different place.
func hit(b *testing.B, s spigot.Store, l spigot.Limit, keys []string) {
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919 // a prime: goroutines start far apart
		for pb.Next() {
			if d, err := s.Do(ctx, spigot.Op{Limit: l, Key: keys[i%len(keys)], N: 1}); err != nil || !d.Allowed() {
				b.Errorf("Take: %+v, %v; want allowed", d, err)
				return
			}
			i++
		}
	})
}
