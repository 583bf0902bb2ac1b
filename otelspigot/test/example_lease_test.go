package otelspigot_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
)

// What a lease Store does, in its metrics: every request is a hit,
// admitted from a lease, a denial on what the shared store last told, or
// a take, a call of the shared store; and once
// Close has given the unspent tokens back, the tokens taken less those
// returned are the tokens admitted. (Without WithMeterProvider,
// LeaseObserver records through the global MeterProvider.)
func ExampleLeaseObserver() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	shared := memory.New() // in place of Redis
	s := lease.New(shared, lease.WithObserver(otelspigot.LeaseObserver(otelspigot.WithMeterProvider(mp))))
	limiter := spigot.New(s, spigot.MustBucket("api", 100, spigot.Per(100, time.Hour)))
	ctx := context.Background()
	admitted := 0
	for range 120 {
		if d, err := limiter.Allow(ctx, "tenant-7"); err == nil && d.Allowed() {
			admitted++
		}
	}
	if err := s.Close(ctx); err != nil {
		fmt.Println(err)
	}

	var rm metricdata.ResourceMetrics
	reader.Collect(ctx, &rm)
	sum := map[string]int64{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			sum[m.Name] += p.Value
		}
	}
	fmt.Println("admitted:", admitted)
	fmt.Println("hits + denials + takes:", sum["spigot.lease.hits"]+sum["spigot.lease.denials"]+sum["spigot.lease.takes"])
	fmt.Println("tokens taken - returned:", sum["spigot.lease.tokens.taken"]-sum["spigot.lease.tokens.returned"])
	// Output:
	// admitted: 100
	// hits + denials + takes: 120
	// tokens taken - returned: 100
}
