// Package otelspigot_test tests otelspigot through the OpenTelemetry
// SDK, which reads what it records: its instruments, their attributes
// and units, its spans, and what it costs. It is a module of its own,
// which no user requires, so that otelspigot's module requires neither
// the SDK nor an exporter.
package otelspigot_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	oteltrace "go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// provider returns an SDK MeterProvider and the ManualReader behind it.
func provider(t *testing.T) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, r
}

// metrics is one collection, by instrument name.
type metrics map[string]metricdata.Metrics

func collect(t *testing.T, r *sdkmetric.ManualReader) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	m := metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelspigot.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, otelspigot.ScopeName)
		}
		for _, x := range sm.Metrics {
			m[x.Name] = x
		}
	}
	return m
}

// attrs renders an attribute set as "k=v,k=v" (sorted by key).
func attrs(s attribute.Set) string {
	var b []string
	for _, kv := range s.ToSlice() {
		b = append(b, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(b, ",")
}

// sums returns the int64 sums (counters) or values (gauges) of name, by
// attrs of their data points.
func (m metrics) sums(t *testing.T, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	x, ok := m[name]
	if !ok {
		return out
	}
	switch d := x.Data.(type) {
	case metricdata.Sum[int64]:
		if !d.IsMonotonic {
			t.Errorf("%s is not monotonic", name)
		}
		for _, p := range d.DataPoints {
			out[attrs(p.Attributes)] += p.Value
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out[attrs(p.Attributes)] = p.Value
		}
	default:
		t.Fatalf("%s: data %T", name, x.Data)
	}
	return out
}

// counts returns the histogram counts of name, by attrs, and checks the
// bounds of every data point.
func (m metrics) counts(t *testing.T, name string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	x, ok := m[name]
	if !ok {
		return out
	}
	d, ok := x.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s: data %T", name, x.Data)
	}
	for _, p := range d.DataPoints {
		if !slices.Equal(p.Bounds, otelspigot.DurationBuckets()) {
			t.Errorf("%s{%s}: bounds %v, want DurationBuckets() %v", name, attrs(p.Attributes), p.Bounds, otelspigot.DurationBuckets())
		}
		out[attrs(p.Attributes)] += p.Count
	}
	return out
}

// allAttrs returns every attribute value of every data point.
func (m metrics) allAttrs() []attribute.KeyValue {
	var kvs []attribute.KeyValue
	for _, x := range m {
		switch d := x.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				kvs = append(kvs, p.Attributes.ToSlice()...)
			}
		case metricdata.Gauge[int64]:
			for _, p := range d.DataPoints {
				kvs = append(kvs, p.Attributes.ToSlice()...)
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				kvs = append(kvs, p.Attributes.ToSlice()...)
			}
		}
	}
	return kvs
}

func equalMap[V comparable](t *testing.T, what string, got, want map[string]V) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %v, want %v", what, got, want)
		return
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: got %v, want %v", what, got, want)
			return
		}
	}
}

func outcomeOf(d spigot.Decision) string {
	switch {
	case d.RetryAfter == spigot.Never:
		return "never"
	case !d.Allowed():
		return "denied"
	}
	return "allowed"
}

var (
	login = spigot.MustBucket("login", 3, spigot.PerMinute(1))
	api   = spigot.MustBucket("api", 5, spigot.PerMinute(1))
)

