package lease_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
)

// TestUnderHTTPLimit: two replicas, each an httplimit middleware over its
// own lease Store on one shared remote, limit one client by its address
// and every client together, all or nothing. Requests alternate between
// them at one instant: exactly the client's capacity is served, from
// leases for the most part, and each 429 says to retry after the
// limit's next token.
func TestUnderHTTPLimit(t *testing.T) {
	clk := clocktest.New(t0)
	remote := memory.New(memory.WithClock(clk))
	perClient := spigot.MustBucket("per-client", 300, spigot.PerSecond(1))
	everyone := spigot.MustBucket("everyone", 100_000, spigot.PerSecond(1000))
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	var replicas [2]http.Handler
	for i := range replicas {
		s := lease.New(remote, lease.WithClock(clk), lease.WithIdle(time.Hour))
		t.Cleanup(func() { s.Close(context.Background()) })
		replicas[i] = httplimit.New(s,
			httplimit.By(perClient, httplimit.ClientIP()),
			httplimit.By(everyone, func(*http.Request) (string, error) { return "all", nil }),
		).Wrap(ok)
	}
	served := 0
	for i := range 1000 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.7:5000"
		w := httptest.NewRecorder()
		replicas[i%2].ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK:
			served++
		case http.StatusTooManyRequests:
			if got := w.Header().Get("Retry-After"); got != "1" {
				t.Fatalf("request %d: Retry-After %q; want 1", i, got)
			}
		default:
			t.Fatalf("request %d: status %d", i, w.Code)
		}
		clk.Advance(time.Microsecond)
	}
	if served != 300 {
		t.Errorf("served %d; want the client's capacity, 300", served)
	}
	d, err := remote.Do(context.Background(), spigot.Op{Limit: everyone, Key: "all", Action: spigot.Peek})
	if err != nil {
		t.Fatal(err)
	}
	// The shared limit lost what was served, less the token its rate
	// refilled in the 1ms the requests took, and what the replicas hold in
	// leases: at most a sixteenth of it each.
	if lost := 100_000 - d.Remaining; lost < 300-1 || lost > 300+2*100_000/16 {
		t.Errorf("the shared limit holds %d; want 100000 less the 300 served (and 1 refilled) and at most two leases", d.Remaining)
	}
}
