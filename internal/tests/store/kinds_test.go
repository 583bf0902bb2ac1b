package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/memory"
)

// reuseLimits are limits of every kind named "reuse", each 5 a minute.
var reuseLimits = []spigot.Limit{
	spigot.MustBucket("reuse", 5, spigot.PerMinute(5)),
	spigot.Must(spigot.NewLeakyBucket("reuse", 5, spigot.PerMinute(5))),
	spigot.Must(spigot.NewFixedWindow("reuse", spigot.PerMinute(5), 0)),
	spigot.Must(spigot.NewSlidingWindow("reuse", spigot.PerMinute(5))),
	spigot.Must(spigot.NewSlidingLog("reuse", spigot.PerMinute(5))),
}

// testKindReuse: a limit's name reused for another kind never hands a key
// a fresh limit. For every ordered pair of kinds, a key used up under the
// first (all 5 taken) is, under the second, used up until the first's
// state is forgotten (its FullAt: a whole minute at most): a Take of 1
// right after, and one 30 s later, are denied, a Peek finds nothing
// remaining, and once the first's state is full again the second is
// whole. The server's decisions and stored states are Op.Apply's, and the
// memory store's decisions the same.
func testKindReuse(t *testing.T, ps protoStore, srv *testserver.Server) {
	ctx := context.Background()
	raw := testclient.GoRedis(t, srv.Addr)
	for _, from := range reuseLimits {
		for _, to := range reuseLimits {
			if from.Kind() == to.Kind() {
				continue
			}
			t.Run(fmt.Sprintf("%v-to-%v", from.Kind(), to.Kind()), func(t *testing.T) {
				// Windows start on the minute: begin 10 s into one.
				clk := clocktest.New(t0.Truncate(time.Minute).Add(10 * time.Second))
				p := prefix(t)
				remote := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
				mem := memory.New(memory.WithClock(clk))
				key := store.Key(p, to, "k")
				m := model{}
				steps := []struct {
					advance time.Duration
					op      spigot.Op
					check   func(d spigot.Decision) bool
					what    string
				}{
					{0, spigot.Op{Limit: from, Key: "k", N: 5}, spigot.Decision.Allowed, "allowed"},
					{0, spigot.Op{Limit: to, Key: "k", N: 1}, func(d spigot.Decision) bool { return !d.Allowed() && d.Remaining == 0 }, "denied"},
					{0, spigot.Op{Limit: to, Key: "k", Action: spigot.Peek, N: 1}, func(d spigot.Decision) bool { return !d.Allowed() && d.Remaining == 0 }, "denied, nothing remaining"},
					{30 * time.Second, spigot.Op{Limit: to, Key: "k", Action: spigot.Peek, N: 5}, func(d spigot.Decision) bool { return !d.Allowed() }, "denied"},
					{0, spigot.Op{Limit: to, Key: "k", Action: spigot.TakeUpTo, N: 5}, func(d spigot.Decision) bool { return d.N < 5 }, "fewer than 5 taken"},
					{40 * time.Second, spigot.Op{Limit: to, Key: "k", Action: spigot.Peek, N: 5}, func(d spigot.Decision) bool { return true }, ""},
				}
				for i, s := range steps {
					clk.Advance(s.advance)
					want := m.apply(key, s.op, clk.Now())
					got, err := remote.Do(ctx, s.op)
					if err != nil {
						t.Fatalf("step %d: %v: %v", i, s.op, err)
					}
					md, err := mem.Do(ctx, s.op)
					if err != nil {
						t.Fatalf("step %d: memory: %v: %v", i, s.op, err)
					}
					if d := diffDecisions(got, want); d != "" {
						t.Errorf("step %d: %v: the script and Op.Apply: %s", i, s.op, d)
					}
					if d := diffDecisions(md, want); d != "" {
						t.Errorf("step %d: %v: memory and Op.Apply: %s", i, s.op, d)
					}
					if !s.check(want) {
						t.Errorf("step %d: %v = %s; want %s: a fresh limit after another kind's", i, s.op, show(want), s.what)
					}
					if problem := m.checkStored(t, raw, key, clk.Now()); problem != "" {
						t.Errorf("step %d: %v: %s", i, s.op, problem)
					}
				}
			})
		}
	}
}