// TestScriptedCounts applies a scripted sequence at one instant and checks
// every instrument's exact counts, attributes and units.
func TestScriptedCounts(t *testing.T) {
	ctx := context.Background()
	mp, r := provider(t)
	w := otelspigot.Wrap(memory.New(memory.WithClock(clocktest.New(t0))), otelspigot.WithMeterProvider(mp))
	if w.Unwrap() == nil {
		t.Fatal("Unwrap: nil")
	}
	const ip, user, ip2, user2 = "10.0.0.1", "user-42", "10.0.0.2", "user-43"
	keys := []string{ip, user, ip2, user2}
	take := func(l spigot.Limit, key string, a spigot.Action, n int64) spigot.Op {
		return spigot.Op{Limit: l, Key: key, Action: a, N: n}
	}
	steps := []struct {
		ops   []spigot.Op
		multi bool
		mode  spigot.Mode
		want  []string
	}{
		{ops: []spigot.Op{take(login, ip, spigot.Take, 1)}, want: []string{"allowed"}},
		{ops: []spigot.Op{take(login, ip, spigot.Take, 1)}, want: []string{"allowed"}},
		{ops: []spigot.Op{take(login, ip, spigot.Take, 1)}, want: []string{"allowed"}},
		{ops: []spigot.Op{take(login, ip, spigot.Take, 1)}, want: []string{"denied"}},
		{ops: []spigot.Op{take(login, ip, spigot.Take, 10)}, want: []string{"never"}},
		{ops: []spigot.Op{take(api, user, spigot.TakeUpTo, 5)}, want: []string{"allowed"}},
		{ops: []spigot.Op{take(login, ip, spigot.Refund, 1)}, want: []string{"allowed"}},
		{ops: []spigot.Op{take(api, user, spigot.Reset, 0)}, want: []string{"allowed"}},
		{ops: []spigot.Op{take(login, ip, spigot.Peek, 1)}, want: []string{"allowed"}},
		{multi: true, mode: spigot.AllOrNothing,
			ops:  []spigot.Op{take(login, ip2, spigot.Take, 1), take(api, user2, spigot.Take, 1)},
			want: []string{"allowed", "allowed"}},
		{multi: true, mode: spigot.Independent,
			ops:  []spigot.Op{take(login, ip, spigot.Take, 1), take(api, user, spigot.Take, 1), take(login, ip, spigot.Take, 1)},
			want: []string{"allowed", "allowed", "denied"}},
	}
	for i, s := range steps {
		out := make([]spigot.Decision, len(s.ops))
		var err error
		if s.multi {
			err = w.DoMulti(ctx, s.mode, s.ops, out)
		} else {
			out[0], err = w.Do(ctx, s.ops[0])
		}
		if err != nil {
			t.Fatalf("step %d: got error %v, want none", i, err)
		}
		for j, d := range out {
			if got := outcomeOf(d); got != s.want[j] {
				t.Errorf("step %d: op %d: got %s, want %s", i, j, got, s.want[j])
			}
		}
	}

	m := collect(t, r)
	equalMap(t, "spigot.decisions", m.sums(t, "spigot.decisions"), map[string]int64{
		"spigot.limit=login,spigot.outcome=allowed": 5,
		"spigot.limit=login,spigot.outcome=denied":  2,
		"spigot.limit=login,spigot.outcome=never":   1,
		"spigot.limit=api,spigot.outcome=allowed":   3,
	})
	equalMap(t, "spigot.tokens.requested", m.sums(t, "spigot.tokens.requested"), map[string]int64{
		"spigot.limit=login": 4 + 10 + 1 + 1 + 1,
		"spigot.limit=api":   5 + 1 + 1,
	})
	equalMap(t, "spigot.store.duration", m.counts(t, "spigot.store.duration"), map[string]uint64{
		"spigot.operation=do":       9,
		"spigot.operation=do_multi": 2,
	})
	if _, ok := m["spigot.store.errors"]; ok {
		t.Errorf("spigot.store.errors: got %v, want no data", m.sums(t, "spigot.store.errors"))
	}
	for name, unit := range map[string]string{
		"spigot.decisions":        "{decision}",
		"spigot.tokens.requested": "{token}",
		"spigot.store.duration":   "s",
	} {
		if got := m[name].Unit; got != unit {
			t.Errorf("%s: unit got %q, want %q", name, got, unit)
		}
		if m[name].Description == "" {
			t.Errorf("%s: no description", name)
		}
	}
	for _, kv := range m.allAttrs() {
		if slices.Contains(keys, kv.Value.String()) {
			t.Errorf("attribute %s=%q holds a key", kv.Key, kv.Value.String())
		}
	}
}

