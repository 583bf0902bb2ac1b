package spigot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/spigot-go/spigot/internal/core"
	"github.com/spigot-go/spigot/internal/nilcheck"
)

// Combine returns the decision on one request that several limits decided
// together, each[i] being limit i's, and the index of the limit that
// decided it.
//
// The request is allowed only if every limit allowed it; then N is the
// least any limit moved, and the deciding limit is the one with the fewest
// tokens Remaining (the first of them). Otherwise RetryAfter is the
// longest of the denials' (Never if any is Never): after it, every limit
// would allow the request if nothing else takes tokens meanwhile. The
// deciding limit is then the first whose RetryAfter that is, and N is 0.
// Remaining is the least of each's (so -1 when any is Degraded),
// ResetAfter and an allowed request's Delay the longest, and RefillAfter
// the deciding limit's. For no decisions it returns the zero Decision and
// -1.
func Combine(each []Decision) (d Decision, by int) {
	if len(each) == 0 {
		return Decision{}, -1
	}
	d = each[0]
	for i, e := range each[1:] {
		if e.RetryAfter > d.RetryAfter || d.Allowed() && e.Allowed() && e.Remaining < d.Remaining {
			by = i + 1
		}
		d.N = min(d.N, e.N)
		d.Remaining = min(d.Remaining, e.Remaining)
		d.RetryAfter = max(d.RetryAfter, e.RetryAfter)
		d.ResetAfter = max(d.ResetAfter, e.ResetAfter)
		d.Delay = max(d.Delay, e.Delay)
	}
	if !d.Allowed() {
		d.N, d.Delay = 0, 0
	}
	d.RefillAfter = each[by].RefillAfter
	return d, by
}

// A GroupDecision is what several limits decided together on one
// request, as a Group (or a front door's rules) decides it: the combined
// Decision (see Combine), embedded, so that d.Allowed() and d.RetryAfter
// answer for the whole request; the index By of the limit that decided it
// (-1 with an error); and Each limit's own decision, in the group's order.
type GroupDecision struct {
	Decision
	By   int
	Each []Decision
}

// A Group applies several limits to one request at once: per address,
// per user and per endpoint, say. Its Allow and AllowN are all or
// nothing: a request that one limit denies is charged to none of them, so
// a flood that the per-user limit stops does not drain the per-address
// one. It is safe for concurrent use. Create one with NewGroup; the zero
// Group is not usable.
type Group struct {
	store  Store
	limits []Limit
}

// NewGroup returns a Group that applies limits, in this order, in s. It
// panics if s is nil. A zero Limit among limits makes every call fail with
// ErrInvalidLimit.
func NewGroup(s Store, limits ...Limit) *Group {
	if nilcheck.Nil(s) {
		panic("spigot: NewGroup: nil Store")
	}
	return &Group{store: s, limits: slices.Clone(limits)}
}

// Limits returns the group's limits, in order.
func (g *Group) Limits() []Limit { return slices.Clone(g.limits) }

// Allow takes one token from each limit, all or nothing: AllowN(ctx, 1,
// keys...).
func (g *Group) Allow(ctx context.Context, keys ...string) (GroupDecision, error) {
	return g.do(ctx, AllOrNothing, Take, 1, keys)
}

// AllowN takes n tokens from every limit of the group, or none from any:
// from limit i for keys[i], or for keys[0] from every limit when there is
// one key. It is one atomic step in a store that applies several
// operations at once (every store of spigot's, but across the hash slots
// of a Redis Cluster); in any other store it takes and, on a denial,
// refunds, as DoMulti does.
func (g *Group) AllowN(ctx context.Context, n int64, keys ...string) (GroupDecision, error) {
	return g.do(ctx, AllOrNothing, Take, n, keys)
}

// Refund gives n tokens back to every limit of the group, for keys as in
// AllowN: for a request that was allowed but then not served.
func (g *Group) Refund(ctx context.Context, n int64, keys ...string) (GroupDecision, error) {
	return g.do(ctx, Independent, Refund, n, keys)
}

// Peek reports what AllowN(ctx, n, keys...) would decide now, and takes
// nothing.
func (g *Group) Peek(ctx context.Context, n int64, keys ...string) (GroupDecision, error) {
	return g.do(ctx, Independent, Peek, n, keys)
}

