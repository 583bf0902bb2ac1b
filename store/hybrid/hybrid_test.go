package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/internal/hybridtest"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// t0 is the instant every fake clock starts at; steps are offsets from it.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	ms  = time.Millisecond
	sec = time.Second

	// patience bounds a wait in real time for something that should
	// happen within milliseconds: it only fails a hang, so it is long
	// enough never to flake on a loaded machine.
	patience = time.Minute
	// slack is how much longer than its deadline a call may take, in the
	// tests of deadlines: far above the scheduling delays of a loaded
	// 2-core machine under -race, far below a hung remote's minute.
	slack = 5 * time.Second
)

// ---- a controllable remote ----

// A mode is how the fake remote answers.
type mode int

const (
	succeed     mode = iota // delegate to a memory store on the test's clock
	fail                    // return errDown at once
	hang                    // block, ignoring the context, until released
	unsupported             // return errUnsupported at once: an op it cannot apply
)

func (m mode) String() string {
	return [...]string{"succeed", "fail", "hang", "unsupported"}[m]
}

var (
	// errDown is the fake remote's failure.
	errDown = errors.New("remote down")
	// errUnsupported is the fake remote's answer to an op it does not
	// know, as from a store of an older version of spigot.
	errUnsupported = fmt.Errorf("fake remote: %w", errors.ErrUnsupported)
)

// fakeRemote is a spigot.Store whose answers the test controls: it
// succeeds (as a memory store that also applies several ops: multi),
// fails, does not support the op, or hangs ignoring its context until
// released, and counts its calls. A hung call, once released, answers by
// the mode at that time (fails if it is still hang). Safe for concurrent
// use.
type fakeRemote struct {
	mem multi

	mu      sync.Mutex
	mode    mode
	release chan struct{} // closed to release the calls hung on it

	n        atomic.Int64  // calls of Do and DoMulti
	entered  chan struct{} // receives when a call starts to hang
	finished chan struct{} // receives when a call that hung answers
}

// newFakeRemote returns a fake remote that succeeds, on clk; hung calls
// are released when t ends.
func newFakeRemote(t testing.TB, clk clock.Clock) *fakeRemote {
	f := &fakeRemote{
		mem:      multi{memory.New(memory.WithClock(clk))},
		release:  make(chan struct{}),
		entered:  make(chan struct{}, 1000),
		finished: make(chan struct{}, 1000),
	}
	t.Cleanup(func() { f.set(fail); f.releaseAll() })
	return f
}

func (f *fakeRemote) set(m mode) {
	f.mu.Lock()
	f.mode = m
	f.mu.Unlock()
}

// releaseAll releases every hung call.
func (f *fakeRemote) releaseAll() {
	f.mu.Lock()
	close(f.release)
	f.release = make(chan struct{})
	f.mu.Unlock()
}

// waitHung waits until n more calls hang.
func (f *fakeRemote) waitHung(t testing.TB, n int) {
	t.Helper()
	for range n {
		select {
		case <-f.entered:
		case <-time.After(patience):
			t.Fatalf("no call reached the hung remote within %v", patience)
		}
	}
}

// answer returns how to answer a call, after hanging if the mode is hang;
// hung reports whether it did.
func (f *fakeRemote) answer() (m mode, hung bool) {
	f.mu.Lock()
	m, rel := f.mode, f.release
	f.mu.Unlock()
	if m != hang {
		return m, false
	}
	f.entered <- struct{}{}
	<-rel
	f.mu.Lock()
	m = f.mode
	f.mu.Unlock()
	if m == hang {
		m = fail
	}
	return m, true
}

// done ends a call; a call that hung then tells waitDone.
func (f *fakeRemote) done(hung bool) {
	if hung {
		f.finished <- struct{}{}
	}
}

// waitDone waits until n more released calls have answered.
func (f *fakeRemote) waitDone(t testing.TB, n int) {
	t.Helper()
	for range n {
		select {
		case <-f.finished:
		case <-time.After(patience):
			t.Fatalf("no released call answered within %v", patience)
		}
	}
}

// Do answers by the mode. A call that hung ignores its context, as a
// server that took the request does.
func (f *fakeRemote) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	f.n.Add(1)
	m, hung := f.answer()
	defer f.done(hung)
	switch m {
	case fail:
		return spigot.Decision{}, errDown
	case unsupported:
		return spigot.Decision{}, errUnsupported
	}
	if hung {
		ctx = context.WithoutCancel(ctx)
	}
	return f.mem.Do(ctx, op)
}

// DoMulti answers by the mode, as Do does, with multi's DoMulti.
func (f *fakeRemote) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	f.n.Add(1)
	m, hung := f.answer()
	defer f.done(hung)
	switch m {
	case fail:
		return errDown
	case unsupported:
		return errUnsupported
	}
	if hung {
		ctx = context.WithoutCancel(ctx)
	}
	return f.mem.DoMulti(ctx, mode, ops, out)
}

func (f *fakeRemote) calls() int64 { return f.n.Load() }

// multi is a memory store that also applies several ops in one DoMulti, in
// Independent mode only, one after the other (not atomically: enough for
// tests, where nothing else runs meanwhile).
type multi struct{ *memory.Store }

func (m multi) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if len(ops) <= 1 {
		return m.Store.DoMulti(ctx, mode, ops, out)
	}
	switch {
	case mode != spigot.Independent:
		return fmt.Errorf("multi: mode %d: %w", mode, errors.ErrUnsupported)
	case len(out) != len(ops):
		return fmt.Errorf("multi: %d ops and %d decisions", len(ops), len(out))
	}
	for i, op := range ops {
		d, err := m.Do(ctx, op)
		if err != nil {
			return err
		}
		out[i] = d
	}
	return nil
}

// takeN is Do of a Take of n tokens of b for key on s.
func takeN(ctx context.Context, s spigot.Store, b spigot.Limit, key string, n int64) (spigot.Decision, error) {
	return s.Do(ctx, spigot.Op{Limit: b, Key: key, N: n})
}

// resetKey is Do of a Reset of b for key on s.
func resetKey(ctx context.Context, s spigot.Store, b spigot.Limit, key string) (spigot.Decision, error) {
	return s.Do(ctx, spigot.Op{Limit: b, Key: key, Action: spigot.Reset})
}

// ---- an observer that records ----

type decision struct {
	op   spigot.Op
	path hybrid.Path
	d    spigot.Decision
}

func (d decision) String() string { return fmt.Sprintf("{%v by %v: %s}", d.op, d.path, show(d.d)) }

type remoteError struct {
	op      spigot.Op
	err     error
	latency time.Duration
}

// recorder records what a Store's observer is told. Safe for concurrent
// use.
type recorder struct {
	mu          sync.Mutex
	decisions   []decision
	errs        []remoteError
	transitions []string // "from>to"
}

func (r *recorder) observer() hybrid.Observer {
	return hybrid.Observer{
		Decision: func(_ context.Context, op spigot.Op, p hybrid.Path, d spigot.Decision) {
			r.mu.Lock()
			r.decisions = append(r.decisions, decision{op, p, d})
			r.mu.Unlock()
		},
		RemoteError: func(_ context.Context, op spigot.Op, err error, latency time.Duration) {
			r.mu.Lock()
			r.errs = append(r.errs, remoteError{op, err, latency})
			r.mu.Unlock()
		},
		Transition: func(_ context.Context, from, to hybrid.Circuit) {
			r.mu.Lock()
			r.transitions = append(r.transitions, from.String()+">"+to.String())
			r.mu.Unlock()
		},
	}
}

// take returns what was recorded since the last take, and forgets it.
func (r *recorder) take() (ds []decision, errs []remoteError, transitions string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds, errs, transitions = r.decisions, r.errs, strings.Join(r.transitions, " ")
	r.decisions, r.errs, r.transitions = nil, nil, nil
	return ds, errs, transitions
}

// ---- step tables ----

// allow is a store's decision that allowed an operation moving n tokens
// (taken, or given back by a Refund).
func allow(n, remaining int64, resetAfter time.Duration) spigot.Decision {
	return spigot.Decision{N: n, Remaining: remaining, ResetAfter: resetAfter}
}

// deny is the decision of a store that took nothing.
func deny(remaining int64, retryAfter, resetAfter time.Duration) spigot.Decision {
	return spigot.Decision{Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter}
}

// withRefill returns d with RefillAfter r.
func withRefill(d spigot.Decision, r time.Duration) spigot.Decision {
	d.RefillAfter = r
	return d
}

// refilled is the decision of a store on a Reset that gave n tokens back to
// a bucket of the capacity.
func refilled(n, capacity int64) spigot.Decision {
	return spigot.Decision{N: n, Remaining: capacity}
}

// admitted is a policy's admission of n tokens (FailOpen's, or anyone's for
// 0): nothing is known of the bucket.
func admitted(n int64) spigot.Decision {
	return spigot.Decision{N: n, Remaining: -1}
}

// refused is a policy's denial (FailClosed's, or anyone's for more than the
// capacity): nothing is known of the bucket.
func refused(retryAfter time.Duration) spigot.Decision {
	return spigot.Decision{RetryAfter: retryAfter, Remaining: -1}
}

