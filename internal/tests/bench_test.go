package spigot_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store/memory"
)

// The benchmarks use the system clock, as users do. Compare the memory
// store with x/time/rate, which keeps one limiter and no keys, in one run:
//
//	go test -run='^$' -bench='Memory|XTimeRate' -benchmem -count=5 .

// manyKeys is the number of distinct keys of the many-key benchmarks.
const manyKeys = 100_000

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

// BenchmarkMemory measures the memory store's Do on one key (allowed, then
// denied) and over many keys.
//
// spigot.Decision has four fields so that the compiler keeps it in
// registers on the way from Op.Apply to the caller: a struct of five
// fields is copied through memory at every call, which cost hot-key about
// a seventh of its time.
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()

	b.Run("hot-key", func(b *testing.B) {
		s := memory.New()
		mustAcquire(b, s, roomy, "10.0.0.1", 1) // the key has state from now on
		b.ReportAllocs()
		for b.Loop() {
			a, err := s.Do(ctx, spigot.Op{Limit: roomy, Key: "10.0.0.1", N: 1})
			if err != nil || !a.Allowed() {
				b.Fatalf("Acquire = %+v, %v; want allowed", a, err)
			}
		}
	})

	b.Run("denied", func(b *testing.B) {
		// A bucket of one token that refills once an hour, emptied first:
		// every request in the loop is denied.
		empty := spigot.MustBucket("bench-denied", 1, spigot.PerHour(1))
		s := memory.New()
		mustAcquire(b, s, empty, "10.0.0.1", 1)
		b.ReportAllocs()
		for b.Loop() {
			a, err := s.Do(ctx, spigot.Op{Limit: empty, Key: "10.0.0.1", N: 1})
			if err != nil || a.Allowed() {
				b.Fatalf("Acquire = %+v, %v; want denied", a, err)
			}
		}
	})

	keys := benchKeys(manyKeys)
	name := "keys=" + strconv.Itoa(manyKeys)

	b.Run(name+"/serial", func(b *testing.B) {
		s := memory.New()
		for _, k := range keys {
			mustAcquire(b, s, roomy, k, 1)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := s.Do(ctx, spigot.Op{Limit: roomy, Key: keys[i], N: 1}); err != nil {
				b.Fatal(err)
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
	})

	b.Run(name+"/parallel", func(b *testing.B) {
		s := memory.New()
		for _, k := range keys {
			mustAcquire(b, s, roomy, k, 1)
		}
		var next atomic.Uint32
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			// Each goroutine walks all the keys from its own starting point.
			i := int(next.Add(1)*7919) % len(keys)
			for pb.Next() {
				if _, err := s.Do(ctx, spigot.Op{Limit: roomy, Key: keys[i], N: 1}); err != nil {
					b.Error(err)
					return
				}
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	})
}

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

func mustAcquire(tb testing.TB, s spigot.Store, bk spigot.Limit, key string, cost int64) {
	tb.Helper()
	if _, err := s.Do(context.Background(), spigot.Op{Limit: bk, Key: key, N: cost}); err != nil {
		tb.Fatal(err)
	}
}