// TestDurationBuckets: a caller that changes the slice DurationBuckets
// returned changes neither the next call's nor the histogram's bounds.
func TestDurationBuckets(t *testing.T) {
	want := []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	b := otelspigot.DurationBuckets()
	for i := range b {
		b[i] = -1
	}
	if got := otelspigot.DurationBuckets(); !slices.Equal(got, want) {
		t.Errorf("after a change to a returned slice: got %v, want %v", got, want)
	}
	mp, r := provider(t)
	s := otelspigot.Wrap(memory.New(), otelspigot.WithMeterProvider(mp))
	if _, err := s.Do(context.Background(), spigot.Op{Limit: spigot.MustBucket("b", 1, spigot.PerSecond(1)), Key: "k", N: 1}); err != nil {
		t.Fatal(err)
	}
	h, ok := collect(t, r)["spigot.store.duration"].Data.(metricdata.Histogram[float64])
	if !ok || len(h.DataPoints) != 1 {
		t.Fatalf("spigot.store.duration: %+v, want one histogram data point", h)
	}
	if got := h.DataPoints[0].Bounds; !slices.Equal(got, want) {
		t.Errorf("histogram bounds %v, want %v", got, want)
	}
}

// ctxStore honours its context, as a network store does.
type ctxStore struct{ spigot.Store }

func (s ctxStore) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := ctx.Err(); err != nil {
		return spigot.Decision{}, fmt.Errorf("ctxstore: %w", err)
	}
	return s.Store.Do(ctx, op)
}

// failStore fails every call with err.
type failStore struct{ err error }

func (s failStore) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	return spigot.Decision{RetryAfter: spigot.Never, Remaining: -1}, s.err
}

func (s failStore) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return s.err
}

// oneStore applies one op per call: its DoMulti of several is unsupported.
// It counts its calls of Do.
type oneStore struct {
	spigot.Store
	dos *[]spigot.Action
}

func (s oneStore) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	*s.dos = append(*s.dos, op.Action)
	return s.Store.Do(ctx, op)
}

func (s oneStore) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return fmt.Errorf("oneStore: one op per call: %w", errors.ErrUnsupported)
}

// TestErrorKinds checks spigot.store.errors for each kind of error, and
// that an error is never counted as a decision.
func TestErrorKinds(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	op := spigot.Op{Limit: login, Key: "10.0.0.1", N: 1}
	steps := []struct {
		kind  string
		store spigot.Store
		ctx   context.Context
		op    spigot.Op
		is    error
	}{
		{"invalid", memory.New(), context.Background(), spigot.Op{Limit: login, Key: "k", N: -1}, spigot.ErrInvalidCost},
		{"invalid", memory.New(), context.Background(), spigot.Op{Key: "k", N: 1}, spigot.ErrInvalidLimit},
		{"canceled", ctxStore{memory.New()}, cancelled, op, context.Canceled},
		{"request", failStore{fmt.Errorf("WRONGTYPE: %w", spigot.ErrRequestFailed)}, context.Background(), op, spigot.ErrRequestFailed},
		{"unavailable", failStore{errors.New("dial tcp: connection refused")}, context.Background(), op, nil},
	}
	for i, s := range steps {
		mp, r := provider(t)
		w := otelspigot.Wrap(s.store, otelspigot.WithMeterProvider(mp))
		_, err := w.Do(s.ctx, s.op)
		if err == nil || (s.is != nil && !errors.Is(err, s.is)) {
			t.Errorf("step %d: got error %v, want one matching %v", i, err, s.is)
		}
		m := collect(t, r)
		if got, want := m.sums(t, "spigot.store.errors"), map[string]int64{"error.type=" + s.kind: 1}; !mapsEqual(got, want) {
			t.Errorf("step %d: got errors %v, want %v", i, got, want)
		}
		if got := m.sums(t, "spigot.decisions"); len(got) != 0 {
			t.Errorf("step %d: got decisions %v, want none", i, got)
		}
		if got, want := m.counts(t, "spigot.store.duration"), map[string]uint64{"spigot.operation=do": 1}; !mapsEqual(got, want) {
			t.Errorf("step %d: got durations %v, want %v", i, got, want)
		}
		if got := m["spigot.store.errors"].Unit; got != "{error}" {
			t.Errorf("step %d: got unit %q, want {error}", i, got)
		}
	}
}

