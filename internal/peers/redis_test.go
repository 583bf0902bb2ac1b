package peers

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	redisstore "github.com/spigot-go/spigot/store/redis"
	rueidisstore "github.com/spigot-go/spigot/store/rueidis"
	valkeystore "github.com/spigot-go/spigot/store/valkey"
	"github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"github.com/valkey-io/valkey-go"
)

// redisPeers returns the limiters on one redis-server at addr, each on a
// client of its own library with that library's default options (go-redis:
// a pool of 10 connections per P; rueidis and valkey-go: one pipelined
// connection), each with keys of its own, and the function that empties the
// server (FLUSHALL) between cells:
//
//   - spigot-goredis, spigot-valkey, spigot-rueidis: store/redis,
//     store/valkey and store/rueidis, a token bucket as in memoryPeers, one
//     EVALSHA per request.
//   - redis_rate: go-redis/redis_rate (GCRA, a token bucket), Rate Tokens
//     per Period, Burst Burst; one EVALSHA per request.
//   - ulule: ulule/limiter's Redis store, a fixed window of Tokens per
//     Period; one EVALSHA per request.
//   - throttled: throttled's GCRA on its go-redis v9 store, as in
//     memoryPeers; a GET, then a SET NX or a compare-and-swap script, so two
//     round trips per request, more under contention on a key.
func redisPeers(tb testing.TB, srv *testserver.Server) ([]peer, func(testing.TB)) {
	gr := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	tb.Cleanup(func() { gr.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(rc.Close)
	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(vk.Close)

	flush := func(tb testing.TB) {
		tb.Helper()
		if _, err := srv.Do("FLUSHALL"); err != nil {
			tb.Fatal(err)
		}
	}
	onStore := func(s spigot.Store) func(tb testing.TB, q quota) allowFunc {
		return func(tb testing.TB, q quota) allowFunc {
			return spigotAllow(spigot.New(s, spigotLimit(tb, q)))
		}
	}
	return []peer{
		{"spigot-goredis", onStore(redisstore.New(gr, store.WithPrefix("goredis:")))},
		{"spigot-valkey", onStore(valkeystore.New(vk, store.WithPrefix("valkey:")))},
		{"spigot-rueidis", onStore(rueidisstore.New(rc, store.WithPrefix("rueidis:")))},
		{"redis_rate", func(tb testing.TB, q quota) allowFunc {
			l := redis_rate.NewLimiter(gr)
			limit := redis_rate.Limit{Rate: int(q.Tokens), Burst: int(q.Burst), Period: q.Period}
			return func(ctx context.Context, key string) (bool, error) {
				r, err := l.Allow(ctx, key, limit)
				if err != nil {
					return false, err
				}
				return r.Allowed > 0, nil
			}
		}},
		{"ulule", func(tb testing.TB, q quota) allowFunc {
			s, err := ulredis.NewStore(gr)
			if err != nil {
				tb.Fatal(err)
			}
			return ululeAllow(ulule.New(s, ulule.Rate{Period: q.Period, Limit: q.Tokens}))
		}},
		{"throttled", func(tb testing.TB, q quota) allowFunc {
			s, err := goredisstore.NewCtx(gr, "throttled:")
			if err != nil {
				tb.Fatal(err)
			}
			return throttledAllow(tb, s, q)
		}},
	}, flush
}

// BenchmarkRedis runs the matrix over the limiters on Redis, on one
// redis-server started for it.
func BenchmarkRedis(b *testing.B) {
	srv := testserver.Start(b, testserver.Redis)
	peers, reset := redisPeers(b, srv)
	benchMatrix(b, peers, reset, func(tb testing.TB) time.Duration { return serverCPU(tb, srv) })
}

// serverCPU returns the CPU time, user and system, that srv's process has
// used so far, from INFO cpu (to the µs).
func serverCPU(tb testing.TB, srv *testserver.Server) time.Duration {
	tb.Helper()
	info, err := srv.Info("cpu")
	if err != nil {
		tb.Fatal(err)
	}
	var total time.Duration
	for _, field := range []string{"used_cpu_user", "used_cpu_sys"} {
		sec, err := strconv.ParseFloat(info[field], 64)
		if err != nil {
			tb.Fatalf("INFO cpu: %s: %v", field, err)
		}
		total += time.Duration(sec * float64(time.Second))
	}
	return total
}