// sameDecision reports whether got is want, but for a RefillAfter that
// want, from a table written without it, leaves 0: the local store's is the
// memory store's, which the conformance suite checks; a Degraded want has
// none, and got must have none either.
func sameDecision(got, want spigot.Decision) bool {
	if want.RefillAfter == 0 && !want.Degraded() {
		got.RefillAfter = 0
	}
	return got == want
}

func show(a spigot.Decision) string {
	retry := a.RetryAfter.String()
	if a.RetryAfter == spigot.Never {
		retry = "Never"
	}
	return fmt.Sprintf("{Allowed %v, N %d, Remaining %d, RetryAfter %s, ResetAfter %v, RefillAfter %v, Degraded %v}",
		a.Allowed(), a.N, a.Remaining, retry, a.ResetAfter, a.RefillAfter, a.Degraded())
}

// A step is one request at a fixed instant, with the remote in a mode.
type step struct {
	at   time.Duration // the clock, from t0
	mode mode          // the remote's mode

	action spigot.Action // the operation (Take, the zero Action, by default)
	cost   int64         // its N

	want spigot.Decision // the decision (the zero Decision with an error)
	path hybrid.Path     // the path the observer is told (none for a Reset)
	// seen is the N of the op the observer is told, when not cost: the
	// guard's share of a TakeUpTo, which is what the remote is asked.
	seen int64
	errs []error // the error must match each (errors.Is); none: no error

	calls int64 // calls the step makes to the remote: 0 or 1
	// remoteErr is the error the observer's RemoteError must be told
	// (errors.Is); nil means errDown after a call to a failing remote, and
	// none otherwise.
	remoteErr error
	state     hybrid.Circuit // the breaker after the step
	trans     string         // the transitions the step reports, "from>to ..."
}

// fixture is a hybrid store on a fake remote and a local memory store
// (that also applies several ops: multi), on one fake clock, with a
// recording observer.
type fixture struct {
	clk    *clocktest.Clock
	remote *fakeRemote
	local  multi
	rec    *recorder
	s      *hybrid.Store
}

// newFixture returns a fixture whose store has opts, after a timeout of a
// minute (so that a slow machine never times out a remote that answers at
// once), the fixture's clock and observer, and WithMaxKeys(0): the local
// store's buckets are as the local store has them, which is what the
// tables of the breaker and the policies count on (TestMemory's tables
// are those of the keys the store remembers).
func newFixture(t testing.TB, opts ...hybrid.Option) *fixture {
	t.Helper()
	clk := clocktest.New(t0)
	f := &fixture{clk: clk, remote: newFakeRemote(t, clk), local: multi{memory.New(memory.WithClock(clk))}, rec: &recorder{}}
	// The fake remote's hang ignores its context: WithDetach.
	opts = append([]hybrid.Option{hybrid.WithTimeout(time.Minute), hybrid.WithDetach(), hybrid.WithClock(clk), hybrid.WithObserver(f.rec.observer()), hybrid.WithMaxKeys(0)}, opts...)
	f.s = hybrid.New(f.remote, f.local, opts...)
	return f
}

// play runs the steps on bucket b, key "k".
func (f *fixture) play(t *testing.T, b spigot.Limit, steps []step) {
	t.Helper()
	for i, st := range steps {
		i++
		f.clk.Set(t0.Add(st.at))
		f.remote.set(st.mode)
		calls := f.remote.calls()
		f.rec.take()
		op := spigot.Op{Limit: b, Key: "k", Action: st.action, N: st.cost}
		what := fmt.Sprintf("step %d (t0+%v, remote %v, %v %d)", i, st.at, st.mode, st.action, st.cost)
		d, err := f.s.Do(t.Context(), op)
		if len(st.errs) == 0 && err != nil {
			t.Fatalf("%s: got error %v, want %s", what, err, show(st.want))
		}
		if len(st.errs) > 0 && err == nil {
			t.Errorf("%s: got no error, want one matching %v", what, st.errs)
		}
		for _, target := range st.errs {
			if !errors.Is(err, target) {
				t.Errorf("%s: got error %v, want one matching %v", what, err, target)
			}
		}
		if !sameDecision(d, st.want) {
			t.Errorf("%s: got %s, want %s", what, show(d), show(st.want))
		}
		ds, errs, trans := f.rec.take()
		seen := op
		if st.seen != 0 {
			seen.N = st.seen
		}
		switch {
		case st.action == spigot.Reset || err != nil:
			if len(ds) != 0 {
				t.Errorf("%s: got decisions %v, want none", what, ds)
			}
		case len(ds) != 1 || ds[0] != (decision{seen, st.path, d}):
			t.Errorf("%s: got decisions %v, want %v", what, ds, []decision{{seen, st.path, d}})
		}
		if got := f.remote.calls() - calls; got != st.calls {
			t.Errorf("%s: got %d remote calls, want %d", what, got, st.calls)
		}
		wantErr := st.remoteErr
		if wantErr == nil && st.calls == 1 && st.mode == fail {
			wantErr = errDown
		}
		wantErrs := 0
		if wantErr != nil {
			wantErrs = 1
		}
		if len(errs) != wantErrs {
			t.Errorf("%s: got %d remote errors (%v), want %d", what, len(errs), errs, wantErrs)
		}
		for _, e := range errs {
			if !errors.Is(e.err, wantErr) || e.latency < 0 || e.latency > patience || e.op != seen {
				t.Errorf("%s: remote error %v on %v after %v; want %v on %v after [0, %v]", what, e.err, e.op, e.latency, wantErr, seen, patience)
			}
		}
		if got := f.s.Circuit(); got != st.state {
			t.Errorf("%s: got state %v, want %v", what, got, st.state)
		}
		if trans != st.trans {
			t.Errorf("%s: got transitions %q, want %q", what, trans, st.trans)
		}
	}
}

// cap4 is the remote's bucket of the step tables: 4 tokens, 1 a second.
var cap4 = spigot.MustBucket("api", 4, spigot.PerSecond(1))

// half is a WithLocalLimit function: half the capacity, the same rate.
func half(b spigot.Limit) spigot.Limit {
	return spigot.MustBucket(b.Name(), b.Capacity()/2, b.Rate())
}

const (
	open     = hybrid.CircuitOpen
	closed   = hybrid.CircuitClosed
	halfOpen = hybrid.CircuitHalfOpen

	toOpen  = "closed>open"
	probeOK = "open>half-open half-open>closed"
	probeKO = "open>half-open half-open>open"
)