func mapsEqual[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if w, ok := a[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestUnsupportedFallback checks that a DoMulti the store cannot do counts
// as an unsupported error, and that spigot.DoMulti's fallback (one Do per
// op through the wrapper) counts each op exactly once.
func TestUnsupportedFallback(t *testing.T) {
	ctx := context.Background()
	mp, r := provider(t)
	var dos []spigot.Action
	w := otelspigot.Wrap(oneStore{memory.New(memory.WithClock(clocktest.New(t0))), &dos}, otelspigot.WithMeterProvider(mp))
	one := spigot.MustBucket("one", 1, spigot.PerMinute(1))

	// A batch: one Do per op.
	ops := []spigot.Op{{Limit: login, Key: "a", N: 1}, {Limit: api, Key: "b", N: 2}}
	out := make([]spigot.Decision, len(ops))
	if err := w.DoMulti(ctx, spigot.Independent, ops, out); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("step 0: got %v, want ErrUnsupported from the wrapper's DoMulti", err)
	}
	if err := spigot.DoMulti(ctx, w, spigot.Independent, ops, out); err != nil {
		t.Fatalf("step 1: got %v, want no error", err)
	}
	// All or nothing, denied by the second op: a Take per op, then a
	// Refund of the first, which is not a decision.
	if _, err := w.Do(ctx, spigot.Op{Limit: one, Key: "c", N: 1}); err != nil {
		t.Fatal(err)
	}
	ops = []spigot.Op{{Limit: login, Key: "a", N: 1}, {Limit: one, Key: "c", N: 1}}
	if err := spigot.DoMulti(ctx, w, spigot.AllOrNothing, ops, out); err != nil {
		t.Fatalf("step 2: got %v, want no error", err)
	}
	if got := []string{outcomeOf(out[0]), outcomeOf(out[1])}; got[1] != "denied" {
		t.Errorf("step 2: got %v, want the second denied", got)
	}

	m := collect(t, r)
	equalMap(t, "spigot.store.errors", m.sums(t, "spigot.store.errors"), map[string]int64{"error.type=unsupported": 3})
	equalMap(t, "spigot.decisions", m.sums(t, "spigot.decisions"), map[string]int64{
		"spigot.limit=login,spigot.outcome=allowed": 2, // step 1 and step 2's first Take
		"spigot.limit=api,spigot.outcome=allowed":   1,
		"spigot.limit=one,spigot.outcome=allowed":   1, // the setup Take
		"spigot.limit=one,spigot.outcome=denied":    1,
	})
	equalMap(t, "spigot.tokens.requested", m.sums(t, "spigot.tokens.requested"), map[string]int64{
		"spigot.limit=login": 2, "spigot.limit=api": 2, "spigot.limit=one": 2,
	})
	// Every call of the store's Do, and only those, is timed once:
	// 2 Takes (step 1), 1 (setup), and in step 2 the fallback's Takes, its
	// Refund of the first and whatever else it asks (Peeks).
	takes := 0
	for _, a := range dos {
		if a == spigot.Take {
			takes++
		}
	}
	if takes != 5 {
		t.Errorf("store: got %d Takes (%v), want 5", takes, dos)
	}
	equalMap(t, "spigot.store.duration", m.counts(t, "spigot.store.duration"), map[string]uint64{
		"spigot.operation=do": uint64(len(dos)), "spigot.operation=do_multi": 3,
	})
}

// TestHybridObserverContext: HybridObserver records each decision in the
// context of the request that caused it, so that the SDK links the
// measurement to the request's span (an exemplar with its trace ID), on
// the remote path and on the local path.
func TestHybridObserverContext(t *testing.T) {
	mp, r := provider(t)
	clk := clocktest.New(t0)
	h := hybrid.New(failStore{errors.New("connection refused")}, memory.New(memory.WithClock(clk)),
		hybrid.WithObserver(otelspigot.HybridObserver(otelspigot.WithMeterProvider(mp))),
		hybrid.WithBreaker(1, time.Second), hybrid.WithClock(clk))
	healthy := hybrid.New(memory.New(memory.WithClock(clk)), memory.New(memory.WithClock(clk)),
		hybrid.WithObserver(otelspigot.HybridObserver(otelspigot.WithMeterProvider(mp))), hybrid.WithClock(clk))
	op := spigot.Op{Limit: spigot.MustBucket("ctx", 10, spigot.PerSecond(1)), Key: "10.0.0.9", N: 1}
	for i, c := range []struct {
		s    *hybrid.Store
		path string
	}{
		{healthy, "spigot.path=remote"},
		{h, "spigot.path=local"},
	} {
		trace := [16]byte{byte(i + 1), 0xca, 0xfe}
		ctx := oteltrace.ContextWithSpanContext(context.Background(), oteltrace.NewSpanContext(oteltrace.SpanContextConfig{
			TraceID: trace, SpanID: [8]byte{1}, TraceFlags: oteltrace.FlagsSampled,
		}))
		if _, err := c.s.Do(ctx, op); err != nil {
			t.Fatalf("step %d: Do: %v", i, err)
		}
		sum, ok := collect(t, r)["spigot.hybrid.decisions"].Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("step %d: no spigot.hybrid.decisions sum", i)
		}
		var got [][]byte
		for _, p := range sum.DataPoints {
			if attrs(p.Attributes) != c.path {
				continue
			}
			for _, e := range p.Exemplars {
				got = append(got, e.TraceID)
			}
		}
		if !slices.ContainsFunc(got, func(id []byte) bool { return string(id) == string(trace[:]) }) {
			t.Errorf("step %d: %s: exemplars of trace IDs %x, want one of %x (the request's)", i, c.path, got, trace)
		}
	}
}

