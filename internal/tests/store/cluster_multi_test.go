package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/memory"
)

// testClusterSeveral: several limits on one request, and batches, on a
// cluster. Each request takes a per-address and a per-user limit whose
// keys are on different primaries, all or nothing, from many goroutines
// and two stores of each library at once; the buckets never refill. Then
// no limit admitted more than its capacity, and every bucket holds exactly
// its capacity less what the allowed requests took: whatever a denied
// request took from one primary before another denied it was given back.
// A batch spread over every primary is decided key by key.
func testClusterSeveral(t *testing.T, cl *testserver.Cluster) {
	ip := spigot.MustBucket("ip", 10, spigot.Per(1, 24*time.Hour))
	user := spigot.MustBucket("user", 12, spigot.Per(1, 24*time.Hour))
	pfx := prefix(t)
	ips, _ := spreadKeys(t, cl, pfx, ip, 1)     // one address on each primary
	users, _ := spreadKeys(t, cl, pfx, user, 1) // one user on each primary
	var stores []spigot.Store
	for _, ps := range protoStores {
		for range 2 {
			stores = append(stores, ps.new(t, cl.Addrs(), storeOpts{prefix: pfx}))
		}
	}
	type pair struct{ ip, user string }
	var pairs []pair // every address with every user on another primary
	for i, a := range ips {
		for j, u := range users {
			if i != j {
				pairs = append(pairs, pair{a, u})
			}
		}
	}
	var (
		mu       sync.Mutex
		admitted = make(map[string]int64) // limit name + key → tokens taken by allowed requests
		denied   int
		wg       sync.WaitGroup
	)
	for g := range 24 {
		s := spigot.NewGroup(stores[g%len(stores)], ip, user)
		wg.Go(func() {
			for r := range 30 {
				p := pairs[(g+r)%len(pairs)]
				d, err := s.Allow(context.Background(), p.ip, p.user)
				if err != nil {
					t.Errorf("Allow(%s, %s): %v", p.ip, p.user, err)
					return
				}
				mu.Lock()
				if d.Allowed() {
					admitted["ip "+p.ip]++
					admitted["user "+p.user]++
				} else {
					denied++
					for i, e := range d.Each {
						if e.N != 0 || (!e.Allowed() && e.RetryAfter <= 0) {
							t.Errorf("a denied request: limit %d decided %+v; want N 0", i, e)
						}
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if denied == 0 {
		t.Fatal("no request was denied: the test did not exhaust the limits")
	}
	check := stores[0]
	for _, c := range []struct {
		l    spigot.Limit
		keys []string
	}{{ip, ips}, {user, users}} {
		for _, k := range c.keys {
			n := admitted[c.l.Name()+" "+k]
			d, err := check.Do(context.Background(), spigot.Op{Limit: c.l, Key: k, Action: spigot.Peek})
			if err != nil || n > c.l.Capacity() || d.Remaining != c.l.Capacity()-n {
				t.Errorf("%v %q: %d admitted, %d remaining (%v); want at most %d admitted and the rest remaining",
					c.l, k, n, d.Remaining, err, c.l.Capacity())
			}
		}
	}
	t.Logf("%d requests allowed, %d denied", admitted["ip "+ips[0]]+admitted["ip "+ips[1]]+admitted["ip "+ips[2]], denied)

	// A batch over keys of every primary: each key decided on its own.
	batch := spigot.MustBucket("batch", 2, spigot.Per(1, 24*time.Hour))
	for _, ps := range protoStores {
		pfx := strings.TrimSuffix(pfx, ":") + "-" + ps.name + ":"
		keys, _ := spreadKeys(t, cl, pfx, batch, 20)
		s := ps.new(t, cl.Addrs(), storeOpts{prefix: pfx})
		ops := make([]spigot.Op, len(keys))
		for i, k := range keys {
			ops[i] = spigot.Op{Limit: batch, Key: k, N: 1}
		}
		for round, want := range []int64{1, 0} {
			out := make([]spigot.Decision, len(ops))
			if err := s.DoMulti(context.Background(), spigot.Independent, ops, out); err != nil {
				t.Fatalf("%s: batch of %d: %v", ps.name, len(ops), err)
			}
			for i, d := range out {
				if !d.Allowed() || d.N != 1 || d.Remaining != want {
					t.Errorf("%s: round %d, %q: %+v; want 1 taken, %d left", ps.name, round+1, ops[i].Key, d, want)
				}
			}
		}
	}
}

// testClusterKinds: limits of every kind on one request, all or nothing,
// on keys of one slot (WithKeyHashTags and one tag), and in batches over
// every primary, on a fake clock: every decision is the memory store's on
// the same clock, field by field (a leaky bucket's Delay too), and so is
// what a Peek of each key finds after each round.
func testClusterKinds(t *testing.T, cl *testserver.Cluster) {
	ctx := context.Background()
	limits := []spigot.Limit{
		spigot.MustBucket("k-tb", 5, spigot.PerMinute(5)),
		spigot.Must(spigot.NewLeakyBucket("k-lb", 4, spigot.PerSecond(2))),
		spigot.Must(spigot.NewFixedWindow("k-fw", spigot.PerMinute(6), 20*time.Second)),
		spigot.Must(spigot.NewSlidingWindow("k-sw", spigot.PerMinute(5))),
		spigot.Must(spigot.NewSlidingLog("k-sl", spigot.PerMinute(4))),
	}
	for _, ps := range protoStores {
		t.Run(ps.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			remote := ps.new(t, cl.Addrs(), storeOpts{clock: clk, prefix: prefix(t), tags: true})
			mem := memory.New(memory.WithClock(clk))
			// check applies ops on both stores, compares, and returns
			// whether the memory store denied any.
			check := func(round int, what string, mode spigot.Mode, ops []spigot.Op) bool {
				t.Helper()
				want, got := make([]spigot.Decision, len(ops)), make([]spigot.Decision, len(ops))
				if err := mem.DoMulti(ctx, mode, ops, want); err != nil {
					t.Fatalf("round %d: %s: memory: %v", round, what, err)
				}
				if err := remote.DoMulti(ctx, mode, ops, got); err != nil {
					t.Fatalf("round %d: %s: %v", round, what, err)
				}
				for i := range ops {
					if d := diffDecisions(got[i], want[i]); d != "" {
						t.Errorf("round %d: %s, %v: %s", round, what, ops[i], d)
					}
				}
				d, _ := spigot.Combine(want)
				return !d.Allowed()
			}
			denied, delayed := 0, 0
			for round := range 40 {
				clk.Advance(time.Duration(round%7) * 900 * time.Millisecond)
				var one, spread, peeks []spigot.Op
				for i, l := range limits {
					a := []spigot.Action{spigot.Take, spigot.Take, spigot.TakeUpTo, spigot.Take, spigot.Refund, spigot.Peek}[(round+i)%6]
					one = append(one, spigot.Op{Limit: l, Key: fmt.Sprintf("{tenant-7}:%d", round%3), Action: a, N: int64(1 + (round+i)%2)})
					spread = append(spread, spigot.Op{Limit: l, Key: fmt.Sprintf("user-%d-%d", i, round%4), Action: a, N: 1})
				}
				if check(round, "all or nothing in one slot", spigot.AllOrNothing, one) {
					denied++
				}
				check(round, "a batch over every primary", spigot.Independent, spread)
				for _, op := range append(one, spread...) {
					peeks = append(peeks, spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.Peek, N: 1})
				}
				check(round, "peeks", spigot.Independent, peeks)
				if d, err := mem.Do(ctx, spigot.Op{Limit: limits[1], Key: one[1].Key, Action: spigot.Peek, N: 1}); err == nil && d.Delay > 0 {
					delayed++
				}
			}
			if denied == 0 || delayed == 0 {
				t.Errorf("%d all-or-nothing calls in one slot were denied, %d peeks of the leaky bucket delayed; the test means both", denied, delayed)
			}
		})
	}
}
