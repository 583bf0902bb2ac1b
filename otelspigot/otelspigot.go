// Package otelspigot records OpenTelemetry metrics and traces of spigot's
// decisions: how much is denied and by which limit, how slow the store
// is, for store/hybrid, whether the remote store fails, how the breaker
// moves, and which requests the fallback decided, and for store/lease,
// how many requests its leases decided and the tokens they took.
//
// Wrap puts the instruments around any spigot.Store, so that it composes
// with every store of spigot's and your own; the wrapped store does
// exactly what the store it wraps does, and passes every operation
// through:
//
//	h := hybrid.New(spigotredis.New(rdb), memory.New(),
//		hybrid.WithObserver(otelspigot.HybridObserver()))
//	otelspigot.ObserveCircuit(h) // the breaker's state, as a gauge
//	limiter := spigot.New(otelspigot.Wrap(h), login)
//
// It records through the OpenTelemetry API alone: its module requires
// spigot and the API (go.opentelemetry.io/otel, otel/metric, otel/trace),
// neither gRPC nor the SDK nor an exporter. What reads the measurements
// and spans, the SDK (go.opentelemetry.io/otel/sdk/metric and sdk/trace)
// and an exporter (Prometheus, OTLP), is the application's choice: it
// sets the global providers (otel.SetMeterProvider,
// otel.SetTracerProvider) or passes its own to WithMeterProvider and
// WithTracerProvider. Until then nothing is recorded.
//
// # Instruments
//
// Wrap (or HTTPObserver, or otelgrpclimit.Observer) records
//
//	spigot.decisions         counter    {decision}  spigot.limit, spigot.outcome (allowed, denied, never)
//	spigot.tokens.requested  counter    {token}     spigot.limit
//	spigot.store.duration    histogram  s           spigot.operation (do, do_multi)
//	spigot.store.errors      counter    {error}     error.type (unavailable, request, invalid, unsupported, canceled)
//
// and HybridObserver and ObserveCircuit, for store/hybrid,
//
//	spigot.hybrid.decisions            counter    {decision}    spigot.path (remote, local, fail-open, fail-closed, guard)
//	spigot.hybrid.remote.duration      histogram  s             (none)
//	spigot.hybrid.remote.errors        counter    {error}       error.type (unavailable, request, unsupported, ...)
//	spigot.hybrid.circuit.transitions  counter    {transition}  spigot.circuit.from, spigot.circuit.to (closed, open, half-open)
//	spigot.hybrid.circuit              gauge      {state}       0 closed, 1 half-open, 2 open
//
// and LeaseObserver, for store/lease,
//
//	spigot.lease.hits             counter  {request}  spigot.limit
//	spigot.lease.takes            counter  {call}     spigot.limit, error.type (when the call failed)
//	spigot.lease.tokens.taken     counter  {token}    spigot.limit
//	spigot.lease.tokens.returned  counter  {token}    spigot.limit, error.type (when the refund failed: tokens lost)
//
// A decision counts each limit's own outcome: when several limits decide
// one request all or nothing and one denies it, the others count it
// allowed, though it took nothing from them. Refunds, resets and peeks
// are timed, not counted as decisions. The histograms' bounds are
// DurationBuckets, 50 µs to 1 s. ErrorType names the kind of an error.
//
// spigot.store.errors counts the errors the wrapped store returns. A
// hybrid store returns none for an unavailable remote: its policy decides
// instead, and the decision counts as any other. An outage behind
// store/hybrid shows in its own instruments: remote errors of type
// "unavailable", decisions whose path is not "remote", the gauge at 2
// until a probe closes the breaker, and a transition from closed to open,
// which the counter keeps even when the breaker closes again before the
// gauge is read.
//
// HTTPObserver feeds spigot.decisions from httplimit's observer instead,
// with the route (http.route) as an attribute: use it or Wrap, not both,
// or every decision counts twice. Observer, of the subpackage
// otelgrpclimit, does the same for grpclimit, with the call's method
// (rpc.method, "pkg.Service/Method", and rpc.system.name, "grpc"); it is
// a module of its own, so that this one requires no gRPC.
//
// Keys (client addresses, users) never become attribute values: their
// number has no bound, and a metric backend pays for every distinct one.
// Only limit names, outcomes, paths, routes, methods, kinds of error and
// states of the breaker do, whose number your configuration bounds.
//
// # Prometheus
//
// Through the OpenTelemetry Prometheus exporter
// (go.opentelemetry.io/otel/exporters/prometheus, default options), a dot
// in a name or an attribute becomes an underscore (spigot.limit is the
// label spigot_limit, error.type is error_type), a counter's name ends in
// _total and a histogram's in _seconds, which its series' names extend
// with _bucket, _sum and _count:
//
//	spigot_decisions_total                   spigot_hybrid_decisions_total
//	spigot_tokens_requested_total            spigot_hybrid_remote_duration_seconds
//	spigot_store_duration_seconds            spigot_hybrid_remote_errors_total
//	spigot_store_errors_total                spigot_hybrid_circuit_transitions_total
//	                                         spigot_hybrid_circuit
//	spigot_lease_hits_total                  spigot_lease_tokens_taken_total
//	spigot_lease_takes_total                 spigot_lease_tokens_returned_total
//
// The repository's docs/grafana holds a dashboard of them, and the
// queries it makes.
//
// # Traces
//
// Wrap makes a span per call of the store (spigot.Do, spigot.DoMulti),
// a child of the request's span, through the global TracerProvider
// (otel.GetTracerProvider) unless WithTracerProvider names another. A
// span has the limit's name, the action, the tokens and the outcome,
// never the key; a failed call's span has the error and status Error.
// Until a global provider is set the Store starts no span (one set later
// is used from then on); to turn spans off, pass the no-op provider:
//
//	otelspigot.Wrap(s, otelspigot.WithTracerProvider(noop.NewTracerProvider())) // go.opentelemetry.io/otel/trace/noop
//
// # Cost
//
// With no-op MeterProvider and TracerProvider
// (go.opentelemetry.io/otel/metric/noop, go.opentelemetry.io/otel/trace/noop)
// the wrapper passes every call straight through, with no allocation. The
// global providers, until you set them, record nothing either, but are
// asked on every call, since they start recording once set: the wrapper
// then reads no clock and allocates nothing. With the SDK, recording a
// decision, an error or a transition allocates nothing once the limit's
// attributes are built.
package otelspigot

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/otelspigot/internal/observe"
	"github.com/spigot-go/spigot/store"
)

