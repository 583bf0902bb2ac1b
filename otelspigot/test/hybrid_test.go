package otelspigot_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// switchStore is a remote whose answer the test sets: the memory store's,
// or err.
type switchStore struct {
	spigot.Store
	err atomic.Pointer[error]
}

func (s *switchStore) set(err error) {
	if err == nil {
		s.err.Store(nil)
		return
	}
	s.err.Store(&err)
}

func (s *switchStore) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := s.err.Load(); err != nil {
		return spigot.Decision{}, *err
	}
	return s.Store.Do(ctx, op)
}

func (s *switchStore) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if err := s.err.Load(); err != nil {
		return *err
	}
	return s.Store.DoMulti(ctx, mode, ops, out)
}

// TestHybridObserver drives store/hybrid through an outage of its remote,
// on a fake clock, and checks every instrument of HybridObserver after
// each step: decisions by path, remote calls timed, remote errors by kind,
// breaker transitions, and the gauge of ObserveCircuit.
func TestHybridObserver(t *testing.T) {
	ctx := context.Background()
	mp, r := provider(t)
	clk := clocktest.New(t0)
	remote := &switchStore{Store: memory.New(memory.WithClock(clk))}
	h := hybrid.New(remote, memory.New(memory.WithClock(clk)),
		hybrid.WithObserver(otelspigot.HybridObserver(otelspigot.WithMeterProvider(mp))),
		hybrid.WithBreaker(2, time.Second), hybrid.WithClock(clk), hybrid.WithTimeout(time.Minute))
	if _, err := otelspigot.ObserveCircuit(h, otelspigot.WithMeterProvider(mp)); err != nil {
		t.Fatalf("ObserveCircuit: %v", err)
	}
	op := spigot.Op{Limit: spigot.MustBucket("hyb", 1000, spigot.PerSecond(1)), Key: "10.0.0.9", N: 1}
	down := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	wrongType := fmt.Errorf("WRONGTYPE: %w", spigot.ErrRequestFailed)

	const (
		closedOpen   = "spigot.circuit.from=closed,spigot.circuit.to=open"
		openHalf     = "spigot.circuit.from=open,spigot.circuit.to=half-open"
		halfClosed   = "spigot.circuit.from=half-open,spigot.circuit.to=closed"
		halfOpen     = "spigot.circuit.from=half-open,spigot.circuit.to=open"
		remotePath   = "spigot.path=remote"
		localPath    = "spigot.path=local"
		unavailable  = "error.type=unavailable"
		requestError = "error.type=request"
	)
	steps := []struct {
		advance time.Duration
		err     error // the remote's, nil: it answers
		calls   int   // Do calls in the step
		fails   bool  // whether they return an error

		paths       map[string]int64 // totals after the step
		errs        map[string]int64
		remoteCalls uint64
		transitions map[string]int64
		circuit     int64
	}{
		{calls: 3, paths: map[string]int64{remotePath: 3}, remoteCalls: 3, circuit: 0},
		// A request error is an answer: no fallback, the breaker stays.
		{err: wrongType, calls: 1, fails: true, paths: map[string]int64{remotePath: 3},
			errs: map[string]int64{requestError: 1}, remoteCalls: 4, circuit: 0},
		// Down: two failures open the breaker, then the local store
		// decides without a call.
		{err: down, calls: 4, paths: map[string]int64{remotePath: 3, localPath: 4},
			errs: map[string]int64{requestError: 1, unavailable: 2}, remoteCalls: 6,
			transitions: map[string]int64{closedOpen: 1}, circuit: 2},
		// Past the cooldown a probe fails: open again.
		{advance: time.Second, err: down, calls: 1, paths: map[string]int64{remotePath: 3, localPath: 5},
			errs: map[string]int64{requestError: 1, unavailable: 3}, remoteCalls: 7,
			transitions: map[string]int64{closedOpen: 1, openHalf: 1, halfOpen: 1}, circuit: 2},
		// Back up, but the cooldown has not passed: still local.
		{advance: time.Second - time.Millisecond, calls: 1, paths: map[string]int64{remotePath: 3, localPath: 6},
			errs: map[string]int64{requestError: 1, unavailable: 3}, remoteCalls: 7,
			transitions: map[string]int64{closedOpen: 1, openHalf: 1, halfOpen: 1}, circuit: 2},
		// Past it, a probe closes the breaker.
		{advance: time.Millisecond, calls: 2, paths: map[string]int64{remotePath: 5, localPath: 6},
			errs: map[string]int64{requestError: 1, unavailable: 3}, remoteCalls: 9,
			transitions: map[string]int64{closedOpen: 1, openHalf: 2, halfOpen: 1, halfClosed: 1}, circuit: 0},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		remote.set(s.err)
		for range s.calls {
			_, err := h.Do(ctx, op)
			if (err != nil) != s.fails {
				t.Fatalf("step %d: got error %v, want one: %v", i, err, s.fails)
			}
		}
		m := collect(t, r)
		equalMap(t, fmt.Sprintf("step %d: spigot.hybrid.decisions", i), m.sums(t, "spigot.hybrid.decisions"), s.paths)
		equalMap(t, fmt.Sprintf("step %d: spigot.hybrid.remote.errors", i), m.sums(t, "spigot.hybrid.remote.errors"), orEmpty(s.errs))
		equalMap(t, fmt.Sprintf("step %d: spigot.hybrid.remote.duration", i), m.counts(t, "spigot.hybrid.remote.duration"), map[string]uint64{"": s.remoteCalls})
		equalMap(t, fmt.Sprintf("step %d: spigot.hybrid.circuit.transitions", i), m.sums(t, "spigot.hybrid.circuit.transitions"), orEmpty(s.transitions))
		equalMap(t, fmt.Sprintf("step %d: spigot.hybrid.circuit", i), m.sums(t, "spigot.hybrid.circuit"), map[string]int64{"": s.circuit})
	}

	m := collect(t, r)
	for name, unit := range map[string]string{
		"spigot.hybrid.decisions":           "{decision}",
		"spigot.hybrid.remote.duration":     "s",
		"spigot.hybrid.remote.errors":       "{error}",
		"spigot.hybrid.circuit.transitions": "{transition}",
		"spigot.hybrid.circuit":             "{state}",
	} {
		if got := m[name].Unit; got != unit {
			t.Errorf("%s: unit got %q, want %q", name, got, unit)
		}
		if m[name].Description == "" {
			t.Errorf("%s: no description", name)
		}
	}
}

