package otelspigot_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
)

// newLease returns a lease Store in front of remote, on clk, observed
// through mp; the test closes it at its end.
func newLease(t *testing.T, clk *clocktest.Clock, remote spigot.Store, mp *sdkmetric.MeterProvider) *lease.Store {
	t.Helper()
	s := lease.New(remote, lease.WithClock(clk),
		lease.WithObserver(otelspigot.LeaseObserver(otelspigot.WithMeterProvider(mp))))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// leaseBusy takes 1 token of l for key from s, n times, 1µs apart on clk,
// and returns how many were admitted and how many failed.
func leaseBusy(t *testing.T, s spigot.Store, clk *clocktest.Clock, l spigot.Limit, key string, n int) (admitted, failed int64) {
	t.Helper()
	for range n {
		d, err := s.Do(context.Background(), spigot.Op{Limit: l, Key: key, N: 1})
		switch {
		case err != nil:
			failed++
		case d.Allowed():
			admitted++
		}
		clk.Advance(time.Microsecond)
	}
	return admitted, failed
}

func remaining(t *testing.T, s spigot.Store, l spigot.Limit, key string) int64 {
	t.Helper()
	d, err := s.Do(context.Background(), spigot.Op{Limit: l, Key: key, Action: spigot.Peek})
	if err != nil {
		t.Fatalf("Peek(%s, %q): %v", l.Name(), key, err)
	}
	return d.Remaining
}

// TestLeaseObserver drives two limits through a lease Store on a fake
// clock, one with more room than its busy key takes (its leases hold
// tokens at Close) and one that runs dry, and checks that every request
// is a hit or a take, that the tokens taken less those returned are the
// tokens admitted, by limit, and the units and descriptions.
func TestLeaseObserver(t *testing.T) {
	mp, r := provider(t)
	clk := clocktest.New(t0)
	remote := memory.New(memory.WithClock(clk))
	s := newLease(t, clk, remote, mp)
	steps := []struct {
		limit    spigot.Limit
		requests int
		admitted int64
	}{
		{spigot.MustBucket("roomy", 10_000, spigot.Per(10_000, time.Hour)), 1000, 1000},
		{spigot.MustBucket("tight", 100, spigot.Per(100, time.Hour)), 150, 100},
	}
	for i, st := range steps {
		admitted, failed := leaseBusy(t, s, clk, st.limit, "tenant-7", st.requests)
		if admitted != st.admitted || failed != 0 {
			t.Errorf("step %d: %s: got %d admitted and %d failed, want %d and none", i, st.limit.Name(), admitted, failed, st.admitted)
		}
	}
	held := collect(t, r).sums(t, "spigot.lease.tokens.returned")
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}

	m := collect(t, r)
	hits, denials, takes := m.sums(t, "spigot.lease.hits"), m.sums(t, "spigot.lease.denials"), m.sums(t, "spigot.lease.takes")
	taken, returned := m.sums(t, "spigot.lease.tokens.taken"), m.sums(t, "spigot.lease.tokens.returned")
	for i, st := range steps {
		a := "spigot.limit=" + st.limit.Name()
		if hits[a]+denials[a]+takes[a] != int64(st.requests) {
			t.Errorf("step %d: %s: %d hits, %d denials and %d takes; want them to add up to the %d requests", i, st.limit.Name(), hits[a], denials[a], takes[a], st.requests)
		}
		if got := taken[a] - returned[a]; got != st.admitted {
			t.Errorf("step %d: %s: %d tokens taken, %d returned: %d kept; want the %d admitted", i, st.limit.Name(), taken[a], returned[a], got, st.admitted)
		}
		if got, want := remaining(t, remote, st.limit, "tenant-7"), st.limit.Capacity()-st.admitted; got != want {
			t.Errorf("step %d: %s: the remote holds %d after Close; want %d", i, st.limit.Name(), got, want)
		}
	}
	if a := "spigot.limit=roomy"; hits[a] < 900 || returned[a] == held[a] {
		t.Errorf("roomy: %d hits, %d tokens returned at Close; want 900 hits at least, and leases given back", hits[a], returned[a]-held[a])
	}
	for _, kv := range m.allAttrs() {
		if kv.Key != otelspigot.LimitKey {
			t.Errorf("attribute %s=%s; want only spigot.limit when nothing fails", kv.Key, kv.Value.String())
		}
	}
	for name, unit := range map[string]string{
		"spigot.lease.hits":            "{request}",
		"spigot.lease.takes":           "{call}",
		"spigot.lease.tokens.taken":    "{token}",
		"spigot.lease.tokens.returned": "{token}",
	} {
		if got := m[name].Unit; got != unit {
			t.Errorf("%s: unit got %q, want %q", name, got, unit)
		}
		if m[name].Description == "" {
			t.Errorf("%s: no description", name)
		}
	}
}

