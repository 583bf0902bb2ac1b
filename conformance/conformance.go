// Package conformance is the test suite every spigot.Store must pass: the
// project's statement of the model of store.Apply, runnable against
// any store, including one you write yourself.
//
// A store's tests call Run with a factory that builds the store on the
// fake clock the suite hands it:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
//			return mystore.New(mystore.WithClock(clk))
//		})
//	}
//
// Each case is a subtest with its own store and clock, and every failure
// says which request, at which instant, got which field wrong, as in this
// failure of the subtest "burst":
//
//	bucket burst(cap 20, 1/3s), key "k", step 21 (t0+0s, cost 1): RetryAfter = 2.999s, want 3s
//
// where t0 is the instant the fake clock starts at. A store whose time
// cannot be controlled (one that reads a server's clock) runs RunRealTime,
// the part of the model that can be checked with the real clock and short
// sleeps. RunBenchmarks measures a store with the same workloads as
// spigot's own benchmarks.
//
// Optional capabilities of a store, such as Lener, are found by type
// assertion, as in testing/fstest and database/sql/driver; their cases
// skip when the store lacks them. The cases of a store's DoMulti of
// ops skip when it answers errors.ErrUnsupported (as a store that applies
// one op per call does); those of spigot.DoMulti, which then applies the
// ops with Do, or part by part, run on every store.
package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
)

// Lener is the optional capability of a store that can count the keys it
// holds state for, as store/memory does. A store with Len promises bounded
// memory: Len counts exactly the keys whose bucket is not full at the
// store's current time, so it falls to 0 once the clock passes every key's
// ResetAfter. Run checks that promise.
type Lener interface {
	Len() int
}

// t0 is the instant at which Run starts every case's fake clock. Steps are
// written as offsets from it.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Run checks that the stores newStore returns keep spigot's model. Every
// case is a subtest that calls newStore once, with the subtest's t (so that
// t.Cleanup and t.Skip apply to it) and a fresh fake clock reading t0, from
// which the store must read its time: the suite moves the clock.
//
// Every case assumes that each bucket it uses starts full, so newStore must
// return a store without state: a new in-process store, or a remote store
// on an emptied database or under a prefix of its own. Cases use distinct
// bucket names, so a store may share one backend between the cases of one
// run. Run does not call newStore concurrently.
//
// A store that expires state on a clock of its own (a Redis key's TTL runs
// on the server's clock) while it reads the fake clock must keep state at
// least as long as a case runs in real time, even where ResetAfter is a
// millisecond: keeping a key's state longer than its ResetAfter is always
// harmless, since a full bucket's state reads as full.
func Run(t *testing.T, newStore func(t *testing.T, clk clock.Clock) spigot.Store) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			s := newStore(t, clk)
			if s == nil {
				t.Fatal("newStore returned nil")
			}
			c.run(t, env{s: s, clk: clk})
		})
	}
}

// RunRealTime checks the part of spigot's model that holds on the real
// clock: a burst then denials, a retry after exactly RetryAfter, refill at
// a fast rate, reset, a cost over the capacity, concurrency, several ops
// per call, and bad input.
// It is for stores whose time the test cannot control, such as a Redis
// store reading the server's TIME, and it sleeps, briefly: it takes about
// half a second.
//
// Every case calls newStore once with its subtest's t. Limit names carry
// a random suffix per run, so newStore may return stores that share one
// server, even across runs. Its assertions allow for any scheduling delay:
// they hold however slowly the test runs, as long as the store's clock and
// the test's advance at the same rate.
func RunRealTime(t *testing.T, newStore func(t *testing.T) spigot.Store) {
	t.Helper()
	suffix := fmt.Sprintf("-%08x", runID())
	for _, c := range realTimeCases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			if s == nil {
				t.Fatal("newStore returned nil")
			}
			c.run(t, env{s: s, suffix: suffix})
		})
	}
}

// A testCase is one named case of the suite. It takes a testing.TB, rather
// than a *testing.T, so that the suite's own tests can run it against
// broken stores and check that it fails.
type testCase struct {
	name string
	run  func(t testing.TB, e env)
}

// env is what a case runs against.
type env struct {
	s      spigot.Store
	clk    *clocktest.Clock // nil in real time
	suffix string           // appended to bucket names
}

// bucket returns a bucket named name plus the run's suffix.
func (e env) bucket(t testing.TB, name string, capacity int64, rate spigot.Rate) spigot.Limit {
	t.Helper()
	b, err := spigot.NewBucket(name+e.suffix, capacity, rate)
	if err != nil {
		t.Fatalf("the suite's bucket: %v", err)
	}
	return b
}

// at moves the fake clock to t0+d.
func (e env) at(d time.Duration) { e.clk.Set(t0.Add(d)) }
