package store_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/testserver"
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