// TestLocal: under the Local policy the local store decides, on
// WithLocalLimit's bucket, whenever the remote fails or the breaker is
// open; the breaker opens after 2 consecutive failures, a success resets
// the count, and a probe after the cooldown closes it or reopens it for
// another cooldown.
func TestLocal(t *testing.T) {
	f := newFixture(t, hybrid.WithLocalLimit(half), hybrid.WithBreaker(2, 10*sec))
	f.play(t, cap4, []step{
		{at: 0, mode: succeed, cost: 1, want: allow(1, 3, 1*sec), path: hybrid.PathRemote, calls: 1, state: closed},
		// The local bucket holds 2 tokens.
		{at: 0, mode: fail, cost: 1, want: allow(1, 1, 1*sec), path: hybrid.PathLocal, calls: 1, state: closed},
		{at: 0, mode: succeed, cost: 1, want: allow(1, 2, 2*sec), path: hybrid.PathRemote, calls: 1, state: closed},
		// The success reset the count: this is the first failure again.
		{at: 0, mode: fail, cost: 1, want: allow(1, 0, 2*sec), path: hybrid.PathLocal, calls: 1, state: closed},
		{at: 0, mode: fail, cost: 1, want: deny(0, 1*sec, 2*sec), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
		// Open: the healthy remote is not called until t0+10s.
		{at: 1 * sec, mode: succeed, cost: 1, want: allow(1, 0, 2*sec), path: hybrid.PathLocal, calls: 0, state: open},
		{at: 9999 * ms, mode: succeed, cost: 2, want: allow(2, 0, 2*sec), path: hybrid.PathLocal, calls: 0, state: open},
		// The probe: the remote's bucket has refilled.
		{at: 10 * sec, mode: succeed, cost: 1, want: allow(1, 3, 1*sec), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
		{at: 10 * sec, mode: fail, cost: 1, want: deny(0, 999*ms, 1999*ms), path: hybrid.PathLocal, calls: 1, state: closed},
		{at: 10 * sec, mode: fail, cost: 1, want: deny(0, 999*ms, 1999*ms), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
		// A failed probe opens the breaker for another cooldown.
		{at: 20 * sec, mode: fail, cost: 1, want: allow(1, 1, 1*sec), path: hybrid.PathLocal, calls: 1, state: open, trans: probeKO},
		{at: 29999 * ms, mode: succeed, cost: 1, want: allow(1, 1, 1*sec), path: hybrid.PathLocal, calls: 0, state: open},
		{at: 30 * sec, mode: succeed, cost: 1, want: allow(1, 3, 1*sec), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
	})
}

// TestLocalSplit: the README's WithLocalLimit, Limit.Split(4), on a
// bucket of 3 tokens at 3/s: each replica keeps 1 token (never 0, which
// would deny every request with RetryAfter Never) and a quarter of the
// rate, 3 per 4 s.
func TestLocalSplit(t *testing.T) {
	small := spigot.MustBucket("small", 3, spigot.PerSecond(3))
	f := newFixture(t, hybrid.WithBreaker(1, 10*sec), hybrid.WithLocalLimit(func(b spigot.Limit) spigot.Limit { return b.Split(4) }))
	f.play(t, small, []step{
		{at: 0, mode: fail, cost: 1, want: allow(1, 0, 1334*ms), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
		{at: 0, mode: fail, cost: 1, want: deny(0, 1334*ms, 1334*ms), path: hybrid.PathLocal, calls: 0, state: open},
		{at: 1334 * ms, mode: fail, cost: 1, want: allow(1, 0, 1334*ms), path: hybrid.PathLocal, calls: 0, state: open},
		{at: 1334 * ms, mode: fail, cost: 2, want: deny(0, spigot.Never, 1334*ms), path: hybrid.PathLocal, calls: 0, state: open},
	})
}

// TestLocalSameBucket: without WithLocalLimit, the local store enforces
// the request's own bucket.
func TestLocalSameBucket(t *testing.T) {
	f := newFixture(t, hybrid.WithBreaker(1, 10*sec))
	f.play(t, cap4, []step{
		{at: 0, mode: succeed, cost: 2, want: allow(2, 2, 2*sec), path: hybrid.PathRemote, calls: 1, state: closed},
		{at: 0, mode: fail, cost: 1, want: allow(1, 3, 1*sec), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
		{at: 0, mode: succeed, cost: 3, want: allow(3, 0, 4*sec), path: hybrid.PathLocal, calls: 0, state: open},
		{at: 0, mode: succeed, cost: 5, want: deny(0, spigot.Never, 4*sec), path: hybrid.PathLocal, calls: 0, state: open},
		{at: 0, mode: succeed, cost: 0, want: allow(0, 0, 4*sec), path: hybrid.PathLocal, calls: 0, state: open},
	})
}

// TestFailOpen: under FailOpen a request is admitted, with nothing known of
// the bucket, whenever the remote fails or the breaker is open.
func TestFailOpen(t *testing.T) {
	f := newFixture(t, hybrid.WithPolicy(hybrid.FailOpen), hybrid.WithBreaker(2, 10*sec))
	f.play(t, cap4, []step{
		{at: 0, mode: fail, cost: 1, want: admitted(1), path: hybrid.PathFailOpen, calls: 1, state: closed},
		{at: 0, mode: succeed, cost: 3, want: allow(3, 1, 3*sec), path: hybrid.PathRemote, calls: 1, state: closed},
		{at: 0, mode: fail, cost: 1, want: admitted(1), path: hybrid.PathFailOpen, calls: 1, state: closed},
		{at: 0, mode: fail, cost: 4, want: admitted(4), path: hybrid.PathFailOpen, calls: 1, state: open, trans: toOpen},
		{at: 5 * sec, mode: succeed, cost: 4, want: admitted(4), path: hybrid.PathFailOpen, calls: 0, state: open},
		{at: 10 * sec, mode: fail, cost: 1, want: admitted(1), path: hybrid.PathFailOpen, calls: 1, state: open, trans: probeKO},
		{at: 20 * sec, mode: succeed, cost: 1, want: allow(1, 3, 1*sec), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
	})
}

// TestFailClosed: under FailClosed a request is denied whenever the remote
// fails or the breaker is open, with RetryAfter the cooldown while the
// breaker is closed, exactly the time left until the probe (rounded up to
// the millisecond) while it is open, and Never for a cost over the
// capacity; a cost of 0 is allowed, as in the model.
func TestFailClosed(t *testing.T) {
	f := newFixture(t, hybrid.WithPolicy(hybrid.FailClosed), hybrid.WithBreaker(2, 10*sec))
	f.play(t, cap4, []step{
		{at: 0, mode: fail, cost: 1, want: refused(10 * sec), path: hybrid.PathFailClosed, calls: 1, state: closed},
		{at: 0, mode: fail, cost: 5, want: refused(spigot.Never), path: hybrid.PathFailClosed, calls: 1, state: open, trans: toOpen},
		{at: 1234500 * time.Microsecond, mode: succeed, cost: 1, want: refused(8766 * ms), path: hybrid.PathFailClosed, calls: 0, state: open},
		{at: 5 * sec, mode: succeed, cost: 5, want: refused(spigot.Never), path: hybrid.PathFailClosed, calls: 0, state: open},
		{at: 5 * sec, mode: succeed, cost: 0, want: admitted(0), path: hybrid.PathFailClosed, calls: 0, state: open}, // a peek is always allowed
		{at: 9999 * ms, mode: succeed, cost: 1, want: refused(1 * ms), path: hybrid.PathFailClosed, calls: 0, state: open},
		{at: 9999900 * time.Microsecond, mode: succeed, cost: 1, want: refused(1 * ms), path: hybrid.PathFailClosed, calls: 0, state: open},
		// A failed probe: the next one is a cooldown away.
		{at: 10 * sec, mode: fail, cost: 1, want: refused(10 * sec), path: hybrid.PathFailClosed, calls: 1, state: open, trans: probeKO},
		{at: 15*sec + 1, mode: succeed, cost: 1, want: refused(5 * sec), path: hybrid.PathFailClosed, calls: 0, state: open},
		{at: 20 * sec, mode: succeed, cost: 1, want: allow(1, 3, 1*sec), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
		{at: 20 * sec, mode: fail, cost: 1, want: refused(10 * sec), path: hybrid.PathFailClosed, calls: 1, state: closed},
	})
}

// TestGuard: the guard bucket is consulted first; its denial is final and
// never calls the remote (healthy or not, breaker open or not); when it
// allows, the remote decides, or the policy. Reset resets the guard and the
// local store too, even when the remote is unavailable.
func TestGuard(t *testing.T) {
	guard := func(b spigot.Limit) spigot.Limit { return spigot.MustBucket(b.Name(), 2, b.Rate()) }
	f := newFixture(t, hybrid.WithGuard(guard), hybrid.WithBreaker(1, 10*sec))
	f.play(t, cap4, []step{
		{at: 0, mode: succeed, cost: 1, want: allow(1, 3, 1*sec), path: hybrid.PathRemote, calls: 1, state: closed},
		{at: 0, mode: succeed, cost: 1, want: allow(1, 2, 2*sec), path: hybrid.PathRemote, calls: 1, state: closed},
		// The guard's own denial.
		{at: 0, mode: succeed, cost: 1, want: deny(0, 1*sec, 2*sec), path: hybrid.PathGuard, calls: 0, state: closed},
		{at: 0, mode: fail, cost: 1, want: deny(0, 1*sec, 2*sec), path: hybrid.PathGuard, calls: 0, state: closed},
		{at: 0, mode: fail, cost: 3, want: deny(0, spigot.Never, 2*sec), path: hybrid.PathGuard, calls: 0, state: closed},
		// The guard refilled a token: the remote fails, the local store
		// (the same bucket, 4 tokens) decides.
		{at: 1 * sec, mode: fail, cost: 1, want: allow(1, 3, 1*sec), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
		{at: 1 * sec, mode: succeed, cost: 1, want: deny(0, 1*sec, 2*sec), path: hybrid.PathGuard, calls: 0, state: open},
		// The breaker is open: Reset fails, but resets the guard and the
		// local store.
		{at: 1 * sec, mode: succeed, action: spigot.Reset, errs: []error{hybrid.ErrUnavailable}, calls: 0, state: open},
		{at: 1 * sec, mode: succeed, cost: 1, want: allow(1, 3, 1*sec), path: hybrid.PathLocal, calls: 0, state: open},
		{at: 1 * sec, mode: succeed, cost: 1, want: allow(1, 2, 2*sec), path: hybrid.PathLocal, calls: 0, state: open},
		{at: 1 * sec, mode: succeed, cost: 1, want: deny(0, 1*sec, 2*sec), path: hybrid.PathGuard, calls: 0, state: open},
		// The probe, then a Reset that reaches the remote.
		{at: 11 * sec, mode: succeed, cost: 2, want: allow(2, 2, 2*sec), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
		{at: 11 * sec, mode: succeed, cost: 1, want: deny(0, 1*sec, 2*sec), path: hybrid.PathGuard, calls: 0, state: closed},
		{at: 11 * sec, mode: succeed, action: spigot.Reset, want: refilled(2, 4), calls: 1, state: closed},
		{at: 11 * sec, mode: succeed, cost: 2, want: allow(2, 2, 2*sec), path: hybrid.PathRemote, calls: 1, state: closed},
	})
}

// TestReset: Reset reports the remote's answer, and fails with
// ErrUnavailable (wrapping the remote's error) when the remote fails,
// which counts against the breaker, or without calling it when the
// breaker is open. After the cooldown a Reset may be the probe.
func TestReset(t *testing.T) {
	f := newFixture(t, hybrid.WithBreaker(1, 10*sec))
	f.play(t, cap4, []step{
		{at: 0, mode: succeed, cost: 3, want: allow(3, 1, 3*sec), path: hybrid.PathRemote, calls: 1, state: closed},
		{at: 0, mode: succeed, action: spigot.Reset, want: refilled(3, 4), calls: 1, state: closed},
		{at: 0, mode: succeed, action: spigot.Reset, want: refilled(0, 4), calls: 1, state: closed},
		{at: 0, mode: succeed, cost: 3, want: allow(3, 1, 3*sec), path: hybrid.PathRemote, calls: 1, state: closed},
		{at: 0, mode: fail, action: spigot.Reset, errs: []error{hybrid.ErrUnavailable, errDown}, calls: 1, state: open, trans: toOpen},
		{at: 5 * sec, mode: succeed, action: spigot.Reset, errs: []error{hybrid.ErrUnavailable}, calls: 0, state: open},
		{at: 10 * sec, mode: fail, action: spigot.Reset, errs: []error{hybrid.ErrUnavailable, errDown}, calls: 1, state: open, trans: probeKO},
		// The probe: the remote's bucket has refilled since t0.
		{at: 20*sec - 1, mode: succeed, action: spigot.Reset, errs: []error{hybrid.ErrUnavailable}, calls: 0, state: open},
		{at: 20 * sec, mode: succeed, action: spigot.Reset, want: refilled(0, 4), calls: 1, state: closed, trans: probeOK},
	})

	// The caller's cancellation is the caller's error.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if d, err := resetKey(ctx, f.s, cap4, "k"); d != (spigot.Decision{}) || err != context.Canceled {
		t.Errorf("Reset with a cancelled context: got %s, %v; want the zero Decision, context.Canceled", show(d), err)
	}
}

// TestInvalidInput: a zero Limit, a key longer than spigot.MaxKeyLen, a
// negative cost or an unknown Action is returned as the error any store
// returns (Do) or as an error matching the same sentinel (DoMulti),
// whatever the policy and the breaker, without calling the remote or the
// policy, and without counting against the breaker.
func TestInvalidInput(t *testing.T) {
	ref := memory.New()
	for _, policy := range []hybrid.Policy{hybrid.Local, hybrid.FailOpen, hybrid.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			f := newFixture(t, hybrid.WithPolicy(policy), hybrid.WithBreaker(1, 10*sec),
				hybrid.WithGuard(func(b spigot.Limit) spigot.Limit { return b }))
			f.remote.set(fail)
			for _, state := range []hybrid.Circuit{closed, open} {
				if state == open {
					takeN(t.Context(), f.s, cap4, "k", 1) // opens the breaker
					f.rec.take()
				}
				calls := f.remote.calls()
				for _, c := range []struct {
					op     spigot.Op
					target error
				}{
					{spigot.Op{N: 1}, spigot.ErrInvalidLimit},
					{spigot.Op{N: 0}, spigot.ErrInvalidLimit},
					{spigot.Op{Action: spigot.Reset}, spigot.ErrInvalidLimit},
					{spigot.Op{Action: spigot.Peek, N: 1}, spigot.ErrInvalidLimit},
					{spigot.Op{Limit: cap4, N: -1}, spigot.ErrInvalidCost},
					{spigot.Op{Limit: cap4, Action: spigot.TakeUpTo, N: -1}, spigot.ErrInvalidCost},
					{spigot.Op{Limit: cap4, Action: spigot.Refund, N: -1}, spigot.ErrInvalidCost},
					{spigot.Op{Limit: cap4, Action: 200, N: 1}, errors.ErrUnsupported},
					{spigot.Op{Limit: cap4, Action: spigot.Peek + 1}, errors.ErrUnsupported},
					{spigot.Op{Limit: cap4, Key: strings.Repeat("k", spigot.MaxKeyLen+1), N: 1}, spigot.ErrInvalidKey},
					{spigot.Op{Limit: cap4, Key: strings.Repeat("k", spigot.MaxKeyLen+1), Action: spigot.Reset}, spigot.ErrInvalidKey},
				} {
					if c.op.Key == "" {
						c.op.Key = "k"
					}
					what := fmt.Sprintf("breaker %v: Do(%v)", state, c.op)
					d, err := f.s.Do(t.Context(), c.op)
					_, want := ref.Do(t.Context(), c.op)
					if !errors.Is(err, c.target) || err.Error() != want.Error() || d != (spigot.Decision{}) {
						t.Errorf("%s: got %s, %v; want the zero Decision, %v", what, show(d), err, want)
					}
					ops := []spigot.Op{{Limit: cap4, Key: "k", N: 1}, c.op}
					if err := f.s.DoMulti(t.Context(), spigot.Independent, ops, make([]spigot.Decision, 2)); !errors.Is(err, c.target) {
						t.Errorf("breaker %v: DoMulti(a Take, %v): got %v, want an error matching %v", state, c.op, err, c.target)
					}
				}
				if got := f.remote.calls() - calls; got != 0 {
					t.Errorf("breaker %v: invalid input made %d remote calls, want 0", state, got)
				}
				if ds, errs, trans := f.rec.take(); len(ds)+len(errs) != 0 || trans != "" {
					t.Errorf("breaker %v: invalid input was observed: decisions %v, remote errors %v, transitions %q", state, ds, errs, trans)
				}
				if got := f.s.Circuit(); got != state {
					t.Errorf("after invalid input: got state %v, want %v", got, state)
				}
			}
		})
	}
}

// TestCallerCancellation: a caller that gives up gets its context's error,
// whatever the policy; it is not a remote failure: it neither counts
// against the breaker nor reaches the observer.
func TestCallerCancellation(t *testing.T) {
	for _, policy := range []hybrid.Policy{hybrid.Local, hybrid.FailOpen, hybrid.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			hybridtest.CheckGoroutines(t, patience)
			f := newFixture(t, hybrid.WithPolicy(policy), hybrid.WithBreaker(2, 10*sec))
			cancelled, cancel := context.WithCancel(t.Context())
			cancel()

			// Cancelled before the call, many times over: the breaker
			// (2 failures) stays closed.
			for range 5 {
				if a, err := takeN(cancelled, f.s, cap4, "k", 1); err != context.Canceled {
					t.Fatalf("Take with a cancelled context: got %s, %v; want context.Canceled", show(a), err)
				}
			}

			// Cancelled while the remote hangs, and a deadline that comes
			// before the store's timeout (a minute).
			f.remote.set(hang)
			ctx, cancel := context.WithCancel(t.Context())
			errc := make(chan error, 1)
			go func() {
				_, err := takeN(ctx, f.s, cap4, "k", 1)
				errc <- err
			}()
			f.remote.waitHung(t, 1)
			start := time.Now()
			cancel()
			select {
			case err := <-errc:
				if err != context.Canceled {
					t.Errorf("Take cancelled while the remote hangs: got %v, want context.Canceled", err)
				}
				if d := time.Since(start); d > slack {
					t.Errorf("Take returned %v after its cancellation, want less than %v", d, slack)
				}
			case <-time.After(patience):
				t.Fatalf("Take did not return within %v of its cancellation", patience)
			}

			start = time.Now()
			ctx, cancel = context.WithTimeout(t.Context(), 20*ms)
			defer cancel()
			a, err := takeN(ctx, f.s, cap4, "k", 1)
			if d := time.Since(start); err != context.DeadlineExceeded || d < 20*ms || d > 20*ms+slack {
				t.Errorf("Take with a deadline of 20ms while the remote hangs: got %s, %v after %v; want context.DeadlineExceeded after [20ms, %v]", show(a), err, d, 20*ms+slack)
			}

			ds, errs, trans := f.rec.take()
			if len(ds)+len(errs) != 0 || trans != "" {
				t.Errorf("cancelled calls were observed: decisions %v, remote errors %v, transitions %q", ds, errs, trans)
			}
			// One real failure: the count starts from 0.
			f.remote.set(fail)
			f.remote.releaseAll()
			if _, err := takeN(t.Context(), f.s, cap4, "k", 1); err != nil {
				t.Fatalf("Take on a failing remote: %v", err)
			}
			if got := f.s.Circuit(); got != closed {
				t.Errorf("after cancelled calls and one failure: got state %v, want %v (2 failures open it)", got, closed)
			}
		})
	}
}

// TestAbandonedProbe: a probe whose caller gives up teaches nothing: the
// breaker goes back to open and the next request probes at once.
func TestAbandonedProbe(t *testing.T) {
	hybridtest.CheckGoroutines(t, patience)
	f := newFixture(t, hybrid.WithBreaker(1, 10*sec))
	f.remote.set(fail)
	takeN(t.Context(), f.s, cap4, "k", 1)
	f.clk.Advance(10 * sec)
	f.remote.set(hang)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := takeN(ctx, f.s, cap4, "abandoned", 1)
		errc <- err
	}()
	f.remote.waitHung(t, 1)
	if got := f.s.Circuit(); got != halfOpen {
		t.Errorf("during the probe: got state %v, want %v", got, halfOpen)
	}
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Errorf("the abandoned probe: got %v, want context.Canceled", err)
	}
	if got := f.s.Circuit(); got != open {
		t.Errorf("after the abandoned probe: got state %v, want %v", got, open)
	}
	_, errs, trans := f.rec.take()
	if want := toOpen + " " + probeKO; trans != want || len(errs) != 1 {
		t.Errorf("got transitions %q and %d remote errors, want %q and 1 (before the probe)", trans, len(errs), want)
	}
	// The next request, at the same instant, probes.
	f.remote.set(succeed)
	f.remote.releaseAll()
	calls := f.remote.calls()
	if a, err := takeN(t.Context(), f.s, cap4, "k", 1); err != nil || !sameDecision(a, allow(1, 3, sec)) {
		t.Errorf("the next request: got %s, %v; want %s", show(a), err, show(allow(1, 3, sec)))
	}
	if got := f.remote.calls() - calls; got != 1 {
		t.Errorf("the next request made %d remote calls, want 1", got)
	}
	if _, _, trans := f.rec.take(); trans != probeOK || f.s.Circuit() != closed {
		t.Errorf("the next request: got transitions %q, state %v; want %q, %v", trans, f.s.Circuit(), probeOK, closed)
	}
}

// TestHalfOpen: after the cooldown exactly one request probes the remote;
// while it is in flight, every other request goes to the policy without a
// remote call (FailClosed: RetryAfter the cooldown, as the breaker is not
// open); the probe's success closes the breaker.
func TestHalfOpen(t *testing.T) {
	for _, c := range []struct {
		policy hybrid.Policy
		path   hybrid.Path
		want   spigot.Decision
	}{
		{hybrid.Local, hybrid.PathLocal, allow(1, 3, sec)},
		{hybrid.FailOpen, hybrid.PathFailOpen, admitted(1)},
		{hybrid.FailClosed, hybrid.PathFailClosed, refused(10 * sec)},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			hybridtest.CheckGoroutines(t, patience)
			f := newFixture(t, hybrid.WithPolicy(c.policy), hybrid.WithBreaker(1, 10*sec))
			f.remote.set(fail)
			takeN(t.Context(), f.s, cap4, "k", 1)
			f.clk.Advance(10 * sec)
			f.remote.set(hang)
			f.rec.take()

			probe := make(chan error, 1)
			go func() {
				a, err := takeN(t.Context(), f.s, cap4, "probe", 1)
				if err == nil && !sameDecision(a, allow(1, 3, sec)) {
					err = fmt.Errorf("got %s, want %s", show(a), show(allow(1, 3, sec)))
				}
				probe <- err
			}()
			f.remote.waitHung(t, 1)
			calls := f.remote.calls()

			const n = 8
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					a, err := takeN(t.Context(), f.s, cap4, fmt.Sprint("k", i), 1)
					if err != nil || !sameDecision(a, c.want) {
						t.Errorf("request %d during the probe: got %s, %v; want %s", i, show(a), err, show(c.want))
					}
				})
			}
			wg.Wait()
			if got := f.remote.calls() - calls; got != 0 {
				t.Errorf("requests during the probe made %d remote calls, want 0", got)
			}
			if got := f.s.Circuit(); got != halfOpen {
				t.Errorf("during the probe: got state %v, want %v", got, halfOpen)
			}
			ds, _, trans := f.rec.take()
			if trans != "open>half-open" || len(ds) != n {
				t.Errorf("during the probe: got transitions %q and %d decisions, want %q and %d", trans, len(ds), "open>half-open", n)
			}
			for _, d := range ds {
				if d.path != c.path {
					t.Errorf("during the probe: got a decision by %v, want %v", d.path, c.path)
				}
			}

			f.remote.set(succeed)
			f.remote.releaseAll()
			if err := <-probe; err != nil {
				t.Errorf("the probe: %v", err)
			}
			ds, _, trans = f.rec.take()
			if trans != "half-open>closed" || len(ds) != 1 || ds[0].path != hybrid.PathRemote || f.s.Circuit() != closed {
				t.Errorf("after the probe: got transitions %q, decisions %v, state %v; want %q, one by %v, %v",
					trans, ds, f.s.Circuit(), "half-open>closed", hybrid.PathRemote, closed)
			}
		})
	}
}