// TestHTTPObserver counts an httplimit middleware's decisions by route,
// and a failing store's errors.
func TestHTTPObserver(t *testing.T) {
	mp, r := provider(t)
	perAddr := spigot.MustBucket("per-address", 5, spigot.PerMinute(1))
	perUser := spigot.MustBucket("per-user", 2, spigot.PerMinute(1))
	obs := httplimit.WithObserver(otelspigot.HTTPObserver(otelspigot.WithMeterProvider(mp)))
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })

	mux := http.NewServeMux()
	mw := httplimit.New(memory.New(memory.WithClock(clocktest.New(t0))),
		httplimit.By(perAddr, httplimit.ClientIP()), httplimit.By(perUser, httplimit.Header("X-User")), obs)
	mux.Handle("GET /items/{id}", mw.Wrap(ok))
	failing := httplimit.New(failStore{errors.New("connection refused")}, httplimit.By(perAddr, nil), obs)
	mux.Handle("GET /fail", failing.Wrap(ok))

	for i, s := range []struct {
		path string
		want int
	}{
		{"/items/1", http.StatusOK},
		{"/items/2", http.StatusOK},
		{"/items/3", http.StatusTooManyRequests},
		{"/fail", http.StatusServiceUnavailable}, // a failing store fails safe by default
	} {
		req := httptest.NewRequest("GET", s.path, nil)
		req.Header.Set("X-User", "alice")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != s.want {
			t.Errorf("step %d: GET %s: got %d, want %d", i, s.path, rec.Code, s.want)
		}
	}

	m := collect(t, r)
	const route = "http.route=GET /items/{id},"
	equalMap(t, "spigot.decisions", m.sums(t, "spigot.decisions"), map[string]int64{
		route + "spigot.limit=per-address,spigot.outcome=allowed": 3,
		route + "spigot.limit=per-user,spigot.outcome=allowed":    2,
		route + "spigot.limit=per-user,spigot.outcome=denied":     1,
	})
	equalMap(t, "spigot.tokens.requested", m.sums(t, "spigot.tokens.requested"), map[string]int64{
		route + "spigot.limit=per-address": 3,
		route + "spigot.limit=per-user":    3,
	})
	equalMap(t, "spigot.store.errors", m.sums(t, "spigot.store.errors"), map[string]int64{"error.type=unavailable": 1})
	equalMap(t, "spigot.store.duration", m.counts(t, "spigot.store.duration"), map[string]uint64{
		"spigot.operation=do_multi": 3, "spigot.operation=do": 1,
	})
	for _, kv := range m.allAttrs() {
		if v := kv.Value.String(); v == "alice" || v == "192.0.2.1" {
			t.Errorf("attribute %s=%q holds a key", kv.Key, v)
		}
	}
}

