package hybrid_test

// Every Action on every path, and DoMulti (they use hybrid_test.go's
// helpers).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

const (
	take     = spigot.Take
	takeUpTo = spigot.TakeUpTo
	refund   = spigot.Refund
	reset    = spigot.Reset
	peek     = spigot.Peek
)

// guard8 is a WithGuard function: a guard twice as large as cap4, 8 tokens
// at the same rate.
func guard8(b spigot.Limit) spigot.Limit { return spigot.MustBucket(b.Name(), 8, b.Rate()) }

// zeroCap is a bucket of capacity 0: it allows only operations for nothing.
var zeroCap = spigot.MustBucket("zero", 0, spigot.PerSecond(1))

// TestActions: each Action on each path, at fixed instants on cap4 (4
// tokens, 1 a second). The remote and the local store decide by the model;
// FailOpen and FailClosed decide without the bucket's state (Degraded):
// FailOpen takes n, TakeUpTo min(n, capacity), and FailClosed denies until
// the probe; both deny more than the capacity (Never), allow an op for
// nothing, and give nothing back on a Refund. A Peek never charges the
// guard, and a TakeUpTo through the guard asks the remote for no more than
// the guard allowed and gives the guard back what the remote (or the
// policy) did not take. A Reset while the remote is unavailable fails, but
// resets the guard and the local store. No decision of the local store or
// a policy touches the remote's bucket.
func TestActions(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  []hybrid.Option
		limit spigot.Limit // cap4 if zero
		steps []step
	}{{
		name: "remote",
		opts: []hybrid.Option{hybrid.WithBreaker(1, 10*sec)},
		steps: []step{
			{at: 0, action: take, cost: 1, want: allow(1, 3, sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, action: takeUpTo, cost: 5, want: allow(3, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, action: takeUpTo, cost: 1, want: deny(0, sec, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, action: peek, cost: 1, want: deny(0, sec, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, action: refund, cost: 2, want: allow(2, 2, 2*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, action: peek, cost: 2, want: allow(0, 2, 2*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, action: take, cost: 2, want: allow(2, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: sec, action: peek, cost: 5, want: deny(1, spigot.Never, 3*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: sec, action: reset, want: refilled(3, 4), calls: 1, state: closed},
			{at: sec, action: take, cost: 4, want: allow(4, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: sec, action: refund, cost: 10, want: allow(4, 4, 0), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: sec, action: reset, want: refilled(0, 4), calls: 1, state: closed},
			{at: sec, action: takeUpTo, cost: 0, want: allow(0, 4, 0), path: hybrid.PathRemote, calls: 1, state: closed},
		},
	}, {
		// The local bucket holds 2 tokens.
		name: "local",
		opts: []hybrid.Option{hybrid.WithLocalLimit(half), hybrid.WithBreaker(2, 10*sec)},
		steps: []step{
			{at: 0, mode: fail, action: take, cost: 1, want: allow(1, 1, sec), path: hybrid.PathLocal, calls: 1, state: closed},
			{at: 0, mode: fail, action: takeUpTo, cost: 5, want: allow(1, 0, 2*sec), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
			{at: 0, action: takeUpTo, cost: 1, want: deny(0, sec, 2*sec), path: hybrid.PathLocal, state: open},
			{at: 0, action: peek, cost: 1, want: deny(0, sec, 2*sec), path: hybrid.PathLocal, state: open},
			{at: 0, action: refund, cost: 1, want: allow(1, 1, sec), path: hybrid.PathLocal, state: open},
			{at: 0, action: peek, cost: 1, want: allow(0, 1, sec), path: hybrid.PathLocal, state: open},
			{at: 0, action: peek, cost: 3, want: deny(1, spigot.Never, sec), path: hybrid.PathLocal, state: open},
			{at: 0, action: take, cost: 1, want: allow(1, 0, 2*sec), path: hybrid.PathLocal, state: open},
			{at: 0, action: reset, errs: []error{hybrid.ErrUnavailable}, state: open},
			{at: 0, action: take, cost: 2, want: allow(2, 0, 2*sec), path: hybrid.PathLocal, state: open},
			{at: 0, action: refund, cost: 5, want: allow(2, 2, 0), path: hybrid.PathLocal, state: open},
			// The probe: the remote's bucket is as full as it was at t0.
			{at: 10 * sec, action: take, cost: 1, want: allow(1, 3, sec), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
		},
	}, {
		name: "fail-open",
		opts: []hybrid.Option{hybrid.WithPolicy(hybrid.FailOpen), hybrid.WithBreaker(2, 10*sec)},
		steps: []step{
			{at: 0, mode: fail, action: take, cost: 1, want: admitted(1), path: hybrid.PathFailOpen, calls: 1, state: closed},
			{at: 0, mode: fail, action: takeUpTo, cost: 3, want: admitted(3), path: hybrid.PathFailOpen, calls: 1, state: open, trans: toOpen},
			{at: 0, action: takeUpTo, cost: 9, want: admitted(4), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: takeUpTo, cost: 0, want: admitted(0), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: take, cost: 5, want: refused(spigot.Never), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: take, cost: 4, want: admitted(4), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: peek, cost: 1, want: admitted(0), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: peek, cost: 5, want: refused(spigot.Never), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: refund, cost: 2, want: admitted(0), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: reset, errs: []error{hybrid.ErrUnavailable}, state: open},
			// A Peek may be the probe; the remote's bucket is full.
			{at: 10 * sec, action: peek, cost: 1, want: allow(0, 4, 0), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
			{at: 10 * sec, action: take, cost: 1, want: allow(1, 3, sec), path: hybrid.PathRemote, calls: 1, state: closed},
		},
	}, {
		name: "fail-closed",
		opts: []hybrid.Option{hybrid.WithPolicy(hybrid.FailClosed), hybrid.WithBreaker(2, 10*sec)},
		steps: []step{
			{at: 0, mode: fail, action: take, cost: 1, want: refused(10 * sec), path: hybrid.PathFailClosed, calls: 1, state: closed},
			{at: 0, mode: fail, action: takeUpTo, cost: 3, want: refused(10 * sec), path: hybrid.PathFailClosed, calls: 1, state: open, trans: toOpen},
			{at: sec, action: takeUpTo, cost: 9, want: refused(9 * sec), path: hybrid.PathFailClosed, state: open},
			{at: sec, action: take, cost: 5, want: refused(spigot.Never), path: hybrid.PathFailClosed, state: open},
			{at: sec, action: take, cost: 0, want: admitted(0), path: hybrid.PathFailClosed, state: open},
			{at: sec, action: takeUpTo, cost: 0, want: admitted(0), path: hybrid.PathFailClosed, state: open},
			{at: sec, action: peek, cost: 1, want: refused(9 * sec), path: hybrid.PathFailClosed, state: open},
			{at: sec, action: peek, cost: 5, want: refused(spigot.Never), path: hybrid.PathFailClosed, state: open},
			{at: sec, action: peek, cost: 0, want: admitted(0), path: hybrid.PathFailClosed, state: open},
			{at: sec, action: refund, cost: 2, want: admitted(0), path: hybrid.PathFailClosed, state: open},
			{at: sec, action: reset, errs: []error{hybrid.ErrUnavailable}, state: open},
			// A Refund may be the probe; the remote's bucket is full.
			{at: 10 * sec, action: refund, cost: 1, want: allow(0, 4, 0), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
			{at: 10 * sec, action: take, cost: 4, want: allow(4, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
		},
	}, {
		name:  "fail-open/capacity=0",
		opts:  []hybrid.Option{hybrid.WithPolicy(hybrid.FailOpen), hybrid.WithBreaker(1, 10*sec)},
		limit: zeroCap,
		steps: []step{
			{at: 0, mode: fail, action: takeUpTo, cost: 1, want: refused(spigot.Never), path: hybrid.PathFailOpen, calls: 1, state: open, trans: toOpen},
			{at: 0, action: take, cost: 1, want: refused(spigot.Never), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: peek, cost: 1, want: refused(spigot.Never), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: take, cost: 0, want: admitted(0), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: takeUpTo, cost: 0, want: admitted(0), path: hybrid.PathFailOpen, state: open},
		},
	}, {
		name:  "fail-closed/capacity=0",
		opts:  []hybrid.Option{hybrid.WithPolicy(hybrid.FailClosed), hybrid.WithBreaker(1, 10*sec)},
		limit: zeroCap,
		steps: []step{
			{at: 0, mode: fail, action: takeUpTo, cost: 1, want: refused(spigot.Never), path: hybrid.PathFailClosed, calls: 1, state: open, trans: toOpen},
			{at: 0, action: take, cost: 0, want: admitted(0), path: hybrid.PathFailClosed, state: open},
		},
	}, {
		// The guard holds 8 tokens, the remote's and the local bucket 4.
		name: "guard",
		opts: []hybrid.Option{hybrid.WithGuard(guard8), hybrid.WithBreaker(1, 10*sec)},
		steps: []step{
			// The guard takes 6, the remote 4: the guard gets 2 back.
			{at: 0, action: takeUpTo, cost: 6, want: allow(4, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			// The guard takes 3, the remote none: the guard gets 3 back.
			{at: 0, action: takeUpTo, cost: 3, want: deny(0, sec, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			// The guard holds 4: its own denial.
			{at: 0, action: take, cost: 5, want: deny(4, sec, 4*sec), path: hybrid.PathGuard, state: closed},
			// A Peek asks the remote, not the guard, and charges neither.
			{at: 0, action: peek, cost: 4, want: deny(0, 4*sec, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, action: peek, cost: 8, want: deny(0, spigot.Never, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, action: take, cost: 5, want: deny(4, sec, 4*sec), path: hybrid.PathGuard, state: closed},
			// A Refund gives back to the guard (4 → 7) and the remote.
			{at: 0, action: refund, cost: 3, want: allow(3, 3, sec), path: hybrid.PathRemote, calls: 1, state: closed},
			// The guard takes 7 of 9 and the remote is asked for 7; it takes 3,
			// and the guard gets 4 back.
			{at: 0, action: takeUpTo, cost: 9, seen: 7, want: allow(3, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, action: take, cost: 5, want: deny(4, sec, 4*sec), path: hybrid.PathGuard, state: closed},
			// The remote fails: the guard takes 2 (4 → 2), the local store 2.
			{at: 0, mode: fail, action: takeUpTo, cost: 2, want: allow(2, 2, 2*sec), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
			{at: 0, action: takeUpTo, cost: 4, seen: 2, want: allow(2, 0, 4*sec), path: hybrid.PathLocal, state: open},
			{at: 0, action: takeUpTo, cost: 1, want: deny(0, sec, 8*sec), path: hybrid.PathGuard, state: open},
			{at: 0, action: peek, cost: 1, want: deny(0, sec, 4*sec), path: hybrid.PathLocal, state: open},
			// Reset fails, but resets the guard and the local store.
			{at: 0, action: reset, errs: []error{hybrid.ErrUnavailable}, state: open},
			{at: 0, action: takeUpTo, cost: 9, seen: 8, want: allow(4, 0, 4*sec), path: hybrid.PathLocal, state: open},
			{at: 0, action: take, cost: 5, want: deny(4, sec, 4*sec), path: hybrid.PathGuard, state: open},
		},
	}, {
		name: "guard/fail-open",
		opts: []hybrid.Option{hybrid.WithGuard(guard8), hybrid.WithPolicy(hybrid.FailOpen), hybrid.WithBreaker(1, 10*sec)},
		steps: []step{
			// The guard takes 6, the policy 4 (the capacity): the guard gets
			// 2 back.
			{at: 0, mode: fail, action: takeUpTo, cost: 6, want: admitted(4), path: hybrid.PathFailOpen, calls: 1, state: open, trans: toOpen},
			{at: 0, action: take, cost: 5, want: deny(4, sec, 4*sec), path: hybrid.PathGuard, state: open},
			{at: 0, action: takeUpTo, cost: 9, seen: 4, want: admitted(4), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: takeUpTo, cost: 1, want: deny(0, sec, 8*sec), path: hybrid.PathGuard, state: open},
			// The guard gets the Refund, the policy gives nothing back.
			{at: 0, action: refund, cost: 2, want: admitted(0), path: hybrid.PathFailOpen, state: open},
			{at: 0, action: take, cost: 3, want: deny(2, sec, 6*sec), path: hybrid.PathGuard, state: open},
		},
	}, {
		name: "guard/fail-closed",
		opts: []hybrid.Option{hybrid.WithGuard(guard8), hybrid.WithPolicy(hybrid.FailClosed), hybrid.WithBreaker(1, 10*sec)},
		steps: []step{
			// The guard takes 3, the policy none: the guard gets 3 back.
			{at: 0, mode: fail, action: takeUpTo, cost: 3, want: refused(10 * sec), path: hybrid.PathFailClosed, calls: 1, state: open, trans: toOpen},
			{at: 0, action: take, cost: 9, want: deny(8, spigot.Never, 0), path: hybrid.PathGuard, state: open},
			{at: 0, action: peek, cost: 4, want: refused(10 * sec), path: hybrid.PathFailClosed, state: open},
			{at: 0, action: refund, cost: 1, want: admitted(0), path: hybrid.PathFailClosed, state: open},
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			limit := c.limit
			if limit == (spigot.Limit{}) {
				limit = cap4
			}
			newFixture(t, c.opts...).play(t, limit, c.steps)
		})
	}
}

// TestUnsupported: a remote error matching errors.ErrUnsupported (an op
// the remote does not know) is returned as it is, for every Action; it
// reaches the observer but never counts against the breaker, even a run
// of them on a breaker of 1 failure, and a probe so answered closes the
// breaker (the remote is up). The guard gets back what a TakeUpTo took.
func TestUnsupported(t *testing.T) {
	errs := []error{errors.ErrUnsupported, errUnsupported}
	t.Run("no guard", func(t *testing.T) {
		f := newFixture(t, hybrid.WithBreaker(1, 10*sec))
		f.play(t, cap4, []step{
			{at: 0, mode: unsupported, action: take, cost: 1, errs: errs, calls: 1, remoteErr: errUnsupported, state: closed},
			{at: 0, mode: unsupported, action: takeUpTo, cost: 2, errs: errs, calls: 1, remoteErr: errUnsupported, state: closed},
			{at: 0, mode: unsupported, action: refund, cost: 1, errs: errs, calls: 1, remoteErr: errUnsupported, state: closed},
			{at: 0, mode: unsupported, action: peek, cost: 1, errs: errs, calls: 1, remoteErr: errUnsupported, state: closed},
			{at: 0, mode: unsupported, action: reset, errs: errs, calls: 1, remoteErr: errUnsupported, state: closed},
			{at: 0, action: take, cost: 1, want: allow(1, 3, sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, mode: fail, action: take, cost: 1, want: allow(1, 3, sec), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
			{at: 10 * sec, mode: unsupported, action: takeUpTo, cost: 1, errs: errs, calls: 1, remoteErr: errUnsupported, state: closed, trans: probeOK},
		})
	})
	t.Run("guard", func(t *testing.T) {
		f := newFixture(t, hybrid.WithGuard(guard8), hybrid.WithBreaker(1, 10*sec))
		f.play(t, cap4, []step{
			{at: 0, mode: unsupported, action: takeUpTo, cost: 3, errs: errs, calls: 1, remoteErr: errUnsupported, state: closed},
			{at: 0, mode: unsupported, action: takeUpTo, cost: 8, errs: errs, calls: 1, remoteErr: errUnsupported, state: closed},
			// The guard is full.
			{at: 0, action: take, cost: 9, want: deny(8, spigot.Never, 0), path: hybrid.PathGuard, state: closed},
		})
	})
	for _, isReset := range []bool{false, true} {
		// The error is the remote's own, not wrapped.
		t.Run(fmt.Sprintf("reset=%v/as-is", isReset), func(t *testing.T) {
			f := newFixture(t, hybrid.WithBreaker(1, 10*sec))
			f.remote.set(unsupported)
			op := spigot.Op{Limit: cap4, Key: "k", N: 1}
			if isReset {
				op = spigot.Op{Limit: cap4, Key: "k", Action: spigot.Reset}
			}
			for i := range 10 {
				if _, err := f.s.Do(t.Context(), op); err != errUnsupported {
					t.Errorf("step %d: Do(%v): got error %v, want the remote's %v", i+1, op, err, errUnsupported)
				}
			}
			if got := f.s.Circuit(); got != closed {
				t.Errorf("after 10 errors matching errors.ErrUnsupported: got state %v, want %v", got, closed)
			}
		})
	}
}

// opsStep is one DoMulti call at a fixed instant.
type opsStep struct {
	at    time.Duration
	mode  mode // the remote's
	multi spigot.Mode
	ops   []spigot.Op
	want  []spigot.Decision // nil with an error
	path  hybrid.Path       // of every op's decision
	errs  []error           // the error must match each (errors.Is); none: no error
	calls int64             // remote calls: 0 or 1
	// remoteErr is what the observer's RemoteError (on ops[0]) must match;
	// nil means errDown after a call to a failing remote, and none
	// otherwise.
	remoteErr error
	state     hybrid.Circuit
	trans     string
}

// playMulti runs the steps on f: DoMulti's decisions, error, remote calls,
// observations (the decision on each op, by the step's path) and breaker.
func (f *fixture) playMulti(t *testing.T, steps []opsStep) {
	t.Helper()
	for i, st := range steps {
		i++
		f.clk.Set(t0.Add(st.at))
		f.remote.set(st.mode)
		calls := f.remote.calls()
		f.rec.take()
		what := fmt.Sprintf("step %d (t0+%v, remote %v, DoMulti of %d ops, mode %d)", i, st.at, st.mode, len(st.ops), st.multi)
		out := make([]spigot.Decision, len(st.ops))
		err := f.s.DoMulti(t.Context(), st.multi, st.ops, out)
		if len(st.errs) == 0 && err != nil {
			t.Fatalf("%s: got error %v, want none", what, err)
		}
		if len(st.errs) > 0 && err == nil {
			t.Errorf("%s: got no error, want one matching %v", what, st.errs)
		}
		for _, target := range st.errs {
			if !errors.Is(err, target) {
				t.Errorf("%s: got error %v, want one matching %v", what, err, target)
			}
		}
		ds, errs, trans := f.rec.take()
		if err == nil {
			var want []decision
			for j, op := range st.ops {
				if !sameDecision(out[j], st.want[j]) {
					t.Errorf("%s: op %d (%v): got %s, want %s", what, j, op, show(out[j]), show(st.want[j]))
				}
				want = append(want, decision{op, st.path, out[j]})
			}
			if !slices.Equal(ds, want) {
				t.Errorf("%s: got decisions %v, want %v", what, ds, want)
			}
		} else if len(ds) != 0 {
			t.Errorf("%s: got decisions %v, want none", what, ds)
		}
		if got := f.remote.calls() - calls; got != st.calls {
			t.Errorf("%s: got %d remote calls, want %d", what, got, st.calls)
		}
		wantErr := st.remoteErr
		if wantErr == nil && st.calls == 1 && st.mode == fail {
			wantErr = errDown
		}
		switch {
		case wantErr == nil && len(errs) != 0:
			t.Errorf("%s: got remote errors %v, want none", what, errs)
		case wantErr != nil && (len(errs) != 1 || !errors.Is(errs[0].err, wantErr) || errs[0].op != st.ops[0]):
			t.Errorf("%s: got remote errors %v, want one matching %v on %v", what, errs, wantErr, st.ops[0])
		}
		if got := f.s.Circuit(); got != st.state {
			t.Errorf("%s: got state %v, want %v", what, got, st.state)
		}
		if trans != st.trans {
			t.Errorf("%s: got transitions %q, want %q", what, trans, st.trans)
		}
	}
}

// TestDoMulti: several ops go to the remote's DoMulti in one call (the
// fake remote's multi applies them one by one, in Independent mode only),
// and the guard is not asked. While the remote is unavailable (it fails,
// or the breaker is open) they go to the local store's DoMulti under the
// Local policy, and to the policy op by op otherwise; with AllOrNothing, a
// policy's denial of one op leaves every op's N 0. The observer is told of
// each op's decision.
func TestDoMulti(t *testing.T) {
	keyA, keyB, keyC := spigot.Op{Limit: cap4, Key: "a"}, spigot.Op{Limit: cap4, Key: "b"}, spigot.Op{Limit: cap4, Key: "c"}
	with := func(op spigot.Op, action spigot.Action, n int64) spigot.Op {
		op.Action, op.N = action, n
		return op
	}
	ops := []spigot.Op{with(keyA, take, 2), with(keyB, takeUpTo, 9), with(keyA, peek, 3), with(keyB, refund, 1), with(keyC, take, 5)}
	remote := []spigot.Decision{allow(2, 2, 2*sec), allow(4, 0, 4*sec), deny(2, sec, 2*sec), allow(1, 1, 3*sec), deny(4, spigot.Never, 0)}

	t.Run("remote", func(t *testing.T) {
		// A guard of 1 token would deny every Take of 2.
		one := func(b spigot.Limit) spigot.Limit { return spigot.MustBucket(b.Name(), 1, b.Rate()) }
		f := newFixture(t, hybrid.WithGuard(one), hybrid.WithBreaker(1, 10*sec))
		f.playMulti(t, []opsStep{
			{at: 0, ops: ops, want: remote, path: hybrid.PathRemote, calls: 1, state: closed},
			// The remote supports Independent only.
			{at: 0, multi: spigot.AllOrNothing, ops: ops, errs: []error{errors.ErrUnsupported}, calls: 1, remoteErr: errors.ErrUnsupported, state: closed},
			{at: 0, mode: unsupported, ops: ops, errs: []error{errors.ErrUnsupported, errUnsupported}, calls: 1, remoteErr: errUnsupported, state: closed},
			// The remote fails: the local store (the same bucket) decides.
			{at: 0, mode: fail, ops: ops[:2], want: remote[:2], path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
			// The probe: the remote's buckets are full again.
			{at: 10 * sec, ops: ops[:2], want: []spigot.Decision{allow(2, 2, 2*sec), allow(4, 0, 4*sec)}, path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
		})
	})

	halved := []spigot.Decision{allow(2, 0, 2*sec), allow(2, 0, 2*sec), deny(0, spigot.Never, 2*sec), allow(1, 1, sec), deny(2, spigot.Never, 0)}
	failOpen := []spigot.Decision{admitted(2), admitted(4), admitted(0), admitted(0), refused(spigot.Never)}
	failClosed := func(retry time.Duration) []spigot.Decision {
		return []spigot.Decision{refused(retry), refused(retry), refused(retry), admitted(0), refused(spigot.Never)}
	}
	for _, c := range []struct {
		policy     hybrid.Policy
		path       hybrid.Path
		want, open []spigot.Decision // while the breaker is closed, and open at t0+4s
	}{
		{hybrid.Local, hybrid.PathLocal, halved, halved},
		{hybrid.FailOpen, hybrid.PathFailOpen, failOpen, failOpen},
		{hybrid.FailClosed, hybrid.PathFailClosed, failClosed(10 * sec), failClosed(8 * sec)},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			f := newFixture(t, hybrid.WithPolicy(c.policy), hybrid.WithLocalLimit(half), hybrid.WithBreaker(2, 10*sec))
			f.playMulti(t, []opsStep{
				{at: 0, mode: fail, ops: ops, want: c.want, path: c.path, calls: 1, state: closed},
				// The breaker opens; the remote is not called while it is
				// open. (The local store's keys are empty again at t0+2s.)
				{at: 2 * sec, mode: fail, ops: ops, want: c.want, path: c.path, calls: 1, state: open, trans: toOpen},
				{at: 4 * sec, ops: ops, want: c.open, path: c.path, state: open},
				// The probe: the remote's buckets are full.
				{at: 12 * sec, ops: ops, want: remote, path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
			})
		})
	}

	// With AllOrNothing, the policy's denial of one op takes nothing from
	// any: every N is 0.
	for _, c := range []struct {
		policy hybrid.Policy
		ops    []spigot.Op
		want   []spigot.Decision // each op's decision; N is then checked to be 0 if one is denied
	}{
		{hybrid.FailOpen, []spigot.Op{with(keyA, take, 2), with(keyB, takeUpTo, 9)}, []spigot.Decision{admitted(2), admitted(4)}},
		{hybrid.FailOpen, []spigot.Op{with(keyA, take, 2), with(keyB, takeUpTo, 9), with(keyC, take, 5)}, []spigot.Decision{admitted(0), admitted(0), refused(spigot.Never)}},
		{hybrid.FailClosed, []spigot.Op{with(keyA, take, 0), with(keyB, takeUpTo, 0)}, []spigot.Decision{admitted(0), admitted(0)}},
		{hybrid.FailClosed, []spigot.Op{with(keyA, take, 0), with(keyB, take, 1)}, []spigot.Decision{admitted(0), refused(10 * sec)}},
	} {
		t.Run(fmt.Sprintf("%v/AllOrNothing/%d ops", c.policy, len(c.ops)), func(t *testing.T) {
			f := newFixture(t, hybrid.WithPolicy(c.policy), hybrid.WithBreaker(1, 10*sec))
			f.playMulti(t, []opsStep{
				{at: 0, mode: fail, multi: spigot.AllOrNothing, ops: c.ops, want: c.want, path: [...]hybrid.Path{hybrid.FailOpen: hybrid.PathFailOpen, hybrid.FailClosed: hybrid.PathFailClosed}[c.policy], calls: 1, state: open, trans: toOpen},
			})
		})
	}
}

// TestDoMultiUnsupported: a remote without DoMulti (memory's) answers
// several ops with an error matching errors.ErrUnsupported; it is returned
// as it is, applies nothing, and never counts against the breaker.
// oneAtATime is a memory store that applies one op per call, as the
// Redis-protocol stores do: DoMulti of several is unsupported.
type oneAtATime struct{ *memory.Store }

func (s oneAtATime) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return fmt.Errorf("oneAtATime: one op per call: %w", errors.ErrUnsupported)
}

func TestDoMultiUnsupported(t *testing.T) {
	clk := clocktest.New(t0)
	remote := oneAtATime{memory.New(memory.WithClock(clk))}
	rec := &recorder{}
	s := hybrid.New(remote, memory.New(memory.WithClock(clk)), hybrid.WithClock(clk), hybrid.WithTimeout(time.Minute),
		hybrid.WithBreaker(1, 10*sec), hybrid.WithObserver(rec.observer()))
	ops := []spigot.Op{{Limit: cap4, Key: "a", N: 1}, {Limit: cap4, Key: "b", Action: spigot.TakeUpTo, N: 2}}
	want := remote.DoMulti(t.Context(), spigot.Independent, ops, make([]spigot.Decision, 2))
	if !errors.Is(want, errors.ErrUnsupported) {
		t.Fatalf("oneAtATime's DoMulti of 2 ops: got %v, want an error matching errors.ErrUnsupported", want)
	}
	for i := range 10 {
		err := s.DoMulti(t.Context(), spigot.Independent, ops, make([]spigot.Decision, 2))
		if err == nil || err.Error() != want.Error() {
			t.Errorf("step %d: got %v, want %v", i+1, err, want)
		}
		ds, errs, trans := rec.take()
		if len(ds) != 0 || len(errs) != 1 || errs[0].err != err || errs[0].op != ops[0] || trans != "" {
			t.Errorf("step %d: got decisions %v, remote errors %v, transitions %q; want none, that error on %v, none", i+1, ds, errs, trans, ops[0])
		}
		if got := s.Circuit(); got != closed {
			t.Errorf("step %d: got state %v, want %v", i+1, got, closed)
		}
	}
	if d, err := takeN(t.Context(), s, cap4, "a", 1); err != nil || !sameDecision(d, allow(1, 3, sec)) {
		t.Errorf("Take 1 after the errors: got %s, %v; want %s", show(d), err, show(allow(1, 3, sec)))
	}
}
