package hybrid_test

// Tests of the half-open breaker's probe and of the policies while the
// breaker is open (they use hybrid_test.go's helpers).

import (
	"context"
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/hybridtest"
	"github.com/spigot-go/spigot/store/hybrid"
)

// TestOneProbeDespiteStaleAbandon: a request that started while the
// breaker was closed, and whose caller gives up while a probe is in
// flight, leaves the breaker half-open: only the probe's own call ends
// that state, so the next request goes to the policy and is never a
// second concurrent probe.
func TestOneProbeDespiteStaleAbandon(t *testing.T) {
	hybridtest.CheckGoroutines(t, patience)
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
	if a, err := takeN(t.Context(), f.s, cap4, "k2", 1); err != nil || !sameDecision(a, allow(1, 3, sec)) {
		t.Errorf("a request during the probe: got %s, %v; want %s from the local store", show(a), err, show(allow(1, 3, sec)))
	}
	if got := f.remote.calls() - calls; got != 0 {
		t.Errorf("a request during the probe made %d remote calls (a second probe), want 0", got)
	}
	f.remote.set(succeed)
	f.remote.releaseAll()
	<-probe
}

// TestCancelledWhileOpen: with the breaker open, a request whose context
// is already done gets the caller's error under every policy, not a
// decision, as the package doc says and conformance's cancelled-context
// case requires of every store.
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

// TestFailOpenCostOverCapacity: FailOpen denies a cost over the capacity
// with RetryAfter Never, as the model does whatever the state (no remote
// is needed to know it).
func TestFailOpenCostOverCapacity(t *testing.T) {
	f := newFixture(t, hybrid.WithPolicy(hybrid.FailOpen), hybrid.WithBreaker(1, 10*sec))
	f.remote.set(fail)
	want := refused(spigot.Never)
	if a, err := takeN(t.Context(), f.s, cap4, "k", 5); err != nil || a != want {
		t.Errorf("FailOpen, cost 5 > capacity 4: got %s, %v; want %s", show(a), err, show(want))
	}
}
