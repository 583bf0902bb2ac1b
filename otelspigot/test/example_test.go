package otelspigot_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/memory"
)

// Expose spigot's metrics to Prometheus: the OpenTelemetry Prometheus
// exporter is the MeterProvider's reader, and promhttp serves its registry.
func Example_prometheus() {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	login := spigot.MustBucket("login", 2, spigot.PerMinute(1))
	limiter := spigot.New(otelspigot.Wrap(memory.New(), otelspigot.WithMeterProvider(mp)), login)
	ctx := context.Background()
	for range 3 {
		limiter.Allow(ctx, "10.0.0.1") // allowed, allowed, denied
	}
	limiter.AllowN(ctx, "10.0.0.2", 5) // never: more than the capacity

	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	var lines []string
	for sc := bufio.NewScanner(res.Body); sc.Scan(); {
		line := sc.Text()
		if !strings.HasPrefix(line, "spigot_decisions_total{") {
			continue
		}
		// Drop the labels of the instrumentation scope, whose version varies.
		var keep []string
		labels, value, _ := strings.Cut(strings.TrimPrefix(line, "spigot_decisions_total{"), "} ")
		for _, l := range strings.Split(labels, ",") {
			if !strings.HasPrefix(l, "otel_scope_") {
				keep = append(keep, l)
			}
		}
		lines = append(lines, "spigot_decisions_total{"+strings.Join(keep, ",")+"} "+value)
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// spigot_decisions_total{spigot_limit="login",spigot_outcome="allowed"} 2
	// spigot_decisions_total{spigot_limit="login",spigot_outcome="denied"} 1
	// spigot_decisions_total{spigot_limit="login",spigot_outcome="never"} 1
}
