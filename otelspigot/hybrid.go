package otelspigot

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/otelspigot/internal/observe"
	"github.com/spigot-go/spigot/store/hybrid"
)

// HybridObserver returns a store/hybrid observer that records what the
// hybrid store does, each in the context of the request that caused it
// (so that a MeterProvider that keeps exemplars links it to the
// request's span):
//
//   - spigot.hybrid.decisions: every decision, by the path that made it
//     (spigot.path: remote, local, fail-open, fail-closed, guard);
//   - spigot.hybrid.remote.duration: how long each call of the remote
//     store took, answered or failed;
//   - spigot.hybrid.remote.errors: each failed remote call, by kind
//     (error.type, as ErrorType names it): "unavailable" for a remote that
//     cannot serve (the policy decided instead), "request" or
//     "unsupported" for an answer about one request;
//   - spigot.hybrid.circuit.transitions: each change of the breaker, by
//     the state it left and the state it entered (spigot.circuit.from,
//     spigot.circuit.to: closed, open, half-open).
//
// Give it to hybrid.WithObserver, and the store to ObserveCircuit for the
// breaker's state as a gauge. To combine it with an observer of your own,
// call each of its functions from yours. Recording allocates nothing. An
// instrument the MeterProvider refuses is left out (the provider reports
// why to otel's error handler). It makes no spans.
func HybridObserver(opts ...Option) hybrid.Observer {
	c := newConfig(opts)
	m := c.MeterProvider.Meter(ScopeName)
	var err, e error
	decisions, e := m.Int64Counter("spigot.hybrid.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions of store/hybrid, by the path that made them."))
	err = errors.Join(err, e)
	duration, e := m.Float64Histogram("spigot.hybrid.remote.duration", metric.WithUnit("s"),
		metric.WithDescription("How long store/hybrid's remote store took to answer a call, or to fail."),
		metric.WithExplicitBucketBoundaries(DurationBuckets()...))
	err = errors.Join(err, e)
	remoteErrors, e := m.Int64Counter("spigot.hybrid.remote.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Calls of store/hybrid's remote store that failed, by kind."))
	err = errors.Join(err, e)
	transitions, e := m.Int64Counter("spigot.hybrid.circuit.transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("Changes of state of store/hybrid's breaker, from one state to another."))
	err = errors.Join(err, e)
	if err != nil {
		otel.Handle(err)
	}

	var byPath [hybrid.PathGuard + 1][]metric.AddOption
	for p := range byPath {
		byPath[p] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(PathKey.String(hybrid.Path(p).String())))}
	}
	errs := newErrorAttrs()
	var moves [circuits][circuits][]metric.AddOption
	for from := range moves {
		for to := range moves[from] {
			moves[from][to] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
				CircuitFromKey.String(hybrid.Circuit(from).String()), CircuitToKey.String(hybrid.Circuit(to).String())))}
		}
	}
	return hybrid.Observer{
		Decision: func(ctx context.Context, _ spigot.Op, p hybrid.Path, _ spigot.Decision) {
			if p >= 0 && int(p) < len(byPath) {
				decisions.Add(ctx, 1, byPath[p]...)
			}
		},
		RemoteCall: func(ctx context.Context, _ spigot.Op, _ error, latency time.Duration) {
			duration.Record(ctx, latency.Seconds())
		},
		RemoteError: func(ctx context.Context, _ spigot.Op, err error, _ time.Duration) {
			remoteErrors.Add(ctx, 1, errs[errorKind(err)]...)
		},
		Transition: func(ctx context.Context, from, to hybrid.Circuit) {
			if from >= 0 && from < circuits && to >= 0 && to < circuits {
				transitions.Add(ctx, 1, moves[from][to]...)
			}
		},
	}
}

// circuits is the number of states of the breaker: closed, open and
// half-open.
const circuits = hybrid.CircuitHalfOpen + 1

// ObserveCircuit reports h's breaker as the gauge spigot.hybrid.circuit:
// 0 closed, 1 half-open (a probe is trying the remote), 2 open (the
// policy decides every request). It returns the registration, whose
// Unregister stops it.
func ObserveCircuit(h *hybrid.Store, opts ...Option) (metric.Registration, error) {
	c := newConfig(opts)
	m := c.MeterProvider.Meter(ScopeName)
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
	in, err := newInstruments(c.MeterProvider)
	if err != nil {
		otel.Handle(err)
	}
	return func(r *http.Request, res *httplimit.Result) {
		in.observe(r.Context(), route{name: res.Route}, observe.Result{
			Limits: res.Limits, Costs: res.Costs, Each: res.Decision.Each, Latency: res.Latency, Err: res.Err,
		})
	}
}
