package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store"
)

// MapStore is a complete spigot.Store in a few lines: a map of
// store.State behind a mutex, updated by store.Apply, which holds the
// whole model. A store for another backend (SQL, etcd, DynamoDB) does the
// same inside one atomic read-modify-write: read the State, call Apply,
// write the new State (or delete it when Apply leaves the zero State: the
// limit is full). MapStore passes conformance.Run and RunRealTime; see
// conformance_test.go.
type MapStore struct {
	Clock clock.Clock // where the store reads the time

	mu sync.Mutex
	m  map[mapKey]store.State
}

// mapKey names a key's state by limit name and key as a pair, so that no
// two pairs collide.
type mapKey struct{ limit, key string }

// Do implements spigot.Store.
func (s *MapStore) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := ctx.Err(); err != nil {
		return spigot.Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[mapKey]store.State)
	}
	k := mapKey{op.Limit.Name(), op.Key}
	state := s.m[k] // a missing key is the zero State: full
	d, err := store.Apply(op, &state, s.Clock.Now())
	switch {
	case err != nil: // an invalid op: nothing changed
	case state.IsZero():
		delete(s.m, k)
	default:
		s.m[k] = state
	}
	return d, err
}

// DoMulti implements spigot.Store: the store applies one operation per
// call, so it answers errors.ErrUnsupported, and spigot.DoMulti applies
// several with Do.
func (s *MapStore) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return errors.ErrUnsupported
}

// A store of your own, such as MapStore, is used like any other; its tests
// call conformance.Run:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
//			return &MapStore{Clock: clk}
//		})
//	}
func Example() {
	clk := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	store := &MapStore{Clock: clk}
	login := spigot.MustBucket("login", 3, spigot.Per(1, 3*time.Second))
	limiter := spigot.New(store, login)
	ctx := context.Background()

	for range 4 {
		a, _ := limiter.Allow(ctx, "203.0.113.7")
		fmt.Printf("allowed %-5v remaining %d retry after %v\n", a.Allowed(), a.Remaining, a.RetryAfter)
	}
	clk.Advance(3 * time.Second)
	a, _ := limiter.Allow(ctx, "203.0.113.7")
	fmt.Printf("3s later: allowed %v\n", a.Allowed())
	// Output:
	// allowed true  remaining 2 retry after 0s
	// allowed true  remaining 1 retry after 0s
	// allowed true  remaining 0 retry after 0s
	// allowed false remaining 0 retry after 3s
	// 3s later: allowed true
}