// TestSpans checks the span of each Do with WithTracerProvider, and that
// there is none with the no-op TracerProvider, even under a recording
// parent span.
func TestSpans(t *testing.T) {
	ctx := context.Background()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	mem := memory.New(memory.WithClock(clocktest.New(t0)))
	one := spigot.MustBucket("one", 1, spigot.PerMinute(1))
	traced := otelspigot.Wrap(mem, otelspigot.WithTracerProvider(tp), otelspigot.WithMeterProvider(noop.NewMeterProvider()))
	failing := otelspigot.Wrap(failStore{errors.New("connection refused")}, otelspigot.WithTracerProvider(tp), otelspigot.WithMeterProvider(noop.NewMeterProvider()))

	steps := []struct {
		s       *otelspigot.Store
		op      spigot.Op
		outcome string // "" for an error
		status  codes.Code
	}{
		{traced, spigot.Op{Limit: one, Key: "10.0.0.1", N: 1}, "allowed", codes.Unset},
		{traced, spigot.Op{Limit: one, Key: "10.0.0.1", N: 1}, "denied", codes.Unset},
		{traced, spigot.Op{Limit: one, Key: "10.0.0.1", Action: spigot.TakeUpTo, N: 2}, "denied", codes.Unset},
		{traced, spigot.Op{Limit: one, Key: "10.0.0.1", N: 5}, "never", codes.Unset},
		{failing, spigot.Op{Limit: one, Key: "10.0.0.1", N: 1}, "", codes.Error},
	}
	for i, s := range steps {
		s.s.Do(ctx, s.op)
		spans := sr.Ended()
		if len(spans) != i+1 {
			t.Fatalf("step %d: got %d spans, want %d", i, len(spans), i+1)
		}
		sp := spans[i]
		if sp.Name() != "spigot.Do" {
			t.Errorf("step %d: got span %q, want spigot.Do", i, sp.Name())
		}
		if sp.InstrumentationScope().Name != otelspigot.ScopeName {
			t.Errorf("step %d: got scope %q, want %q", i, sp.InstrumentationScope().Name, otelspigot.ScopeName)
		}
		got := map[string]string{}
		for _, kv := range sp.Attributes() {
			got[string(kv.Key)] = kv.Value.String()
		}
		want := map[string]string{"spigot.limit": "one", "spigot.action": s.op.Action.String(), "spigot.tokens": fmt.Sprint(s.op.N)}
		if s.outcome != "" {
			want["spigot.outcome"] = s.outcome
		}
		if !mapsEqual(got, want) {
			t.Errorf("step %d: got attributes %v, want %v", i, got, want)
		}
		if sp.Status().Code != s.status {
			t.Errorf("step %d: got status %v, want %v", i, sp.Status().Code, s.status)
		}
		if s.status == codes.Error {
			if sp.Status().Description != "unavailable" {
				t.Errorf("step %d: got status description %q, want unavailable", i, sp.Status().Description)
			}
			if ev := sp.Events(); len(ev) != 1 || ev[0].Name != "exception" {
				t.Errorf("step %d: got events %v, want one exception", i, ev)
			}
		}
	}

	// DoMulti has a span of its own.
	out := make([]spigot.Decision, 2)
	traced.DoMulti(ctx, spigot.AllOrNothing, []spigot.Op{{Limit: login, Key: "x", N: 1}, {Limit: api, Key: "y", N: 1}}, out)
	if spans := sr.Ended(); len(spans) != len(steps)+1 || spans[len(steps)].Name() != "spigot.DoMulti" {
		t.Errorf("DoMulti: got %d spans, want a spigot.DoMulti span", len(spans))
	}

	// With the no-op TracerProvider: no span, even within a recording span.
	n := len(sr.Ended())
	pctx, parent := tp.Tracer("test").Start(ctx, "parent")
	otelspigot.Wrap(mem, otelspigot.WithMeterProvider(noop.NewMeterProvider()), otelspigot.WithTracerProvider(tracenoop.NewTracerProvider())).
		Do(pctx, spigot.Op{Limit: login, Key: "z", N: 1})
	parent.End()
	if spans := sr.Ended(); len(spans) != n+1 || spans[n].Name() != "parent" {
		t.Errorf("untraced: got %d spans after %d, want only the parent", len(spans), n)
	}
}

