package grpclimit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/store/memory"
)

// TestPanics: a programmer error at construction panics at once, with a
// message that names the function and the argument.
func TestPanics(t *testing.T) {
	api := spigot.MustBucket("api", 1, spigot.PerSecond(1))
	limiter := spigot.New(memory.New(), api)
	observe := func(context.Context, *grpclimit.Result) {}
	for i, c := range []struct {
		f    func()
		want string
	}{
		{func() { grpclimit.New(nil, grpclimit.By(api, nil)) }, "spigot: grpclimit: New: nil Store"},
		{func() { grpclimit.New(memory.New()) }, "spigot: grpclimit: New: no rule"},
		{func() { grpclimit.New(memory.New(), grpclimit.By(spigot.Limit{}, nil)) }, "spigot: grpclimit: New: rule 0 has the zero Limit"},
		{func() { grpclimit.Methods("pkg.Service/Method") }, `spigot: grpclimit: Methods("pkg.Service/Method")`},
		{func() { grpclimit.Methods("/pkg.Service") }, `spigot: grpclimit: Methods("/pkg.Service")`},
		{func() { grpclimit.Methods("//Method") }, `spigot: grpclimit: Methods("//Method")`},
		{func() { grpclimit.Methods("/pkg.Service/Method/x") }, `spigot: grpclimit: Methods("/pkg.Service/Method/x")`},
		{func() { grpclimit.Weight(0) }, "spigot: grpclimit: Weight(0)"},
		{func() { grpclimit.Cost(nil) }, "spigot: grpclimit: Cost: nil func"},
		{func() { grpclimit.Message(nil) }, "spigot: grpclimit: Message: nil func"},
		{func() { grpclimit.IPv6Prefix(0) }, "spigot: grpclimit: IPv6Prefix(0)"},
		{func() { grpclimit.PeerIP(grpclimit.RequireForwardedClient()) }, "spigot: grpclimit: PeerIP: RequireForwardedClient without TrustXForwardedFor"},
		{func() { grpclimit.WithObserver(nil) }, "spigot: grpclimit: WithObserver: nil func"},
		{func() { grpclimit.WithErrorHandler(nil) }, "spigot: grpclimit: WithErrorHandler: nil func"},
		{func() { grpclimit.WithKeyErrorHandler(nil) }, "spigot: grpclimit: WithKeyErrorHandler: nil func"},
		{func() { grpclimit.WithClock(nil) }, "spigot: grpclimit: WithClock: nil Clock"},
		{func() { grpclimit.NewClient(nil) }, "spigot: grpclimit: NewClient: nil Limiter"},
		{func() { grpclimit.WithClientKey(nil) }, "spigot: grpclimit: WithClientKey: nil func"},
		{func() { grpclimit.WithClientCost(nil) }, "spigot: grpclimit: WithClientCost: nil func"},
		// An option given to the side it does not configure.
		{func() { grpclimit.NewClient(limiter, grpclimit.By(api, nil)) }, "spigot: grpclimit: NewClient: By configures a Server (New), not a Client"},
		{func() { grpclimit.NewClient(limiter, grpclimit.WithObserver(observe)) }, "spigot: grpclimit: NewClient: WithObserver configures a Server (New), not a Client"},
		{func() { grpclimit.NewClient(limiter, grpclimit.WithErrorHandler(grpclimit.FailOpen)) }, "spigot: grpclimit: NewClient: WithErrorHandler configures a Server (New), not a Client"},
		{func() { grpclimit.New(memory.New(), grpclimit.By(api, nil), grpclimit.WithoutWaiting()) }, "spigot: grpclimit: New: WithoutWaiting configures a Client (NewClient), not a Server"},
		{func() { grpclimit.New(memory.New(), grpclimit.By(api, nil), grpclimit.WithoutRetryInfo()) }, "spigot: grpclimit: New: WithoutRetryInfo configures a Client (NewClient), not a Server"},
		{func() {
			grpclimit.New(memory.New(), grpclimit.By(api, nil), grpclimit.WithClientKey(grpclimit.MethodKey))
		}, "spigot: grpclimit: New: WithClientKey configures a Client (NewClient), not a Server"},
	} {
		got := func() (msg string) {
			defer func() { msg, _ = recover().(string) }()
			c.f()
			return ""
		}()
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("step %d: got panic %q; want one starting %q", i, got, c.want)
		}
	}
	// Both forms of Methods are accepted.
	grpclimit.New(memory.New(), grpclimit.By(api, nil, grpclimit.Methods("/pkg.Service/", "/pkg.Service/Method")))
}