// TestDeadline: a remote that hangs, ignoring its context, holds a request
// no longer than WithTimeout: the policy decides, the observer sees the
// remote error with its latency, and once the remote is released no
// goroutine is left.
func TestDeadline(t *testing.T) {
	const timeout = 30 * ms
	for _, c := range []struct {
		policy hybrid.Policy
		path   hybrid.Path
		want   spigot.Decision
	}{
		{hybrid.Local, hybrid.PathLocal, allow(1, 3, sec)},
		{hybrid.FailOpen, hybrid.PathFailOpen, admitted(1)},
		{hybrid.FailClosed, hybrid.PathFailClosed, refused(10 * sec)},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			hybridtest.CheckGoroutines(t, patience)
			f := newFixture(t, hybrid.WithPolicy(c.policy), hybrid.WithTimeout(timeout), hybrid.WithBreaker(2, 10*sec))
			f.remote.set(hang)
			for i := range 3 { // the second opens the breaker; the third does not wait
				start := time.Now()
				a, err := takeN(t.Context(), f.s, cap4, fmt.Sprint("k", i), 1)
				d := time.Since(start)
				if err != nil || !sameDecision(a, c.want) {
					t.Errorf("request %d: got %s, %v; want %s", i, show(a), err, show(c.want))
				}
				if i < 2 && (d < timeout || d > timeout+slack) {
					t.Errorf("request %d on a hung remote took %v, want [%v, %v]", i, d, timeout, timeout+slack)
				}
				if i == 2 && d > slack {
					t.Errorf("request %d on an open breaker took %v, want less than %v", i, d, slack)
				}
			}
			ds, errs, trans := f.rec.take()
			if len(ds) != 3 || len(errs) != 2 || trans != toOpen {
				t.Fatalf("got %d decisions, %d remote errors, transitions %q; want 3, 2, %q", len(ds), len(errs), trans, toOpen)
			}
			for _, d := range ds {
				if d.path != c.path {
					t.Errorf("got a decision by %v, want %v", d.path, c.path)
				}
			}
			for _, e := range errs {
				if !errors.Is(e.err, context.DeadlineExceeded) || e.latency < timeout || e.latency > timeout+slack {
					t.Errorf("remote error %v after %v; want context.DeadlineExceeded after [%v, %v]", e.err, e.latency, timeout, timeout+slack)
				}
			}
			f.remote.waitHung(t, 2)
			if n := f.remote.calls(); n != 2 {
				t.Errorf("got %d remote calls, want 2", n)
			}
			f.remote.releaseAll() // the hung calls end: checkGoroutines sees it
		})
	}
}