// ScopeName is the instrumentation scope of the meters and tracers.
const ScopeName = "github.com/spigot-go/spigot/otelspigot"

// DurationBuckets returns the bounds, in seconds, of the histogram
// spigot.store.duration: from 50 µs (a memory store, a pipelined Redis on
// loopback) to 1 s. Each call returns a new slice, which the caller may
// change (to start a View of its own, say) without changing the
// instrument's.
func DurationBuckets() []float64 {
	return []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
}

// The attribute keys.
const (
	LimitKey     = attribute.Key("spigot.limit")
	OutcomeKey   = attribute.Key("spigot.outcome")
	OperationKey = attribute.Key("spigot.operation")
	PathKey      = attribute.Key("spigot.path")
	ErrorTypeKey = attribute.Key("error.type")
	RouteKey     = attribute.Key("http.route")
	// RPCMethodKey and RPCSystemNameKey are a gRPC call's method, without
	// its leading slash ("pkg.Service/Method"), and its RPC system
	// ("grpc"), as the OpenTelemetry semantic conventions name them.
	RPCMethodKey     = attribute.Key("rpc.method")
	RPCSystemNameKey = attribute.Key("rpc.system.name")
	// CircuitFromKey and CircuitToKey are the states of store/hybrid's
	// breaker (closed, open, half-open) that a transition left and
	// entered.
	CircuitFromKey = attribute.Key("spigot.circuit.from")
	CircuitToKey   = attribute.Key("spigot.circuit.to")
)

// An Option configures Wrap, HybridObserver, ObserveCircuit,
// LeaseObserver, HTTPObserver and otelgrpclimit.Observer.
type Option func(*config)

type config = observe.Config

// WithMeterProvider records through mp instead of the global
// MeterProvider (otel.GetMeterProvider). A nil mp means the global one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.MeterProvider = mp }
}