func orEmpty[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// TestHybridObserverAllocs: with the SDK, every function of the observer
// records without allocating.
func TestHybridObserverAllocs(t *testing.T) {
	ctx := context.Background()
	mp, _ := provider(t)
	for _, p := range []struct {
		name string
		o    hybrid.Observer
	}{
		{"sdk", otelspigot.HybridObserver(otelspigot.WithMeterProvider(mp))},
		{"noop", otelspigot.HybridObserver(otelspigot.WithMeterProvider(noop.NewMeterProvider()))},
	} {
		o := p.o
		op := spigot.Op{Limit: login, Key: "10.0.0.1", N: 1}
		down := errors.New("connection refused")
		for name, f := range map[string]func(){
			"Decision":    func() { o.Decision(ctx, op, hybrid.PathLocal, spigot.Decision{N: 1}) },
			"RemoteCall":  func() { o.RemoteCall(ctx, op, nil, time.Millisecond) },
			"RemoteError": func() { o.RemoteError(ctx, op, down, time.Millisecond) },
			"Transition":  func() { o.Transition(ctx, hybrid.CircuitClosed, hybrid.CircuitOpen) },
		} {
			f() // the first measurement of a series may allocate it
			if n := testing.AllocsPerRun(1000, f); n != 0 {
				t.Errorf("%s: %s: got %v allocations, want 0", p.name, name, n)
			}
		}
	}
}

// TestHybridObserverOutOfRange: a path or circuit the observer does not
// know (from a newer store/hybrid) is not recorded, and does not panic.
func TestHybridObserverOutOfRange(t *testing.T) {
	ctx := context.Background()
	mp, r := provider(t)
	o := otelspigot.HybridObserver(otelspigot.WithMeterProvider(mp))
	op := spigot.Op{Limit: login, Key: "10.0.0.1", N: 1}
	o.Decision(ctx, op, hybrid.Path(-1), spigot.Decision{})
	o.Decision(ctx, op, hybrid.PathGuard+1, spigot.Decision{})
	o.Transition(ctx, hybrid.Circuit(-1), hybrid.CircuitOpen)
	o.Transition(ctx, hybrid.CircuitClosed, hybrid.CircuitHalfOpen+1)
	m := collect(t, r)
	for _, name := range []string{"spigot.hybrid.decisions", "spigot.hybrid.circuit.transitions"} {
		if got := m.sums(t, name); len(got) != 0 {
			t.Errorf("%s: got %v, want nothing", name, got)
		}
	}
}
