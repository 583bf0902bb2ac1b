package grpclimit_test

import (
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	"google.golang.org/grpc/codes"
)

// TestMetadataOfTheFallbackLimit: while a hybrid store's remote is down,
// each replica enforces WithLocalLimit's Split(3) of the per-tenant limit:
// the ratelimit-policy and ratelimit metadata describe that limit (q=2),
// a single rule's as well as several's, and its denial.
func TestMetadataOfTheFallbackLimit(t *testing.T) {
	clk := clocktest.New(t0)
	perTenant := spigot.MustBucket("tenant", 6, spigot.PerHour(6))
	perPeer := spigot.MustBucket("peer", 30, spigot.PerHour(30))
	h := func() *hybrid.Store {
		return hybrid.New(brokenStore{}, memory.New(memory.WithClock(clk)), hybrid.WithClock(clk), hybrid.WithBreaker(1, time.Hour),
			hybrid.WithLocalLimit(func(l spigot.Limit) spigot.Limit { return l.Split(3) }))
	}
	for _, c := range []struct {
		name   string
		rules  []grpclimit.Option
		policy string
		want   []string // ratelimit of each call
	}{
		{"one rule", []grpclimit.Option{grpclimit.By(perTenant, grpclimit.Metadata("X-Tenant"))},
			`"tenant";q=2;w=3600`, []string{`"tenant";r=1;t=1800`, `"tenant";r=0;t=1800`, `"tenant";r=0;t=1800`}},
		{"two rules", []grpclimit.Option{grpclimit.By(perPeer, grpclimit.PeerIP()), grpclimit.By(perTenant, grpclimit.Metadata("X-Tenant"))},
			`"peer";q=10;w=3600, "tenant";q=2;w=3600`, []string{`"peer";r=9;t=360, "tenant";r=1;t=1800`, `"peer";r=8;t=360, "tenant";r=0;t=1800`, `"peer";r=8;t=360, "tenant";r=0;t=1800`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, _ := serve(t, grpclimit.New(h(), c.rules...))
			for i, want := range c.want {
				header, err := call(t, conn, echoMethod, "x-tenant", "acme")
				if code := readStatus(err).code; (i < 2) != (code == codes.OK) {
					t.Errorf("call %d: %v", i, err)
				}
				if got := one(t, i, header, "ratelimit-policy"); got != c.policy {
					t.Errorf("call %d: ratelimit-policy %q; want %q", i, got, c.policy)
				}
				if got := one(t, i, header, "ratelimit"); got != want {
					t.Errorf("call %d: ratelimit %q; want %q", i, got, want)
				}
			}
		})
	}
}