// WithTracerProvider makes Wrap's spans through tp instead of the global
// TracerProvider (otel.GetTracerProvider). A nil tp means the global one.
// Pass the no-op provider of go.opentelemetry.io/otel/trace/noop
// (noop.NewTracerProvider()) to turn spans off: the Store then starts
// none. The other functions of the package make no spans.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.TracerProvider = tp }
}

func newConfig(opts []Option) config { return observe.NewConfig(opts) }

// unsetTracerProvider is what otel.GetTracerProvider returns until a
// provider is set: a placeholder whose tracers make non-recording spans,
// at the cost of an allocation or two each, until they delegate to the
// provider set. It is nil if a provider was set before this package was
// initialized.
var unsetTracerProvider = func() trace.TracerProvider {
	tp := otel.GetTracerProvider()
	if t := reflect.TypeOf(tp); t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global" {
		return tp
	}
	return nil
}()

// instruments are the synchronous instruments of decisions and of the
// store, and the attribute sets of each limit, made once.
type instruments struct {
	decisions metric.Int64Counter
	tokens    metric.Int64Counter
	duration  metric.Float64Histogram
	errors    metric.Int64Counter

	mu     sync.RWMutex
	limits map[limitKey]*limitAttrs
	ops    [2][]metric.RecordOption // do, do_multi
	errs   errorAttrs
}

// limitKey is a limit's name and route: a struct rather than the two
// joined, which would allocate the joined string on every decision.
type limitKey struct {
	limit string
	route route
}

// A route is what a request's decisions are counted by, besides their
// limit: an HTTP route (http.route) or, with an RPC system
// (rpc.system.name), an RPC's method (rpc.method). The zero route is
// none: Wrap's decisions.
type route struct{ system, name string }

// limitAttrs are the measurement options of one limit (and route), built
// once so that recording allocates nothing.
type limitAttrs struct {
	outcome [3][]metric.AddOption // allowed, denied, never
	tokens  []metric.AddOption
}

// maxLimits bounds the limit names (and routes) whose options are kept;
// past it they are built on every measurement.
const maxLimits = 1000

func newInstruments(mp metric.MeterProvider) (*instruments, error) {
	m := mp.Meter(ScopeName)
	in := &instruments{limits: make(map[limitKey]*limitAttrs), errs: newErrorAttrs()}
	var err, e error
	in.decisions, e = m.Int64Counter("spigot.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions on operations that take tokens, by limit and outcome."))
	err = errors.Join(err, e)
	in.tokens, e = m.Int64Counter("spigot.tokens.requested", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens that operations asked to take, by limit."))
	err = errors.Join(err, e)
	in.duration, e = m.Float64Histogram("spigot.store.duration", metric.WithUnit("s"),
		metric.WithDescription("How long the store took to answer a call."),
		metric.WithExplicitBucketBoundaries(DurationBuckets()...))
	err = errors.Join(err, e)
	in.errors, e = m.Int64Counter("spigot.store.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Calls the store failed, by kind."))
	err = errors.Join(err, e)
	for i, name := range []string{"do", "do_multi"} {
		in.ops[i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(OperationKey.String(name)))}
	}
	return in, err
}

var outcomes = [3]string{"allowed", "denied", "never"}

// attrs returns the options of limit, and of route (when not the zero
// route).
func (in *instruments) attrs(limit string, route route) *limitAttrs {
	key := limitKey{limit, route}
	in.mu.RLock()
	a := in.limits[key]
	in.mu.RUnlock()
	if a != nil {
		return a
	}
	base := []attribute.KeyValue{LimitKey.String(limit)}
	switch {
	case route.system != "":
		base = append(base, RPCSystemNameKey.String(route.system))
		if route.name != "" {
			base = append(base, RPCMethodKey.String(route.name))
		}
	case route.name != "":
		base = append(base, RouteKey.String(route.name))
	}
	a = &limitAttrs{tokens: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(base...))}}
	for i, o := range outcomes {
		a.outcome[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(append(base, OutcomeKey.String(o))...))}
	}
	in.mu.Lock()
	if len(in.limits) < maxLimits {
		in.limits[key] = a
	}
	in.mu.Unlock()
	return a
}

