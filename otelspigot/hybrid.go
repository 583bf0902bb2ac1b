package otelspigot

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/store/hybrid"
)

// HybridObserver returns a store/hybrid observer that counts every
// decision by its path (spigot.hybrid.decisions, by spigot.path), in the
// context of the request that it decided, so that a MeterProvider that
// keeps exemplars links each count to the request's span. Give it to
// hybrid.WithObserver; combine it with an observer of your own by calling
// both from one.
func HybridObserver(opts ...Option) hybrid.Observer {
	c := newConfig(opts)
	counter, err := c.mp.Meter(ScopeName).Int64Counter("spigot.hybrid.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions of store/hybrid, by the path that made them."))
	if err != nil {
		otel.Handle(err)
	}
	var byPath [hybrid.PathGuard + 1][]metric.AddOption
	for p := range byPath {
		byPath[p] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(PathKey.String(hybrid.Path(p).String())))}
	}
	return hybrid.Observer{Decision: func(ctx context.Context, _ spigot.Op, p hybrid.Path, _ spigot.Decision) {
		if int(p) < len(byPath) {
			counter.Add(ctx, 1, byPath[p]...)
		}
	}}
}

// ObserveCircuit reports h's breaker as the gauge spigot.hybrid.circuit:
// 0 closed, 1 half-open (a probe is trying the remote), 2 open (the
// policy decides every request). It returns the registration, whose
// Unregister stops it.
func ObserveCircuit(h *hybrid.Store, opts ...Option) (metric.Registration, error) {
	c := newConfig(opts)
	m := c.mp.Meter(ScopeName)
	gauge, err := m.Int64ObservableGauge("spigot.hybrid.circuit", metric.WithUnit("{state}"),
		metric.WithDescription("The breaker of store/hybrid: 0 closed, 1 half-open, 2 open."))
	if err != nil {
		return nil, err
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(gauge, circuitValue(h.Circuit()))
		return nil
	}, gauge)
}

func circuitValue(c hybrid.Circuit) int64 {
	switch c {
	case hybrid.CircuitHalfOpen:
		return 1
	case hybrid.CircuitOpen:
		return 2
	}
	return 0
}

// HTTPObserver returns an httplimit observer that records each limited
// request's decisions in spigot.decisions and spigot.tokens.requested,
// with the route (the ServeMux pattern) as http.route, its store errors in
// spigot.store.errors and the store's latency in spigot.store.duration.
// Give it to httplimit.WithObserver, in front of a store that is not
// wrapped (or every decision counts twice).
func HTTPObserver(opts ...Option) func(*http.Request, *httplimit.Result) {
	c := newConfig(opts)
	in, err := newInstruments(c.mp)
	if err != nil {
		otel.Handle(err)
	}
	return func(r *http.Request, res *httplimit.Result) {
		ctx := r.Context()
		op := 0
		if len(res.Limits) > 1 {
			op = 1
		}
		in.duration.Record(ctx, res.Latency.Seconds(), in.ops[op]...)
		if res.Err != nil {
			in.failed(ctx, res.Err)
			return
		}
		for i, l := range res.Limits {
			in.decided(ctx, spigot.Op{Limit: l, Action: spigot.Take, N: res.Costs[i]}, res.Decisions.Each[i], res.Route)
		}
	}
}
