package envoyrls_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spigot-go/spigot/internal/tests/envoyrls"
)

// The benchmark's configuration: domain bench, every limit per hour.
const (
	benchDomain = "bench"
	// high is far above what a run can reach: its keys are admitted.
	high = 1_000_000_000
	// hotOver is the hot key's limit in the over=true case: calls before
	// the rounds use it up, so that every call of the rounds in its
	// window is denied.
	hotOver = 1000
	// cycleOver is each distinct key's limit in the over=true case, used
	// up before the rounds as hotOver is.
	cycleOver = 1
	// distinct is how many descriptors the keys=10000 case cycles through.
	distinct = 10_000
	// clients is how many callers call at once, each on a connection of
	// its own.
	clients = 64
)

var benchConfig = fmt.Sprintf(`domain: %s
descriptors:
  - key: hot_under
    rate_limit: {unit: hour, requests_per_unit: %d}
  - key: hot_over
    rate_limit: {unit: hour, requests_per_unit: %d}
  - key: cycle_under
    rate_limit: {unit: hour, requests_per_unit: %d}
  - key: cycle_over
    rate_limit: {unit: hour, requests_per_unit: %d}
`, benchDomain, high, hotOver, high, cycleOver)

// BenchmarkServe measures ShouldRateLimit calls per second from 64
// concurrent gRPC callers, envoyproxy/ratelimit (the baseline, with its
// local cache of keys over their limit off and on) beside spigot serve
// (plain, -denycache, -lease), each on a redis-server of its own, one
// service running at a time:
//
//	cd internal/tests && SPIGOT_REQUIRE_SERVERS=1 go test -run '^$' -bench BenchmarkServe -benchtime 3s -count 1 ./envoyrls
//
// With -v it also logs each window check's counts.
//
// Each service answers four cases: keys=1, one hot descriptor, and
// keys=10000, 10 000 distinct descriptors cycled; over=false, whose limit
// (10⁹ an hour) no run reaches, so that nearly every call is admitted, and
// over=true, whose limit (1000 an hour for the hot key, 1 for each of the
// distinct ones) untimed calls use up before the rounds, so that every
// call of the rounds is denied: where envoyproxy/ratelimit's local cache
// and spigot's denial cache and leases answer from memory.
//
// Each caller has a grpc.ClientConn of its own, as 64 Envoy proxies would:
// one connection multiplexing every call would measure one HTTP/2
// connection's reader and writer, on both sides, rather than the service.
// The callers run in this process, on the same cores as the service and
// its redis-server, so a figure is the machine's throughput with all
// three; the allocations reported are the callers' alone. Beside calls/s
// each case reports denied/op, the share of its last round's calls that
// were denied: 0 or 1 unless the run straddles the hour.
//
// After each service's cases, the OK answers are checked against the
// limits: in one window (the hour of the Redis server's TIME before the
// first round and after the last) no key of spigot serve's (its default,
// fixed window charging) was admitted more than its requests_per_unit;
// when the runs straddle the hour the check is skipped and logged.
// envoyproxy/ratelimit's counts are logged, not checked.
func BenchmarkServe(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(benchConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	services := []struct {
		name   string
		spigot bool
		start  func(testing.TB) *envoyrls.Service
	}{
		{"envoyproxy", false, func(tb testing.TB) *envoyrls.Service { return envoyrls.Start(tb, dir) }},
		{"envoyproxy-localcache", false, func(tb testing.TB) *envoyrls.Service {
			return envoyrls.Start(tb, dir, envoyrls.LocalCacheSize(64<<20))
		}},
		{"spigot", true, func(tb testing.TB) *envoyrls.Service { return envoyrls.StartSpigot(tb, dir) }},
		{"spigot-denycache", true, func(tb testing.TB) *envoyrls.Service { return envoyrls.StartSpigot(tb, dir, "-denycache") }},
		{"spigot-lease", true, func(tb testing.TB) *envoyrls.Service { return envoyrls.StartSpigot(tb, dir, "-lease") }},
	}
	cases := []struct {
		name  string
		key   string
		keys  int
		limit int
	}{
		{"keys=1/over=false", "hot_under", 1, high},
		{"keys=1/over=true", "hot_over", 1, hotOver},
		{"keys=10000/over=false", "cycle_under", distinct, high},
		{"keys=10000/over=true", "cycle_over", distinct, cycleOver},
	}
	for _, svc := range services {
		b.Run("service="+svc.name, func(b *testing.B) {
			s := svc.start(b)
			conns := dialClients(b, s.GRPCAddr)
			for _, c := range cases {
				reqs := make([]*pb.RateLimitRequest, c.keys)
				for i := range reqs {
					value := "v"
					if c.keys > 1 {
						value = fmt.Sprintf("k%05d", i)
					}
					reqs[i] = &pb.RateLimitRequest{Domain: benchDomain, Descriptors: []*rlpb.RateLimitDescriptor{envoyrls.Descriptor(c.key, value)}}
				}
				oks := make([]int64, c.keys) // every round's OK answers, by key
				before := s.Redis.Micros(b)
				if c.limit < high {
					// Use up every key's limit before the rounds, so that
					// each of their calls is denied.
					calls(b, conns, reqs, c.limit*len(reqs), oks)
				}
				b.Run(c.name, func(b *testing.B) { benchCalls(b, conns, reqs, oks) })
				after := s.Redis.Micros(b)
				checkWindow(b, svc.name, svc.spigot, c.name, c.limit, oks, before, after)
			}
		})
	}
}

// dialClients returns clients connections to addr, each connected and
// having answered one call, closed when tb ends.
func dialClients(tb testing.TB, addr string) []pb.RateLimitServiceClient {
	tb.Helper()
	out := make([]pb.RateLimitServiceClient, clients)
	probe := &pb.RateLimitRequest{Domain: "bench-probe-no-such-domain", Descriptors: []*rlpb.RateLimitDescriptor{envoyrls.Descriptor("probe", "1")}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range out {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			tb.Fatalf("client %d: %v", i, err)
		}
		tb.Cleanup(func() { conn.Close() })
		out[i] = pb.NewRateLimitServiceClient(conn)
		if _, err := out[i].ShouldRateLimit(ctx, probe); err != nil {
			tb.Fatalf("client %d: probe: %v", i, err)
		}
	}
	return out
}

// benchCalls makes b.N calls, as calls does, and reports them.
func benchCalls(b *testing.B, conns []pb.RateLimitServiceClient, reqs []*pb.RateLimitRequest, oks []int64) {
	b.ReportAllocs()
	b.ResetTimer()
	denied := calls(b, conns, reqs, b.N, oks)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	b.ReportMetric(float64(denied)/float64(b.N), "denied/op")
}

// calls makes n calls, from len(conns) goroutines, one a connection, the
// i-th call sending reqs[i%len(reqs)]; it adds each key's OK answers to
// oks and returns how many calls were denied. A call that fails fails tb.
func calls(tb testing.TB, conns []pb.RateLimitServiceClient, reqs []*pb.RateLimitRequest, n int, oks []int64) (denied int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		next, no, failed atomic.Int64
		firstErr         atomic.Value
		wg               sync.WaitGroup
		mu               sync.Mutex
	)
	for _, c := range conns {
		wg.Go(func() {
			mine := make([]int64, len(reqs))
			var myNo int64
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					break
				}
				k := int(i % int64(len(reqs)))
				resp, err := c.ShouldRateLimit(ctx, reqs[k])
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				case resp.GetOverallCode() == pb.RateLimitResponse_OK:
					mine[k]++
				default:
					myNo++
				}
			}
			no.Add(myNo)
			mu.Lock()
			for k, v := range mine {
				oks[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		tb.Fatalf("%d of %d calls failed, the first: %v", f, n, firstErr.Load())
	}
	return no.Load()
}

// checkWindow checks, for spigot serve, that no key was admitted more than
// limit times in the window of the hour of before and after (the Redis
// server's clock, µs), and logs envoyproxy/ratelimit's most admitted key.
func checkWindow(tb testing.TB, service string, spigot bool, name string, limit int, oks []int64, before, after int64) {
	tb.Helper()
	const hour = 3600 * 1_000_000
	if before/hour != after/hour {
		tb.Logf("%s %s: the runs straddle the hour (%s to %s): the window check is skipped",
			service, name, time.UnixMicro(before).UTC().Format(time.TimeOnly), time.UnixMicro(after).UTC().Format(time.TimeOnly))
		return
	}
	var most, total int64
	key := 0
	for k, v := range oks {
		total += v
		if v > most {
			most, key = v, k
		}
	}
	msg := fmt.Sprintf("%s %s: in one window, %d OK answers in all, at most %d for one key (key %d), of a limit of %d",
		service, name, total, most, key, limit)
	switch {
	case !spigot:
		tb.Log(msg)
	case most > int64(limit):
		tb.Errorf("%s: over the limit", msg)
	default:
		tb.Log(msg)
	}
}
