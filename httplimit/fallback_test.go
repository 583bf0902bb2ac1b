package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// TestHeadersOfTheFallbackLimit: while a hybrid store's remote is down,
// each replica enforces WithLocalLimit's Split(3) of the per-address limit
// (60 a minute): the fields describe that limit, q=20, with its r and t,
// and a denial its Retry-After, not the 60 nobody enforces; the per-user
// limit beside it, split too, as well. With the remote up (the memory
// store as the remote), the rule's own limit.
func TestHeadersOfTheFallbackLimit(t *testing.T) {
	addr := spigot.MustBucket("per-address", 60, spigot.PerMinute(60))
	user := spigot.MustBucket("per-user", 9, spigot.PerMinute(3))
	policy := func(s spigot.Store) http.Handler {
		return httplimit.New(s, httplimit.By(addr, httplimit.ClientIP()), httplimit.By(user, httplimit.Header("X-User")), httplimit.WithHeaders(httplimit.IETF)).Wrap(&served{})
	}
	alice := http.Header{"X-User": {"alice"}}
	t.Run("remote down", func(t *testing.T) {
		clk, _ := fixture()
		h := hybrid.New(brokenStore{}, memory.New(memory.WithClock(clk)), hybrid.WithClock(clk), hybrid.WithBreaker(1, time.Hour),
			hybrid.WithLocalLimit(func(l spigot.Limit) spigot.Limit { return l.Split(3) }))
		const fallback = `"per-address";q=20;w=60, "per-user";q=3;w=180`
		play(t, clk, policy(h), []step{
			{header: alice, status: 204, want: map[string]string{"Ratelimit-Policy": fallback, "Ratelimit": `"per-address";r=19;t=3, "per-user";r=2;t=60`}},
			{header: alice, status: 204, want: map[string]string{"Ratelimit-Policy": fallback, "Ratelimit": `"per-address";r=18;t=3, "per-user";r=1;t=60`}},
			{header: alice, status: 204, want: map[string]string{"Ratelimit-Policy": fallback, "Ratelimit": `"per-address";r=17;t=3, "per-user";r=0;t=60`}},
			{header: alice, status: 429, want: map[string]string{"Ratelimit-Policy": fallback, "Ratelimit": `"per-address";r=17;t=3, "per-user";r=0;t=60`, "Retry-After": "60"}},
		})
	})
	t.Run("remote up", func(t *testing.T) {
		clk, remote := fixture()
		h := hybrid.New(remote, memory.New(memory.WithClock(clk)), hybrid.WithClock(clk),
			hybrid.WithLocalLimit(func(l spigot.Limit) spigot.Limit { return l.Split(3) }))
		play(t, clk, policy(h), []step{{header: alice, status: 204, want: map[string]string{
			"Ratelimit-Policy": `"per-address";q=60;w=60, "per-user";q=9;w=180`,
			"Ratelimit":        `"per-address";r=59;t=1, "per-user";r=8;t=20`,
		}}})
	})
}
