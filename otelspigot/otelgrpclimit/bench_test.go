package otelgrpclimit_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/otelspigot/otelgrpclimit"
)

// BenchmarkObserver measures Observer's cost per call on the Result of a
// call that two limits allowed: an observer that does nothing (the
// baseline), Observer on a no-op MeterProvider, and on the SDK's with a
// ManualReader.
func BenchmarkObserver(b *testing.B) {
	limits := []spigot.Limit{
		spigot.MustBucket("per-address", 10, spigot.PerSecond(1)),
		spigot.MustBucket("per-tenant", 10, spigot.PerSecond(1)),
	}
	each := []spigot.Decision{{Remaining: 9}, {Remaining: 8}}
	res := grpclimit.Result{
		FullMethod: "/spigot.test.Echo/Echo",
		Limits:     limits,
		Keys:       []string{"10.0.0.1", "alice"},
		Costs:      []int64{1, 2},
		Decision:   spigot.GroupDecision{Decision: each[1], By: 1, Each: each},
		Latency:    50 * time.Microsecond,
	}
	for _, p := range []struct {
		name string
		obs  func() func(context.Context, *grpclimit.Result)
	}{
		{"none", func() func(context.Context, *grpclimit.Result) { return func(context.Context, *grpclimit.Result) {} }},
		{"noop", func() func(context.Context, *grpclimit.Result) {
			return otelgrpclimit.Observer(otelspigot.WithMeterProvider(noop.NewMeterProvider()))
		}},
		{"sdk", func() func(context.Context, *grpclimit.Result) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			return otelgrpclimit.Observer(otelspigot.WithMeterProvider(mp))
		}},
	} {
		b.Run("provider="+p.name+"/parallel", func(b *testing.B) {
			obs := p.obs()
			ctx := context.Background()
			obs(ctx, &res) // the attributes, built
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := res
				for pb.Next() {
					obs(ctx, &r)
				}
			})
		})
	}
}
