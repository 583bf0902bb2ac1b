package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/scriptstore"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/memory"
)

// The differential of group commit: random operations from many
// goroutines at once, on a store with group commit (WithGroupCommit) and
// the fake clock, give every caller the decision that a serial replay of
// the store's round trips, in the order the server applied them, gives on
// the memory store and on spigot's Go model; and the server holds the
// model's state for every key.

const (
	groupSeeds      = 4
	groupBursts     = 25
	groupGoroutines = 12
	groupOpsEach    = 4
)

// TestGroupCommitDifferential runs the differential of group commit for
// every store on a server of each kind.
func TestGroupCommitDifferential(t *testing.T) {
	var (
		mu    sync.Mutex
		trips = map[string][][]spigot.Op{} // prefix → the ops of each round trip, in order
	)
	t.Cleanup(scriptstore.SetHooks(scriptstore.Hooks{Sent: func(prefix string, calls [][]spigot.Op) {
		var ops []spigot.Op
		for _, c := range calls {
			ops = append(ops, c...)
		}
		mu.Lock()
		trips[prefix] = append(trips[prefix], ops)
		mu.Unlock()
	}}))
	// drain returns and forgets the round trips of prefix so far.
	drain := func(prefix string) [][]spigot.Op {
		mu.Lock()
		defer mu.Unlock()
		out := trips[prefix]
		delete(trips, prefix)
		return out
	}
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			for _, ps := range protoStores {
				t.Run(ps.name, func(t *testing.T) {
					batched := 0 // the ops that went with others
					for seed := range uint64(groupSeeds) {
						batched += groupDifferential(t, ps, srv, seed, drain)
					}
					if batched == 0 {
						t.Errorf("no op went in a round trip with another: group commit was not exercised")
					}
				})
			}
		})
	}
}

// A groupCall is an op and the decision a caller got.
type groupCall struct {
	op spigot.Op
	d  spigot.Decision
}

// groupDifferential runs the bursts of seed on a store of ps on srv, and
// returns how many ops went in a round trip with others.
func groupDifferential(t *testing.T, ps protoStore, srv *testserver.Server, seed uint64, drain func(string) [][]spigot.Op) (batched int) {
	t.Helper()
	clk := clocktest.New(t0)
	p := fmt.Sprintf("%s-%d:", t.Name(), seed)
	s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p, group: true})
	mem := memory.New(memory.WithClock(clk))
	raw := testclient.GoRedis(t, srv.Addr)
	m := model{}
	g := newDiffGen(seed, false)
	for burst := range groupBursts {
		clk.Advance(g.next().step)
		now := clk.Now()
		// Each goroutine's ops, drawn before any is sent.
		ops := make([][]spigot.Op, groupGoroutines)
		for i := range ops {
			for range groupOpsEach {
				ops[i] = append(ops[i], g.draw().op)
			}
		}
		got := make([][]groupCall, groupGoroutines)
		var wg sync.WaitGroup
		for i := range ops {
			wg.Go(func() {
				for _, op := range ops[i] {
					d, err := s.Do(context.Background(), op)
					if err != nil {
						t.Errorf("seed %d, burst %d: Do(%v): %v", seed, burst, op, err)
						return
					}
					got[i] = append(got[i], groupCall{op, d})
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}

		// The serial replay of the round trips, in the server's order.
		want := map[groupCall]int{}
		replayed := 0
		for _, trip := range drain(p) {
			if len(trip) > 1 {
				batched += len(trip)
			}
			for _, op := range trip {
				key := store.Key(p, op.Limit, op.Key)
				d := m.apply(key, op, now)
				md, err := mem.Do(context.Background(), op)
				if err != nil || md != d {
					t.Fatalf("seed %d, burst %d: %v on the memory store = %s, %v; Op.Apply: %s", seed, burst, op, show(md), err, show(d))
				}
				want[groupCall{op, d}]++
				replayed++
			}
		}
		if total := groupGoroutines * groupOpsEach; replayed != total {
			t.Fatalf("seed %d, burst %d: the round trips carried %d ops; want %d, one per call", seed, burst, replayed, total)
		}
		for i := range got {
			for _, c := range got[i] {
				if want[c] == 0 {
					t.Fatalf("seed %d, burst %d, goroutine %d: %v = %s; the serial replay of the round trips gives no such decision for it", seed, burst, i, c.op, show(c.d))
				}
				want[c]--
			}
		}
		for _, k := range []string{"a", "b", "", "{t}c"} {
			for _, l := range append(g.d[:len(g.d):len(g.d)], g.e) {
				key := store.Key(p, l, k)
				if problem := m.checkStored(t, raw, key, now); problem != "" {
					t.Fatalf("seed %d, burst %d: %s", seed, burst, problem)
				}
			}
		}
	}
	return batched
}
