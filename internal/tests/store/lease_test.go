package store_test

// store/lease on real servers: three replicas deciding from leases on one
// server admit no more than the limit over the interval they run, by the
// server's own clock, and a busy key costs the server at least ten times
// fewer calls than requests.

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/lease"
)

// TestLeaseGlobalLimit: 3 lease Stores (replicas) × 64 goroutines, each
// goroutine sending Takes of one token on one hot key, or spread over
// 10 000 keys, through every client on each server. Each key admits at most
// capacity + rate × the interval between the server's clock before the
// first request and after the last, whether its limit is far above the
// requests (hot) or far below them (hot-at-limit, keys=10000); on the hot
// key, the server gets at most one call for ten admitted requests.
func TestLeaseGlobalLimit(t *testing.T) {
	const replicas, goroutines, perGoroutine = 3, 64, 60
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			for _, ps := range protoStores {
				for _, c := range []struct {
					name     string
					keys     int
					capacity int64
					rate     spigot.Rate
					busy     bool // nothing denied: count the server's calls
				}{
					{"hot", 1, 1_000_000, spigot.Per(1_000_000, time.Second), true},
					{"hot-at-limit", 1, 500, spigot.Per(1000, time.Second), false},
					{"keys=10000", 10_000, 1, spigot.Per(1, time.Hour), false},
				} {
					t.Run(ps.name+"/"+c.name, func(t *testing.T) {
						b := spigot.MustBucket("lease", c.capacity, c.rate)
						remote := countstore.New(ps.new(t, []string{srv.Addr}, storeOpts{prefix: t.Name() + ":", group: true}))
						stores := make([]*lease.Store, replicas)
						for i := range stores {
							stores[i] = lease.New(remote)
						}
						admitted := make([]atomic.Int64, c.keys)
						var requests atomic.Int64
						start := srv.Micros(t)
						var wg sync.WaitGroup
						for g := range replicas * goroutines {
							s := stores[g%replicas]
							wg.Go(func() {
								for i := range perGoroutine {
									k := (g*perGoroutine + i) % c.keys
									d, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: "k" + strconv.Itoa(k), N: 1})
									if err != nil {
										t.Error(err)
										return
									}
									requests.Add(1)
									if d.Allowed() {
										admitted[k].Add(1)
									}
								}
							})
						}
						wg.Wait()
						end := srv.Micros(t)
						for _, s := range stores {
							if err := s.Close(context.Background()); err != nil {
								t.Error(err)
							}
						}
						elapsed := time.Duration(end-start) * time.Microsecond
						bound := c.capacity + int64(elapsed)*c.rate.Tokens/int64(c.rate.Period)
						total := int64(0)
						for k := range admitted {
							n := admitted[k].Load()
							total += n
							if n > bound {
								t.Errorf("key k%d: the replicas admitted %d in %v of the server's clock; want at most capacity + rate × interval = %d", k, n, elapsed, bound)
							}
						}
						calls := remote.Calls()
						t.Logf("%d requests, %d admitted, %d server calls (with the refunds at Close) in %v", requests.Load(), total, calls, elapsed)
						if c.busy && calls*10 > total {
							t.Errorf("%d server calls for %d admitted requests on a busy key; want at most a tenth", calls, total)
						}
					})
				}
			}
		})
	}
}
