package lease_test

// A fixed window leased by a fleet.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/lease"
)

// TestFixedWindowFleet: a fixed window of 300 per 200ms, whose windows
// start 30ms past each multiple of 200ms, on one key, taken one token at a
// time by 3 replicas (lease Stores, each on a go-redis store of its own)
// × 64 goroutines, until the server's clock has run 2s. No aligned window
// may admit more than 300, on the server's clock: the server runs on this
// machine, so its TIME and time.Now read one clock, and each admission
// was decided between the instants just before and just after its call.
// One whose interval lies inside a window counts there; one that
// straddles a boundary may belong to either side, and the test fails only
// when no way of counting the straddlers keeps every window within the
// limit (see fit). The leases must be used: at least a quarter of the
// admissions decided from them (the Observer's Hit). It logs the store
// calls per admission.
//
//	SPIGOT_REQUIRE_SERVERS=1 go test -race -run TestFixedWindowFleet -v ./internal/tests/lease
func TestFixedWindowFleet(t *testing.T) {
	const (
		replicas   = 3
		goroutines = 64
		limit      = 300
		window     = 200 * time.Millisecond
		offset     = 30 * time.Millisecond
		run        = 2 * time.Second
		minShare   = 0.25
	)
	fw := spigot.Must(spigot.NewFixedWindow("fleet-window", spigot.Per(limit, window), offset))
	srv := testserver.Start(t, testserver.Redis)
	sameClock(t, srv)
	var (
		remotes [replicas]*countstore.Store
		stores  [replicas]*lease.Store
		hits    [replicas]atomic.Int64
		takes   [replicas]atomic.Int64
	)
	for i := range replicas {
		remotes[i] = countstore.New(newRemote(t, "go-redis", srv.Addr, prefix(t)))
		stores[i] = lease.New(remotes[i], lease.WithObserver(lease.Observer{
			Hit: func(_ context.Context, op spigot.Op) {
				if op.Limit == fw {
					hits[i].Add(1)
				}
			},
			Take: func(_ context.Context, op spigot.Op, _, _ int64, _ error) {
				if op.Limit == fw {
					takes[i].Add(1)
				}
			},
		}))
		t.Cleanup(func() { stores[i].Close(context.Background()) })
	}

	var (
		stop     atomic.Bool
		errs     atomic.Int64
		requests atomic.Int64
		wg       sync.WaitGroup
		admitted [replicas * goroutines][][2]int64 // each goroutine's admissions: before and after, µs
	)
	start := srv.Micros(t)
	for i := range replicas {
		for g := range goroutines {
			wg.Go(func() {
				mine := &admitted[i*goroutines+g]
				for !stop.Load() {
					before := time.Now().UnixMicro()
					d, err := stores[i].Do(context.Background(), spigot.Op{Limit: fw, Key: "k", N: 1})
					after := time.Now().UnixMicro()
					requests.Add(1)
					if err != nil {
						if errs.Add(1) <= 3 {
							t.Errorf("replica %d: %v", i, err)
						}
						continue
					}
					if d.Allowed() {
						*mine = append(*mine, [2]int64{before, after})
					}
				}
			})
		}
	}
	t.Cleanup(func() { // when the test ends early
		stop.Store(true)
		wg.Wait()
	})
	end := untilServerClock(t, srv, start+run.Microseconds(), func() bool { return true })
	stop.Store(true)
	wg.Wait()
	sameClock(t, srv)

	var spans []span
	for _, a := range admitted {
		for _, iv := range a {
			spans = append(spans, spanOf(fw, iv[0], iv[1]))
		}
	}
	inside, most, straddlers := windowCounts(spans)
	if ok, w := fit(spans, limit); !ok {
		t.Errorf("the window starting %v admitted more than %d, however the straddlers are counted: %d inside it, %d straddlers in the run", windowStart(fw, w), limit, inside[w], straddlers)
	}
	var nHits, nTakes, calls int64
	for i := range replicas {
		nHits += hits[i].Load()
		nTakes += takes[i].Load()
		calls += remotes[i].Calls()
	}
	n := int64(len(spans))
	t.Logf("%v on the server's clock (about %d windows): %d requests, %d admitted (at most %d inside one window, %d straddling two), %d from leases (%.1f %%), %d lease takes; %d store calls, %.3f per admission",
		time.Duration(end-start)*time.Microsecond, (end-start)/window.Microseconds(), requests.Load(), n, most, straddlers,
		nHits, 100*float64(nHits)/float64(max(n, 1)), nTakes, calls, float64(calls)/float64(max(n, 1)))
	if n == 0 {
		t.Fatal("nothing admitted")
	}
	if float64(nHits) < minShare*float64(n) {
		t.Errorf("%d of %d admissions decided from leases; want at least %.0f %%", nHits, n, 100*minShare)
	}
}

// sameClock fails tb unless the server's TIME lies between two readings of
// time.Now around it: the premise of counting admissions by the machine's
// clock as the server's.
func sameClock(tb testing.TB, srv *testserver.Server) {
	tb.Helper()
	before := time.Now().UnixMicro()
	s := srv.Micros(tb)
	after := time.Now().UnixMicro()
	if s < before || s > after {
		tb.Fatalf("the server's TIME %d µs is not between this process's %d and %d: not one clock", s, before, after)
	}
}
