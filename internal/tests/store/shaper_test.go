package store_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/testserver"
)

// lastClock is the system clock, to the microsecond, that remembers the
// instant it last gave: the instant the script decided on, for a store
// that one goroutine uses alone.
type lastClock struct{ last time.Time }

func (c *lastClock) Now() time.Time {
	c.last = time.Now().Truncate(time.Microsecond)
	return c.last
}

// TestShaperAcrossReplicas: four replicas, each with its own client and
// store on one server, send 50 requests each through a leaky bucket of
// 100/s; every request is admitted (the queue holds them all), and their
// departures (the instant the script decided on, plus the Delay) are at
// least 10 ms apart, whichever replica admitted them.
func TestShaperAcrossReplicas(t *testing.T) {
	const replicas, each = 4, 50
	shaper := spigot.Must(spigot.NewLeakyBucket("shape", replicas*each, spigot.PerSecond(100)))
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			for _, ps := range protoStores {
				t.Run(ps.name, func(t *testing.T) {
					var (
						mu         sync.Mutex
						departures []time.Time
						wg         sync.WaitGroup
					)
					for range replicas {
						clk := &lastClock{}
						st := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: prefix(t)})
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range each {
								d, err := st.Do(context.Background(), spigot.Op{Limit: shaper, Key: "partner", N: 1})
								if err != nil || !d.Allowed() {
									t.Errorf("Take: %+v, %v; want admitted, with its turn in Delay", d, err)
									return
								}
								mu.Lock()
								departures = append(departures, clk.last.Add(d.Delay))
								mu.Unlock()
							}
						}()
					}
					wg.Wait()
					slices.SortFunc(departures, func(a, b time.Time) int { return a.Compare(b) })
					if len(departures) != replicas*each {
						t.Fatalf("%d departures; want %d", len(departures), replicas*each)
					}
					for i := 1; i < len(departures); i++ {
						if gap := departures[i].Sub(departures[i-1]); gap < 10*time.Millisecond {
							t.Errorf("departures %d and %d are %v apart; want at least 10ms", i-1, i, gap)
						}
					}
				})
			}
		})
	}
}
