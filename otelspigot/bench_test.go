package otelspigot_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/memory"
)

// BenchmarkWrap measures the wrapper's cost on the memory store: none (the
// bare store), a no-op MeterProvider, and the SDK's with a ManualReader.
// The memory store runs on a fake clock, so that every Take of 1 on a
// bucket that never runs dry is allowed and the key keeps its state.
//
// provider=noop costs next to nothing over provider=none because Wrap
// passes calls straight through to the store when every instrument is the
// no-op API's: asking each instrument whether it is enabled instead took
// three calls through interfaces a decision, about a sixth of the memory
// store's time.
func BenchmarkWrap(b *testing.B) {
	big := spigot.MustBucket("bench", 1<<30, spigot.PerSecond(1))
	for _, p := range []struct {
		name string
		wrap func(spigot.Store) spigot.Store
	}{
		{"none", func(s spigot.Store) spigot.Store { return s }},
		{"noop", func(s spigot.Store) spigot.Store {
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
