package hybrid_test

// The hybrid store's cost while the breaker is open, against the memory
// store alone (target: within 2×); its cost over the bare remote store when
// the remote is healthy is measured on a Redis server in
// internal/tests/store/hybrid. Compare each pair's medians:
//
//	go test -run='^$' -bench=Hybrid -benchmem -count=5 ./store/hybrid/

import (
	"context"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// benchOp takes a token of a bucket that never runs dry: every request is
// allowed.
var benchOp = spigot.Op{Limit: spigot.MustBucket("hybrid-bench", 1e12, spigot.PerSecond(1e12)), Key: "hot", N: 1}

func BenchmarkHybrid(b *testing.B) {
	b.Run("open", func(b *testing.B) {
		clk := clocktest.New(t0) // the breaker never reaches its probe
		failing := newFakeRemote(b, clk)
		failing.set(fail)
		open := hybrid.New(failing, memory.New(), hybrid.WithClock(clk), hybrid.WithBreaker(1, time.Hour))
		if _, err := open.Do(context.Background(), benchOp); err != nil || open.Circuit() != hybrid.CircuitOpen {
			b.Fatalf("opening the breaker: %v, breaker %v", err, open.Circuit())
		}
		stores := []struct {
			name string
			s    spigot.Store
		}{
			{"store=memory", memory.New()},
			{"store=hybrid", open},
		}
		for _, run := range []struct {
			name string
			f    func(*testing.B, spigot.Store)
		}{{"loop=serial", serial}, {"loop=parallel", parallel}} {
			b.Run(run.name, func(b *testing.B) {
				for _, st := range stores {
					b.Run(st.name, func(b *testing.B) { run.f(b, st.s) })
				}
			})
		}
		if n := failing.calls(); n != 1 {
			b.Errorf("the remote was called %d times with the breaker open, want once (to open it)", n)
		}
	})
}

// serial makes requests one after the other on one key.
func serial(b *testing.B, s spigot.Store) {
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		if a, err := s.Do(ctx, benchOp); err != nil || !a.Allowed() {
			b.Fatalf("Do: %+v, %v; want allowed", a, err)
		}
	}
}

// parallel makes requests from GOMAXPROCS goroutines on one key.
func parallel(b *testing.B, s spigot.Store) {
	b.ReportAllocs()
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if a, err := s.Do(ctx, benchOp); err != nil || !a.Allowed() {
				b.Errorf("Do: %+v, %v; want allowed", a, err)
				return
			}
		}
	})
}