func (g *Group) do(ctx context.Context, mode Mode, action Action, n int64, keys []string) (GroupDecision, error) {
	if len(keys) != len(g.limits) && len(keys) != 1 {
		return g.failed(), fmt.Errorf("spigot: Group of %d limits given %d keys; want one key per limit, or one for all", len(g.limits), len(keys))
	}
	ops := make([]Op, len(g.limits))
	for i, l := range g.limits {
		ops[i] = Op{Limit: l, Key: keys[min(i, len(keys)-1)], Action: action, N: n}
	}
	out := make([]Decision, len(ops))
	if err := DoMulti(ctx, g.store, mode, ops, out); err != nil {
		for i := range out {
			out[i] = Undecided()
		}
		return GroupDecision{Decision: Undecided(), By: -1, Each: out}, err
	}
	d, by := Combine(out)
	return GroupDecision{Decision: d, By: by, Each: out}, nil
}

func (g *Group) failed() GroupDecision {
	each := make([]Decision, len(g.limits))
	for i := range each {
		each[i] = Undecided()
	}
	return GroupDecision{Decision: Undecided(), By: -1, Each: each}
}

// DoMulti applies ops in s as s.DoMulti(ctx, mode, ops, out) does, and
// when s cannot apply them in one call (an error matching
// errors.ErrUnsupported), applies them otherwise:
//
//   - AllOrNothing, given a *store.PartsError: the parts one by one, each in
//     one call of s.DoMulti, in increasing order of part (within a part,
//     ops keep their order). When a part is denied, it gives back, in one
//     batch, what the parts before it took, and decides each part after
//     it as a set that cannot be allowed (one more op, a Take of more than
//     the capacity), so that every denied op carries its RetryAfter and
//     every N is 0.
//   - AllOrNothing, given any other error: the same with each op a part
//     of its own, applied by s.Do, in the order of their limit's name and
//     key (so that two requests for the same keys take them in the same
//     order); the ops after a denial are decided by a Peek, after the
//     give-back (so that an op never sees what one before it took).
//   - Independent: one s.Do per op, in order.
//
// So it never admits more than each limit allows, but a concurrent request
// may find the tokens of the parts before a denial missing until they are
// given back, one round trip later. If that fails, they stay taken (the
// error says so): the limits err towards denying. A Refund or Reset among
// ops of several parts cannot be undone: it is an error matching
// errors.ErrUnsupported, and nothing is applied.
//
// It is the way to apply a batch, or several limits to one request, in
// any Store.
func DoMulti(ctx context.Context, s Store, mode Mode, ops []Op, out []Decision) error {
	err := s.DoMulti(ctx, mode, ops, out)
	if err == nil || !errors.Is(err, errors.ErrUnsupported) {
		return err
	}
	if err := core.CheckMulti(mode, AllOrNothing, ops, len(out)); err != nil {
		return err
	}
	var parts interface{ OpParts() []uint64 } // a *store.PartsError
	if mode == AllOrNothing && errors.As(err, &parts) && len(parts.OpParts()) == len(ops) {
		return inParts(ctx, s.DoMulti, ops, out, parts.OpParts(), true)
	}
	one := func(ctx context.Context, _ Mode, ops []Op, out []Decision) error {
		var errs []error
		for i, op := range ops {
			d, err := s.Do(ctx, op)
			if err != nil {
				d = Undecided()
				errs = append(errs, err)
			}
			out[i] = d
		}
		return errors.Join(errs...)
	}
	if mode == Independent {
		return one(ctx, mode, ops, out)
	}
	order := make([]int, len(ops))
	for i := range ops {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		return cmp.Or(cmp.Compare(ops[i].Limit.Name(), ops[j].Limit.Name()), cmp.Compare(ops[i].Key, ops[j].Key))
	})
	rank := make([]uint64, len(ops))
	for r, i := range order {
		rank[i] = uint64(r)
	}
	return inParts(ctx, one, ops, out, rank, false)
}

