package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/lease"
)

// TestMaxKeys: a key that the Store cannot hold, at its cap, goes to the
// remote request by request, until a key it holds goes idle and is swept;
// WithMaxKeys(0) holds none.
func TestMaxKeys(t *testing.T) {
	type step struct {
		key    string
		sweep  bool // first, after two idle hours
		remote bool // each of the key's 100 requests goes to the remote
	}
	b := spigot.MustBucket("b", 100_000, spigot.Per(1, time.Hour))
	for _, c := range []struct {
		max   int
		steps []step
	}{
		{1, []step{{key: "a"}, {key: "b", remote: true}, {key: "a"}, {key: "b", sweep: true}}},
		{0, []step{{key: "a", remote: true}, {key: "a", sweep: true, remote: true}}},
	} {
		clk := clocktest.New(t0)
		remote, s := setup(t, clk, lease.WithMaxKeys(c.max))
		for i, st := range c.steps {
			if st.sweep {
				clk.Advance(2 * time.Hour)
				if err := s.Sweep(context.Background()); err != nil {
					t.Fatalf("max %d, step %d: Sweep: %v", c.max, i, err)
				}
			}
			before := remote.Calls()
			busy(t, s, clk, b, st.key, 100)
			if calls := remote.Calls() - before; calls == 100 != st.remote || !st.remote && calls > 20 {
				t.Errorf("max %d, step %d: 100 requests on %q made %d remote calls; want 100: %v, or at most 20", c.max, i, st.key, calls, st.remote)
			}
		}
	}
}