// TestLateAnswer: a remote call that answers after its deadline changes
// nothing: its request was already decided by the policy.
func TestLateAnswer(t *testing.T) {
	hybridtest.CheckGoroutines(t, patience)
	f := newFixture(t, hybrid.WithTimeout(20*ms), hybrid.WithBreaker(5, 10*sec))
	f.remote.set(hang)
	// The local store's decision, RefillAfter and all: one token of cap4.
	if a, err := takeN(t.Context(), f.s, cap4, "k", 1); err != nil || a != withRefill(allow(1, 3, sec), sec) {
		t.Fatalf("got %s, %v; want %s from the local store", show(a), err, show(withRefill(allow(1, 3, sec), sec)))
	}
	f.remote.waitHung(t, 1)
	f.remote.set(succeed)
	f.remote.releaseAll()
	f.remote.waitDone(t, 1)
	// The remote took its token after all, once: a request charged twice,
	// never admitted twice.
	if a, err := takeN(t.Context(), f.s, cap4, "k", 1); err != nil || a != withRefill(allow(1, 2, 2*sec), sec) {
		t.Errorf("the next request: got %s, %v; want %s", show(a), err, show(withRefill(allow(1, 2, 2*sec), sec)))
	}
}

// TestLateAnswerMulti: with WithDetach, a remote DoMulti that answers
// after its deadline works on slices of its own: it neither reads the ops
// nor writes the decisions the caller reuses once DoMulti has returned
// (as httplimit does, from a pool), and it charges the ops it was given.
func TestLateAnswerMulti(t *testing.T) {
	hybridtest.CheckGoroutines(t, patience)
	f := newFixture(t, hybrid.WithTimeout(20*ms), hybrid.WithBreaker(5, 10*sec))
	f.remote.set(hang)
	ops := []spigot.Op{{Limit: cap4, Key: "a", N: 1}, {Limit: cap4, Key: "b", N: 2}}
	out := make([]spigot.Decision, len(ops))
	if err := f.s.DoMulti(t.Context(), spigot.Independent, ops, out); err != nil {
		t.Fatalf("DoMulti on a hung remote: %v", err)
	}
	if want := []spigot.Decision{allow(1, 3, sec), allow(2, 2, 2*sec)}; !slices.EqualFunc(out, want, sameDecision) {
		t.Fatalf("DoMulti on a hung remote: got %v, want the local store's %v", out, want)
	}
	f.remote.waitHung(t, 1)

	// The caller reuses its slices for another request, before and while
	// the late answer comes.
	reused := []spigot.Op{{Limit: cap4, Key: "x", N: 3}, {Limit: cap4, Key: "y", N: 4}}
	mine := spigot.Decision{N: 99, Remaining: 99}
	reuse := func() {
		copy(ops, reused)
		for i := range out {
			out[i] = mine
		}
	}
	reuse()
	f.remote.set(succeed)
	f.remote.releaseAll()
	reuse()
	f.remote.waitDone(t, 1)
	for i, d := range out {
		if d != mine {
			t.Errorf("decision %d after the late answer: got %s, want the caller's own %s", i, show(d), show(mine))
		}
	}
	if !slices.Equal(ops, reused) {
		t.Errorf("ops after the late answer: got %v, want the caller's own %v", ops, reused)
	}
	// The late answer charged the ops of the call that timed out.
	for i, c := range []struct {
		key  string
		want int64
	}{{"a", 3}, {"b", 2}, {"x", 4}, {"y", 4}} {
		d, err := f.remote.mem.Do(t.Context(), spigot.Op{Limit: cap4, Key: c.key, Action: spigot.Peek})
		if err != nil || d.Remaining != c.want {
			t.Errorf("step %d: the remote's %q: got %s, %v; want Remaining %d", i+1, c.key, show(d), err, c.want)
		}
	}
}