// TestSDKAllocs checks that recording a decision in the SDK allocates
// nothing once the limit's attributes are built.
func TestSDKAllocs(t *testing.T) {
	ctx := context.Background()
	mp, _ := provider(t)
	w := otelspigot.Wrap(memory.New(memory.WithClock(clocktest.New(t0))), otelspigot.WithMeterProvider(mp))
	op := spigot.Op{Limit: spigot.MustBucket("big", 1<<30, spigot.PerSecond(1)), Key: "10.0.0.1", N: 1}
	if _, err := w.Do(ctx, op); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { w.Do(ctx, op) }); n != 0 {
		t.Errorf("got %v allocations per Do, want 0", n)
	}
}

// byKey applies ops all or nothing only within one key, as a cluster does
// within a hash slot: several keys get a *store.PartsError.
type byKey struct{ spigot.Store }

func (s byKey) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	for i, op := range ops {
		if mode == spigot.AllOrNothing && op.Key != ops[0].Key {
			parts := make([]uint64, len(ops))
			for j := range ops {
				parts[j] = uint64(len(ops[j].Key))
			}
			parts[i] = 1000 // differs from the first op's
			return &store.PartsError{Parts: parts}
		}
	}
	return s.Store.DoMulti(ctx, mode, ops, out)
}

// TestPartsNotAnError: the PartsError a cluster's store answers for ops of
// several slots is neither an error nor a call of the store: spigot.DoMulti
// through the wrapper records one call and one decision per part, and no
// error.
func TestPartsNotAnError(t *testing.T) {
	mp, r := provider(t)
	w := otelspigot.Wrap(byKey{memory.New()}, otelspigot.WithMeterProvider(mp))
	ops := []spigot.Op{{Limit: login, Key: "a", N: 1}, {Limit: login, Key: "bb", N: 1}}
	if err := spigot.DoMulti(t.Context(), w, spigot.AllOrNothing, ops, make([]spigot.Decision, 2)); err != nil {
		t.Fatal(err)
	}
	m := collect(t, r)
	if got := m.sums(t, "spigot.store.errors"); len(got) != 0 {
		t.Errorf("got errors %v, want none", got)
	}
	if got, want := m.counts(t, "spigot.store.duration"), map[string]uint64{"spigot.operation=do_multi": 2}; !mapsEqual(got, want) {
		t.Errorf("got durations %v, want %v", got, want)
	}
	if got, want := m.sums(t, "spigot.decisions"), map[string]int64{"spigot.limit=login,spigot.outcome=allowed": 2}; !mapsEqual(got, want) {
		t.Errorf("got decisions %v, want %v", got, want)
	}
}
