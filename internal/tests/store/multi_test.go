package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/memory"
)

// testDifferentialMulti: random sets of one to five operations (every
// action, duplicate keys, config changes, costs above the capacity, a
// clock that steps back), applied with AllOrNothing and, every third set,
// as an Independent batch, decide on the server exactly as in the memory
// store (a denied all-or-nothing set's ops that did not deny are Peeks on
// the state found, in both), and leave every key as
// the memory store leaves it.
func testDifferentialMulti(t *testing.T, ps protoStore, srv *testserver.Server) {
	ctx := context.Background()
	for seed := range uint64(diffSeeds / 2) {
		clk := clocktest.New(t0)
		p := fmt.Sprintf("%s-%d:", t.Name(), seed)
		remote := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
		mem := memory.New(memory.WithClock(clk))
		g := newDiffGen(seed, false)
		denied := 0
		for i := range diffSteps / 2 {
			mode := spigot.AllOrNothing
			if i%3 == 2 {
				mode = spigot.Independent
			}
			first := g.next()
			clk.Advance(first.step)
			ops := []spigot.Op{first.op}
			for range g.rng.IntN(5) {
				ops = append(ops, g.next().op)
			}
			want, got := make([]spigot.Decision, len(ops)), make([]spigot.Decision, len(ops))
			if err := mem.DoMulti(ctx, mode, ops, want); err != nil {
				g.fail(t, i, "memory: DoMulti(%v, %v): %v", mode, ops, err)
			}
			if err := remote.DoMulti(ctx, mode, ops, got); err != nil {
				g.fail(t, i, "remote: DoMulti(%v, %v): %v", mode, ops, err)
			}
			var shown []string
			for j := range ops {
				shown = append(shown, fmt.Sprintf("%v = %s", ops[j], show(got[j])))
				if d := diffDecisions(got[j], want[j]); d != "" {
					g.fail(t, i, "DoMulti(%v), op %d of %v: remote and memory: %s", mode, j, ops, d)
				}
			}
			if d, _ := spigot.Combine(want); !d.Allowed() && mode == spigot.AllOrNothing {
				denied++
			}
			g.history = append(g.history, fmt.Sprintf("  set %d, %v, clock %+v: %s", i, mode, first.step, strings.Join(shown, "; ")))
			for _, op := range ops {
				peek := spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.Peek}
				md, merr := mem.Do(ctx, peek)
				rd, rerr := remote.Do(ctx, peek)
				if merr != nil || rerr != nil || diffDecisions(rd, md) != "" {
					g.fail(t, i, "then %v: remote %s, %v; memory %s, %v", peek, show(rd), rerr, show(md), merr)
				}
			}
		}
		if denied == 0 {
			t.Errorf("seed %d: no all-or-nothing set was denied; the differential must cover denials", seed)
		}
	}
}