// decided records the decision d on op.
func (in *instruments) decided(ctx context.Context, op spigot.Op, d spigot.Decision, route route) {
	if op.Action != spigot.Take && op.Action != spigot.TakeUpTo {
		return // refunds, resets and peeks decide nothing
	}
	if !in.decisions.Enabled(ctx) && !in.tokens.Enabled(ctx) {
		return
	}
	a := in.attrs(op.Limit.Name(), route)
	in.decisions.Add(ctx, 1, a.outcome[outcomeOf(d)]...)
	in.tokens.Add(ctx, op.N, a.tokens...)
}

// failed records a store error of kind ErrorType(err).
func (in *instruments) failed(ctx context.Context, err error) {
	if in.errors.Enabled(ctx) {
		in.errors.Add(ctx, 1, in.errs[errorKind(err)]...)
	}
}

// observe records a limiting middleware's Result on one request, for
// route: the store's latency and its error or, without one, each limit's
// decision.
func (in *instruments) observe(ctx context.Context, route route, res observe.Result) {
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
		in.decided(ctx, spigot.Op{Limit: l, Action: spigot.Take, N: res.Costs[i]}, res.Each[i], route)
	}
}

// errorTypes are the values of ErrorType, indexed by errorKind.
var errorTypes = [...]string{"invalid", "unsupported", "canceled", "request", "unavailable"}

// errorAttrs are the measurement options of each kind of error.
type errorAttrs [len(errorTypes)][]metric.AddOption

func newErrorAttrs() errorAttrs {
	var a errorAttrs
	for i, t := range errorTypes {
		a[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(ErrorTypeKey.String(t)))}
	}
	return a
}

// ErrorType returns the kind of a store's error, as spigot.store.errors
// and spigot.hybrid.remote.errors count it (their error.type):
// "invalid" for bad input (spigot.ErrInvalidLimit, spigot.ErrInvalidKey,
// spigot.ErrInvalidCost), "unsupported" (errors.ErrUnsupported),
// "canceled" (the caller's context), "request" for an error about one
// request (spigot.ErrRequestFailed), and "unavailable" for the others: the
// store cannot serve requests now (refused, reset or lost connections,
// timeouts, a server that answers that it cannot serve any request).
func ErrorType(err error) string { return errorTypes[errorKind(err)] }

// errorKind returns the index in errorTypes of err's kind.
func errorKind(err error) int {
	switch {
	case errors.Is(err, spigot.ErrInvalidLimit), errors.Is(err, spigot.ErrInvalidKey), errors.Is(err, spigot.ErrInvalidCost):
		return 0
	case errors.Is(err, errors.ErrUnsupported):
		return 1
	case errors.Is(err, context.Canceled):
		return 2
	case errors.Is(err, spigot.ErrRequestFailed):
		return 3
	}
	return 4
}

// A Store is a spigot.Store that records the metrics of the package doc
// for every operation of the store it wraps. It is safe for concurrent
// use. Create one with Wrap.
type Store struct {
	next   spigot.Store
	in     *instruments
	tracer trace.Tracer // nil: no spans
	// unset: tracer is the global provider's from before one was set: no
	// spans until one is.
	unset bool
	off   bool // no tracer, and every instrument is a no-op: pass through
}

var _ spigot.Store = (*Store)(nil)

// Wrap returns s with metrics and spans. It panics if s is nil. An
// instrument the MeterProvider refuses is left out (the provider reports
// why to otel's error handler).
func Wrap(s spigot.Store, opts ...Option) *Store {
	if nilcheck.Nil(s) {
		panic("spigot: otelspigot: Wrap: nil Store")
	}
	c := newConfig(opts)
	in, err := newInstruments(c.MeterProvider)
	if err != nil {
		otel.Handle(err)
	}
	w := &Store{next: s, in: in}
	if _, off := c.TracerProvider.(tracenoop.TracerProvider); !off {
		w.tracer = c.TracerProvider.Tracer(ScopeName)
		w.unset = c.TracerProvider == unsetTracerProvider
		if _, off := w.tracer.(tracenoop.Tracer); off {
			w.tracer = nil
		}
	}
	w.off = w.tracer == nil && in.noop()
	return w
}

// tracing reports whether calls are to have spans: they do with a tracer,
// but the global provider's before one is set, whose spans record nothing
// and would cost an allocation each.
func (s *Store) tracing() bool {
	return s.tracer != nil && (!s.unset || otel.GetTracerProvider() != unsetTracerProvider)
}

