package redis_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/redis"
)

func client(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformanceMiniredis(t *testing.T) {
	conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
		return redis.New(client(t, miniredis.RunT(t).Addr()), redis.WithClock(clk))
	})
}

// scripterOnly hides every method of a client but Scripter's, as a
// Scripter of the caller's own (a wrapper for tracing, say) would.
type scripterOnly struct{ goredis.Scripter }

// TestConformanceScripterOnly: a Scripter without Process gets the same
// answers, through EvalSha and Eval.
func TestConformanceScripterOnly(t *testing.T) {
	conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
		return redis.New(scripterOnly{client(t, miniredis.RunT(t).Addr())}, redis.WithClock(clk))
	})
}

func TestConformanceServers(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			c := client(t, srv.Addr)
			t.Run("fake-clock", func(t *testing.T) {
				conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
					return redis.New(c, redis.WithClock(clk), redis.WithPrefix(t.Name()+":"))
				})
			})
			t.Run("server-time", func(t *testing.T) {
				conformance.RunRealTime(t, func(t *testing.T) spigot.Store { return redis.New(c) })
			})
		})
	}
}
