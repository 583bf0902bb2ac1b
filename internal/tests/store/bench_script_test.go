package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

// BenchmarkScript measures what one call of the script costs the server,
// in µs of its own time per call (server-µs/op, from INFO commandstats:
// the time the server spent in EVALSHA, not the round trip), named
// server=…/limit=…:
//
//   - limit=token-bucket and leaky-bucket: a Take of 1 of a bucket that
//     keeps its state (a billion tokens, refilling 1/s);
//   - limit=sliding-log-L: a Take of 1 of a sliding log of L tokens a
//     second, at its steady state under load: every call comes 1/L s
//     after the one before, so that the log holds L tokens at L distinct
//     instants (its largest state), the oldest leaves and one comes;
//   - limit=sliding-window and fixed-window: a Take of 1 in a window that
//     keeps its counts.
//
// The calls go one at a time over one connection, each with the caller's
// clock (ARGV[1]); run with -benchtime=2000x or more.
func BenchmarkScript(b *testing.B) {
	cases := []struct {
		limit string
		l     spigot.Limit
	}{
		{"token-bucket", spigot.MustBucket("roomy", 1_000_000_000, spigot.PerSecond(1))},
		{"leaky-bucket", spigot.Must(spigot.NewLeakyBucket("roomy", 1_000_000_000, spigot.PerSecond(1)))},
		{"fixed-window", spigot.Must(spigot.NewFixedWindow("fw", spigot.PerDay(1_000_000_000), 0))},
		{"sliding-window", spigot.Must(spigot.NewSlidingWindow("sw", spigot.PerDay(1_000_000)))},
	}
	for _, n := range []int64{10, 100, 1000} {
		cases = append(cases, struct {
			limit string
			l     spigot.Limit
		}{fmt.Sprintf("sliding-log-%d", n), spigot.Must(spigot.NewSlidingLog("sl", spigot.PerSecond(n)))})
	}
	for _, kind := range testserver.Kinds {
		b.Run("server="+serverName(kind), func(b *testing.B) {
			srv := testserver.Start(b, kind)
			c := testclient.GoRedis(b, srv.Addr)
			ctx := context.Background()
			for _, bc := range cases {
				b.Run("limit="+bc.limit, func(b *testing.B) {
					if err := c.ScriptLoad(ctx, wire.Script()).Err(); err != nil {
						b.Fatal(err)
					}
					h := wire.SHA1()
					key := store.Key(store.DefaultPrefix, bc.l, b.Name())
					argv := wire.NewArgs(nil).Op(spigot.Op{Limit: bc.l, N: 1})
					args := make([]any, len(argv))
					for i, a := range argv {
						args[i] = a
					}
					// One call per 1/L s for a log of L tokens a second; 1 ms
					// apart for the others.
					step := int64(1000)
					if w := bc.l.Window(); bc.l.Kind() == spigot.SlidingLog {
						step = w.Microseconds() / bc.l.Capacity()
					}
					now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixMicro()
					call := func() {
						args[0] = strconv.FormatInt(now, 10)
						now += step
						if err := c.EvalSha(ctx, h, []string{key}, args...).Err(); err != nil {
							b.Fatal(err)
						}
					}
					warm := int64(10)
					if bc.l.Kind() == spigot.SlidingLog {
						warm = 2 * bc.l.Capacity() // to the steady state
					}
					for range warm {
						call()
					}
					if bc.l.Kind() == spigot.SlidingLog {
						if v, _ := getValue(b, c, key); func() bool {
							s, err := wire.ParseState(v, spigot.SlidingLog)
							return err != nil || int64(len(s.Log)) != bc.l.Capacity()
						}() {
							b.Fatalf("the log holds %q; want %d tokens", v, bc.l.Capacity())
						}
					}
					resetStat(b, c)
					b.ResetTimer()
					for range b.N {
						call()
					}
					b.StopTimer()
					b.ReportMetric(evalshaUsec(b, c)/float64(b.N), "server-µs/op")
				})
			}
		})
	}
}

// serverName is the name of a server kind in a benchmark's name.
func serverName(k testserver.Kind) string { return strings.TrimSuffix(string(k), "-server") }

func resetStat(b *testing.B, c goredis.UniversalClient) {
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}

// evalshaUsec returns the µs the server spent in EVALSHA since the last
// CONFIG RESETSTAT.
func evalshaUsec(b *testing.B, c goredis.UniversalClient) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				return n
			}
		}
	}
	b.Fatalf("INFO commandstats has no cmdstat_evalsha: %q", info)
	return 0
}