// noop reports whether every instrument is the no-op API's, which records
// nothing whatever the context, so that the wrapper may pass calls
// straight through without asking each instrument whether it is enabled
// (see BenchmarkWrap, in otelspigot/test). The global MeterProvider's
// instruments are not: they start recording once a provider is set.
func (in *instruments) noop() bool {
	_, a := in.decisions.(noop.Int64Counter)
	_, b := in.tokens.(noop.Int64Counter)
	_, c := in.duration.(noop.Float64Histogram)
	_, d := in.errors.(noop.Int64Counter)
	return a && b && c && d
}

// Unwrap returns the store that s wraps.
func (s *Store) Unwrap() spigot.Store { return s.next }

// Do implements spigot.Store: it applies op in the wrapped store and
// records it.
func (s *Store) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if s.off {
		return s.next.Do(ctx, op)
	}
	return s.do(ctx, op)
}

func (s *Store) do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	var span trace.Span
	if s.tracing() {
		ctx, span = s.tracer.Start(ctx, "spigot.Do", trace.WithAttributes(
			LimitKey.String(op.Limit.Name()), attribute.String("spigot.action", op.Action.String()), attribute.Int64("spigot.tokens", op.N)))
		defer span.End()
	}
	var d spigot.Decision
	err := s.call(ctx, span, 0, func() (err error) {
		d, err = s.next.Do(ctx, op)
		return err
	})
	if err != nil {
		return d, err
	}
	s.in.decided(ctx, op, d, route{})
	if span != nil {
		span.SetAttributes(OutcomeKey.String(outcomes[outcomeOf(d)]))
	}
	return d, nil
}

// call runs f, a call of the wrapped store, and records how long it took
// (spigot.store.duration, for operation 0 do or 1 do_multi) and its
// error, on span too when there is one. A *store.PartsError, which a
// cluster's store answers at once for ops of several slots (spigot.DoMulti
// then applies them slot by slot, through this Store), is neither.
func (s *Store) call(ctx context.Context, span trace.Span, operation int, f func() error) error {
	timed := s.in.duration.Enabled(ctx)
	var start time.Time
	if timed {
		start = time.Now()
	}
	err := f()
	if err != nil && isParts(err) {
		return err
	}
	if timed {
		s.in.duration.Record(ctx, time.Since(start).Seconds(), s.in.ops[operation]...)
	}
	if err != nil {
		s.in.failed(ctx, err)
		if span != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, ErrorType(err))
		}
	}
	return err
}

// DoMulti implements spigot.Store: it applies ops in the wrapped store, as
// one call, and records each decision. An error matching
// errors.ErrUnsupported passes through unrecorded as a decision, so that
// spigot.DoMulti's fallback (one Do per op, through this Store) records
// each op once.
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if s.off {
		return s.next.DoMulti(ctx, mode, ops, out)
	}
	return s.doMulti(ctx, mode, ops, out)
}

func (s *Store) doMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	var span trace.Span
	if s.tracing() {
		ctx, span = s.tracer.Start(ctx, "spigot.DoMulti", trace.WithAttributes(attribute.Int("spigot.ops", len(ops)),
			attribute.Bool("spigot.all_or_nothing", mode == spigot.AllOrNothing)))
		defer span.End()
	}
	err := s.call(ctx, span, 1, func() error { return s.next.DoMulti(ctx, mode, ops, out) })
	if err != nil {
		if mode == spigot.AllOrNothing || errors.Is(err, errors.ErrUnsupported) || len(out) != len(ops) {
			return err
		}
		// A batch whose failed ops failed alone: the others were decided.
	}
	for i, op := range ops {
		if err == nil || !out[i].Degraded() {
			s.in.decided(ctx, op, out[i], route{})
		}
	}
	return err
}

// isParts reports whether err is a *store.PartsError.
func isParts(err error) bool {
	var parts *store.PartsError
	return errors.As(err, &parts)
}

// outcomeOf returns the index in outcomes of d's outcome.
func outcomeOf(d spigot.Decision) int {
	switch {
	case d.RetryAfter == spigot.Never:
		return 2
	case !d.Allowed():
		return 1
	}
	return 0
}