// TestObserverOptional: every hook of the Observer may be nil, and so may
// the Observer.
func TestObserverOptional(t *testing.T) {
	var decisions atomic.Int64
	for _, o := range []hybrid.Observer{{}, {Decision: func(context.Context, spigot.Op, hybrid.Path, spigot.Decision) { decisions.Add(1) }}} {
		clk := clocktest.New(t0)
		remote := newFakeRemote(t, clk)
		s := hybrid.New(remote, memory.New(memory.WithClock(clk)), hybrid.WithClock(clk), hybrid.WithTimeout(time.Minute),
			hybrid.WithBreaker(1, sec), hybrid.WithObserver(o))
		for i, m := range []mode{succeed, fail, succeed} {
			remote.set(m)
			if i == 2 {
				clk.Advance(sec)
			}
			if _, err := takeN(t.Context(), s, cap4, "k", 1); err != nil {
				t.Fatalf("step %d: %v", i+1, err)
			}
		}
	}
	if got := decisions.Load(); got != 3 {
		t.Errorf("got %d decisions, want 3", got)
	}
}

// TestObserverRemoteCall: RemoteCall is told of every remote call, with
// its op (a DoMulti's first), its error and a latency within the call's
// own; RemoteError only of the failures the remote caused, not of a call
// the caller gave up on. A call the open breaker spares is no call.
func TestObserverRemoteCall(t *testing.T) {
	type call struct {
		key string
		err error
	}
	var mu sync.Mutex
	var calls, errs []call
	var latency time.Duration
	o := hybrid.Observer{
		RemoteCall: func(_ context.Context, op spigot.Op, err error, d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, call{op.Key, err})
			latency = d
		},
		RemoteError: func(_ context.Context, op spigot.Op, err error, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, call{op.Key, err})
		},
	}
	clk := clocktest.New(t0)
	remote := newFakeRemote(t, clk)
	// The fake remote's hang ignores its context: WithDetach.
	s := hybrid.New(remote, memory.New(memory.WithClock(clk)), hybrid.WithClock(clk), hybrid.WithTimeout(time.Minute),
		hybrid.WithDetach(), hybrid.WithBreaker(2, sec), hybrid.WithObserver(o))
	ops := []spigot.Op{{Limit: cap4, Key: "a", N: 1}, {Limit: cap4, Key: "b", N: 1}}
	for i, c := range []struct {
		mode   mode
		multi  bool
		cancel bool  // the caller gives up while the remote hangs
		fails  bool  // whether the call returns an error
		err    error // the error RemoteCall is told (errors.Is), nil for none
		remote bool  // whether RemoteError is told too
		open   bool  // the breaker is open: no call
	}{
		{mode: succeed},
		{mode: unsupported, err: errors.ErrUnsupported, remote: true, fails: true}, // an answer
		{mode: succeed, multi: true},
		{mode: hang, cancel: true, err: context.Canceled, fails: true},
		{mode: fail, err: errDown, remote: true},
		{mode: fail, multi: true, err: errDown, remote: true}, // the breaker opens
		{mode: succeed, open: true},
	} {
		remote.set(c.mode)
		mu.Lock()
		calls, errs, latency = nil, nil, -1
		mu.Unlock()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			if c.multi {
				done <- s.DoMulti(ctx, spigot.Independent, ops, make([]spigot.Decision, len(ops)))
				return
			}
			_, err := s.Do(ctx, ops[0])
			done <- err
		}()
		if c.cancel {
			remote.waitHung(t, 1)
			cancel()
		}
		err := <-done
		elapsed := time.Since(start)
		cancel()
		if c.fails != (err != nil) {
			t.Errorf("step %d: got error %v, want one: %v", i, err, c.fails)
		}
		mu.Lock()
		gotCalls, gotErrs, gotLatency := calls, errs, latency
		mu.Unlock()
		wantCalls := 1
		if c.open {
			wantCalls = 0
		}
		if len(gotCalls) != wantCalls {
			t.Fatalf("step %d: got calls %v, want %d", i, gotCalls, wantCalls)
		}
		if wantCalls == 0 {
			continue
		}
		if got := gotCalls[0]; got.key != "a" || !errors.Is(got.err, c.err) || (c.err == nil) != (got.err == nil) {
			t.Errorf("step %d: got call %+v, want key a, error %v", i, got, c.err)
		}
		if gotLatency < 0 || gotLatency > elapsed {
			t.Errorf("step %d: got latency %v, want 0 to the call's %v", i, gotLatency, elapsed)
		}
		if c.remote != (len(gotErrs) == 1) || len(gotErrs) > 1 {
			t.Errorf("step %d: got remote errors %v, want %v", i, gotErrs, c.remote)
		}
	}
	if got := s.Circuit(); got != hybrid.CircuitOpen {
		t.Errorf("got circuit %v, want open", got)
	}
}

// TestNames: what String returns for each Policy, Circuit and Path, and
// for a value that has no name.
func TestNames(t *testing.T) {
	for i, c := range []struct {
		v    fmt.Stringer
		want string
	}{
		{hybrid.Local, "local"},
		{hybrid.FailOpen, "fail-open"},
		{hybrid.FailClosed, "fail-closed"},
		{hybrid.Policy(3), "Policy(3)"},
		{hybrid.Policy(-1), "Policy(-1)"},
		{hybrid.CircuitClosed, "closed"},
		{hybrid.CircuitOpen, "open"},
		{hybrid.CircuitHalfOpen, "half-open"},
		{hybrid.Circuit(3), "Circuit(3)"},
		{hybrid.Circuit(-1), "Circuit(-1)"},
		{hybrid.PathRemote, "remote"},
		{hybrid.PathLocal, "local"},
		{hybrid.PathFailOpen, "fail-open"},
		{hybrid.PathFailClosed, "fail-closed"},
		{hybrid.PathGuard, "guard"},
		{hybrid.Path(5), "Path(5)"},
		{hybrid.Path(-1), "Path(-1)"},
	} {
		if got := c.v.String(); got != c.want {
			t.Errorf("step %d: got %q, want %q", i, got, c.want)
		}
	}
}

