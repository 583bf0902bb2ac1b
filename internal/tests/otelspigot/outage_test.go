package otelspigot_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	spigotredis "github.com/spigot-go/spigot/store/redis"
)

// TestOutage is what an operator sees through otelspigot while the Redis
// server behind store/hybrid dies and comes back, read through a
// ManualReader as an exporter would: decisions by the remote; once the
// server is killed, remote errors of type unavailable, the breaker's
// transition closed→open and the gauge at open, and decisions by the local
// store; once it is back and the cooldown has passed (on the hybrid
// store's fake clock), probes (open→half-open) until one closes the
// breaker (half-open→closed), and the remote decides again.
//
// Each phase waits for a state of the breaker, making requests until it
// holds, with a bound on their number, never on time. The remote's
// timeout is generous, so that a loaded machine never makes a live server
// look unavailable: a killed one refuses connections at once. The test
// kills a server: it is skipped under go test -short.
func TestOutage(t *testing.T) {
	testserver.SkipShort(t, "kills and restarts a redis-server")
	srv := testserver.Start(t, testserver.Redis)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	with := otelspigot.WithMeterProvider(mp)

	const cooldown = time.Second
	clk := clocktest.New(t0)
	h := hybrid.New(spigotredis.New(rdb), memory.New(memory.WithClock(clk)),
		hybrid.WithObserver(otelspigot.HybridObserver(with)),
		hybrid.WithBreaker(3, cooldown), hybrid.WithClock(clk), hybrid.WithTimeout(time.Minute))
	if _, err := otelspigot.ObserveCircuit(h, with); err != nil {
		t.Fatalf("ObserveCircuit: %v", err)
	}
	// A name of its own, so that no other test's state on the server counts.
	limit := spigot.MustBucket(fmt.Sprint("outage-", time.Now().UnixNano()), 1_000_000, spigot.PerSecond(1))
	limiter := spigot.New(otelspigot.Wrap(h, with), limit)
	ctx := context.Background()
	allow := func(phase string) {
		t.Helper()
		d, err := limiter.Allow(ctx, "10.0.0.1")
		if err != nil || !d.Allowed() {
			t.Fatalf("%s: got %+v, %v; want allowed: the remote, or the local store when the remote is down", phase, d, err)
		}
	}
	// maxRequests bounds the requests a phase makes to reach its state,
	// which takes a few.
	const maxRequests = 100

	// Phase 1: the remote decides.
	for range 5 {
		allow("up")
	}
	m := collect(t, reader)
	m.want(t, "up", "spigot.hybrid.decisions", map[string]int64{"spigot.path=remote": 5})
	m.want(t, "up", "spigot.decisions", map[string]int64{"spigot.limit=" + limit.Name() + ",spigot.outcome=allowed": 5})
	m.want(t, "up", "spigot.hybrid.remote.errors", map[string]int64{})
	m.want(t, "up", "spigot.hybrid.circuit.transitions", map[string]int64{})
	m.want(t, "up", "spigot.hybrid.circuit", map[string]int64{"": 0})
	m.wantCount(t, "up", "spigot.hybrid.remote.duration", 5)

	// Phase 2: killed. Requests fall back on the local store; three
	// remote failures in a row open the breaker, which then spares the
	// remote every call.
	srv.Kill()
	n := 0
	for ; h.Circuit() != hybrid.CircuitOpen; n++ {
		if n == maxRequests {
			t.Fatalf("down: circuit %v after %d requests, want open", h.Circuit(), n)
		}
		allow("down")
	}
	if n != 3 {
		t.Errorf("down: the breaker opened after %d requests, want 3 (WithBreaker's failures)", n)
	}
	for range 5 {
		allow("down, open")
	}
	m = collect(t, reader)
	m.want(t, "down", "spigot.hybrid.decisions", map[string]int64{"spigot.path=remote": 5, "spigot.path=local": int64(n + 5)})
	m.want(t, "down", "spigot.hybrid.remote.errors", map[string]int64{"error.type=unavailable": int64(n)})
	m.want(t, "down", "spigot.hybrid.circuit.transitions", map[string]int64{"spigot.circuit.from=closed,spigot.circuit.to=open": 1})
	m.want(t, "down", "spigot.hybrid.circuit", map[string]int64{"": 2})
	calls := uint64(5 + n) // and none while the breaker is open
	m.wantCount(t, "down", "spigot.hybrid.remote.duration", calls)
	m.want(t, "down", "spigot.store.errors", map[string]int64{}) // the local store decided

	// Phase 3: back, on the same port, empty. Past the cooldown a request
	// probes the remote; a probe may fail on a connection the kill left in
	// the client's pool, which opens the breaker for another cooldown.
	srv.Restart()
	probes := 0
	for ; h.Circuit() != hybrid.CircuitClosed; probes++ {
		if probes == maxRequests {
			t.Fatalf("back: circuit %v after %d probes, want closed", h.Circuit(), probes)
		}
		clk.Advance(cooldown)
		allow("back")
	}
	m = collect(t, reader)
	m.want(t, "back", "spigot.hybrid.circuit.transitions", map[string]int64{
		"spigot.circuit.from=closed,spigot.circuit.to=open":      1,
		"spigot.circuit.from=open,spigot.circuit.to=half-open":   int64(probes),
		"spigot.circuit.from=half-open,spigot.circuit.to=open":   int64(probes - 1),
		"spigot.circuit.from=half-open,spigot.circuit.to=closed": 1,
	}, "spigot.circuit.from=half-open,spigot.circuit.to=open")
	m.want(t, "back", "spigot.hybrid.remote.errors", map[string]int64{"error.type=unavailable": int64(n + probes - 1)})
	m.want(t, "back", "spigot.hybrid.circuit", map[string]int64{"": 0})
	m.wantCount(t, "back", "spigot.hybrid.remote.duration", calls+uint64(probes))

	// Phase 4: the remote decides again.
	before := m.sums(t, "spigot.hybrid.decisions")
	for range 5 {
		allow("again")
	}
	m = collect(t, reader)
	m.want(t, "again", "spigot.hybrid.decisions", map[string]int64{
		"spigot.path=remote": before["spigot.path=remote"] + 5, "spigot.path=local": before["spigot.path=local"],
	})
	m.wantCount(t, "again", "spigot.hybrid.remote.duration", calls+uint64(probes)+5)
	m.want(t, "again", "spigot.hybrid.circuit", map[string]int64{"": 0})
	t.Logf("%d requests to open the breaker, %d probes to close it", n, probes)
}

