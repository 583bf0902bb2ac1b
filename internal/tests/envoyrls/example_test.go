package envoyrls_test

import (
	"fmt"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spigot-go/spigot/internal/tests/envoyrls"
)

// Diff names each field that differs between two answers; the seconds
// until the window resets may differ by one, as two calls made one after
// the other see them.
func ExampleDiff() {
	limit := &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 3, Unit: pb.RateLimitResponse_RateLimit_HOUR}
	a := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{
		{Code: pb.RateLimitResponse_OK, CurrentLimit: limit, LimitRemaining: 2, DurationUntilReset: durationpb.New(600e9)},
	}}
	b := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT, Statuses: []*pb.RateLimitResponse_DescriptorStatus{
		{Code: pb.RateLimitResponse_OVER_LIMIT, CurrentLimit: limit, LimitRemaining: 0, DurationUntilReset: durationpb.New(599e9)},
	}}
	for _, d := range envoyrls.Diff(a, b) {
		fmt.Println(d)
	}
	// Output:
	// overall_code: "OK" != "OVER_LIMIT"
	// statuses[0].code: "OK" != "OVER_LIMIT"
	// statuses[0].limit_remaining: 2 != 0
}
