package otelgrpclimit_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/otelspigot/otelgrpclimit"
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

// serve is start, stopped when the test ends.
func serve(t *testing.T, l *grpclimit.Server) *grpc.ClientConn {
	t.Helper()
	conn, stop, err := start(l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return conn
}

// points is one collection: the data points of each instrument, their
// attributes rendered as "k=v,k=v" (sorted by key), with their sum (a
// counter's) or count (a histogram's).
type points map[string]map[string]int64

func collect(t *testing.T, r *sdkmetric.ManualReader) (points, []attribute.KeyValue) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	p := points{}
	var all []attribute.KeyValue
	add := func(name string, s attribute.Set, v int64) {
		if p[name] == nil {
			p[name] = map[string]int64{}
		}
		p[name][render(s)] += v
		all = append(all, s.ToSlice()...)
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelspigot.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, otelspigot.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, x := range d.DataPoints {
					add(m.Name, x.Attributes, x.Value)
				}
			case metricdata.Histogram[float64]:
				for _, x := range d.DataPoints {
					add(m.Name, x.Attributes, int64(x.Count))
				}
			default:
				t.Errorf("%s: data %T", m.Name, m.Data)
			}
		}
	}
	return p, all
}

func render(s attribute.Set) string {
	var b []string
	for _, kv := range s.ToSlice() {
		b = append(b, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(b, ",")
}

func equalMap(t *testing.T, what string, got, want map[string]int64) {
	t.Helper()
	ok := len(got) == len(want)
	for k, w := range want {
		if g, in := got[k]; !in || g != w {
			ok = false
		}
	}
	if !ok {
		t.Errorf("%s:\ngot  %v\nwant %v", what, got, want)
	}
}

// TestObserver counts the decisions of three limits on the calls of
// three methods, unary and streaming, by method, over a real server: those
// of a stream's opening and of its messages (PerMessage), and a broken
// store's error.
func TestObserver(t *testing.T) {
	mp, r := provider(t)
	obs := grpclimit.WithObserver(otelgrpclimit.Observer(otelspigot.WithMeterProvider(mp)))
	perAddr := spigot.MustBucket("per-address", 10, spigot.PerMinute(1))
	perTenant := spigot.MustBucket("per-tenant", 4, spigot.PerMinute(2))
	perMessage := spigot.MustBucket("per-message", 1, spigot.PerMinute(1))
	clk := clocktest.New(t0)
	conn := serve(t, grpclimit.New(memory.New(memory.WithClock(clk)),
		grpclimit.By(perAddr, grpclimit.PeerIP()),
		grpclimit.By(perTenant, grpclimit.Metadata("x-tenant"), grpclimit.Methods("/spigot.test.Echo/"), grpclimit.Weight(2)),
		grpclimit.By(perMessage, grpclimit.Metadata("x-tenant"), grpclimit.Methods(chatMethod), grpclimit.PerMessage()),
		obs))
	broken := serve(t, grpclimit.New(brokenStore{}, grpclimit.By(perAddr, nil), obs))

	t1 := t0.Add(time.Minute) // per-tenant has 2 tokens again
	steps := []struct {
		at     time.Time
		conn   *grpc.ClientConn
		method string
		tenant string
		want   codes.Code
	}{
		{t0, conn, echoMethod, "alice", codes.OK},
		{t0, conn, echoMethod, "alice", codes.OK},
		{t0, conn, echoMethod, "alice", codes.ResourceExhausted}, // per-tenant denies; per-address takes nothing
		{t0, conn, otherMethod, "alice", codes.OK},               // per-address alone
		{t1, conn, echoMethod, "alice", codes.OK},
		{t1, conn, chatMethod, "bob", codes.OK},
		{t1, conn, chatMethod, "bob", codes.ResourceExhausted}, // opened; per-message denies its message
		{t1, broken, echoMethod, "alice", codes.Unavailable},   // fails safe
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, s := range steps {
		clk.Set(s.at)
		err := call(ctx, s.conn, s.method, "x-tenant", s.tenant)
		if got := status.Code(err); got != s.want {
			t.Errorf("step %d: %s: got %v (%v), want %v", i, s.method, got, err, s.want)
		}
	}

	p, all := collect(t, r)
	const (
		echo  = "rpc.method=spigot.test.Echo/Echo,rpc.system.name=grpc,"
		chat  = "rpc.method=spigot.test.Echo/Chat,rpc.system.name=grpc,"
		other = "rpc.method=spigot.test.Other/Echo,rpc.system.name=grpc,"
	)
	equalMap(t, "spigot.decisions", p["spigot.decisions"], map[string]int64{
		echo + "spigot.limit=per-address,spigot.outcome=allowed":  4,
		echo + "spigot.limit=per-tenant,spigot.outcome=allowed":   3,
		echo + "spigot.limit=per-tenant,spigot.outcome=denied":    1,
		other + "spigot.limit=per-address,spigot.outcome=allowed": 1,
		chat + "spigot.limit=per-address,spigot.outcome=allowed":  2,
		chat + "spigot.limit=per-tenant,spigot.outcome=allowed":   2,
		chat + "spigot.limit=per-message,spigot.outcome=allowed":  1,
		chat + "spigot.limit=per-message,spigot.outcome=denied":   1,
	})
	equalMap(t, "spigot.tokens.requested", p["spigot.tokens.requested"], map[string]int64{
		echo + "spigot.limit=per-address":  4,
		echo + "spigot.limit=per-tenant":   8,
		other + "spigot.limit=per-address": 1,
		chat + "spigot.limit=per-address":  2,
		chat + "spigot.limit=per-tenant":   4,
		chat + "spigot.limit=per-message":  2,
	})
	equalMap(t, "spigot.store.duration", p["spigot.store.duration"], map[string]int64{
		"spigot.operation=do_multi": 6, "spigot.operation=do": 4,
	})
	equalMap(t, "spigot.store.errors", p["spigot.store.errors"], map[string]int64{"error.type=unavailable": 1})
	for _, kv := range all {
		if v := kv.Value.String(); v == "alice" || v == "bob" || v == "127.0.0.1" {
			t.Errorf("attribute %s=%q holds a key", kv.Key, v)
		}
	}
}

// TestSemconv checks the attribute keys against the OpenTelemetry
// semantic conventions.
func TestSemconv(t *testing.T) {
	for _, k := range []struct{ got, want attribute.Key }{
		{otelspigot.RPCMethodKey, semconv.RPCMethodKey},
		{otelspigot.RPCSystemNameKey, semconv.RPCSystemNameKey},
		{otelspigot.RouteKey, semconv.HTTPRouteKey},
		{otelspigot.ErrorTypeKey, semconv.ErrorTypeKey},
	} {
		if k.got != k.want {
			t.Errorf("got key %q, want %q", k.got, k.want)
		}
	}
	if v := semconv.RPCSystemNameGRPC.Value.AsString(); v != "grpc" {
		t.Errorf("semconv's rpc.system.name of gRPC is %q, not grpc", v)
	}
}

// TestOtelspigotLinksNoGRPC checks that package otelspigot imports
// neither grpclimit nor gRPC, so that a program that records HTTP metrics
// alone does not link them.
func TestOtelspigotLinksNoGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "github.com/spigot-go/spigot/otelspigot").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "github.com/spigot-go/spigot/grpclimit" || strings.HasPrefix(pkg, "google.golang.org/grpc") {
			t.Errorf("otelspigot imports %s", pkg)
		}
	}
}
