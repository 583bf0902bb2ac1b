package conformance

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/spigot-go/spigot"
)

// benchKeys is the number of distinct keys of the many-keys benchmark.
const benchKeys = 100_000

// RunBenchmarks measures s with the workloads of spigot's own benchmarks,
// as sub-benchmarks that run in parallel (b.RunParallel) and report
// allocations:
//
//   - hot-key: every goroutine on one key, always allowed;
//   - keys=100000: goroutines spread over 100 000 distinct keys, allowed,
//     each key holding state between its requests;
//   - denied: one key of an empty bucket, always denied;
//   - cost=10: one key, 10 tokens a request, allowed;
//   - cost=0: one key, peeks;
//   - all-or-nothing/limits=3: one request limited by 3 limits at once,
//     one DoMulti (AllOrNothing) over 100 000 keys, allowed;
//   - independent/ops=100: batches of 100 ops in one DoMulti
//     (Independent), over 100 000 keys, allowed.
//
// The last two skip for a store that cannot apply several ops in one
// call; keys=100000, one op per call, is their baseline. The store uses
// its own clock. The buckets refill fast enough (or, for denied, slowly
// enough) that the outcome does not depend on how fast the store is; a
// request with another outcome, or an error, fails the benchmark. Set the
// parallelism with go test's -cpu flag.
func RunBenchmarks(b *testing.B, s spigot.Store) {
	// A trillion tokens a second: one key never runs dry.
	fast := spigot.MustBucket("conformance-bench", 1e12, spigot.PerSecond(1e12))
	// A billion tokens refilled slowly: each of many keys holds state (its
	// bucket is not full) between its requests, and never runs dry.
	spread := spigot.MustBucket("conformance-bench-keys", 1e9, spigot.PerSecond(1))
	slow := spigot.MustBucket("conformance-bench-denied", 1, spigot.PerHour(1))
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}

	b.Run("hot-key", func(b *testing.B) {
		bench(b, s, fast, func(int) string { return "hot" }, 1, true)
	})
	b.Run("keys="+strconv.Itoa(benchKeys), func(b *testing.B) {
		bench(b, s, spread, func(i int) string { return keys[i%len(keys)] }, 1, true)
	})
	b.Run("denied", func(b *testing.B) {
		if _, err := take(b.Context(), s, slow, "hot", 1); err != nil { // empty it
			b.Fatalf("Take: %v", err)
		}
		bench(b, s, slow, func(int) string { return "hot" }, 1, false)
	})
	b.Run("cost=10", func(b *testing.B) {
		bench(b, s, fast, func(int) string { return "hot" }, 10, true)
	})
	b.Run("cost=0", func(b *testing.B) {
		bench(b, s, fast, func(int) string { return "hot" }, 0, true)
	})
	b.Run("all-or-nothing/limits=3", func(b *testing.B) {
		limits := []spigot.Limit{
			spread,
			spigot.MustBucket("conformance-bench-user", 1e9, spigot.PerSecond(1)),
			spigot.MustBucket("conformance-bench-tenant", 1e9, spigot.PerSecond(1)),
		}
		benchMulti(b, s, spigot.AllOrNothing, len(limits), func(i int, ops []spigot.Op) {
			for j, l := range limits {
				ops[j] = spigot.Op{Limit: l, Key: keys[i%len(keys)], N: 1}
			}
		})
	})
	b.Run("independent/ops=100", func(b *testing.B) {
		const n = 100
		benchMulti(b, s, spigot.Independent, n, func(i int, ops []spigot.Op) {
			for j := range ops {
				ops[j] = spigot.Op{Limit: spread, Key: keys[(i*n+j)%len(keys)], N: 1}
			}
		})
	})
}

// benchMulti runs parallel DoMulti calls in mode, each of n ops that
// set(i, ops) fills in for the i-th call of a goroutine, where each
// goroutine starts at a different place, and fails if an op is not
// allowed. It skips when the store cannot apply several ops in one call.
func benchMulti(b *testing.B, s spigot.Store, mode spigot.Mode, n int, set func(i int, ops []spigot.Op)) {
	b.ReportAllocs()
	ctx := context.Background()
	ops, out := make([]spigot.Op, n), make([]spigot.Decision, n)
	set(0, ops)
	if err := s.DoMulti(ctx, mode, ops, out); errors.Is(err, errors.ErrUnsupported) {
		b.Skipf("the store cannot apply several ops in one DoMulti: %v", err)
	} else if err != nil {
		b.Fatalf("DoMulti (%v) of %v: %v", modeName(mode), ops, err)
	}
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919 // a prime: goroutines start far apart
		ops, out := make([]spigot.Op, n), make([]spigot.Decision, n)
		for pb.Next() {
			set(i, ops)
			if err := s.DoMulti(ctx, mode, ops, out); err != nil {
				b.Errorf("DoMulti (%v) of %v: %v", modeName(mode), ops, err)
				return
			}
			for j, d := range out {
				if !d.Allowed() {
					b.Errorf("DoMulti (%v): op %d (%v) = %+v, want allowed", modeName(mode), j, ops[j], d)
					return
				}
			}
			i++
		}
	})
}

// bench runs parallel requests of cost on bucket bk, the i-th request of a
// goroutine on key(start+i), where each goroutine starts at a different
// place, and fails if an admission is not allowed as expected.
func bench(b *testing.B, s spigot.Store, bk spigot.Limit, key func(int) string, cost int64, allowed bool) {
	b.ReportAllocs()
	ctx := context.Background()
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919 // a prime: goroutines start far apart
		for pb.Next() {
			a, err := take(ctx, s, bk, key(i), cost)
			if err != nil {
				b.Errorf("bucket %v: Take(%q, %d): %v", bk, key(i), cost, err)
				return
			}
			if a.Allowed() != allowed {
				b.Errorf("bucket %v: Take(%q, %d) = %+v, want Allowed %v", bk, key(i), cost, a, allowed)
				return
			}
			i++
		}
	})
}
