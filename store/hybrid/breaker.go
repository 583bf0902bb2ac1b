package hybrid

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spigot-go/spigot/clock"
)

// A Circuit is the state of the breaker.
type Circuit int32

const (
	// CircuitClosed: requests go to the remote store.
	CircuitClosed Circuit = iota
	// CircuitOpen: requests go to the policy, without a network wait.
	CircuitOpen
	// CircuitHalfOpen: one request probes the remote; the others go to the
	// policy.
	CircuitHalfOpen
)

var circuitNames = [...]string{CircuitClosed: "closed", CircuitOpen: "open", CircuitHalfOpen: "half-open"}

// String returns the circuit's name, as in "half-open".
func (c Circuit) String() string { return name(c, "Circuit", circuitNames[:]) }

// Circuit reports the breaker's state.
func (s *Store) Circuit() Circuit { return s.breaker.circuit() }

// A breaker is a Store's circuit breaker. Closed, it lets every request
// call the remote, and opens after failures consecutive remote failures.
// Open, it lets none through until cooldown has passed on clock; then the
// first request turns it half-open and is its probe, while the others
// still go to the policy. The probe's success closes it; its failure opens
// it for another cooldown; a probe that learns nothing (its caller gave
// up, or a large call timed out) opens it again at once, so that the next
// request probes. observe, when not nil, is told every transition, in
// order, with the context of the call that moved it.
//
// It is safe for concurrent use. Its zero value is not usable: New sets
// failures, cooldown and clock.
type breaker struct {
	failures int32
	cooldown time.Duration
	clock    clock.Clock
	observe  func(ctx context.Context, from, to Circuit)

	answers   atomic.Uint64 // remote calls that succeeded, ever
	state     atomic.Int32  // a Circuit; changed only under mu
	run       atomic.Int32  // consecutive remote failures while closed
	runStart  atomic.Int64  // UnixNano, real time: the run's first failure
	openUntil atomic.Int64  // UnixNano on clock when an open breaker lets a probe through
	mu        sync.Mutex    // serializes transitions (and their reports)
}

func (b *breaker) circuit() Circuit { return Circuit(b.state.Load()) }

// allow reports whether a request may call the remote, and whether that
// call is the breaker's probe: every request may while the breaker is
// closed; while it is open, only the first request after the cooldown,
// which turns it half-open and probes; while it is half-open, none.
func (b *breaker) allow(ctx context.Context) (call, probe bool) {
	switch b.circuit() {
	case CircuitClosed:
		return true, false
	case CircuitHalfOpen:
		return false, false
	}
	if b.clock.Now().UnixNano() < b.openUntil.Load() {
		return false, false
	}
	return b.transition(ctx, CircuitOpen, CircuitHalfOpen, 0), true
}

// succeeded records a remote success: a probe's closes the breaker; any
// other only clears the run of failures (it may have started before the
// breaker opened, so it says nothing of the remote now).
func (b *breaker) succeeded(ctx context.Context, probe bool) {
	b.answers.Add(1)
	if probe {
		b.transition(ctx, CircuitHalfOpen, CircuitClosed, 0)
	}
	b.run.Store(0)
}

// failed records a remote failure: a probe's reopens the breaker for
// another cooldown; otherwise the run of failures grows, and opens the
// breaker when it reaches b.failures.
//
// A run of timeouts (timeout is the call's, above 0 for a timeout) opens
// it only once it has also lasted a timeout: the calls a stalled process
// (a busy node's) had in flight time out together when it runs again,
// and the next ones, answered, end the run.
func (b *breaker) failed(ctx context.Context, probe bool, timeout time.Duration) {
	if probe {
		b.transition(ctx, CircuitHalfOpen, CircuitOpen, b.cooldown)
		return
	}
	now := time.Now().UnixNano()
	n := b.run.Add(1)
	if n == 1 {
		b.runStart.Store(now)
	}
	if timeout > 0 && now-b.runStart.Load() < int64(timeout) {
		return
	}
	if n >= b.failures {
		b.transition(ctx, CircuitClosed, CircuitOpen, b.cooldown)
	}
}

// transition moves the breaker from one state to another, if it is still
// in from, and reports it; when it opens, the next probe is allowed after
// cooldown. It reports whether it moved.
func (b *breaker) transition(ctx context.Context, from, to Circuit, cooldown time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.circuit() != from {
		return false
	}
	if to == CircuitOpen {
		b.run.Store(0)
		b.openUntil.Store(b.clock.Now().Add(cooldown).UnixNano())
	}
	b.state.Store(int32(to))
	if b.observe != nil {
		b.observe(ctx, from, to)
	}
	return true
}

// untilProbe is the RetryAfter of a FailClosed denial: the time until the
// breaker lets a probe through, rounded up to the millisecond, or the
// cooldown when the breaker is not open (the remote just failed).
func (b *breaker) untilProbe() time.Duration {
	d := b.cooldown
	if b.circuit() == CircuitOpen {
		d = time.Duration(b.openUntil.Load() - b.clock.Now().UnixNano())
	}
	d = (d + time.Millisecond - 1).Truncate(time.Millisecond)
	return max(d, time.Millisecond)
}

// latency is the slowest answer of the remote lately: the slowest seen,
// halved for every latencyHalfLife since. Its zero value has seen none. It
// is safe for concurrent use: concurrent updates may lose a sample, which
// an estimate can afford.
type latency struct {
	peak   atomic.Int64 // ns; 0: no answer yet
	peakAt atomic.Int64 // UnixNano, real time
}

// latencyHalfLife is how fast the slowest answer is forgotten.
const latencyHalfLife = 10 * time.Second

// at returns the slowest answer as of now (UnixNano).
func (l *latency) at(now int64) time.Duration {
	peak := l.peak.Load()
	if elapsed := now - l.peakAt.Load(); elapsed > 0 {
		return time.Duration(float64(peak) * math.Exp2(-float64(elapsed)/float64(latencyHalfLife)))
	}
	return time.Duration(peak)
}

// add adds the latency of an answer.
func (l *latency) add(r time.Duration) {
	now := time.Now().UnixNano()
	if r = max(r, 1); r > l.at(now) {
		l.peak.Store(int64(r))
		l.peakAt.Store(now)
	}
}

// timeout returns the remote call's timeout: twice the slowest answer of
// late, within DefaultTimeout and DefaultMaxTimeout; DefaultMaxTimeout
// before the first answer.
func (l *latency) timeout() time.Duration {
	if l.peak.Load() == 0 {
		return DefaultMaxTimeout
	}
	return min(max(2*l.at(time.Now().UnixNano()), DefaultTimeout), DefaultMaxTimeout)
}