// TestObserverContext: every hook of the Observer gets the context of the
// Do or DoMulti call that caused it, transitions included: the failure
// that opens the breaker, and the probe that half-opens and closes it.
func TestObserverContext(t *testing.T) {
	type stepKey struct{}
	var mu sync.Mutex
	var seen []string // "hook@step"
	record := func(ctx context.Context, hook string) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s@%v", hook, ctx.Value(stepKey{})))
	}
	o := hybrid.Observer{
		Decision: func(ctx context.Context, _ spigot.Op, p hybrid.Path, _ spigot.Decision) {
			record(ctx, "decision:"+p.String())
		},
		RemoteError: func(ctx context.Context, _ spigot.Op, _ error, _ time.Duration) { record(ctx, "error") },
		RemoteCall:  func(ctx context.Context, _ spigot.Op, _ error, _ time.Duration) { record(ctx, "call") },
		Transition: func(ctx context.Context, from, to hybrid.Circuit) {
			record(ctx, from.String()+">"+to.String())
		},
	}
	clk := clocktest.New(t0)
	remote := newFakeRemote(t, clk)
	s := hybrid.New(remote, memory.New(memory.WithClock(clk)), hybrid.WithClock(clk), hybrid.WithTimeout(time.Minute),
		hybrid.WithBreaker(1, sec), hybrid.WithObserver(o))
	ops := []spigot.Op{{Limit: cap4, Key: "a", N: 1}, {Limit: cap4, Key: "b", N: 1}}
	for i, c := range []struct {
		mode    mode
		advance time.Duration
		multi   bool
		want    []string
	}{
		{succeed, 0, false, []string{"call@0", "decision:remote@0"}},
		{fail, 0, false, []string{"call@1", "error@1", "closed>open@1", "decision:local@1"}},
		{succeed, sec, false, []string{"open>half-open@2", "call@2", "half-open>closed@2", "decision:remote@2"}},
		{fail, 0, true, []string{"call@3", "error@3", "closed>open@3", "decision:local@3", "decision:local@3"}},
		{succeed, sec, true, []string{"open>half-open@4", "call@4", "half-open>closed@4", "decision:remote@4", "decision:remote@4"}},
	} {
		remote.set(c.mode)
		clk.Advance(c.advance)
		ctx := context.WithValue(t.Context(), stepKey{}, i)
		var err error
		if c.multi {
			err = s.DoMulti(ctx, spigot.Independent, ops, make([]spigot.Decision, len(ops)))
		} else {
			_, err = s.Do(ctx, ops[0])
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		mu.Lock()
		got := seen
		seen = nil
		mu.Unlock()
		if !slices.Equal(got, c.want) {
			t.Errorf("step %d: got %q, want %q", i, got, c.want)
		}
	}
}

// TestBreakerFailures: WithBreaker's count.
func TestBreakerFailures(t *testing.T) {
	for _, c := range []struct {
		failures, opensAfter int
	}{{1, 1}, {3, 3}, {hybrid.DefaultFailures, hybrid.DefaultFailures}} {
		f := newFixture(t, hybrid.WithBreaker(c.failures, sec))
		f.remote.set(fail)
		for i := 1; i <= c.opensAfter; i++ {
			takeN(t.Context(), f.s, cap4, "k", 1)
			want := closed
			if i == c.opensAfter {
				want = open
			}
			if got := f.s.Circuit(); got != want {
				t.Errorf("WithBreaker(%d, 1s): after %d failures: got state %v, want %v", c.failures, i, got, want)
			}
		}
	}
}

// TestOptionPanics: an option that cannot mean what it says panics when
// it is made, with a message naming it; so does New given a nil option.
func TestOptionPanics(t *testing.T) {
	clk := clocktest.New(t0)
	id := func(b spigot.Limit) spigot.Limit { return b }
	var nilClock *clocktest.Clock
	for i, c := range []struct {
		make func() hybrid.Option
		want string
	}{
		{func() hybrid.Option { return hybrid.WithTimeout(-1) }, "spigot: hybrid: WithTimeout: -1ns: want 0 (the default) or more"},
		{func() hybrid.Option { return hybrid.WithTimeout(-time.Second) }, "spigot: hybrid: WithTimeout: -1s: want 0 (the default) or more"},
		{func() hybrid.Option { return hybrid.WithPolicy(hybrid.Policy(42)) }, "spigot: hybrid: WithPolicy: Policy(42): want Local, FailOpen or FailClosed"},
		{func() hybrid.Option { return hybrid.WithPolicy(hybrid.Policy(-1)) }, "spigot: hybrid: WithPolicy: Policy(-1): want Local, FailOpen or FailClosed"},
		{func() hybrid.Option { return hybrid.WithLocalLimit(nil) }, "spigot: hybrid: WithLocalLimit: nil func"},
		{func() hybrid.Option { return hybrid.WithGuard(nil) }, "spigot: hybrid: WithGuard: nil func"},
		{func() hybrid.Option { return hybrid.WithBreaker(0, 0) }, "spigot: hybrid: WithBreaker: failures 0: want 1 or more"},
		{func() hybrid.Option { return hybrid.WithBreaker(-1, sec) }, "spigot: hybrid: WithBreaker: failures -1: want 1 or more"},
		{func() hybrid.Option { return hybrid.WithBreaker(1<<31, sec) }, "spigot: hybrid: WithBreaker: failures 2147483648: want 2147483647 at most"},
		{func() hybrid.Option { return hybrid.WithBreaker(1, 0) }, "spigot: hybrid: WithBreaker: cooldown 0s: want more than 0"},
		{func() hybrid.Option { return hybrid.WithBreaker(1, -sec) }, "spigot: hybrid: WithBreaker: cooldown -1s: want more than 0"},
		{func() hybrid.Option { return hybrid.WithLargeCall(0) }, "spigot: hybrid: WithLargeCall: 0 ops: want 1 or more"},
		{func() hybrid.Option { return hybrid.WithLargeCall(-1) }, "spigot: hybrid: WithLargeCall: -1 ops: want 1 or more"},
		{func() hybrid.Option { return hybrid.WithClock(nil) }, "spigot: hybrid: WithClock: nil Clock"},
		{func() hybrid.Option { return hybrid.WithClock(nilClock) }, "spigot: hybrid: WithClock: nil Clock"},
		{func() hybrid.Option {
			hybrid.New(memory.New(), memory.New(), hybrid.WithClock(clk), nil)
			return nil
		}, "spigot: hybrid: New: option 1 is nil"},
	} {
		got := func() (msg any) {
			defer func() { msg = recover() }()
			c.make()
			return nil
		}()
		if got != c.want {
			t.Errorf("step %d: got panic %v, want %q", i+1, got, c.want)
		}
	}
	// The limits of what each accepts.
	hybrid.New(memory.New(), memory.New(), hybrid.WithTimeout(0), hybrid.WithTimeout(1), hybrid.WithPolicy(hybrid.Local),
		hybrid.WithPolicy(hybrid.FailClosed), hybrid.WithLocalLimit(id), hybrid.WithGuard(id),
		hybrid.WithBreaker(1, 1), hybrid.WithBreaker(1<<31-1, time.Duration(1<<63-1)), hybrid.WithLargeCall(1), hybrid.WithClock(clk), hybrid.WithObserver(hybrid.Observer{}))
}

// TestDefaults: a store without options has a 50 ms timeout, the Local
// policy, and a breaker of 5 failures and 5 s.
func TestDefaults(t *testing.T) {
	if hybrid.DefaultTimeout != 50*ms || hybrid.DefaultFailures != 5 || hybrid.DefaultCooldown != 5*sec {
		t.Errorf("got defaults %v, %d, %v; want 50ms, 5, 5s", hybrid.DefaultTimeout, hybrid.DefaultFailures, hybrid.DefaultCooldown)
	}
	hybridtest.CheckGoroutines(t, patience)
	clk := clocktest.New(t0)
	remote := newFakeRemote(t, clk)
	rec := &recorder{}
	// The fake remote's hang ignores its context: WithDetach (which
	// changes no default), and WithTimeout(0), which is the default.
	s := hybrid.New(remote, memory.New(memory.WithClock(clk)), hybrid.WithDetach(), hybrid.WithTimeout(0), hybrid.WithClock(clk), hybrid.WithObserver(rec.observer()))
	remote.set(hang)
	start := time.Now()
	if a, err := takeN(t.Context(), s, cap4, "k", 1); err != nil || !sameDecision(a, allow(1, 3, sec)) {
		t.Errorf("got %s, %v; want %s from the local store", show(a), err, show(allow(1, 3, sec)))
	}
	if d := time.Since(start); d < hybrid.DefaultTimeout || d > hybrid.DefaultTimeout+slack {
		t.Errorf("a hung remote held the request %v, want [%v, %v]", d, hybrid.DefaultTimeout, hybrid.DefaultTimeout+slack)
	}
	remote.set(fail)
	for range 4 {
		takeN(t.Context(), s, cap4, "k", 1)
	}
	if got := s.Circuit(); got != open {
		t.Errorf("after 5 failures: got state %v, want %v", got, open)
	}
	remote.set(succeed)
	clk.Advance(5*sec - 1)
	takeN(t.Context(), s, cap4, "k", 1)
	if got := s.Circuit(); got != open {
		t.Errorf("5s - 1ns after opening: got state %v, want %v", got, open)
	}
	clk.Advance(1)
	takeN(t.Context(), s, cap4, "k", 1)
	if got := s.Circuit(); got != closed {
		t.Errorf("5s after opening: got state %v, want %v", got, closed)
	}
	remote.releaseAll()
}

func TestStrings(t *testing.T) {
	for _, c := range []struct {
		got  fmt.Stringer
		want string
	}{
		{hybrid.Local, "local"}, {hybrid.FailOpen, "fail-open"}, {hybrid.FailClosed, "fail-closed"}, {hybrid.Policy(7), "Policy(7)"},
		{hybrid.CircuitClosed, "closed"}, {hybrid.CircuitOpen, "open"}, {hybrid.CircuitHalfOpen, "half-open"}, {hybrid.Circuit(-1), "Circuit(-1)"},
		{hybrid.PathRemote, "remote"}, {hybrid.PathLocal, "local"}, {hybrid.PathFailOpen, "fail-open"},
		{hybrid.PathFailClosed, "fail-closed"}, {hybrid.PathGuard, "guard"}, {hybrid.Path(9), "Path(9)"},
	} {
		if s := c.got.String(); s != c.want {
			t.Errorf("got %q, want %q", s, c.want)
		}
	}
}