// TestLeaseObserverFailures takes from a remote that goes down while a
// busy key holds a lease, comes back, and is down again at Close: the
// takes that failed count with their error.type, as do the tokens of the
// refunds that failed at Close, which the remote never gets back.
func TestLeaseObserverFailures(t *testing.T) {
	mp, r := provider(t)
	clk := clocktest.New(t0)
	remote := &switchStore{Store: memory.New(memory.WithClock(clk))}
	s := newLease(t, clk, remote, mp)
	l := spigot.MustBucket("flaky", 10_000, spigot.Per(10_000, time.Hour))
	down := errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	const (
		ok     = "spigot.limit=flaky"
		failed = "error.type=unavailable,spigot.limit=flaky"
	)

	var admitted, failures int64
	for i, err := range []error{nil, down, nil} {
		remote.set(err)
		a, f := leaseBusy(t, s, clk, l, "tenant-7", 1000)
		admitted, failures = admitted+a, failures+f
		if (f > 0) != (err != nil) || a+f != 1000 {
			t.Errorf("step %d: remote error %v: got %d admitted and %d failed of 1000; want failures only while it is down, and no denials", i, err, a, f)
		}
		if got := collect(t, r).sums(t, "spigot.lease.takes")[failed]; got != failures {
			t.Errorf("step %d: spigot.lease.takes{%s} = %d; want the %d requests that failed", i, failed, got, failures)
		}
	}
	remote.set(down)
	if err := s.Close(context.Background()); !errors.Is(err, down) {
		t.Fatalf("Close: got %v, want the refunds' error %v", err, down)
	}
	remote.set(nil)

	m := collect(t, r)
	hits, takes := m.sums(t, "spigot.lease.hits"), m.sums(t, "spigot.lease.takes")
	taken, returned := m.sums(t, "spigot.lease.tokens.taken"), m.sums(t, "spigot.lease.tokens.returned")
	if got := hits[ok] + takes[ok] + takes[failed]; got != 3000 || len(hits) != 1 || len(takes) != 2 {
		t.Errorf("hits %v and takes %v; want them to add up to the 3000 requests, by limit and error", hits, takes)
	}
	if lost := returned[failed]; lost == 0 || len(returned) > 2 || len(taken) != 1 {
		t.Errorf("tokens taken %v, returned %v; want some returned with error.type=unavailable", taken, returned)
	}
	if got := taken[ok] - returned[ok] - returned[failed]; got != admitted {
		t.Errorf("%d tokens taken, %d returned, %d lost: %d kept; want the %d admitted", taken[ok], returned[ok], returned[failed], got, admitted)
	}
	if got, want := remaining(t, remote, l, "tenant-7"), l.Capacity()-admitted-returned[failed]; got != want {
		t.Errorf("the remote holds %d after Close; want %d: the capacity less %d admitted and %d lost", got, want, admitted, returned[failed])
	}
}

