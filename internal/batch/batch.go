// Package batch is what httplimit and grpclimit share to decide one
// request by the rules that apply to it: their limits, keys and costs,
// and the one store call that takes from them all or nothing.
package batch

import (
	"context"

	"github.com/spigot-go/spigot"
)

// A Batch holds, in its first N entries, the rules that apply to one
// request: each rule's index, its limit, its key, its cost, its op and,
// once decided, its decision. A middleware keeps Batches in a pool, made
// by Make for its number of rules; a Batch is not safe for concurrent
// use.
type Batch struct {
	N      int
	Rules  []int
	Limits []spigot.Limit
	Keys   []string
	Costs  []int64
	Ops    []spigot.Op
	Out    []spigot.Decision
}

// Make returns an empty Batch with room for n rules.
func Make(n int) Batch {
	return Batch{
		Rules:  make([]int, n),
		Limits: make([]spigot.Limit, n),
		Keys:   make([]string, n),
		Costs:  make([]int64, n),
		Ops:    make([]spigot.Op, n),
		Out:    make([]spigot.Decision, n),
	}
}

// Add adds rule i, which takes cost tokens from limit l for key k.
func (b *Batch) Add(i int, l spigot.Limit, k string, cost int64) {
	j := b.N
	b.Rules[j], b.Limits[j], b.Keys[j], b.Costs[j] = i, l, k, cost
	b.Ops[j] = spigot.Op{Limit: l, Key: k, Action: spigot.Take, N: cost}
	b.N++
}

// Decide takes the batch's ops from s, all or nothing, in one call (Do
// for one op, spigot.DoMulti for more), and returns its decisions (see
// Decided). It needs N ≥ 1.
func (b *Batch) Decide(ctx context.Context, s spigot.Store) (spigot.GroupDecision, error) {
	var err error
	if b.N == 1 {
		b.Out[0], err = s.Do(ctx, b.Ops[0])
	} else {
		err = spigot.DoMulti(ctx, s, spigot.AllOrNothing, b.Ops[:b.N], b.Out[:b.N])
	}
	return b.Decided(err), err
}

// Decided returns the decisions in Out, combined (see spigot.Combine);
// after the store's error err, every one of them is spigot.Undecided() and
// By is -1.
func (b *Batch) Decided(err error) spigot.GroupDecision {
	out := b.Out[:b.N]
	if err != nil {
		for i := range out {
			out[i] = spigot.Undecided()
		}
		return spigot.GroupDecision{Decision: out[0], By: -1, Each: out}
	}
	d, by := spigot.Combine(out)
	return spigot.GroupDecision{Decision: d, By: by, Each: out}
}

// Refund gives back what the batch's ops take, each on its own, in one
// call; it runs even when ctx is cancelled. It changes the ops'
// Action, and Out.
func (b *Batch) Refund(ctx context.Context, s spigot.Store) error {
	ctx = context.WithoutCancel(ctx)
	ops := b.Ops[:b.N]
	for i := range ops {
		ops[i].Action = spigot.Refund
	}
	switch b.N {
	case 0:
		return nil
	case 1:
		_, err := s.Do(ctx, ops[0])
		return err
	}
	return spigot.DoMulti(ctx, s, spigot.Independent, ops, b.Out[:b.N])
}