// ---- conformance ----

// TestConformance: with a healthy remote, the hybrid store is the remote
// store (internal/tests/store/hybrid runs it on a Redis server). The
// timeout is generous, so that a slow machine does not make the remote
// look unavailable (the observer fails the test if it does).
func TestConformance(t *testing.T) {
	t.Run("remote=memory", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
			return hybrid.New(memory.New(memory.WithClock(clk)), memory.New(memory.WithClock(clk)),
				hybrid.WithClock(clk), hybrid.WithObserver(hybridtest.Healthy(t)), hybrid.WithTimeout(10*sec))
		})
	})
}

// stuck is a remote that never answers but honours its context, as
// spigot's Redis-protocol stores do.
type stuck struct{}

func (stuck) Do(ctx context.Context, _ spigot.Op) (spigot.Decision, error) {
	<-ctx.Done()
	return spigot.Decision{}, ctx.Err()
}

func (stuck) DoMulti(ctx context.Context, _ spigot.Mode, _ []spigot.Op, _ []spigot.Decision) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestDeadlineThroughContext: without WithDetach the deadline reaches the
// remote through its context, on the caller's goroutine.
func TestDeadlineThroughContext(t *testing.T) {
	hybridtest.CheckGoroutines(t, patience)
	clk := clocktest.New(t0)
	s := hybrid.New(stuck{}, memory.New(memory.WithClock(clk)), hybrid.WithTimeout(30*ms), hybrid.WithClock(clk))
	b := spigot.MustBucket("stuck", 2, spigot.PerSecond(1))
	start := time.Now()
	a, err := takeN(t.Context(), s, b, "k", 1)
	if d := time.Since(start); err != nil || !sameDecision(a, allow(1, 1, sec)) || d < 30*ms || d > 30*ms+slack {
		t.Errorf("Take on a stuck remote = %s, %v after %v; want the local store's %s after [30ms, %v]", show(a), err, d, show(allow(1, 1, sec)), 30*ms+slack)
	}
	if _, err := resetKey(t.Context(), s, b, "k"); !errors.Is(err, hybrid.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Reset on a stuck remote: %v; want ErrUnavailable wrapping context.DeadlineExceeded", err)
	}
}

// A sizedMode is how sizedRemote answers DoMulti.
type sizedMode int

const (
	sizedStuck     sizedMode = iota // block until the context is done
	sizedIOTimeout                  // a connection's deadline passed, at once
	sizedRefused                    // a refused connection, at once
	sizedAnswer                     // answer as a memory store
)

func (m sizedMode) String() string {
	return [...]string{"stuck", "i/o timeout", "refused", "answer"}[m]
}

// sizedRemote is a remote whose DoMulti answers by its mode, as a server
// that a large request keeps busy, or one that is down; it counts its
// calls.
type sizedRemote struct {
	multi
	mode  atomic.Int32 // a sizedMode
	calls atomic.Int64
}

func (r *sizedRemote) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	r.calls.Add(1)
	switch sizedMode(r.mode.Load()) {
	case sizedIOTimeout:
		return &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	case sizedRefused:
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	case sizedAnswer:
		return r.multi.DoMulti(ctx, mode, ops, out)
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestLargeCallTimeout: a DoMulti of more than 100 ops (DefaultLargeCall)
// that times out (its deadline, or a connection's) is decided by the
// policy but does not count against the breaker, and as the probe lets the
// next request probe again; one of up to 100 ops counts, and so does a
// refused connection whatever the size.
func TestLargeCallTimeout(t *testing.T) {
	if hybrid.DefaultLargeCall != 100 {
		t.Fatalf("DefaultLargeCall is %d: the package doc says 100", hybrid.DefaultLargeCall)
	}
	testLargeCall(t, 0, []largeCallStep{
		{0, sizedStuck, 101, hybrid.PathLocal, 1, closed, ""},
		{0, sizedStuck, 1000, hybrid.PathLocal, 1, closed, ""},
		{0, sizedIOTimeout, 101, hybrid.PathLocal, 1, closed, ""},
		{0, sizedIOTimeout, 101, hybrid.PathLocal, 1, closed, ""},
		// Small calls count.
		{0, sizedStuck, 100, hybrid.PathLocal, 1, closed, ""},
		{0, sizedIOTimeout, 2, hybrid.PathLocal, 1, open, toOpen},
		{5 * sec, sizedAnswer, 2, hybrid.PathLocal, 0, open, ""},
		// A large probe that times out teaches nothing: the next request
		// probes at once.
		{10 * sec, sizedStuck, 101, hybrid.PathLocal, 1, open, probeKO},
		{10 * sec, sizedIOTimeout, 101, hybrid.PathLocal, 1, open, probeKO},
		{10 * sec, sizedAnswer, 101, hybrid.PathRemote, 1, closed, probeOK},
		// A refused connection counts, whatever the size.
		{10 * sec, sizedRefused, 101, hybrid.PathLocal, 1, closed, ""},
		{10 * sec, sizedRefused, 500, hybrid.PathLocal, 1, open, toOpen},
		{20 * sec, sizedRefused, 101, hybrid.PathLocal, 1, open, probeKO},
		{30 * sec, sizedIOTimeout, 100, hybrid.PathLocal, 1, open, probeKO},
		{40 * sec, sizedAnswer, 100, hybrid.PathRemote, 1, closed, probeOK},
	})
}

// TestWithLargeCall: with WithLargeCall(10), a DoMulti of 11 ops that
// times out leaves the breaker as it was, and one of 10 counts.
func TestWithLargeCall(t *testing.T) {
	testLargeCall(t, 10, []largeCallStep{
		{0, sizedIOTimeout, 11, hybrid.PathLocal, 1, closed, ""},
		{0, sizedStuck, 11, hybrid.PathLocal, 1, closed, ""},
		{0, sizedIOTimeout, 10, hybrid.PathLocal, 1, closed, ""},
		{0, sizedIOTimeout, 11, hybrid.PathLocal, 1, closed, ""},
		{0, sizedStuck, 10, hybrid.PathLocal, 1, open, toOpen},
		{10 * sec, sizedIOTimeout, 11, hybrid.PathLocal, 1, open, probeKO},
		{10 * sec, sizedAnswer, 11, hybrid.PathRemote, 1, closed, probeOK},
	})
}

// A largeCallStep is a DoMulti of ops ops at t0+at on a remote in mode,
// and what follows: the path of its decisions, the remote calls it made,
// the breaker's state and its transitions.
type largeCallStep struct {
	at    time.Duration
	mode  sizedMode
	ops   int
	path  hybrid.Path
	calls int64
	state hybrid.Circuit
	trans string
}

// testLargeCall runs steps on a Store with a breaker of 2 failures and a
// cooldown of 10 s, and WithLargeCall(large) unless large is 0.
func testLargeCall(t *testing.T, large int, steps []largeCallStep) {
	t.Helper()
	clk := clocktest.New(t0)
	rec := &recorder{}
	remote := &sizedRemote{multi: multi{memory.New(memory.WithClock(clk))}}
	// The stuck remote waits out the deadline in real time: a short one,
	// which a loaded machine can only lengthen.
	opts := []hybrid.Option{hybrid.WithClock(clk), hybrid.WithTimeout(20 * ms), hybrid.WithBreaker(2, 10*sec), hybrid.WithObserver(rec.observer())}
	if large != 0 {
		opts = append(opts, hybrid.WithLargeCall(large))
	}
	s := hybrid.New(remote, memory.New(memory.WithClock(clk)), opts...)
	big := spigot.MustBucket("big", 1000, spigot.PerSecond(1))
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		remote.mode.Store(int32(st.mode))
		calls := remote.calls.Load()
		ops := make([]spigot.Op, st.ops)
		for j := range ops {
			ops[j] = spigot.Op{Limit: big, Key: fmt.Sprint("k", j), N: 1}
		}
		what := fmt.Sprintf("step %d (t0+%v, remote %v, %d ops)", i+1, st.at, st.mode, st.ops)
		if err := s.DoMulti(t.Context(), spigot.Independent, ops, make([]spigot.Decision, len(ops))); err != nil {
			t.Fatalf("%s: got error %v, want none", what, err)
		}
		ds, _, trans := rec.take()
		if len(ds) != st.ops {
			t.Errorf("%s: got %d decisions, want %d", what, len(ds), st.ops)
		}
		for _, d := range ds {
			if d.path != st.path || !d.d.Allowed() {
				t.Errorf("%s: got %v, want allowed by %v", what, d, st.path)
				break
			}
		}
		if got := remote.calls.Load() - calls; got != st.calls {
			t.Errorf("%s: got %d remote calls, want %d", what, got, st.calls)
		}
		if got := s.Circuit(); got != st.state || trans != st.trans {
			t.Errorf("%s: got state %v, transitions %q; want %v, %q", what, got, trans, st.state, st.trans)
		}
	}
}
