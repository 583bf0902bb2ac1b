package otelspigot

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// TestRouteAttrs checks that one instruments' cache of attribute sets
// keeps a limit's sets for no route, an HTTP route and an RPC method
// apart, even where the route and the method have the same name.
func TestRouteAttrs(t *testing.T) {
	in, err := newInstruments(noop.NewMeterProvider())
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		route route
		want  string // of the tokens' set
	}{
		{route{}, "spigot.limit=api"},
		{route{name: "pkg.Service/Method"}, "http.route=pkg.Service/Method,spigot.limit=api"},
		{route{system: "grpc", name: "pkg.Service/Method"}, "rpc.method=pkg.Service/Method,rpc.system.name=grpc,spigot.limit=api"},
		{route{name: ""}, "spigot.limit=api"},
		{route{system: "grpc"}, "rpc.system.name=grpc,spigot.limit=api"},
		{route{name: "pkg.Service/Method"}, "http.route=pkg.Service/Method,spigot.limit=api"},
	}
	for pass := range 2 { // built, then from the cache
		for i, s := range steps {
			a := in.attrs("api", s.route)
			if got := render(metric.NewAddConfig(a.tokens).Attributes()); got != s.want {
				t.Errorf("pass %d, step %d: %+v: got %s, want %s", pass, i, s.route, got, s.want)
			}
			for j, o := range outcomes {
				want := s.want + ",spigot.outcome=" + o
				if got := render(metric.NewAddConfig(a.outcome[j]).Attributes()); got != want {
					t.Errorf("pass %d, step %d: %+v: got %s, want %s", pass, i, s.route, got, want)
				}
			}
		}
	}
	if len(in.limits) != 4 {
		t.Errorf("%d sets in the cache, want 4", len(in.limits))
	}
}

func render(s attribute.Set) string {
	var b []byte
	for i, kv := range s.ToSlice() {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, string(kv.Key)+"="+kv.Value.String()...)
	}
	return string(b)
}
