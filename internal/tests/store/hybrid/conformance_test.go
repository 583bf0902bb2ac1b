package hybrid_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/internal/hybridtest"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	"github.com/spigot-go/spigot/store/redis"
)

// serverClient returns a go-redis client of the server at addr with the
// options the store's doc asks for, closed when tb ends; opts, if any,
// changes them.
func serverClient(tb testing.TB, addr string, opts ...func(*goredis.Options)) *goredis.Client {
	tb.Helper()
	o := &goredis.Options{Addr: addr, ContextTimeoutEnabled: true}
	for _, f := range opts {
		f(o)
	}
	c := goredis.NewClient(o)
	tb.Cleanup(func() { c.Close() })
	return c
}

// TestConformance: with a healthy remote on a Redis server, the hybrid
// store is the remote store. The timeout is generous, so that a slow
// machine does not make the remote look unavailable (the observer fails
// the test if it does).
func TestConformance(t *testing.T) {
	srv := testserver.Start(t, testserver.Redis)
	c := serverClient(t, srv.Addr)
	t.Run("remote=redis", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
			remote := redis.New(c, store.WithClock(clk), store.WithPrefix(t.Name()+":"))
			return hybrid.New(remote, memory.New(memory.WithClock(clk)),
				hybrid.WithClock(clk), hybrid.WithObserver(hybridtest.Healthy(t)), hybrid.WithTimeout(10*time.Second))
		})
	})
	t.Run("remote=redis/server-time", func(t *testing.T) {
		conformance.RunRealTime(t, func(t *testing.T) spigot.Store {
			return hybrid.New(redis.New(c), memory.New(), hybrid.WithObserver(hybridtest.Healthy(t)), hybrid.WithTimeout(10*time.Second))
		})
	})
}
