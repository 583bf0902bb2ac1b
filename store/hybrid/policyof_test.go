package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// TestPolicyOf: while the remote is down, each limit falls back by its
// own policy, in one store: the login limit fails closed, browsing is
// limited locally; a batch of both stays all or nothing, so a denial of
// either charges the other nothing.
func TestPolicyOf(t *testing.T) {
	login := spigot.MustBucket("po-login", 3, spigot.Per(3, time.Hour))
	browse := spigot.MustBucket("po-browse", 10, spigot.Per(10, time.Hour))
	policy := func(l spigot.Limit) hybrid.Policy {
		if l == login {
			return hybrid.FailClosed
		}
		return hybrid.Local
	}
	local := memory.New()
	s := hybrid.New(down{}, local, hybrid.WithPolicyOf(policy))
	ctx := context.Background()
	remaining := func(step int, want int64) {
		t.Helper()
		d, err := local.Do(ctx, spigot.Op{Limit: browse, Key: "ann", Action: spigot.Peek})
		if err != nil || d.Remaining != want {
			t.Errorf("step %d: the local browse limit: %+v, %v; want %d remaining", step, d, err, want)
		}
	}

	if d, err := s.Do(ctx, spigot.Op{Limit: login, Key: "ann", N: 1}); err != nil || d.Allowed() || !d.Degraded() {
		t.Errorf("step 0: login = %+v, %v; want denied, degraded (fail closed)", d, err)
	}
	if d, err := s.Do(ctx, spigot.Op{Limit: browse, Key: "ann", N: 1}); err != nil || !d.Allowed() || d.Remaining != 9 {
		t.Errorf("step 1: browse = %+v, %v; want admitted by the local store, 9 left", d, err)
	}
	out := make([]spigot.Decision, 2)
	ops := []spigot.Op{{Limit: login, Key: "ann", N: 1}, {Limit: browse, Key: "ann", N: 1}}
	if err := s.DoMulti(ctx, spigot.AllOrNothing, ops, out); err != nil || out[0].Allowed() || !out[1].Allowed() || out[1].N != 0 || out[1].Remaining != 9 {
		t.Errorf("step 2: login and browse = %+v, %v; want login denied, browse told (9 left) but not charged", out, err)
	}
	remaining(2, 9)

	// Fail open by default, browsing local: the local store's denial
	// charges nothing, and an admission charges the local limit alone.
	local2 := memory.New()
	s2 := hybrid.New(down{}, local2, hybrid.WithPolicy(hybrid.FailOpen), hybrid.WithPolicyOf(func(l spigot.Limit) hybrid.Policy {
		if l == browse {
			return hybrid.Local
		}
		return hybrid.FailOpen
	}))
	if err := s2.DoMulti(ctx, spigot.AllOrNothing, ops, out); err != nil || !out[0].Allowed() || !out[0].Degraded() || out[0].N != 1 || !out[1].Allowed() || out[1].Remaining != 9 {
		t.Errorf("step 3: login and browse = %+v, %v; want both admitted, login by FailOpen, browse locally (9 left)", out, err)
	}
	ops[1].N = 10 // more than the 9 left
	if err := s2.DoMulti(ctx, spigot.AllOrNothing, ops, out); err != nil || out[1].Allowed() || out[0].N != 0 {
		t.Errorf("step 4: login and 10 of browse = %+v, %v; want browse denied, login not charged (N 0)", out, err)
	}
	local = local2
	remaining(4, 9)
}
