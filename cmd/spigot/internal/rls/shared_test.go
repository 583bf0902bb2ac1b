package rls

import (
	"context"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
)

// TestSharedLimit: a descriptor with shared_limit charges the limit of
// that name that a Go service keeps in the same store, with the request's
// last value as its key, as an httplimit rule of that limit keyed by the
// tenant does: what one takes, the other sees.
func TestSharedLimit(t *testing.T) {
	clk := clocktest.New(t0)
	st := memory.New(memory.WithClock(clk))
	cfg := mustLoad(t, map[string]string{"c.yaml": `
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5, shared_limit: per-tenant}
`})
	svc := NewService(st, cfg, WithClock(clk))
	goService := spigot.New(st, spigot.Must(spigot.NewFixedWindow("per-tenant", spigot.Per(5, time.Minute), 0)))
	for range 3 {
		if d, err := goService.Allow(context.Background(), "acme"); err != nil || !d.Allowed() {
			t.Fatalf("the Go service's Allow: %+v, %v", d, err)
		}
	}
	run(t, svc, clk, []step{
		{0, request("edge", desc("tenant", "acme")), "OK: | OK 5/minute r=1 t=60"},
		{0, request("edge", desc("tenant", "acme")), "OK: | OK 5/minute r=0 t=60"},
		{0, request("edge", desc("tenant", "acme")), "OVER: | OVER 5/minute r=0 t=60"},
		{0, request("edge", desc("tenant", "other")), "OK: | OK 5/minute r=4 t=60"},
	})
	if d, err := goService.Allow(context.Background(), "acme"); err != nil || d.Allowed() {
		t.Errorf("the Go service after the gateway's 2: %+v, %v; want denied", d, err)
	}
	for _, bad := range []string{
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, shared_limit: ''}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, shared_limit: x}\n",
		"domain: d\ndescriptors:\n  - key: k\n    shared_limit: x\n",
	} {
		if _, err := Load(mapFS(map[string]string{"c.yaml": bad})); err == nil {
			t.Errorf("%q loaded; want refused", bad)
		}
	}
}
