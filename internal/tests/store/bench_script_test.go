package store_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
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
// server=…/script=…/limit=…:
//
//   - script=v2, script=today, limit=token-bucket: a Take of 1 of a
//     bucket that keeps its state (a billion tokens, refilling 1/s), by
//     the script before the other kinds (testdata/spigot-v2.lua) and by
//     today's, in the same run: their ratio is what the other kinds cost
//     the token bucket's path;
//   - script=today, limit=sliding-log-L: a Take of 1 of a sliding log of L
//     tokens a second, at its steady state under load: every call comes
//     1/L s after the one before, so that the log holds L tokens at L
//     distinct instants (its largest state), the oldest leaves and one
//     comes;
//   - script=today, limit=sliding-window and fixed-window: a Take of 1 in
//     a window that keeps its counts.
//
// The calls go one at a time over one connection, each with the caller's
// clock (ARGV[1]); run with -benchtime=2000x or more.
func BenchmarkScript(b *testing.B) {
	sha := func(s string) string {
		sum := sha1.Sum([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	bucket := spigot.MustBucket("roomy", 1_000_000_000, spigot.PerSecond(1))
	cases := []struct {
		script, limit string
		src           string
		l             spigot.Limit
	}{
		{"v2", "token-bucket", scriptV2, bucket},
		{"today", "token-bucket", wire.Script(), bucket},
		{"today", "leaky-bucket", wire.Script(), spigot.Must(spigot.NewLeakyBucket("roomy", 1_000_000_000, spigot.PerSecond(1)))},
		{"today", "fixed-window", wire.Script(), spigot.Must(spigot.NewFixedWindow("fw", spigot.PerDay(1_000_000_000), 0))},
		{"today", "sliding-window", wire.Script(), spigot.Must(spigot.NewSlidingWindow("sw", spigot.PerDay(1_000_000)))},
	}
	for _, n := range []int64{10, 100, 1000} {
		cases = append(cases, struct {
			script, limit string
			src           string
			l             spigot.Limit
		}{"today", fmt.Sprintf("sliding-log-%d", n), wire.Script(), spigot.Must(spigot.NewSlidingLog("sl", spigot.PerSecond(n)))})
	}
	for _, kind := range testserver.Kinds {
		b.Run("server="+serverName(kind), func(b *testing.B) {
			srv := testserver.Start(b, kind)
			c := testclient.GoRedis(b, srv.Addr)
			ctx := context.Background()
			// The two scripts on the token bucket, in alternating blocks of
			// 100 calls, so that the load of other processes weighs on both
			// alike: today's server time over v2's.
			b.Run("script=today-over-v2/limit=token-bucket", func(b *testing.B) {
				var usec [2]float64
				calls := [2]func(){}
				for i, src := range []string{scriptV2, wire.Script()} {
					if err := c.ScriptLoad(ctx, src).Err(); err != nil {
						b.Fatal(err)
					}
					h, key := sha(src), store.Key(store.DefaultPrefix, bucket, fmt.Sprintf("%s-%d", b.Name(), i))
					argv := wire.NewArgs(nil).Op(spigot.Op{Limit: bucket, N: 1})
					args := make([]any, len(argv))
					for j, a := range argv {
						args[j] = a
					}
					now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixMicro()
					calls[i] = func() {
						args[0] = strconv.FormatInt(now, 10)
						now += 1000
						if err := c.EvalSha(ctx, h, []string{key}, args...).Err(); err != nil {
							b.Fatal(err)
						}
					}
					calls[i]()
				}
				b.ResetTimer()
				for done := 0; done < b.N; done += 100 {
					for i := range calls {
						resetStat(b, c)
						for range 100 {
							calls[i]()
						}
						usec[i] += evalshaUsec(b, c)
					}
				}
				b.ReportMetric(usec[0]/float64(b.N), "v2-server-µs/op")
				b.ReportMetric(usec[1]/float64(b.N), "today-server-µs/op")
				b.ReportMetric(usec[1]/usec[0], "today/v2")
			})
			for _, bc := range cases {
				b.Run(fmt.Sprintf("script=%s/limit=%s", bc.script, bc.limit), func(b *testing.B) {
					if err := c.ScriptLoad(ctx, bc.src).Err(); err != nil {
						b.Fatal(err)
					}
					h := sha(bc.src)
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