// TestLeaseObserverAllocs: with the SDK, every function of the observer
// records without allocating once the limit's attributes are built.
func TestLeaseObserverAllocs(t *testing.T) {
	ctx := context.Background()
	mp, _ := provider(t)
	for _, p := range []struct {
		name string
		o    lease.Observer
	}{
		{"sdk", otelspigot.LeaseObserver(otelspigot.WithMeterProvider(mp))},
		{"noop", otelspigot.LeaseObserver(otelspigot.WithMeterProvider(noop.NewMeterProvider()))},
	} {
		o := p.o
		op := spigot.Op{Limit: login, Key: "10.0.0.1", N: 1}
		down := errors.New("connection refused")
		for name, f := range map[string]func(){
			"Hit":          func() { o.Hit(ctx, op) },
			"Take":         func() { o.Take(ctx, op, 5, 5, nil) },
			"Take failed":  func() { o.Take(ctx, op, 5, 0, down) },
			"Return":       func() { o.Return(ctx, login, 3, nil) },
			"Return error": func() { o.Return(ctx, login, 3, down) },
		} {
			f() // the first measurement of a series may allocate it
			if n := testing.AllocsPerRun(1000, f); n != 0 {
				t.Errorf("%s: %s: got %v allocations, want 0", p.name, name, n)
			}
		}
	}
}

// TestLeaseWrapped: a lease Store wrapped by Wrap, under a Limiter and a
// Group, decides as it would bare: each limit admits exactly its capacity,
// and Wrap's decisions and the lease's hits and takes count every request.
func TestLeaseWrapped(t *testing.T) {
	ctx := context.Background()
	mp, r := provider(t)
	clk := clocktest.New(t0)
	remote := memory.New(memory.WithClock(clk))
	s := newLease(t, clk, remote, mp)
	w := otelspigot.Wrap(s, otelspigot.WithMeterProvider(mp), otelspigot.WithTracerProvider(tracenoop.NewTracerProvider()))

	perTenant := spigot.MustBucket("tenant", 100, spigot.Per(100, time.Hour))
	perIP := spigot.MustBucket("ip", 1000, spigot.Per(1000, time.Hour))
	limiter := spigot.New(w, perTenant, spigot.WithClock(clk))
	group := spigot.NewGroup(w, perTenant, perIP)
	steps := []struct {
		allow    func() (spigot.Decision, error)
		requests int
		admitted int
	}{
		// A busy key from leases: the capacity, then denials.
		{func() (spigot.Decision, error) { return limiter.Allow(ctx, "tenant-1") }, 150, 100},
		// All or nothing, from the leases while they hold both limits:
		// the tenant's limit denies first.
		{func() (spigot.Decision, error) {
			d, err := group.Allow(ctx, "tenant-2", "10.0.0.1")
			return d.Decision, err
		}, 150, 100},
	}
	var first map[string]int64 // the lease's counts after the limiter's requests
	for i, st := range steps {
		if i == 1 {
			m := collect(t, r)
			first = map[string]int64{
				"hits":    m.sums(t, "spigot.lease.hits")["spigot.limit=tenant"],
				"denials": m.sums(t, "spigot.lease.denials")["spigot.limit=tenant"],
				"takes":   m.sums(t, "spigot.lease.takes")["spigot.limit=tenant"],
			}
		}
		admitted := 0
		for range st.requests {
			d, err := st.allow()
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if d.Allowed() {
				admitted++
			}
			clk.Advance(time.Microsecond)
		}
		if admitted != st.admitted {
			t.Errorf("step %d: got %d admitted of %d, want %d", i, admitted, st.requests, st.admitted)
		}
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := remaining(t, remote, perTenant, "tenant-1"); got != 0 {
		t.Errorf("tenant-1: the remote holds %d after Close, want 0", got)
	}

	m := collect(t, r)
	equalMap(t, "spigot.decisions", m.sums(t, "spigot.decisions"), map[string]int64{
		"spigot.limit=tenant,spigot.outcome=allowed": 200,
		"spigot.limit=tenant,spigot.outcome=denied":  100,
		"spigot.limit=ip,spigot.outcome=allowed":     150, // its own outcome, though the tenant's denied 50
	})
	if n := first["hits"] + first["denials"] + first["takes"]; n != 150 || first["hits"] == 0 {
		t.Errorf("after the limiter's requests: %v; want them to add up to its 150 requests, hits among them", first)
	}
	if hits := m.sums(t, "spigot.lease.hits")["spigot.limit=tenant"]; hits <= first["hits"] {
		t.Errorf("%d hits after the group's requests, %d before; want some of the group's tenant limit from leases", hits, first["hits"])
	}
}
