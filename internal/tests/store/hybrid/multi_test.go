package hybrid_test

import (
	"context"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	"github.com/spigot-go/spigot/store/redis"
)

// TestGroupOnRedis: a Group's all-or-nothing request goes to a real
// redis-server in one call and is decided there; with the server killed,
// the local store decides it, still all or nothing, from what the server
// last said of each key; once the server is back and the breaker's
// cooldown is over, the server decides again.
func TestGroupOnRedis(t *testing.T) {
	srv := testserver.Start(t, testserver.Redis)
	c := serverClient(t, srv.Addr, func(o *goredis.Options) { o.DialerRetries = 1 })
	clk := clocktest.New(t0)
	var mu sync.Mutex
	var paths []hybrid.Path // of the decisions since the last take
	take := func() []hybrid.Path {
		mu.Lock()
		defer mu.Unlock()
		p := paths
		paths = nil
		return p
	}
	observer := hybrid.Observer{Decision: func(_ context.Context, _ spigot.Op, p hybrid.Path, _ spigot.Decision) {
		mu.Lock()
		paths = append(paths, p)
		mu.Unlock()
	}}
	remote := redis.New(c, store.WithClock(clk))
	s := hybrid.New(remote, memory.New(memory.WithClock(clk)), hybrid.WithClock(clk),
		hybrid.WithTimeout(10*sec), hybrid.WithBreaker(1, 10*sec), hybrid.WithObserver(observer))
	ip := spigot.MustBucket("ip", 10, spigot.PerSecond(10))
	user := spigot.MustBucket("user", 3, spigot.PerSecond(1))
	g := spigot.NewGroup(s, ip, user)
	ctx := t.Context()

	// play makes 4 requests for alice from one address: 3 allowed, the 4th
	// denied by the user's limit and charged to neither; each op decided
	// on path; then a Peek finds ipLeft tokens for the address.
	play := func(phase string, path hybrid.Path, ipLeft int64) {
		t.Helper()
		for i := range 4 {
			d, err := g.Allow(ctx, "10.0.0.1", "alice")
			if err != nil || d.Allowed() != (i < 3) || (i == 3 && (d.By != 1 || d.RetryAfter != sec)) {
				t.Errorf("%s, request %d: %+v, %v; want allowed %v, else denied by the user's limit for 1s", phase, i+1, d, err, i < 3)
			}
			if ps := take(); len(ps) != 2 || ps[0] != path || ps[1] != path {
				t.Errorf("%s, request %d: observed decisions on %v; want two on %v", phase, i+1, ps, path)
			}
		}
		if d, err := g.Peek(ctx, 0, "10.0.0.1", "alice"); err != nil || d.Each[0].Remaining != ipLeft || d.Each[1].Remaining != 0 {
			t.Errorf("%s: then %+v, %v; want %d and 0 left: the denial charged nothing", phase, d.Each, err, ipLeft)
		}
		take()
	}
	play("remote", hybrid.PathRemote, 7)
	if d, err := remote.Do(ctx, spigot.Op{Limit: ip, Key: "10.0.0.1", Action: spigot.Peek}); err != nil || d.Remaining != 7 {
		t.Errorf("the server's own state: %+v, %v; want 7 left", d, err)
	}

	srv.Kill()
	if _, err := g.Allow(ctx, "10.0.0.2", "bob"); err != nil { // opens the breaker
		t.Fatal(err)
	}
	if got := s.Circuit(); got != hybrid.CircuitOpen {
		t.Fatalf("breaker %v after a failed call; want open", got)
	}
	take()
	// The local store starts from what the server last said of alice: her
	// bucket is empty, and refills as the server's would.
	if d, err := g.Allow(ctx, "10.0.0.1", "alice"); err != nil || d.Allowed() || d.By != 1 || d.RetryAfter != sec {
		t.Errorf("local, at once: %+v, %v; want denied by the user's limit for 1s", d, err)
	}
	take()
	clk.Advance(3 * sec)
	play("local", hybrid.PathLocal, 7)

	srv.Restart()
	clk.Advance(10 * sec) // the cooldown: the next call probes the server
	// The restarted server forgot every key; the Peek, the first call in
	// Independent mode, charges it with what the local store admitted for
	// the address (3), and for alice (3, of the none left).
	play("remote again", hybrid.PathRemote, 4)
}
