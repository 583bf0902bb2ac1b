package rls_test

import (
	"context"
	"fmt"
	"testing/fstest"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/cmd/spigot/internal/rls"
	"github.com/spigot-go/spigot/store/memory"
)

func Example() {
	cfg, err := rls.Load(fstest.MapFS{"api.yaml": {Data: []byte(`
domain: api
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: tenant
    value: free
    rate_limit:
      unit: second
      requests_per_unit: 10
      algorithm: token-bucket
      capacity: 20
`)}})
	if err != nil {
		panic(err)
	}
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 15, 0, time.UTC))
	svc := rls.NewService(memory.New(memory.WithClock(clk)), cfg, rls.WithClock(clk))
	req := &pb.RateLimitRequest{Domain: "api", Descriptors: []*rlpb.RateLimitDescriptor{
		{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
		{Entries: []*rlpb.RateLimitDescriptor_Entry{{Key: "tenant", Value: "free"}}},
	}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			panic(err)
		}
		fmt.Print(resp.OverallCode)
		for _, st := range resp.Statuses {
			fmt.Printf(" | %s remaining %d, resets in %v", st.Code, st.LimitRemaining, st.DurationUntilReset.AsDuration())
		}
		fmt.Println()
	}
	// Output:
	// OK | OK remaining 1, resets in 45s | OK remaining 19, resets in 1s
	// OK | OK remaining 0, resets in 45s | OK remaining 18, resets in 1s
	// OVER_LIMIT | OVER_LIMIT remaining 0, resets in 45s | OK remaining 17, resets in 1s
}
