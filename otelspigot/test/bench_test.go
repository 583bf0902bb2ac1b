package otelspigot_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// BenchmarkWrap measures the wrapper's cost on the memory store: none (the
// bare store), no-op MeterProvider and TracerProvider, the no-op
// MeterProvider with the global TracerProvider (none set), and the SDK's
// MeterProvider with a ManualReader (and the global TracerProvider, none
// set). The memory store runs on a fake clock, so that every Take of 1 on
// a bucket that never runs dry is allowed and the key keeps its state.
//
// provider=noop costs next to nothing over provider=none because Wrap
// passes calls straight through to the store when every instrument is the
// no-op API's and so is the tracer: asking each instrument whether it is
// enabled instead (provider=noop-metrics) took three calls through
// interfaces a decision, about a sixth of the memory store's time.
func BenchmarkWrap(b *testing.B) {
	big := spigot.MustBucket("bench", 1<<30, spigot.PerSecond(1))
	for _, p := range []struct {
		name string
		wrap func(spigot.Store) spigot.Store
	}{
		{"none", func(s spigot.Store) spigot.Store { return s }},
		{"noop", func(s spigot.Store) spigot.Store {
			return otelspigot.Wrap(s, otelspigot.WithMeterProvider(noop.NewMeterProvider()),
				otelspigot.WithTracerProvider(tracenoop.NewTracerProvider()))
		}},
		{"noop-metrics", func(s spigot.Store) spigot.Store {
			return otelspigot.Wrap(s, otelspigot.WithMeterProvider(noop.NewMeterProvider()))
		}},
		{"sdk", func(s spigot.Store) spigot.Store {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			return otelspigot.Wrap(s, otelspigot.WithMeterProvider(mp))
		}},
	} {
		b.Run("provider="+p.name+"/serial", func(b *testing.B) {
			s := p.wrap(memory.New(memory.WithClock(clocktest.New(time.Unix(1e9, 0)))))
			ctx := context.Background()
			op := spigot.Op{Limit: big, Key: "10.0.0.1", N: 1}
			if _, err := s.Do(ctx, op); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Do(ctx, op); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("provider="+p.name+"/parallel", func(b *testing.B) {
			s := p.wrap(memory.New(memory.WithClock(clocktest.New(time.Unix(1e9, 0)))))
			ctx := context.Background()
			var id atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				// A key per goroutine, with state before the timing counts.
				op := spigot.Op{Limit: big, Key: "10.0.0." + strconv.FormatInt(id.Add(1), 10), N: 1}
				if _, err := s.Do(ctx, op); err != nil {
					b.Error(err)
					return
				}
				for pb.Next() {
					if _, err := s.Do(ctx, op); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkHybridObserver measures HybridObserver's cost on store/hybrid
// whose remote and local stores are memory stores: no observer (the
// baseline), HybridObserver on a no-op MeterProvider, and on the SDK's
// with a ManualReader, with its Decision function alone (decisions by
// path only) and whole. Each Do is decided by the remote: a decision and
// a timed remote call are recorded.
func BenchmarkHybridObserver(b *testing.B) {
	big := spigot.MustBucket("bench", 1<<30, spigot.PerSecond(1))
	sdk := func() hybrid.Observer {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		return otelspigot.HybridObserver(otelspigot.WithMeterProvider(mp))
	}
	for _, p := range []struct {
		name string
		opts func() []hybrid.Option
	}{
		{"none", func() []hybrid.Option { return nil }},
		{"noop", func() []hybrid.Option {
			return []hybrid.Option{hybrid.WithObserver(otelspigot.HybridObserver(otelspigot.WithMeterProvider(noop.NewMeterProvider())))}
		}},
		{"sdk-decisions", func() []hybrid.Option {
			return []hybrid.Option{hybrid.WithObserver(hybrid.Observer{Decision: sdk().Decision})}
		}},
		{"sdk", func() []hybrid.Option { return []hybrid.Option{hybrid.WithObserver(sdk())} }},
	} {
		newStore := func() spigot.Store {
			clk := clocktest.New(time.Unix(1e9, 0))
			return hybrid.New(memory.New(memory.WithClock(clk)), memory.New(memory.WithClock(clk)),
				append([]hybrid.Option{hybrid.WithClock(clk), hybrid.WithTimeout(time.Minute)}, p.opts()...)...)
		}
		b.Run("observer="+p.name+"/serial", func(b *testing.B) {
			s := newStore()
			ctx := context.Background()
			op := spigot.Op{Limit: big, Key: "10.0.0.1", N: 1}
			if _, err := s.Do(ctx, op); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Do(ctx, op); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("observer="+p.name+"/parallel", func(b *testing.B) {
			s := newStore()
			ctx := context.Background()
			var id atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				op := spigot.Op{Limit: big, Key: "10.0.0." + strconv.FormatInt(id.Add(1), 10), N: 1}
				if _, err := s.Do(ctx, op); err != nil {
					b.Error(err)
					return
				}
				for pb.Next() {
					if _, err := s.Do(ctx, op); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
