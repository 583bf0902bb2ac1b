package conformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/conformance"
)

// TestMapStoreSuite shows a store author who groups their store's tests
// in a suite, as testify's suite package does, checking their store with
// the conformance suite beside their own tests: conformance.Run takes the
// suite's *testing.T (testify's s.T()), and runs each case as a subtest of
// the suite's, so a failing case is reported as
// TestMapStoreSuite/TestConformance/<case>.
func TestMapStoreSuite(t *testing.T) {
	t.Run("TestConformance", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
			return &MapStore{Clock: clk}
		})
	})
	t.Run("TestConformanceRealTime", func(t *testing.T) {
		conformance.RunRealTime(t, func(t *testing.T) spigot.Store {
			return &MapStore{Clock: clock.System()}
		})
	})
	t.Run("TestRefill", testMapStoreRefill)
}

// testMapStoreRefill is one of the author's own tests, on a store of its
// own (the conformance suite makes a store per case itself).
func testMapStoreRefill(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	login := spigot.New(&MapStore{Clock: clk}, spigot.MustBucket("login", 2, spigot.PerSecond(1)))
	ctx := context.Background()
	allow := func(step int, want bool) spigot.Decision {
		t.Helper()
		a, err := login.Allow(ctx, "u")
		if err != nil || a.Allowed() != want {
			t.Fatalf("step %d: got %+v, %v; want allowed %v", step, a, err, want)
		}
		return a
	}
	allow(0, true)
	allow(1, true)
	a := allow(2, false)
	if a.RetryAfter != time.Second {
		t.Fatalf("step 2: got RetryAfter %v; want 1s", a.RetryAfter)
	}
	clk.Advance(a.RetryAfter)
	allow(3, true)
}
