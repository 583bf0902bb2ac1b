package rls

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
)

// TestAlgorithmsAsTheModel: a descriptor of each of spigot's algorithms
// (but the leaky bucket, whose Delay Envoy cannot honour) decides as
// spigot's model does, in a domain charged all or nothing (a refused
// request takes nothing): 2 000 random requests, of 0 to 3 hits at
// instants µs to seconds apart, against a Limiter of the same limit on a
// memory store of its own, on one fake clock: the same code, and
// limit_remaining the model's Remaining (0 when over).
func TestAlgorithmsAsTheModel(t *testing.T) {
	for _, c := range []struct {
		algorithm string
		model     spigot.Limit
	}{
		{"token-bucket", spigot.MustBucket("m", 7, spigot.Per(5, time.Minute))},
		{"fixed-window", spigot.Must(spigot.NewFixedWindow("m", spigot.Per(5, time.Minute), 0))},
		{"sliding-window", spigot.Must(spigot.NewSlidingWindow("m", spigot.Per(5, time.Minute)))},
		{"sliding-log", spigot.Must(spigot.NewSlidingLog("m", spigot.Per(5, time.Minute)))},
	} {
		t.Run(c.algorithm, func(t *testing.T) {
			capacity := ""
			if c.algorithm == "token-bucket" {
				capacity = ", capacity: 7"
			}
			clk := clocktest.New(t0)
			cfg := mustLoad(t, map[string]string{"c.yaml": "domain: m\ncharging: all-or-nothing\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: " + c.algorithm + capacity + "}\n"})
			svc := NewService(memory.New(memory.WithClock(clk)), cfg, WithClock(clk))
			model := spigot.New(memory.New(memory.WithClock(clk)), c.model)
			rng := rand.New(rand.NewPCG(40, 1))
			for step := range 2000 {
				clk.Advance(time.Duration(rng.IntN(4)) * time.Duration(rng.IntN(20_000_000)) * time.Microsecond)
				n := uint64(rng.IntN(4))
				resp, err := svc.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "m", Descriptors: []*rlpb.RateLimitDescriptor{hits(n, desc("k", "v"))}})
				if err != nil {
					t.Fatal(err)
				}
				var d spigot.Decision
				if n == 0 {
					d, err = model.Peek(context.Background(), "v", 0)
				} else {
					d, err = model.AllowN(context.Background(), "v", int64(n))
				}
				if err != nil {
					t.Fatal(err)
				}
				st := resp.Statuses[0]
				wantCode, wantRemaining := pb.RateLimitResponse_OK, uint32(max(d.Remaining, 0))
				if !d.Allowed() {
					wantCode, wantRemaining = pb.RateLimitResponse_OVER_LIMIT, 0
				}
				if st.Code != wantCode || st.LimitRemaining != wantRemaining {
					t.Fatalf("step %d, %v after %v, %d hits: %v remaining %d; the model: %+v", step, c.algorithm, clk.Now().Sub(t0), n, st.Code, st.LimitRemaining, d)
				}
			}
		})
	}
}