// metrics is one collection of the ManualReader, by instrument name.
type metrics map[string]metricdata.Metrics

func collect(t *testing.T, r *sdkmetric.ManualReader) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	m := metrics{}
	for _, sm := range rm.ScopeMetrics {
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

// sums returns the values of the counter or gauge name, by attributes.
func (m metrics) sums(t *testing.T, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	x, ok := m[name]
	if !ok {
		return out
	}
	switch d := x.Data.(type) {
	case metricdata.Sum[int64]:
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

// count returns the count of the histogram name, over every attribute set.
func (m metrics) count(t *testing.T, name string) uint64 {
	t.Helper()
	x, ok := m[name]
	if !ok {
		return 0
	}
	d, ok := x.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s: data %T", name, x.Data)
	}
	var n uint64
	for _, p := range d.DataPoints {
		n += p.Count
	}
	return n
}

// want checks the values of the counter or gauge name, by attributes; a
// value of 0 in want may also be absent, for the attribute sets listed in
// maybe.
func (m metrics) want(t *testing.T, phase, name string, want map[string]int64, maybe ...string) {
	t.Helper()
	got := m.sums(t, name)
	for _, k := range maybe {
		if want[k] == 0 {
			if _, ok := got[k]; !ok {
				delete(want, k)
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %s: got %v, want %v", phase, name, got, want)
		return
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: %s: got %v, want %v", phase, name, got, want)
			return
		}
	}
}

// wantCount checks the count of the histogram name.
func (m metrics) wantCount(t *testing.T, phase, name string, want uint64) {
	t.Helper()
	if got := m.count(t, name); got != want {
		t.Errorf("%s: %s: got %d, want %d", phase, name, got, want)
	}
}
