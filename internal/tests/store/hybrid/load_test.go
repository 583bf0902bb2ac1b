package hybrid_test

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	"github.com/spigot-go/spigot/store/redis"
)

// TestDefaultsHoldOnABusyNode: three replicas, each a hybrid store with
// the default options on a go-redis store of one healthy redis-server, 32
// goroutines each, on a machine that a CPU hog (four busy loops per core, in
// processes of their own) keeps busy beside them: for the whole run every
// breaker stays closed. With the 50ms timeout of old and its five
// failures in a row, the breakers of all three opened within a second
// (issue 39), and most requests were decided by the policy: a loaded
// node's latency is not an outage.
//
//	SPIGOT_REQUIRE_SERVERS=1 go test -race -run TestDefaultsHoldOnABusyNode -v ./store/hybrid
func TestDefaultsHoldOnABusyNode(t *testing.T) {
	const (
		replicas   = 3
		goroutines = 32
		requests   = 3000 // per replica
	)
	srv := testserver.Start(t, testserver.Redis)
	hog(t, 4*runtime.NumCPU()) // a load of about 10 with the test's own
	limit := spigot.MustBucket("busy-node", 1_000_000, spigot.PerSecond(1_000_000))
	var (
		transitions sync.Mutex
		moves       []string
		offRemote   atomic.Int64
		errs        atomic.Int64
		remoteErrs  atomic.Int64
		latencies   [replicas][]time.Duration
	)
	var wg sync.WaitGroup
	for r := range replicas {
		var mu sync.Mutex
		s := hybrid.New(redis.New(serverClient(t, srv.Addr), store.WithPrefix(t.Name()+":")), memory.New(),
			hybrid.WithObserver(hybrid.Observer{
				Decision: func(_ context.Context, _ spigot.Op, p hybrid.Path, _ spigot.Decision) {
					if p != hybrid.PathRemote {
						offRemote.Add(1)
					}
				},
				RemoteError: func(_ context.Context, _ spigot.Op, err error, latency time.Duration) {
					if remoteErrs.Add(1) <= 12 {
						t.Logf("replica %d: after %v: %v", r, latency, err)
					}
				},
				RemoteCall: func(_ context.Context, _ spigot.Op, _ error, latency time.Duration) {
					mu.Lock()
					latencies[r] = append(latencies[r], latency)
					mu.Unlock()
				},
				Transition: func(_ context.Context, from, to hybrid.Circuit) {
					transitions.Lock()
					moves = append(moves, fmt.Sprintf("replica %d: %v → %v", r, from, to))
					transitions.Unlock()
				},
			}))
		var next atomic.Int64
		for g := range goroutines {
			wg.Go(func() {
				for next.Add(1) <= requests {
					if _, err := s.Do(context.Background(), spigot.Op{Limit: limit, Key: fmt.Sprintf("k%d", g%8), N: 1}); err != nil {
						errs.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	for r, l := range latencies {
		slices.Sort(l)
		if len(l) > 0 {
			t.Logf("replica %d: %d remote calls, latency p50 %v, p99 %v, max %v", r, len(l), l[len(l)/2], l[len(l)*99/100], l[len(l)-1])
		}
	}
	// A call the stalled process could not see answered in time is
	// decided by the policy, as a hybrid store's every failed call is:
	// counted, not asserted (it measures the machine).
	t.Logf("%d of %d decisions by the policy, for calls that timed out", offRemote.Load(), replicas*requests)
	if len(moves) > 0 || errs.Load() > 0 {
		t.Errorf("with a healthy server on a busy node: %d errors, breaker transitions %v; want none", errs.Load(), moves)
	}
}

// hog keeps n cores busy, in processes of their own, until t ends.
func hog(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting a CPU hog: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
}
