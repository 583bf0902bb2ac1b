package hybrid_test

// Regression tests for bugs found in review of the breaker and the
// policies (they use hybrid_test.go's helpers).

import (
	"context"
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store/hybrid"
)

// Bug 1: a request that started while the breaker was closed and whose
// caller gives up while a probe is in flight ended the half-open state
// (the breaker handled any abandoned call as if it were the probe's): the
// next request became a second concurrent probe. Now only the probe's own
// call (remoteCall with probe true) ends the half-open state.
func TestOneProbeDespiteStaleAbandon(t *testing.T) {
	checkGoroutines(t)
	f := newFixture(t, hybrid.WithBreaker(1, 10*sec))
	f.remote.set(hang)
	ctx, cancel := context.WithCancel(t.Context())
	stale := make(chan error, 1)
	go func() { // starts while the breaker is closed
		_, err := takeN(ctx, f.s, cap4, "stale", 1)
		stale <- err
	}()
	f.remote.waitHung(t, 1)
	f.remote.set(fail)
	takeN(t.Context(), f.s, cap4, "k", 1) // opens the breaker
	f.clk.Advance(10 * sec)
	f.remote.set(hang)
	probe := make(chan error, 1)
	go func() {
		_, err := takeN(t.Context(), f.s, cap4, "probe", 1)
		probe <- err
	}()
	f.remote.waitHung(t, 1)
	cancel() // the stale request's caller gives up
	if err := <-stale; err != context.Canceled {
		t.Errorf("the stale request: got %v, want context.Canceled", err)
	}
	if got := f.s.Circuit(); got != halfOpen {
		t.Errorf("a non-probe request abandoned during the probe: got state %v, want %v", got, halfOpen)
	}
	f.remote.set(fail)
	calls := f.remote.calls()
	if a, err := takeN(t.Context(), f.s, cap4, "k2", 1); err != nil || a != allow(1, 3, sec) {
		t.Errorf("a request during the probe: got %s, %v; want %s from the local store", show(a), err, show(allow(1, 3, sec)))
	}
	if got := f.remote.calls() - calls; got != 0 {
		t.Errorf("a request during the probe made %d remote calls (a second probe), want 0", got)
	}
	f.remote.set(succeed)
	f.remote.releaseAll()
	<-probe
}

// Bug 2: with the breaker open, FailOpen and FailClosed decide a request
// whose context is already done, instead of returning the caller's error
// (Local does return it, because the memory store checks the context). The
// package doc says the caller's cancellation returns the caller's error,
// and conformance's cancelled-context case requires it of every store.
func TestCancelledWhileOpen(t *testing.T) {
	for _, policy := range []hybrid.Policy{hybrid.Local, hybrid.FailOpen, hybrid.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			f := newFixture(t, hybrid.WithPolicy(policy), hybrid.WithBreaker(1, 10*sec))
			f.remote.set(fail)
			takeN(t.Context(), f.s, cap4, "k", 1)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if a, err := takeN(ctx, f.s, cap4, "k", 1); err != context.Canceled {
				t.Errorf("breaker open, cancelled context: got %s, %v; want context.Canceled", show(a), err)
			}
		})
	}
}

// Bug 3 (a contract question): FailOpen admits a cost over the capacity,
// which the model never admits (RetryAfter Never), although that needs no
// remote to know; FailClosed already answers Never.
func TestFailOpenCostOverCapacity(t *testing.T) {
	f := newFixture(t, hybrid.WithPolicy(hybrid.FailOpen), hybrid.WithBreaker(1, 10*sec))
	f.remote.set(fail)
	want := refused(spigot.Never)
	if a, err := takeN(t.Context(), f.s, cap4, "k", 5); err != nil || a != want {
		t.Errorf("FailOpen, cost 5 > capacity 4: got %s, %v; want %s", show(a), err, show(want))
	}
}