// inParts applies ops all or nothing, part by part, parts[i] being the
// part of ops[i], as DoMulti says. do applies the ops of one part all or
// nothing (mode AllOrNothing), and a batch (mode Independent); without
// dry, do applies only single ops all or nothing, and the ops after a
// denial are decided by a Peek (TakeUpTo as a Peek of one token).
func inParts(ctx context.Context, do func(context.Context, Mode, []Op, []Decision) error, ops []Op, out []Decision, parts []uint64, dry bool) error {
	if len(ops) == 0 {
		return nil
	}
	order := make([]int, len(ops))
	for i := range ops {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(parts[i], parts[j]) })
	if parts[order[0]] == parts[order[len(order)-1]] { // one part
		return do(ctx, AllOrNothing, ops, out)
	}
	for _, op := range ops {
		if op.Action == Refund || op.Action == Reset {
			return fmt.Errorf("spigot: DoMulti: all or nothing over several parts (hash slots) cannot undo %v: %w", op, errors.ErrUnsupported)
		}
	}
	// sorted holds the ops in order, each part followed by room for the
	// op that makes it a dry run.
	sorted := make([]Op, 0, len(ops)+1)
	res := make([]Decision, len(ops)+1)
	var ends []int // the end of each part in sorted
	for k, i := range order {
		if k > 0 && parts[i] != parts[order[k-1]] {
			ends = append(ends, k)
		}
		sorted = append(sorted, ops[i])
	}
	ends = append(ends, len(ops))
	denied := -1 // the index in ends of the denied part
	for p, start := 0, 0; p < len(ends) && denied < 0; p++ {
		end := ends[p]
		if err := do(ctx, AllOrNothing, sorted[start:end], res[start:end]); err != nil {
			if start > 0 {
				err = errors.Join(err, undo(ctx, do, sorted[:start], res[:start]))
			}
			return err
		}
		for k := start; k < end; k++ {
			if !res[k].Allowed() && (sorted[k].Action == Take || sorted[k].Action == TakeUpTo) {
				denied = p
			}
		}
		start = end
	}
	if denied >= 0 {
		if err := decideRest(ctx, do, sorted, res, ends, denied, dry); err != nil {
			return err
		}
	}
	for k, i := range order {
		out[i] = res[k]
	}
	return nil
}

// decideRest gives back what the parts before the denied part took, and
// decides the parts after it without applying them, all at once; then
// every op of the parts before it is a Peek, as an op that did not deny
// is in a denied batch.
func decideRest(ctx context.Context, do func(context.Context, Mode, []Op, []Decision) error, sorted []Op, res []Decision, ends []int, denied int, dry bool) error {
	taken, before := ends[denied], 0
	if denied > 0 {
		before = ends[denied-1]
	}
	rest := slices.Clone(sorted[taken:])
	if !dry {
		// Peek after the give-back, so that an op on the same key as one
		// before the denial never sees what that one took.
		if err := undo(ctx, do, sorted[:taken], res[:taken]); err != nil {
			return err
		}
		peeks := append(peeksOf(sorted[:before]), peeksOf(rest)...)
		if len(peeks) == 0 {
			return nil
		}
		d := make([]Decision, len(peeks))
		if err := do(ctx, Independent, peeks, d); err != nil {
			return err
		}
		copy(res[:before], d)
		copy(res[taken:], d[before:])
		return nil
	}
	// The parts after the denial hold other keys than the ones before it:
	// give back and decide them all at once.
	errs := make([]error, len(ends)-denied)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = undo(ctx, do, sorted[:taken], res[:taken]) })
	for p := denied + 1; p < len(ends); p++ {
		start, end := ends[p-1]-taken, ends[p]-taken
		last := rest[end-1]
		part := append(slices.Clip(rest[start:end]), Op{Limit: last.Limit, Key: last.Key, N: last.Limit.Capacity() + 1})
		wg.Go(func() {
			d := make([]Decision, len(part))
			errs[p-denied] = do(ctx, AllOrNothing, part, d)
			copy(res[taken+start:taken+end], d)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil || before == 0 {
		return err
	}
	return do(ctx, Independent, peeksOf(sorted[:before]), res[:before])
}

// peeksOf returns the Peeks that decide ops in a denied all-or-nothing
// batch, as store.PeekOf does: of N for a Take or a Peek, of 1 for a
// TakeUpTo of 1 or more (DoMulti over several parts holds no Refund or
// Reset).
func peeksOf(ops []Op) []Op {
	peeks := slices.Clone(ops)
	for k := range peeks {
		if peeks[k].Action == TakeUpTo {
			peeks[k].N = min(peeks[k].N, 1)
		}
		peeks[k].Action = Peek
	}
	return peeks
}

// undo refunds what ops took, in one batch, and sets the N of every one of
// their decisions to 0.
func undo(ctx context.Context, do func(context.Context, Mode, []Op, []Decision) error, ops []Op, res []Decision) error {
	var refunds []Op
	for k, op := range ops {
		if res[k].N > 0 && (op.Action == Take || op.Action == TakeUpTo) {
			refunds = append(refunds, Op{Limit: op.Limit, Key: op.Key, Action: Refund, N: res[k].N})
		}
		res[k].N = 0
	}
	if len(refunds) == 0 {
		return nil
	}
	if err := do(ctx, Independent, refunds, make([]Decision, len(refunds))); err != nil {
		return fmt.Errorf("spigot: DoMulti: a part was denied, and giving back what the parts before it took failed, so they stay charged: %w", err)
	}
	return nil
}
