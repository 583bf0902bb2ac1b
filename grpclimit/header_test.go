package grpclimit_test

import (
	"context"
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/store/memory"
)

// degrading is a store that decides as its Store does, but marks the
// decisions of the limits named in it Degraded, as a fallback store
// would.
type degrading struct {
	spigot.Store
	names map[string]bool
}

func (s degrading) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	d, err := s.Store.Do(ctx, op)
	if s.names[op.Limit.Name()] {
		d.Remaining = -1
	}
	return d, err
}

func (s degrading) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	err := s.Store.DoMulti(ctx, mode, ops, out)
	for i, op := range ops {
		if s.names[op.Limit.Name()] {
			out[i].Remaining = -1
		}
	}
	return err
}

// TestMetadataOfRules: the ratelimit-policy metadata holds a member per
// rule that applies to the call, in the order of the rules; ratelimit
// holds one per decision that is not Degraded, and is left out when
// every one is.
func TestMetadataOfRules(t *testing.T) {
	ip := spigot.MustBucket("ip", 100, spigot.PerSecond(100))
	tenant := spigot.MustBucket("tenant", 2, spigot.PerHour(2))
	const both = `"ip";q=100;w=1, "tenant";q=2;w=3600`
	for i, c := range []struct {
		degraded []string
		tenant   bool // the rule keyed by tenant applies
		policy   string
		limits   string // "": no ratelimit metadata
	}{
		{nil, false, `"ip";q=100;w=1`, `"ip";r=99;t=1`},
		{nil, true, both, `"ip";r=99;t=1, "tenant";r=1;t=1800`},
		{[]string{"tenant"}, true, both, `"ip";r=99;t=1`},
		{[]string{"ip"}, true, both, `"tenant";r=1;t=1800`},
		{[]string{"ip"}, false, `"ip";q=100;w=1`, ""},
		{[]string{"ip", "tenant"}, true, both, ""},
	} {
		names := map[string]bool{}
		for _, n := range c.degraded {
			names[n] = true
		}
		s := degrading{memory.New(memory.WithClock(clocktest.New(t0))), names}
		conn, _ := serve(t, grpclimit.New(s,
			grpclimit.By(ip, grpclimit.PeerIP()),
			grpclimit.By(tenant, grpclimit.FullMethod(), grpclimit.Methods("/spigot.test.Other/"))))
		method := echoMethod
		if c.tenant {
			method = otherMethod
		}
		header, err := call(t, conn, method)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := one(t, i, header, "ratelimit-policy"); got != c.policy {
			t.Errorf("step %d: got ratelimit-policy %q; want %q", i, got, c.policy)
		}
		if got := header.Get("ratelimit"); c.limits == "" && len(got) > 0 || c.limits != "" && (len(got) != 1 || got[0] != c.limits) {
			t.Errorf("step %d: got ratelimit %q; want %q", i, got, c.limits)
		}
	}
}
