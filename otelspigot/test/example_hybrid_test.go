package otelspigot_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// refused is a remote store whose server is down.
type refused struct{}

var errRefused = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (refused) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	return spigot.Decision{}, errRefused
}
func (refused) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return errRefused
}

// What an outage of store/hybrid's remote looks like in the metrics: the
// remote's errors by kind, the breaker's transition and state, and the
// decisions the local store made instead. The limiter itself sees no
// error.
func ExampleHybridObserver() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	h := hybrid.New(refused{}, memory.New(),
		hybrid.WithObserver(otelspigot.HybridObserver(otelspigot.WithMeterProvider(mp))),
		hybrid.WithBreaker(2, time.Minute))
	otelspigot.ObserveCircuit(h, otelspigot.WithMeterProvider(mp))
	limiter := spigot.New(h, spigot.MustBucket("login", 5, spigot.PerMinute(1)))
	for range 3 {
		if _, err := limiter.Allow(context.Background(), "10.0.0.1"); err != nil {
			fmt.Println(err)
		}
	}

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				var kvs []string
				for _, kv := range p.Attributes.ToSlice() {
					kvs = append(kvs, string(kv.Key)+"="+kv.Value.String())
				}
				lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, strings.Join(kvs, ","), p.Value))
			}
		case metricdata.Gauge[int64]:
			for _, p := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s %d", m.Name, p.Value))
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s count %d", m.Name, p.Count))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// spigot.hybrid.circuit 2
	// spigot.hybrid.circuit.transitions{spigot.circuit.from=closed,spigot.circuit.to=open} 1
	// spigot.hybrid.decisions{spigot.path=local} 3
	// spigot.hybrid.remote.duration count 2
	// spigot.hybrid.remote.errors{error.type=unavailable} 2
}

// Spans go through the global TracerProvider by default, once one is set;
// WithTracerProvider names another, and the no-op provider turns them off.
func ExampleWithTracerProvider() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	login := spigot.MustBucket("login", 5, spigot.PerMinute(1))
	traced := spigot.New(otelspigot.Wrap(memory.New(), otelspigot.WithTracerProvider(tp)), login)
	untraced := spigot.New(otelspigot.Wrap(memory.New(), otelspigot.WithTracerProvider(tracenoop.NewTracerProvider())), login)

	ctx, request := tp.Tracer("server").Start(context.Background(), "POST /login")
	traced.Allow(ctx, "10.0.0.1")
	untraced.Allow(ctx, "10.0.0.1")
	request.End()

	for _, s := range spans.Ended() {
		fmt.Println(s.Name())
	}
	// Output:
	// spigot.Do
	// POST /login
}
