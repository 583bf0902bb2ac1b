package store_test

// store/denycache in front of every Redis-protocol store on real servers:
// what it answers itself agrees with the server, and a flood on a denied
// key reaches the server once.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/internal/hybridtest"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/denycache"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	"github.com/spigot-go/spigot/store/redis"
	"github.com/spigot-go/spigot/store/rueidis"
)

// TestDenyCacheServers runs, for every store on each server, a
// differential of a denycache.Store in front of the store against a twin
// memory store that gets every op, all on one fake clock at whole
// milliseconds:
// what the Store sends on is decided as the twin decides it,
// and what it answers itself the twin denies, with a RetryAfter and a
// ResetAfter no longer and a Remaining no larger. Then a flood on a
// denied key, on the server's clock, alone and behind store/hybrid,
// reaches the server once.
func TestDenyCacheServers(t *testing.T) {
	limits := []spigot.Limit{
		spigot.MustBucket("tb", 5, spigot.Per(3, time.Second)),
		spigot.Must(spigot.NewLeakyBucket("lb", 4, spigot.Per(2, time.Second))),
		spigot.Must(spigot.NewFixedWindow("fw", spigot.Per(5, time.Second), 300*time.Millisecond)),
		spigot.Must(spigot.NewSlidingWindow("sw", spigot.Per(5, time.Second))),
		spigot.Must(spigot.NewSlidingLog("sl", spigot.Per(4, time.Second))),
	}
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			for _, ps := range protoStores {
				t.Run(ps.name, func(t *testing.T) {
					t.Run("differential", func(t *testing.T) {
						for seed := range uint64(8) {
							clk := clocktest.New(t0)
							remote := countstore.New(ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: fmt.Sprintf("%s-%d:", t.Name(), seed)}))
							c := denycache.New(remote, denycache.WithClock(clk))
							denyDifferential(t, seed, limits, clk, remote, c)
						}
					})
					t.Run("flood", func(t *testing.T) {
						remote := ps.new(t, []string{srv.Addr}, storeOpts{prefix: t.Name() + ":"})
						for _, stack := range []string{"store", "hybrid"} {
							s := remote
							if stack == "hybrid" {
								s = hybrid.New(remote, memory.New(), hybrid.WithObserver(hybridtest.Healthy(t)), hybrid.WithTimeout(10*time.Second))
							}
							counted := countstore.New(s)
							denyFlood(t, stack, denycache.New(counted), counted)
						}
					})
				})
			}
		})
	}
}

