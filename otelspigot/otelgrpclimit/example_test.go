package otelgrpclimit_test

import (
	"context"
	"fmt"
	"sort"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc/status"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/otelspigot/otelgrpclimit"
	"github.com/spigot-go/spigot/store/memory"
)

// Count a gRPC service's decisions by method: 2 calls at once per client
// address, then 1 a minute, over Echo and Other's Echo. (The store runs
// on a fake clock here, so that nothing refills between the calls.)
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	perAddress := spigot.MustBucket("per-address", 2, spigot.PerMinute(1))
	store := memory.New(memory.WithClock(clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))))
	policy := grpclimit.New(store,
		grpclimit.By(perAddress, grpclimit.PeerIP()),
		grpclimit.WithObserver(otelgrpclimit.Observer(otelspigot.WithMeterProvider(mp))),
	)
	conn, stop, err := start(policy)
	if err != nil {
		panic(err)
	}
	defer stop()

	ctx := context.Background()
	for _, method := range []string{"/spigot.test.Echo/Echo", "/spigot.test.Echo/Echo", "/spigot.test.Other/Echo"} {
		fmt.Println(method, status.Code(call(ctx, conn, method)))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "spigot.decisions" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				line := m.Name
				for _, kv := range p.Attributes.ToSlice() {
					line += fmt.Sprintf(" %s=%s", kv.Key, kv.Value.String())
				}
				lines = append(lines, fmt.Sprintf("%s: %d", line, p.Value))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// /spigot.test.Echo/Echo OK
	// /spigot.test.Echo/Echo OK
	// /spigot.test.Other/Echo ResourceExhausted
	// spigot.decisions rpc.method=spigot.test.Echo/Echo rpc.system.name=grpc spigot.limit=per-address spigot.outcome=allowed: 2
	// spigot.decisions rpc.method=spigot.test.Other/Echo rpc.system.name=grpc spigot.limit=per-address spigot.outcome=denied: 1
}
