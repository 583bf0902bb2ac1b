package peers

import (
	"context"
	"sync"
	"testing"
	"time"

	sethvargo "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store/memory"
	throttled "github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// memoryPeers are the in-process limiters, each as its documentation shows
// it, with its default options:
//
//   - spigot: a token bucket (capacity Burst, Tokens per Period) in
//     store/memory, through spigot.Limiter's Allow.
//   - sethvargo: go-limiter's memorystore, Tokens per Interval. It has no
//     burst of its own: its bucket holds Tokens, refilled at each Interval,
//     so Burst is Tokens (see startSethvargo for admitted's Interval).
//   - xrate: a map of *rate.Limiter (golang.org/x/time/rate, a token bucket)
//     under a sync.Mutex, as a user writes it; it never forgets a key.
//   - xrate-syncmap: the same in a sync.Map (Load, then LoadOrStore).
//   - ulule: ulule/limiter's memory store, a fixed window of Tokens per
//     Period (no burst beyond the window's count).
//   - throttled: throttled's GCRA (a token bucket) on memstore without a
//     key cap (a map under a mutex), MaxRate Tokens per Period, MaxBurst
//     Burst-1 (its burst counts the requests beyond the first), with the
//     attempts of its compare-and-swap unbounded (by default 10, which 64
//     goroutines on one key exceed, failing requests).
var memoryPeers = []peer{
	{"spigot", startSpigotMemory},
	{"sethvargo", startSethvargo},
	{"xrate", startXRate},
	{"xrate-syncmap", startXRateSyncMap},
	{"ulule", startUluleMemory},
	{"throttled", startThrottledMemory},
}

// BenchmarkMemory runs the matrix over the in-process limiters.
func BenchmarkMemory(b *testing.B) { benchMatrix(b, memoryPeers, nil, nil) }

func spigotLimit(tb testing.TB, q quota) spigot.Limit {
	l, err := spigot.NewBucket("peers", q.Burst, spigot.Per(q.Tokens, q.Period))
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// spigotAllow returns the allowFunc of a Limiter.
func spigotAllow(l *spigot.Limiter) allowFunc {
	return func(ctx context.Context, key string) (bool, error) {
		d, err := l.Allow(ctx, key)
		return d.Allowed(), err
	}
}

func startSpigotMemory(tb testing.TB, q quota) allowFunc {
	return spigotAllow(spigot.New(memory.New(), spigotLimit(tb, q)))
}

func startSethvargo(tb testing.TB, q quota) allowFunc {
	// After its first Interval, a bucket of go-limiter v0.7.1 refills
	// Interval/Tokens tokens (the nanoseconds per token) at each Interval,
	// up to Tokens: Tokens a second only while Tokens² ≤ 1e9. Past that,
	// as in admitted, its Interval is stretched to Tokens² nanoseconds, so
	// that the bucket's first Interval, which holds Tokens, lasts longer
	// than any benchmark.
	interval := q.Period
	if t := time.Duration(q.Tokens); t*t > interval {
		interval = t * t
	}
	s, err := memorystore.New(&memorystore.Config{Tokens: uint64(q.Tokens), Interval: interval})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close(context.Background()) })
	return sethvargoAllow(s)
}

func sethvargoAllow(s sethvargo.Store) allowFunc {
	return func(ctx context.Context, key string) (bool, error) {
		_, _, _, ok, err := s.Take(ctx, key)
		return ok, err
	}
}

func xrateLimiter(q quota) *rate.Limiter {
	return rate.NewLimiter(rate.Limit(float64(q.Tokens)/q.Period.Seconds()), int(q.Burst))
}

func startXRate(tb testing.TB, q quota) allowFunc {
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter)
	return func(ctx context.Context, key string) (bool, error) {
		mu.Lock()
		l, ok := m[key]
		if !ok {
			l = xrateLimiter(q)
			m[key] = l
		}
		mu.Unlock()
		return l.Allow(), nil
	}
}

func startXRateSyncMap(tb testing.TB, q quota) allowFunc {
	var m sync.Map
	return func(ctx context.Context, key string) (bool, error) {
		v, ok := m.Load(key)
		if !ok {
			v, _ = m.LoadOrStore(key, xrateLimiter(q))
		}
		return v.(*rate.Limiter).Allow(), nil
	}
}

func startUluleMemory(tb testing.TB, q quota) allowFunc {
	return ululeAllow(ulule.New(ulmemory.NewStore(), ulule.Rate{Period: q.Period, Limit: q.Tokens}))
}

func ululeAllow(l *ulule.Limiter) allowFunc {
	return func(ctx context.Context, key string) (bool, error) {
		c, err := l.Get(ctx, key)
		return !c.Reached, err
	}
}

func throttledQuota(q quota) throttled.RateQuota {
	return throttled.RateQuota{
		MaxRate:  throttled.PerDuration(int(q.Tokens), q.Period),
		MaxBurst: int(q.Burst - 1),
	}
}

func startThrottledMemory(tb testing.TB, q quota) allowFunc {
	s, err := memstore.NewCtx(0)
	if err != nil {
		tb.Fatal(err)
	}
	return throttledAllow(tb, s, q)
}

func throttledAllow(tb testing.TB, s throttled.GCRAStoreCtx, q quota) allowFunc {
	l, err := throttled.NewGCRARateLimiterCtx(s, throttledQuota(q))
	if err != nil {
		tb.Fatal(err)
	}
	// Its compare-and-swap gives up after 10 attempts by default, which
	// 64 goroutines on one key exceed: a user would raise the limit.
	l.SetMaxCASAttemptsLimit(1 << 20)
	return func(ctx context.Context, key string) (bool, error) {
		limited, _, err := l.RateLimitCtx(ctx, key, 1)
		return !limited, err
	}
}