// denyFlood takes the one token of a key (refilled an hour later), then
// floods it from 8 goroutines: only the first Take reaches the store.
func denyFlood(t *testing.T, stack string, c spigot.Store, counted *countstore.Store) {
	t.Helper()
	ctx := context.Background()
	l := spigot.MustBucket("flood", 1, spigot.PerHour(1))
	op := spigot.Op{Limit: l, Key: stack, N: 1}
	if d, err := c.Do(ctx, op); err != nil || !d.Allowed() {
		t.Fatalf("%s: first Take: %+v, %v", stack, d, err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				d, err := c.Do(ctx, op)
				if err != nil || d.Allowed() || d.RetryAfter <= 59*time.Minute {
					t.Errorf("%s: got %+v, %v; want a denial for about an hour", stack, d, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := counted.Calls(); n != 1 {
		t.Errorf("%s: 4001 requests made %d store calls, want 1", stack, n)
	}
}

// denyDifferential runs random steps on c, in front of remote, and on a
// twin memory store on clk, and compares their decisions.
func denyDifferential(t *testing.T, seed uint64, limits []spigot.Limit, clk *clocktest.Clock, remote *countstore.Store, c *denycache.Store) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 11))
	twin := memory.New(memory.WithClock(clk))
	local := 0
	actions := []spigot.Action{spigot.Take, spigot.Take, spigot.Take, spigot.Take, spigot.TakeUpTo, spigot.Peek, spigot.Refund}
	for step := range 150 {
		clk.Advance(time.Duration(rng.IntN(3)*rng.IntN(300)) * time.Millisecond)
		n := 1 + rng.IntN(2)
		ops := make([]spigot.Op, n)
		for j := range ops {
			ops[j] = spigot.Op{Limit: limits[rng.IntN(len(limits))], Key: []string{"a", "b"}[rng.IntN(2)], Action: actions[rng.IntN(len(actions))], N: rng.Int64N(6)}
		}
		mode := spigot.Mode(rng.IntN(2))
		got, want := make([]spigot.Decision, n), make([]spigot.Decision, n)
		before := remote.Calls()
		var err, werr error
		if n == 1 {
			got[0], err = c.Do(ctx, ops[0])
			want[0], werr = twin.Do(ctx, ops[0])
		} else {
			err = spigot.DoMulti(ctx, c, mode, ops, got)
			werr = twin.DoMulti(ctx, mode, ops, want)
		}
		if err != nil || werr != nil {
			t.Fatalf("seed %d step %d: %v: %v, twin %v", seed, step, ops, err, werr)
		}
		sent := remote.Calls() > before
		for j := range ops {
			g, w := got[j], want[j]
			switch {
			case g == w:
			case sent && n == 1:
				t.Fatalf("seed %d step %d: %v sent: got %+v, want %+v", seed, step, ops[j], g, w)
			case !g.Allowed() && !w.Allowed() && g.N == 0 && g.RetryAfter <= w.RetryAfter && g.ResetAfter <= w.ResetAfter && g.Remaining <= w.Remaining:
				local++
			default:
				t.Fatalf("seed %d step %d: %v (mode %d, sent %v): got %+v, twin %+v", seed, step, ops[j], mode, sent, g, w)
			}
		}
	}
	if local == 0 {
		t.Errorf("seed %d: the Store never answered itself", seed)
	}
}

// BenchmarkDenyCacheFlood: a flood on one denied key (its one token taken,
// refilled an hour later) from every goroutine, named
// server=…/client=…/store=…: the Redis-protocol store alone, and behind a
// denycache.Store, with the memory store alone as the baseline, in one run:
//
//	go test -run '^$' -bench DenyCacheFlood -benchtime 1s -count 3 ./internal/tests/store
//
// calls/op is what reaches the server per request.
func BenchmarkDenyCacheFlood(b *testing.B) {
	l := spigot.MustBucket("flood", 1, spigot.PerHour(1))
	run := func(b *testing.B, s spigot.Store, counted *countstore.Store) {
		ctx := context.Background()
		op := spigot.Op{Limit: l, Key: "203.0.113.7", N: 1}
		s.Do(ctx, op) // takes the token
		before := counted.Calls()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, err := s.Do(ctx, op); err != nil || d.Allowed() {
					b.Errorf("got %+v, %v; want a denial", d, err)
					return
				}
			}
		})
		b.ReportMetric(float64(counted.Calls()-before)/float64(b.N), "calls/op")
	}
	b.Run("store=memory", func(b *testing.B) {
		counted := countstore.New(memory.New())
		run(b, counted, counted)
	})
	for _, kind := range testserver.Kinds {
		srv := testserver.Start(b, kind)
		for _, client := range []struct {
			name string
			new  func(b *testing.B, prefix string) spigot.Store
		}{
			{"go-redis", func(b *testing.B, p string) spigot.Store {
				return redis.New(testclient.GoRedis(b, srv.Addr), store.WithPrefix(p))
			}},
			{"rueidis", func(b *testing.B, p string) spigot.Store {
				return rueidis.New(testclient.Rueidis(b, srv.Addr), store.WithPrefix(p))
			}},
		} {
			for _, cached := range []bool{false, true} {
				name := "store=" + client.name
				if cached {
					name = "store=denycache"
				}
				b.Run("server="+string(kind)+"/client="+client.name+"/"+name, func(b *testing.B) {
					counted := countstore.New(client.new(b, fmt.Sprintf("bench%d:", time.Now().UnixNano())))
					var s spigot.Store = counted
					if cached {
						s = denycache.New(counted)
					}
					run(b, s, counted)
				})
			}
		}
	}
}
