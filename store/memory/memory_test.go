package memory

// These tests cover what is specific to the memory store: expiry of idle
// keys, the key cap, sharding, allocation and concurrency. The model itself
// is checked for every store by package conformance.

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/keyed"
	"github.com/spigot-go/spigot/store"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// maxShards is the most shards a store's keys are split between.
const maxShards = 256

// newStore returns a store on a fake clock that reads t0.
func newStore(t *testing.T, opts ...Option) (*Store, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(t0)
	return New(append([]Option{WithClock(clk)}, opts...)...), clk
}

// do applies op and fails t on an error.
func do(t testing.TB, s *Store, op spigot.Op) spigot.Decision {
	t.Helper()
	d, err := s.Do(context.Background(), op)
	if err != nil {
		t.Fatalf("Do(%v): %v", op, err)
	}
	return d
}

// take takes n tokens for key in b.
func take(t testing.TB, s *Store, b spigot.Limit, key string, n int64) spigot.Decision {
	t.Helper()
	return do(t, s, spigot.Op{Limit: b, Key: key, Action: spigot.Take, N: n})
}

// peek reports what a Take of n tokens for key in b would decide.
func peek(t testing.TB, s *Store, b spigot.Limit, key string, n int64) spigot.Decision {
	t.Helper()
	return do(t, s, spigot.Op{Limit: b, Key: key, Action: spigot.Peek, N: n})
}

// refilled returns want with the RefillAfter of its definition when want,
// from a table written without it, leaves it 0: on a copy of the state s
// holds for op's key after op, at now, a Take of want.Remaining, then the
// RetryAfter of a Take of one.
func refilled(s *Store, op spigot.Op, now time.Time, want spigot.Decision) spigot.Decision {
	if want.RefillAfter != 0 || want.Degraded() {
		return want
	}
	st, _ := stateOf(s, op.Limit, op.Key)
	st.Log = slices.Clone(st.Log)
	take := spigot.Op{Limit: op.Limit, Key: op.Key, N: want.Remaining}
	store.Apply(take, &st, now)
	take.N = 1
	d, _ := store.Apply(take, &st, now)
	want.RefillAfter = d.RetryAfter
	return want
}

// held reports whether the store holds state for key in b (not the zero
// State of a key whose memory is kept for reuse), without sweeping or
// refilling anything.
func held(s *Store, b spigot.Limit, key string) bool {
	_, ok := stateOf(s, b, key)
	return ok
}

// stateOf returns the state the store holds for key in b, and whether it
// holds any, without sweeping or refilling anything.
func stateOf(s *Store, b spigot.Limit, key string) (store.State, bool) {
	return stateAt(s, s.keys.Hash(b.Name(), key), b.Name(), key)
}

// stateAt is stateOf for key in bucket name, under hash h.
func stateAt(s *Store, h uint64, name, key string) (store.State, bool) {
	sh := s.keys.Shard(h)
	sh.Lock()
	defer sh.Unlock()
	var st store.State
	if x := sh.Find(h, name, key); x != nil {
		x.Lock()
		if e := fast.Of(x); e != nil {
			st = e.state()
		} else {
			st = slow.Of(x).state
		}
		x.Unlock()
	}
	return st, !st.IsZero()
}

// step is one operation on key at t0+at, its decision, and the number of
// entries the store holds afterwards (counted without sweeping).
type step struct {
	at     time.Duration
	action spigot.Action
	key    string
	n      int64
	want   spigot.Decision
	held   int
}

// play applies steps to s in b, setting clk to each step's instant.
func play(t *testing.T, s *Store, clk *clocktest.Clock, b spigot.Limit, steps []step) {
	t.Helper()
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		op := spigot.Op{Limit: b, Key: st.key, Action: st.action, N: st.n}
		if got, want := do(t, s, op), refilled(s, op, clk.Now(), st.want); got != want {
			t.Errorf("step %d: at t0+%v, %v: got %+v, want %+v", i, st.at, op, got, want)
		}
		if got := count(s); got != st.held {
			t.Errorf("step %d: at t0+%v, after %v: got %d entries, want %d", i, st.at, op, got, st.held)
		}
	}
}

// count reports how many keys hold state, expired or not, without
// sweeping: the entries held, less those kept for reuse with the zero
// State.
func count(s *Store) int {
	n := 0
	s.keys.Range(func(x *keyed.Header) bool {
		if e := fast.Of(x); e != nil && e.scale != 0 || e == nil && !slow.Of(x).state.IsZero() {
			n++
		}
		return true
	})
	return n
}

// entries reports how many entries the store holds, with state or kept
// for reuse: its memory.
func entries(s *Store) int { return s.keys.Len() }

// tableSlots returns how many slots every shard's table has, to tell
// whether a sweep gave a table's memory back.
func tableSlots(s *Store) []int {
	slots := make([]int, s.keys.Shards())
	for i := range slots {
		sh := s.keys.ShardAt(i)
		sh.Lock()
		slots[i] = sh.Slots()
		sh.Unlock()
	}
	return slots
}

func ip(i int) string {
	return "10." + strconv.Itoa(i>>16) + "." + strconv.Itoa(i>>8&0xff) + "." + strconv.Itoa(i&0xff)
}

// TestMillionKeys touches a million distinct keys and checks that the store
// holds them all until their buckets are full again, and then nothing, with
// its tables' memory given back.
func TestMillionKeys(t *testing.T) {
	const n = 1_000_000
	b := spigot.MustBucket("flood", 5, spigot.PerSecond(1))
	s, clk := newStore(t)

	// Two goroutines (the machine's cores), each on its half of the keys.
	var wg sync.WaitGroup
	var denied atomic.Int64
	for w := range 2 {
		wg.Go(func() {
			for i := w; i < n; i += 2 {
				a, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: strconv.Itoa(i), N: 1})
				if err != nil || !a.Allowed() || a.N != 1 || a.Remaining != 4 {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if d := denied.Load(); d != 0 {
		t.Fatalf("%d of %d first requests did not take 1 token and leave 4", d, n)
	}
	slots := tableSlots(s)

	// TestExpiryBoundary checks the microsecond before the boundary.
	steps := []struct {
		at   time.Duration
		want int
	}{
		{0, n},
		{time.Second, 0},
	}
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		if got := s.Len(); got != st.want {
			t.Errorf("step %d: at t0+%v, Len() = %d, want %d", i, st.at, got, st.want)
		}
	}
	// Len only counts: the entries and their tables are still there.
	if got := count(s); got != n {
		t.Errorf("after Len, %d entries held; want %d (Len forgets nothing)", got, n)
	}
	for i, n := range tableSlots(s) {
		if n != slots[i] {
			t.Errorf("shard %d has a table of %d slots after Len; want the %d it had", i, n, slots[i])
		}
	}
	s.Sweep()
	if got := count(s); got != 0 {
		t.Errorf("after Sweep, %d entries held; want 0", got)
	}
	if got := entries(s); got != 0 {
		t.Errorf("after Sweep, %d entries kept; want 0", got)
	}
	least := tableSlots(New())[0]
	for i, n := range tableSlots(s) {
		if n != least || slots[i] == least {
			t.Errorf("shard %d: a table of %d slots, grown to %d; want one of %d once it emptied", i, n, slots[i], least)
		}
	}
}

// TestMemoryGivenBackAfterTake checks that Sweep rebuilds a shard's table
// when its keys left through a Take (a request that found the bucket full
// again) rather than through the sweep itself.
func TestMemoryGivenBackAfterTake(t *testing.T) {
	const n = 20_000
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	s, clk := newStore(t)
	for i := range n {
		take(t, s, b, ip(i), 1)
	}
	slots := tableSlots(s)
	clk.Advance(time.Second)
	for i := range n {
		if a := take(t, s, b, ip(i), 0); a != (spigot.Decision{Remaining: 5, RefillAfter: time.Second}) {
			t.Fatalf("key %d: a Take of 0 after the refill = %+v, want a full bucket", i, a)
		}
	}
	if got := count(s); got != 0 {
		t.Fatalf("after Takes of 0 at full buckets, %d entries held; want 0", got)
	}
	if got := s.Len(); got != 0 {
		t.Fatalf("Len() = %d, want 0", got)
	}
	s.Sweep()
	for i, n := range tableSlots(s) {
		if n >= slots[i] {
			t.Errorf("shard %d kept its grown table of %d slots after Sweep (%d); want a smaller one", i, slots[i], n)
		}
	}
}

// TestExpiryBoundary checks that a key is held until exactly its ResetAfter
// and not one microsecond longer, for keys with different deficits.
func TestExpiryBoundary(t *testing.T) {
	// 3 tokens a second: one token is 333333⅓ µs, so ResetAfter rounds
	// up: 334 ms for one token, 1 s for three, 3334 ms for ten.
	b := spigot.MustBucket("b", 10, spigot.PerSecond(3))
	s, clk := newStore(t)
	for _, c := range []struct {
		key  string
		cost int64
		want time.Duration
	}{
		{"one", 1, 334 * time.Millisecond},
		{"three", 3, time.Second},
		{"ten", 10, 3334 * time.Millisecond},
		{"none", 0, 0},
	} {
		if a := take(t, s, b, c.key, c.cost); !a.Allowed() || a.N != c.cost || a.ResetAfter != c.want {
			t.Fatalf("Take(%q, %d) = %+v, want allowed, N %d, ResetAfter %v", c.key, c.cost, a, c.cost, c.want)
		}
	}

	const µs = time.Microsecond
	steps := []struct {
		at   time.Duration
		held []string
	}{
		{0, []string{"one", "three", "ten"}},
		{334*time.Millisecond - µs, []string{"one", "three", "ten"}},
		{334 * time.Millisecond, []string{"three", "ten"}},
		{time.Second - µs, []string{"three", "ten"}},
		{time.Second, []string{"ten"}},
		{3334*time.Millisecond - µs, []string{"ten"}},
		{3334 * time.Millisecond, nil},
	}
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		if got := s.Len(); got != len(st.held) {
			t.Errorf("step %d: at t0+%v, Len() = %d, want %d", i, st.at, got, len(st.held))
		}
		s.Sweep()
		for _, k := range []string{"one", "three", "ten", "none"} {
			want := false
			for _, h := range st.held {
				want = want || h == k
			}
			if got := held(s, b, k); got != want {
				t.Errorf("step %d: at t0+%v, key %q held = %v, want %v", i, st.at, k, got, want)
			}
		}
	}
}

// TestExpiryUnderNewConfig checks that state past its expiry, even while
// still in the table (nothing swept it), is a full bucket, whatever the
// bucket's config has become since, as a key with a TTL would be.
func TestExpiryUnderNewConfig(t *testing.T) {
	small := spigot.MustBucket("b", 2, spigot.PerSecond(1))
	large := spigot.MustBucket("b", 10, spigot.PerSecond(1))
	for i, c := range []struct {
		at   time.Duration
		want int64 // Remaining of a peek under large
	}{
		{2*time.Second - time.Microsecond, 1}, // the state holds 1.999999 tokens
		{2 * time.Second, 10},                 // expired: forgotten
	} {
		s, clk := newStore(t)
		take(t, s, small, "k", 2) // empty, full again in 2 s
		clk.Set(t0.Add(c.at))
		if !held(s, large, "k") {
			t.Fatalf("step %d: the key is not in the table; the test needs it there", i)
		}
		if a := peek(t, s, large, "k", 0); a.Remaining != c.want {
			t.Errorf("step %d: at t0+%v, Remaining = %d, want %d", i, c.at, a.Remaining, c.want)
		}
	}
}

// TestDoAllocs checks that an operation on a key that already has state
// allocates nothing, whatever its action and decision.
func TestDoAllocs(t *testing.T) {
	ctx := context.Background()
	roomy := spigot.MustBucket("roomy", 1_000_000, spigot.PerSecond(1))
	empty := spigot.MustBucket("empty", 2, spigot.PerHour(1))
	other := spigot.MustBucket("other", 1_000_000, spigot.PerSecond(1))
	for _, c := range []struct {
		name  string
		s     *Store
		b     spigot.Limit
		taken int64          // by the first Take: the deficit the ops run on
		after []spigot.Limit // stored for the key after b: ahead of b in its chain
	}{
		{"allowed/fake-clock", New(WithClock(clocktest.New(t0))), roomy, 1000, nil},
		{"allowed/system-clock", New(), roomy, 1000, nil},
		{"denied/system-clock", New(), empty, 2, nil},
		{"chained", New(), roomy, 1000, []spigot.Limit{other, empty}},
		{"capped", New(WithMaxKeys(10)), roomy, 1000, nil},
	} {
		take(t, c.s, c.b, "k", c.taken) // the key has state from now on
		for _, o := range c.after {
			take(t, c.s, o, "k", 1)
		}
		op := func(a spigot.Action) spigot.Op { return spigot.Op{Limit: c.b, Key: "k", Action: a, N: 1} }
		for _, ops := range [][]spigot.Op{
			{op(spigot.Take)},
			{op(spigot.TakeUpTo)},
			{op(spigot.Peek)},
			// A Refund of 1 then a Take of 1: the bucket is never full, so
			// the key keeps its state.
			{op(spigot.Refund), op(spigot.Take)},
		} {
			t.Run(c.name+"/"+ops[0].Action.String(), func(t *testing.T) {
				n := testing.AllocsPerRun(1000, func() {
					for _, o := range ops {
						if _, err := c.s.Do(ctx, o); err != nil {
							t.Fatal(err)
						}
					}
				})
				if n != 0 {
					t.Errorf("%v on a key with state: %v allocations, want 0", ops, n)
				}
				if !held(c.s, c.b, "k") {
					t.Errorf("after %v, the key holds no state: the test measured nothing", ops)
				}
			})
		}
	}
}

func TestMaxKeysCap(t *testing.T) {
	// Nothing expires during the flood: every insert at the cap evicts a
	// key whose bucket is not full.
	b := spigot.MustBucket("b", 5, spigot.PerMinute(1))
	for _, c := range []struct {
		max, flood int
		exact      bool // a single shard: the cap is reached exactly
	}{
		{1, 50, true},
		{3, 50, true},
		{100, 1000, true},
		{127, 1000, true},
		{128, 1000, false},
		{1000, 5000, false},
		{20_000, 60_000, false},
	} {
		t.Run("max="+strconv.Itoa(c.max), func(t *testing.T) {
			s, _ := newStore(t, WithMaxKeys(c.max))
			if total := perShardTotal(s); total != c.max {
				t.Fatalf("the shards' caps add up to %d, want %d", total, c.max)
			}
			for i := range c.flood {
				take(t, s, b, ip(i), 1)
				// Counting takes every shard's lock: count as often as
				// there are shards, to keep the test linear.
				if i%s.keys.Shards() == 0 {
					if got := count(s); got > c.max {
						t.Fatalf("after %d keys, %d held; want at most %d", i+1, got, c.max)
					}
				}
			}
			got := s.Len()
			if got > c.max || c.exact && got != c.max || got < c.max/2 {
				t.Errorf("Len() = %d after %d keys, want %d (at most, exactly: %v)", got, c.flood, c.max, c.exact)
			}
			if ev := s.Evictions(); ev != c.flood-got {
				t.Errorf("Evictions() = %d, want %d (keys touched minus keys held)", ev, c.flood-got)
			}
		})
	}
}

func perShardTotal(s *Store) int {
	n := 0
	for i := range s.keys.Shards() {
		n += s.keys.ShardAt(i).Cap()
	}
	return n
}

func TestMaxKeysUnbounded(t *testing.T) {
	b := spigot.MustBucket("b", 5, spigot.PerMinute(1))
	for _, n := range []int{0, -1} {
		t.Run("max="+strconv.Itoa(n), func(t *testing.T) {
			s, _ := newStore(t, WithMaxKeys(n))
			if got := s.keys.Shards(); got != maxShards {
				t.Errorf("%d shards, want %d", got, maxShards)
			}
			const keys = 5000
			for i := range keys {
				take(t, s, b, ip(i), 1)
			}
			if got := s.Len(); got != keys {
				t.Errorf("Len() = %d, want %d", got, keys)
			}
			if got := s.Evictions(); got != 0 {
				t.Errorf("Evictions() = %d, want 0", got)
			}
		})
	}
}

// TestEvictionOrder checks which key an insert at the cap evicts: an
// expired one if any, otherwise the one nearest to full.
func TestEvictionOrder(t *testing.T) {
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	type use struct {
		key  string
		cost int64
	}
	for _, c := range []struct {
		name      string
		keys      []use         // taken at t0, in this order
		at        time.Duration // when the new key arrives
		evicted   string
		evictions int // the eviction of an expired key is not counted
	}{
		{"nearest-to-full", []use{{"a", 3}, {"b", 1}, {"c", 5}}, 500 * time.Millisecond, "b", 1},
		{"nearest-to-full-last", []use{{"a", 5}, {"b", 4}, {"c", 2}}, 0, "c", 1},
		{"expired", []use{{"a", 5}, {"b", 2}, {"c", 4}}, 2 * time.Second, "b", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, clk := newStore(t, WithMaxKeys(len(c.keys)))
			want := map[string]int64{} // Remaining of a peek at t0+c.at
			for _, u := range c.keys {
				take(t, s, b, u.key, u.cost)
				want[u.key] = min(5, 5-u.cost+int64(c.at/time.Second))
			}
			clk.Set(t0.Add(c.at))
			take(t, s, b, "new", 1)
			for _, u := range c.keys {
				if got := held(s, b, u.key); got != (u.key != c.evicted) {
					t.Errorf("key %q held = %v, want %v", u.key, got, u.key != c.evicted)
				}
			}
			for _, u := range c.keys {
				w := want[u.key]
				if u.key == c.evicted {
					w = 5 // forgotten: a full bucket
				}
				if a := peek(t, s, b, u.key, 0); a.Remaining != w {
					t.Errorf("key %q: Remaining = %d, want %d", u.key, a.Remaining, w)
				}
			}
			if got := s.Evictions(); got != c.evictions {
				t.Errorf("Evictions() = %d, want %d", got, c.evictions)
			}
		})
	}
}

// TestHardLimitedKeySurvivesFlood checks that a key with an empty bucket is
// kept, and stays denied, while a flood of distinct keys that take one token
// each fills the store to its cap many times over.
func TestHardLimitedKeySurvivesFlood(t *testing.T) {
	login := spigot.MustBucket("login", 5, spigot.PerMinute(1))
	for _, maxKeys := range []int{3, 100, 1000, 20_000} {
		t.Run("max="+strconv.Itoa(maxKeys), func(t *testing.T) {
			s, clk := newStore(t, WithMaxKeys(maxKeys))
			take(t, s, login, "attacker", 5)
			flood := min(10*maxKeys, 50_000) // 1 ms apart: under a minute in all
			for i := range flood {
				clk.Advance(time.Millisecond)
				take(t, s, login, ip(i), 1)
			}
			elapsed := time.Duration(flood) * time.Millisecond
			// The attacker's bucket has refilled for elapsed (under a minute:
			// no whole token yet), and a request is still denied.
			a := take(t, s, login, "attacker", 1)
			if want := time.Minute - elapsed; a.Allowed() || a.Remaining != 0 || a.RetryAfter != want {
				t.Errorf("after a flood of %d keys, the attacker's request = %+v, want denied with RetryAfter %v", flood, a, want)
			}
			if got := s.Len(); got > maxKeys {
				t.Errorf("Len() = %d, want at most %d", got, maxKeys)
			}
		})
	}
}

func TestConcurrentOneKey(t *testing.T) {
	const (
		capacity   = 100
		goroutines = 16
		attempts   = 40 // per goroutine: 640 in all
	)
	b := spigot.MustBucket("b", capacity, spigot.PerMinute(1))
	s, _ := newStore(t) // the clock stands still: nothing refills
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range attempts {
				a, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: "k", N: 1})
				if err != nil || a.Allowed() != (a.N == 1) {
					t.Errorf("Take of 1 = %+v, %v; want N 1 when allowed, 0 when denied", a, err)
					return
				}
				if a.Allowed() {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != capacity {
		t.Errorf("%d of %d requests admitted, want %d", got, goroutines*attempts, capacity)
	}
	if a := peek(t, s, b, "k", 0); a.Remaining != 0 {
		t.Errorf("Remaining = %d after the burst, want 0", a.Remaining)
	}
}

func TestConcurrentManyKeys(t *testing.T) {
	const (
		capacity   = 10
		keys       = 500
		goroutines = 16 // each sends one request to every key
	)
	b := spigot.MustBucket("b", capacity, spigot.PerMinute(1))
	for _, opts := range []struct {
		name string
		opts []Option
	}{
		{"uncapped", nil},
		{"capped", []Option{WithMaxKeys(2 * keys)}}, // room for every key: no eviction
	} {
		t.Run(opts.name, func(t *testing.T) {
			s, _ := newStore(t, opts.opts...)
			admitted := make([]atomic.Int64, keys)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range keys {
						k := (i + g*31) % keys // each goroutine from its own place
						a, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: ip(k), N: 1})
						if err != nil || a.Allowed() != (a.N == 1) {
							t.Errorf("Take of 1 = %+v, %v; want N 1 when allowed, 0 when denied", a, err)
							return
						}
						if a.Allowed() {
							admitted[k].Add(1)
						}
					}
				})
			}
			// Readers alongside the writers, for the race detector.
			wg.Go(func() {
				for range 50 {
					s.Len()
					s.Evictions()
				}
			})
			wg.Wait()
			for k := range admitted {
				if got := admitted[k].Load(); got != capacity {
					t.Errorf("key %d: %d of %d requests admitted, want %d", k, got, goroutines, capacity)
				}
			}
			if got := s.Len(); got != keys {
				t.Errorf("Len() = %d, want %d", got, keys)
			}
			if got := s.Evictions(); got != 0 {
				t.Errorf("Evictions() = %d, want 0", got)
			}
		})
	}
}

// TestConcurrentFlood runs a flood of distinct keys, resets and reads
// against a small cap from many goroutines, for the race detector and the
// cap.
func TestConcurrentFlood(t *testing.T) {
	const maxKeys = 300
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	s, clk := newStore(t, WithMaxKeys(maxKeys))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := ip(g<<16 | i)
				if _, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: k, N: 1}); err != nil {
					t.Error(err)
					return
				}
				if i%7 == 0 {
					if _, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: k, Action: spigot.Reset}); err != nil {
						t.Error(err)
						return
					}
				}
				if i%100 == 0 {
					clk.Advance(10 * time.Millisecond)
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if n := s.Len(); n > maxKeys {
				t.Errorf("Len() = %d, want at most %d", n, maxKeys)
			}
		}
	})
	wg.Wait()
	if n := s.Len(); n > maxKeys {
		t.Errorf("Len() = %d, want at most %d", n, maxKeys)
	}
}

// TestReset covers what Reset owes to expiry: state that has expired but is
// still in the table gives back nothing (N 0), and so does a bucket full under
// a newer, smaller config; otherwise N is the whole tokens the bucket
// lacked, rounded up. Either way the entry is gone afterwards.
func TestReset(t *testing.T) {
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	smaller := spigot.MustBucket("b", 3, spigot.PerSecond(1))
	larger := spigot.MustBucket("b", 10, spigot.PerSecond(1))
	for i, c := range []struct {
		cost  int64         // taken at t0
		at    time.Duration // the Reset
		under spigot.Limit
		want  int64 // the Reset's N
	}{
		{1, time.Second - time.Microsecond, b, 1}, // 4.999999 of 5
		{1, time.Second, b, 0},                    // expired, still in the table
		{1, 3 * time.Second, b, 0},
		{5, 4 * time.Second, b, 1},
		{5, 5 * time.Second, b, 0},
		{4, 0, b, 4},
		{2, 0, smaller, 0}, // 3 tokens left: full under capacity 3
		{3, 0, smaller, 1},
		{3, time.Second, smaller, 0},
		{1, time.Second - time.Microsecond, larger, 6}, // 4.999999 of 10
		{1, time.Second, larger, 0},                    // expired: full under any config
		{0, 0, b, 0},                                   // never stored
	} {
		s, clk := newStore(t)
		take(t, s, b, "k", c.cost)
		clk.Set(t0.Add(c.at))
		wasHeld := held(s, b, "k")
		reset := spigot.Op{Limit: c.under, Key: "k", Action: spigot.Reset}
		got := do(t, s, reset)
		if want := refilled(s, reset, clk.Now(), spigot.Decision{N: c.want, Remaining: c.under.Capacity()}); got != want {
			t.Errorf("step %d: cost %d at t0, Reset at t0+%v under %v = %+v, want %+v (held before: %v)", i, c.cost, c.at, c.under, got, want, wasHeld)
		}
		if held(s, b, "k") || count(s) != 0 {
			t.Errorf("step %d: %d entries held after Reset (the key: %v), want none", i, count(s), held(s, b, "k"))
		}
	}
}

// TestPeek checks that a Peek decides as a Take would and stores nothing:
// peeks of unseen keys create no entry, and peeks of a key with state leave
// its state as it was.
func TestPeek(t *testing.T) {
	const never = spigot.Never
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	s, clk := newStore(t)
	play(t, s, clk, b, []step{
		{0, spigot.Peek, "a", 1, spigot.Decision{Remaining: 5}, 0},
		{0, spigot.Peek, "b", 5, spigot.Decision{Remaining: 5}, 0},
		{0, spigot.Peek, "c", 6, spigot.Decision{Remaining: 5, RetryAfter: never}, 0},
		{0, spigot.Peek, "d", 0, spigot.Decision{Remaining: 5}, 0},
	})
	if got := s.Len(); got != 0 {
		t.Fatalf("after peeks of unseen keys: got Len() %d, want 0", got)
	}
	play(t, s, clk, b, []step{
		{0, spigot.Take, "k", 4, spigot.Decision{N: 4, Remaining: 1, ResetAfter: 4 * time.Second}, 1},
	})
	before, _ := stateOf(s, b, "k")
	play(t, s, clk, b, []step{
		{0, spigot.Peek, "k", 1, spigot.Decision{Remaining: 1, ResetAfter: 4 * time.Second}, 1},
		{0, spigot.Peek, "k", 2, spigot.Decision{Remaining: 1, RetryAfter: time.Second, ResetAfter: 4 * time.Second}, 1},
		{500 * time.Millisecond, spigot.Peek, "k", 2, spigot.Decision{Remaining: 1, RetryAfter: 500 * time.Millisecond, ResetAfter: 3500 * time.Millisecond}, 1},
		{500 * time.Millisecond, spigot.Peek, "k", 6, spigot.Decision{Remaining: 1, RetryAfter: never, ResetAfter: 3500 * time.Millisecond}, 1},
		{2 * time.Second, spigot.Peek, "k", 3, spigot.Decision{Remaining: 3, ResetAfter: 2 * time.Second}, 1},
	})
	if after, _ := stateOf(s, b, "k"); !reflect.DeepEqual(after, before) {
		t.Errorf("peeks changed the state: got %+v, want %+v", after, before)
	}
	clk.Set(t0.Add(4 * time.Second))
	if got, want := do(t, s, spigot.Op{Limit: b, Key: "k", Action: spigot.Peek, N: 5}), (spigot.Decision{Remaining: 5, RefillAfter: time.Second}); got != want {
		t.Errorf("a Peek once the bucket is full again: got %+v, want %+v", got, want)
	}
	if got := s.Len(); got != 0 {
		t.Errorf("once the bucket is full again: got Len() %d, want 0", got)
	}
}

// TestRefund checks what a Refund gives back, that it stops at the
// capacity, and that a Refund that fills the bucket removes the key's entry.
func TestRefund(t *testing.T) {
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	const ms = time.Millisecond
	s, clk := newStore(t)
	play(t, s, clk, b, []step{
		// An unseen key is full: nothing to give back, nothing stored.
		{0, spigot.Refund, "a", 1, spigot.Decision{Remaining: 5}, 0},
		{0, spigot.Take, "k", 3, spigot.Decision{N: 3, Remaining: 2, ResetAfter: 3 * time.Second}, 1},
		{0, spigot.Refund, "k", 1, spigot.Decision{N: 1, Remaining: 3, ResetAfter: 2 * time.Second}, 1},
		{500 * ms, spigot.Refund, "k", 0, spigot.Decision{Remaining: 3, ResetAfter: 1500 * ms}, 1},
		// 3.5 tokens: 1.5 fit, rounded up to 2, and the bucket is full.
		{500 * ms, spigot.Refund, "k", 5, spigot.Decision{N: 2, Remaining: 5}, 0},
		// A Refund of what a Take took leaves nothing behind.
		{500 * ms, spigot.Take, "k", 5, spigot.Decision{N: 5, ResetAfter: 5 * time.Second}, 1},
		{500 * ms, spigot.Refund, "k", 5, spigot.Decision{N: 5, Remaining: 5}, 0},
		// A Refund above the capacity gives back what the bucket lacks.
		{time.Second, spigot.Take, "k", 2, spigot.Decision{N: 2, Remaining: 3, ResetAfter: 2 * time.Second}, 1},
		{time.Second, spigot.Refund, "k", 1_000_000, spigot.Decision{N: 2, Remaining: 5}, 0},
	})
	if got := s.Len(); got != 0 {
		t.Errorf("after a Refund to full: got Len() %d, want 0", got)
	}
}

// TestTakeUpTo checks that TakeUpTo takes the whole tokens the bucket
// holds, up to N, and is denied only when it takes none of N > 0.
func TestTakeUpTo(t *testing.T) {
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	const ms = time.Millisecond
	s, clk := newStore(t)
	play(t, s, clk, b, []step{
		{0, spigot.TakeUpTo, "k", 3, spigot.Decision{N: 3, Remaining: 2, ResetAfter: 3 * time.Second}, 1},
		{0, spigot.TakeUpTo, "k", 3, spigot.Decision{N: 2, Remaining: 0, ResetAfter: 5 * time.Second}, 1},
		{500 * ms, spigot.TakeUpTo, "k", 3, spigot.Decision{Remaining: 0, RetryAfter: 500 * ms, ResetAfter: 4500 * ms}, 1},
		{500 * ms, spigot.TakeUpTo, "k", 0, spigot.Decision{Remaining: 0, ResetAfter: 4500 * ms}, 1},
		{2500 * ms, spigot.TakeUpTo, "k", 10, spigot.Decision{N: 2, Remaining: 0, ResetAfter: 4500 * ms}, 1},
		// An unseen key: at most the capacity.
		{2500 * ms, spigot.TakeUpTo, "new", 10, spigot.Decision{N: 5, Remaining: 0, ResetAfter: 5 * time.Second}, 2},
	})
}

// TestDoMulti checks that DoMulti with one op does what Do does, whatever
// the mode, and that with more than one op, or an unknown mode, it returns
// an error matching errors.ErrUnsupported and changes nothing.
func TestDoMulti(t *testing.T) {
	ctx := context.Background()
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	clk := clocktest.New(t0)
	viaDo, viaMulti := New(WithClock(clk)), New(WithClock(clk))
	for i, op := range []spigot.Op{
		{Limit: b, Key: "k", N: 3},
		{Limit: b, Key: "k", N: 3}, // denied
		{Limit: b, Key: "k", Action: spigot.Peek, N: 2},
		{Limit: b, Key: "k", Action: spigot.TakeUpTo, N: 4},
		{Limit: b, Key: "k", Action: spigot.Refund, N: 1},
		{Limit: b, Key: "k", N: 0},
		{Limit: b, Key: "k", Action: spigot.Reset},
		{Limit: b, Key: "k", N: 5},
		{Limit: b, Key: "k", N: -1},
		{Limit: b, Key: "k", Action: spigot.Action(200)},
		{Key: "k", N: 1},
	} {
		clk.Set(t0.Add(time.Duration(i) * 300 * time.Millisecond))
		mode := spigot.Mode(i % 2) // Independent, AllOrNothing, …
		want, wantErr := viaDo.Do(ctx, op)
		out := make([]spigot.Decision, 1)
		err := viaMulti.DoMulti(ctx, mode, []spigot.Op{op}, out)
		if out[0] != want || (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Errorf("step %d: DoMulti(%v, [%v]): got %+v, %v; want %+v, %v (as Do)", i, mode, op, out[0], err, want, wantErr)
		}
		if got, want := count(viaMulti), count(viaDo); got != want {
			t.Errorf("step %d: after DoMulti(%v, [%v]): got %d entries, want %d (as Do)", i, mode, op, got, want)
		}
	}
	got, gotHeld := stateOf(viaMulti, b, "k")
	want, wantHeld := stateOf(viaDo, b, "k")
	if !reflect.DeepEqual(got, want) || gotHeld != wantHeld || !wantHeld {
		t.Errorf("after the same ops: got state %+v (held: %v), want %+v (held: %v, as Do)", got, gotHeld, want, wantHeld)
	}

	s, clk := newStore(t)
	take(t, s, b, "k", 2)
	before, _ := stateOf(s, b, "k")
	take1 := spigot.Op{Limit: b, Key: "k", N: 1}
	for i, c := range []struct {
		mode        spigot.Mode
		ops         []spigot.Op
		outs        int
		unsupported bool // the error matches errors.ErrUnsupported
	}{
		{spigot.Mode(9), []spigot.Op{take1}, 1, true},
		{spigot.Mode(9), []spigot.Op{take1, take1}, 2, true},
		{spigot.Independent, []spigot.Op{take1, {Limit: b, Key: "new", N: -1}}, 2, false}, // an invalid op: none applied
		{spigot.AllOrNothing, []spigot.Op{take1, {Limit: b, Key: "new", Action: 200}}, 2, true},
		{spigot.AllOrNothing, []spigot.Op{take1, take1}, 1, false},
		{spigot.Independent, []spigot.Op{take1}, 2, false}, // one decision per op
		{spigot.Independent, []spigot.Op{take1}, 0, false},
	} {
		clk.Set(t0.Add(time.Duration(i) * time.Millisecond))
		err := s.DoMulti(ctx, c.mode, c.ops, make([]spigot.Decision, c.outs))
		if err == nil || c.unsupported != errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("step %d: DoMulti(%v, %v, %d decisions): got error %v; want an error, matching errors.ErrUnsupported: %v", i, c.mode, c.ops, c.outs, err, c.unsupported)
		}
		if got, _ := stateOf(s, b, "k"); !reflect.DeepEqual(got, before) || count(s) != 1 {
			t.Errorf("step %d: DoMulti(%v, %v) changed the store: got state %+v and %d entries, want %+v and 1", i, c.mode, c.ops, got, count(s), before)
		}
	}
	if err := s.DoMulti(ctx, spigot.AllOrNothing, nil, nil); err != nil {
		t.Errorf("DoMulti of no ops: got %v, want nil", err)
	}
}

// TestConfigChange checks that a bucket redefined under the same name finds
// the stored state and clamps it, and that state full under the new config
// is dropped.
func TestConfigChange(t *testing.T) {
	old := spigot.MustBucket("login", 10, spigot.PerSecond(1))
	for i, c := range []struct {
		next      spigot.Limit
		cost      int64 // at t0+500ms, with 8.5 tokens stored under old
		want      spigot.Decision
		wantCount int // keys held afterwards
	}{
		// Clamped to 3: full, so the state is dropped.
		{spigot.MustBucket("login", 3, spigot.PerSecond(1)), 0,
			spigot.Decision{Remaining: 3}, 0},
		{spigot.MustBucket("login", 3, spigot.PerSecond(1)), 3,
			spigot.Decision{N: 3, Remaining: 0, ResetAfter: 3 * time.Second}, 1},
		{spigot.MustBucket("login", 3, spigot.PerSecond(1)), 4,
			spigot.Decision{Remaining: 3, RetryAfter: spigot.Never}, 0},
		// A capacity of 0: nothing is ever stored.
		{spigot.MustBucket("login", 0, spigot.PerSecond(1)), 1,
			spigot.Decision{Remaining: 0, RetryAfter: spigot.Never}, 0},
		// Raised, at the same scale: 8.5 tokens carry over exactly.
		{spigot.MustBucket("login", 20, spigot.PerSecond(1)), 0,
			spigot.Decision{Remaining: 8, ResetAfter: 11500 * time.Millisecond}, 1},
		// Another scale (7/10s): the 8 whole tokens carry over; 3 missing
		// tokens refill in 30/7 s = 4285714.3 µs.
		{spigot.MustBucket("login", 10, spigot.Per(7, 10*time.Second)), 1,
			spigot.Decision{N: 1, Remaining: 7, ResetAfter: 4286 * time.Millisecond}, 1},
	} {
		s, clk := newStore(t)
		take(t, s, old, "ip", 2)
		clk.Set(t0.Add(500 * time.Millisecond))
		take(t, s, old, "ip", 0) // stores 8.5 tokens
		if got, want := take(t, s, c.next, "ip", c.cost), refilled(s, spigot.Op{Limit: c.next, Key: "ip"}, clk.Now(), c.want); got != want {
			t.Errorf("step %d: Take under %v, cost %d = %+v, want %+v", i, c.next, c.cost, got, want)
		}
		if got, want := held(s, c.next, "ip"), c.wantCount == 1; got != want {
			t.Errorf("step %d: held = %v, want %v", i, got, want)
		}
		if got := s.Len(); got != c.wantCount {
			t.Errorf("step %d: Len() = %d, want %d", i, got, c.wantCount)
		}
	}
}

// TestBucketsOfOneKey checks that one key in several buckets (entries that
// share a hash) keeps one state per bucket, and that dropping any of them
// leaves the others.
func TestBucketsOfOneKey(t *testing.T) {
	bs := []spigot.Limit{
		spigot.MustBucket("a", 5, spigot.PerSecond(1)),
		spigot.MustBucket("b", 5, spigot.PerSecond(1)),
		spigot.MustBucket("c", 5, spigot.PerSecond(1)),
	}
	for drop := range bs {
		t.Run("drop="+bs[drop].Name(), func(t *testing.T) {
			s, _ := newStore(t)
			for i, b := range bs {
				take(t, s, b, "k", int64(i+1))
			}
			got := do(t, s, spigot.Op{Limit: bs[drop], Key: "k", Action: spigot.Reset})
			if want := (spigot.Decision{N: int64(drop + 1), Remaining: 5, RefillAfter: time.Second}); got != want {
				t.Fatalf("Reset(%s) = %+v, want %+v", bs[drop].Name(), got, want)
			}
			for i, b := range bs {
				want := int64(5 - (i + 1))
				if i == drop {
					want = 5
				}
				if a := peek(t, s, b, "k", 0); a.Remaining != want {
					t.Errorf("bucket %s: Remaining = %d, want %d", b.Name(), a.Remaining, want)
				}
			}
		})
	}
}

// TestHashCollision drives the store with distinct keys under one hash,
// which real 64-bit hashes make too rare to meet in a test: each has an
// entry of its own in the shard's table, and keeps its own state until it
// is reset or swept.
func TestHashCollision(t *testing.T) {
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	other := spigot.MustBucket("other", 5, spigot.PerSecond(1))
	s, clk := newStore(t)
	const h = 42
	s.keys.SetSameHash(h)
	doAt := func(op spigot.Op) spigot.Decision {
		t.Helper()
		return do(t, s, op)
	}
	type key struct {
		b   spigot.Limit
		key string
	}
	keys := []key{{b, "k0"}, {b, "k1"}, {b, "k2"}, {other, "k0"}}
	for i, k := range keys {
		doAt(spigot.Op{Limit: k.b, Key: k.key, N: int64(i + 1)})
	}
	check := func(step int, want ...int64) { // Remaining of each key, -1 for no state
		t.Helper()
		for i, k := range keys {
			st, ok := stateAt(s, h, k.b.Name(), k.key)
			got := int64(-1)
			if ok {
				got = st.Tokens / st.Scale
			}
			if got != want[i] {
				t.Errorf("step %d: %s %q holds %d tokens, want %d", step, k.b.Name(), k.key, got, want[i])
			}
		}
	}
	check(0, 4, 3, 2, 1)
	if got := shardLen(s, h); got != 4 || count(s) != 4 {
		t.Fatalf("the shard holds %d entries, %d with state; want 4", got, count(s))
	}
	doAt(spigot.Op{Limit: b, Key: "k1", Action: spigot.Reset})
	check(1, 4, -1, 2, 1)
	doAt(spigot.Op{Limit: b, Key: "k0", Action: spigot.Reset}) // the first under the hash
	check(2, -1, -1, 2, 1)
	if got := doAt(spigot.Op{Limit: b, Key: "k1", Action: spigot.Peek}); got.Remaining != 5 {
		t.Errorf("a Peek of b \"k1\" after its Reset: Remaining %d, want 5", got.Remaining)
	}
	if got := entries(s); got != 4 {
		t.Errorf("%d entries before Sweep, want 4 (two kept for reuse)", got)
	}
	s.Sweep()
	if got := entries(s); got != 2 {
		t.Errorf("%d entries after Sweep, want 2", got)
	}
	doAt(spigot.Op{Limit: b, Key: "k1", N: 1}) // to a free place under the hash
	check(3, -1, 4, 2, 1)
	clk.Advance(5 * time.Second)
	s.Sweep()
	if got := shardLen(s, h); got != 0 {
		t.Errorf("after the last Sweep the shard holds %d entries; want none", got)
	}
}

// shardLen returns how many entries the shard of hash h holds.
func shardLen(s *Store, h uint64) int {
	sh := s.keys.Shard(h)
	sh.Lock()
	defer sh.Unlock()
	return sh.Len()
}

// TestSharding checks that keys spread over the shards, so that callers on
// different keys take different locks.
func TestSharding(t *testing.T) {
	b := spigot.MustBucket("b", 5, spigot.PerMinute(1))
	s, _ := newStore(t)
	shards := s.keys.Shards()
	if shards != maxShards {
		t.Fatalf("%d shards, want %d", shards, maxShards)
	}
	const n = 10_000
	for i := range n {
		take(t, s, b, ip(i), 1)
	}
	mean := n / shards
	lo, hi := n, 0
	for i := range shards {
		sh := s.keys.ShardAt(i)
		sh.Lock()
		lo, hi = min(lo, sh.Len()), max(hi, sh.Len())
		sh.Unlock()
	}
	// About 39 keys a shard, with a standard deviation of about 6.
	if lo < mean/3 || hi > 3*mean {
		t.Errorf("%d keys over %d shards: from %d to %d a shard, want between %d and %d", n, shards, lo, hi, mean/3, 3*mean)
	}

	// Two stores do not share a hash seed: a flooder who finds keys that
	// crowd one shard of one process has not found them for another.
	if s1, s2 := New(), New(); s1.keys.Hash("b", "k") == s2.keys.Hash("b", "k") {
		t.Error("two stores have the same hash seed")
	}
}

func TestShardsForCap(t *testing.T) {
	for _, c := range []struct{ max, shards int }{
		{1, 1}, {127, 1}, {128, 2}, {1000, 8}, {16_384, 256}, {1 << 40, 256},
	} {
		s := New(WithMaxKeys(c.max))
		if s.keys.Shards() != c.shards || perShardTotal(s) != c.max {
			t.Errorf("WithMaxKeys(%d): %d shards holding %d keys, want %d holding %d", c.max, s.keys.Shards(), perShardTotal(s), c.shards, c.max)
		}
	}
}

// TestInvalidInput checks that a rejected op returns the zero Decision and
// an error that matches its sentinel, and changes nothing: neither the key
// with state ("k") nor an unseen one ("new").
func TestInvalidInput(t *testing.T) {
	s, _ := newStore(t)
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	take(t, s, b, "k", 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, c := range []struct {
		ctx  context.Context
		op   spigot.Op
		want error
	}{
		{context.Background(), spigot.Op{Key: "k", N: 1}, spigot.ErrInvalidLimit},
		{context.Background(), spigot.Op{Key: "new", Action: spigot.Reset}, spigot.ErrInvalidLimit},
		{context.Background(), spigot.Op{Limit: b, Key: "k", N: -1}, spigot.ErrInvalidCost},
		{context.Background(), spigot.Op{Limit: b, Key: "k", Action: spigot.Refund, N: -1}, spigot.ErrInvalidCost},
		{context.Background(), spigot.Op{Limit: b, Key: "k", Action: spigot.Action(200), N: 1}, errors.ErrUnsupported},
		{context.Background(), spigot.Op{Limit: b, Key: "new", Action: spigot.Action(200), N: 1}, errors.ErrUnsupported},
		{context.Background(), spigot.Op{Limit: b, Key: "k", Action: spigot.Action(200)}, errors.ErrUnsupported},
		{ctx, spigot.Op{Limit: b, Key: "k", N: 1}, context.Canceled},
		{ctx, spigot.Op{Limit: b, Key: "k", Action: spigot.Reset}, context.Canceled},
		{ctx, spigot.Op{Limit: b, Key: "new", N: 1}, context.Canceled},
	} {
		if got, err := s.Do(c.ctx, c.op); !errors.Is(err, c.want) || got != (spigot.Decision{}) {
			t.Errorf("step %d: Do(%v) = %+v, %v; want the zero Decision and an error matching %v", i, c.op, got, err, c.want)
		}
	}
	if got := count(s); got != 1 {
		t.Errorf("%d entries held after rejected requests, want 1", got)
	}
	if got, want := peek(t, s, b, "k", 0), (spigot.Decision{Remaining: 3, ResetAfter: 2 * time.Second, RefillAfter: time.Second}); got != want {
		t.Errorf("after rejected requests, a Peek = %+v, want %+v", got, want)
	}
}

// TestKeyCopied checks that the store keeps its own copy of a key, so that
// a key cut from a large string does not keep that string alive.
func TestKeyCopied(t *testing.T) {
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	s, _ := newStore(t)
	line := "GET /login HTTP/1.1 from 203.0.113.7"
	key := line[len(line)-11:]
	take(t, s, b, key, 1)
	h := s.keys.Hash("b", key)
	e := s.keys.Shard(h).Find(h, "b", key)
	if e == nil {
		t.Fatal("the key is not held")
	}
	_, k := e.Key()
	if k != key {
		t.Fatalf("the entry holds %q, want %q", k, key)
	}
	if p, l := uintptr(unsafe.Pointer(unsafe.StringData(k))), uintptr(unsafe.Pointer(unsafe.StringData(line))); p >= l && p < l+uintptr(len(line)) {
		t.Error("the store holds the caller's string, not a copy")
	}
}

// TestDoMultiAllOrNothing: an all-or-nothing batch is charged whole or not
// at all, two ops on one key are charged together, and the decisions say
// what each op gets in the batch; when it is denied, what each limit that
// did not deny holds.
func TestDoMultiAllOrNothing(t *testing.T) {
	ctx := context.Background()
	perIP := spigot.MustBucket("ip", 10, spigot.PerSecond(10))
	perUser := spigot.MustBucket("user", 3, spigot.PerSecond(1))
	s, clk := newStore(t)
	ip, user := func(n int64) spigot.Op { return spigot.Op{Limit: perIP, Key: "10.0.0.1", N: n} },
		func(n int64) spigot.Op { return spigot.Op{Limit: perUser, Key: "u", N: n} }
	for i, c := range []struct {
		ops  []spigot.Op
		want []spigot.Decision
		left [2]int64 // Remaining of ip and user after the call
	}{
		// RefillAfter: whole tokens throughout, so one token: 100 ms of ip,
		// 1 s of user.
		{[]spigot.Op{ip(1), user(1)}, []spigot.Decision{{N: 1, Remaining: 9, ResetAfter: 100 * time.Millisecond, RefillAfter: 100 * time.Millisecond}, {N: 1, Remaining: 2, ResetAfter: time.Second, RefillAfter: time.Second}}, [2]int64{9, 2}},
		{[]spigot.Op{ip(1), user(3)}, []spigot.Decision{{Remaining: 9, ResetAfter: 100 * time.Millisecond, RefillAfter: 100 * time.Millisecond}, {Remaining: 2, RetryAfter: time.Second, ResetAfter: time.Second, RefillAfter: time.Second}}, [2]int64{9, 2}},                                                                              // user lacks one: neither is charged, and ip says what it holds
		{[]spigot.Op{user(1), ip(1), user(1)}, []spigot.Decision{{N: 1, Remaining: 1, ResetAfter: 2 * time.Second, RefillAfter: time.Second}, {N: 1, Remaining: 8, ResetAfter: 200 * time.Millisecond, RefillAfter: 100 * time.Millisecond}, {N: 1, Remaining: 0, ResetAfter: 3 * time.Second, RefillAfter: time.Second}}, [2]int64{8, 0}}, // one key twice: together
		{[]spigot.Op{ip(11), user(0)}, []spigot.Decision{{Remaining: 8, RetryAfter: spigot.Never, ResetAfter: 200 * time.Millisecond, RefillAfter: 100 * time.Millisecond}, {Remaining: 0, ResetAfter: 3 * time.Second, RefillAfter: time.Second}}, [2]int64{8, 0}},
		{[]spigot.Op{ip(2), {Limit: perUser, Key: "u", Action: spigot.Refund, N: 3}}, []spigot.Decision{{N: 2, Remaining: 6, ResetAfter: 400 * time.Millisecond, RefillAfter: 100 * time.Millisecond}, {N: 3, Remaining: 3, RefillAfter: time.Second}}, [2]int64{6, 3}},
	} {
		out := make([]spigot.Decision, len(c.ops))
		if err := s.DoMulti(ctx, spigot.AllOrNothing, c.ops, out); err != nil {
			t.Fatalf("step %d: DoMulti(%v): %v", i, c.ops, err)
		}
		if !slices.Equal(out, c.want) {
			t.Errorf("step %d: DoMulti(%v) = %+v; want %+v", i, c.ops, out, c.want)
		}
		for j, l := range []spigot.Op{ip(0), user(0)} {
			l.Action = spigot.Peek
			if d, _ := s.Do(ctx, l); d.Remaining != c.left[j] {
				t.Errorf("step %d: after the batch, %v has %d left; want %d", i, l.Limit, d.Remaining, c.left[j])
			}
		}
	}
	_ = clk
}

// TestDoMultiNoDeadlock: two goroutines take the same keys all-or-nothing
// in opposite orders; the shards' locks are taken in one global order, so
// both finish, and every token is taken once.
func TestDoMultiNoDeadlock(t *testing.T) {
	const rounds = 2000
	s, _ := newStore(t)
	b := spigot.MustBucket("b", 2*rounds, spigot.PerHour(1))
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			ops := make([]spigot.Op, len(keys))
			for i, k := range keys {
				if g == 1 {
					k = keys[len(keys)-1-i]
				}
				ops[i] = spigot.Op{Limit: b, Key: k, N: 1}
			}
			out := make([]spigot.Decision, len(ops))
			for range rounds {
				if err := s.DoMulti(context.Background(), spigot.AllOrNothing, ops, out); err != nil || !out[0].Allowed() {
					t.Errorf("goroutine %d: DoMulti = %+v, %v; want all allowed", g, out, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		if d, _ := s.Do(context.Background(), spigot.Op{Limit: b, Key: k, Action: spigot.Peek}); d.Remaining != 0 {
			t.Errorf("key %q: %d left; want 0: each of the %d batches took one", k, d.Remaining, 2*rounds)
		}
	}
}

// TestReturningKeyAllocs checks that a key whose bucket is full again
// (expired, refunded to full, or reset) keeps its memory for reuse: its
// next request allocates nothing, whatever the action that filled it.
func TestReturningKeyAllocs(t *testing.T) {
	ctx := context.Background()
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	leaky := spigot.Must(spigot.NewLeakyBucket("leaky", 5, spigot.PerSecond(1)))
	for _, c := range []struct {
		name string
		b    spigot.Limit
		fill func(s *Store, clk *clocktest.Clock) // makes the bucket full again
	}{
		{"expired", b, func(s *Store, clk *clocktest.Clock) { clk.Advance(time.Second) }},
		{"refunded", b, func(s *Store, clk *clocktest.Clock) {
			s.Do(ctx, spigot.Op{Limit: b, Key: "k", Action: spigot.Refund, N: 1})
		}},
		{"reset", b, func(s *Store, clk *clocktest.Clock) {
			s.Do(ctx, spigot.Op{Limit: b, Key: "k", Action: spigot.Reset})
		}},
		{"leaky/expired", leaky, func(s *Store, clk *clocktest.Clock) { clk.Advance(time.Second) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, clk := newStore(t)
			take := spigot.Op{Limit: c.b, Key: "k", N: 1}
			var denied int
			n := testing.AllocsPerRun(100, func() {
				if d, err := s.Do(ctx, take); err != nil || !d.Allowed() || d.Remaining != 4 {
					denied++
				}
				c.fill(s, clk)
			})
			if denied != 0 {
				t.Fatalf("%d Takes of 1 on a full bucket did not leave 4 tokens", denied)
			}
			if n != 0 {
				t.Errorf("a key that comes back to a full bucket: %v allocations a request, want 0", n)
			}
			if got, want := entries(s), 1; got != want || s.Len() != 0 {
				t.Errorf("%d entries, Len() %d; want %d kept for reuse, and 0", got, s.Len(), want)
			}
		})
	}
}

// TestKeptForReuse checks how long the memory of a full key is kept: a
// shard that grows gives back the memory of keys full for ten seconds or
// more, and no other; Sweep gives back every full key's.
func TestKeptForReuse(t *testing.T) {
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	s, clk := newStore(t, WithMaxKeys(64*1024)) // 1024 shards' worth: 256 shards of 256
	const n = 4000
	for i := range n {
		take(t, s, b, ip(i), 1) // full again at t0+1s
	}
	steps := []struct {
		at            time.Duration
		from, to      int // keys taken at at
		entries, held int
	}{
		// Full for 9 s: kept, however much the store grows.
		{10 * time.Second, n, 3 * n, 3 * n, 2 * n},
		// The first keys have been full for 10 s: freed as the shards grow.
		{11 * time.Second, 3 * n, 5 * n, -1, 2 * n},
	}
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		for k := st.from; k < st.to; k++ {
			take(t, s, b, ip(k), 1)
		}
		if got := entries(s); st.entries >= 0 && got != st.entries || st.entries < 0 && got >= st.to {
			t.Errorf("step %d: at t0+%v, %d entries, want %d (-1: fewer than %d)", i, st.at, got, st.entries, st.to)
		}
		if got := s.Len(); got != st.held {
			t.Errorf("step %d: at t0+%v, Len() = %d, want %d", i, st.at, got, st.held)
		}
		if held(s, b, ip(st.to-1)) != true {
			t.Errorf("step %d: the last key taken holds no state", i)
		}
	}
	s.Sweep()
	if got := entries(s); got != 2*n {
		t.Errorf("after Sweep, %d entries, want %d (the keys with state)", got, 2*n)
	}
}

// TestConcurrentSweep runs requests on keys with state while other
// goroutines sweep, count, and churn keys that come and go (taken then
// reset, so that shards grow, sweep and rebuild their tables): every key is
// admitted exactly its capacity, as if nothing else ran.
func TestConcurrentSweep(t *testing.T) {
	const (
		capacity   = 10
		keys       = 300
		goroutines = 8 // each sends 3 requests to every key
	)
	b := spigot.MustBucket("b", capacity, spigot.PerHour(1))
	churn := spigot.MustBucket("churn", 5, spigot.PerSecond(1))
	window := spigot.Must(spigot.NewFixedWindow("b", spigot.Per(5, time.Hour), 0)) // b's name, another kind
	s, clk := newStore(t)
	admitted := make([]atomic.Int64, keys)
	var reqs, wg sync.WaitGroup
	for g := range goroutines {
		reqs.Go(func() {
			for r := range 3 {
				for i := range keys {
					k := (i + g*37 + r*11) % keys
					a, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: ip(k), N: 1})
					if err != nil {
						t.Error(err)
						return
					}
					if a.Allowed() {
						admitted[k].Add(1)
					}
				}
			}
		})
	}
	var done atomic.Bool
	for g := range 2 {
		wg.Go(func() {
			for i := 0; !done.Load(); i++ {
				k := ip(1<<20 | g<<16 | i%5000)
				for _, op := range []spigot.Op{
					{Limit: churn, Key: k, N: 1},
					{Limit: churn, Key: k, Action: spigot.Reset},
					{Limit: window, Key: k, N: 1}, // held apart from the entries
				} {
					if _, err := s.Do(context.Background(), op); err != nil {
						t.Error(err)
						return
					}
				}
				if i%500 == 0 {
					clk.Advance(time.Millisecond) // a refill of nothing: b's keys lose no token
				}
			}
		})
	}
	wg.Go(func() {
		for !done.Load() {
			s.Sweep()
			s.Len()
		}
	})
	reqs.Wait()
	done.Store(true)
	wg.Wait()
	for k := range admitted {
		if got := admitted[k].Load(); got != capacity {
			t.Errorf("key %d: %d of %d requests admitted, want %d", k, got, 3*goroutines, capacity)
		}
	}
	for k := range keys {
		if d := peek(t, s, b, ip(k), 0); d.Remaining != 0 {
			t.Errorf("key %d: Remaining = %d, want 0", k, d.Remaining)
		}
	}
}

// TestNamesThatMixAlike checks two buckets whose names differ only in the
// middle, so that every key has one hash in both: each keeps its own state.
func TestNamesThatMixAlike(t *testing.T) {
	x := spigot.MustBucket("tenant-1234-x-requests", 5, spigot.PerSecond(1))
	y := spigot.MustBucket("tenant-1234-y-requests", 5, spigot.PerSecond(1))
	s, _ := newStore(t)
	if hx, hy := s.keys.Hash(x.Name(), "k"), s.keys.Hash(y.Name(), "k"); hx != hy {
		t.Fatalf("the names hash apart (%#x, %#x): the test needs them alike", hx, hy)
	}
	for i, st := range []struct {
		b    spigot.Limit
		n    int64
		want int64 // Remaining
	}{
		{x, 1, 4},
		{y, 2, 3},
		{x, 1, 3},
		{y, 3, 0},
		{x, 0, 3},
	} {
		if got := take(t, s, st.b, "k", st.n); got.Remaining != st.want {
			t.Errorf("step %d: Take(%s, %d): Remaining %d, want %d", i, st.b.Name(), st.n, got.Remaining, st.want)
		}
	}
}

// TestEntryLayout checks that an entry is 48 bytes, with its id after it
// in the same allocation (keyed's tests check the shards' layout).
func TestEntryLayout(t *testing.T) {
	if size := unsafe.Sizeof(entry{}); size != 48 {
		t.Errorf("an entry is %d bytes, want 48", size)
	}
	e := fast.New("b", "k")
	name, _ := e.Key()
	if got, want := uintptr(unsafe.Pointer(unsafe.StringData(name))), uintptr(unsafe.Pointer(e))+48; got != want {
		t.Errorf("an entry's id is at %#x, want %#x: right after it", got, want)
	}
}

// TestConcurrentRemoval hammers the keys of one shard while their entries
// are removed and added again under the requests: by Sweep, by the sweeps
// and evictions of inserts at the cap (the clock advancing past the ten
// seconds a full key is kept), and by keys that leave and come back. Every
// request is applied once, to the state the key holds: a key with state is
// admitted exactly its capacity, and a key whose every Take is refunded
// admits every Take and ends full.
func TestConcurrentRemoval(t *testing.T) {
	const (
		capacity = 5
		kept     = 4  // keys taken until denied, each by every taker
		takers   = 4  // goroutines on the kept keys
		rounds   = 50 // requests of each taker to each kept key
		bouncers = 4  // goroutines on each bounce key
		bounces  = 2  // keys taken and refunded
		cycles   = 2000
	)
	b := spigot.MustBucket("b", capacity, spigot.PerHour(1))
	// A bounce key holds a token for each of its goroutines and one for
	// the batches.
	bounce := spigot.MustBucket("bounce", bouncers+1, spigot.PerHour(1))
	churn := spigot.MustBucket("churn", 5, spigot.PerSecond(1))
	s, clk := newStore(t, WithMaxKeys(64))
	if got := s.keys.Shards(); got != 1 {
		t.Fatalf("%d shards, want 1: the test needs every key in one", got)
	}
	ctx := context.Background()
	admitted := make([]atomic.Int64, kept)
	var reqs, bg sync.WaitGroup
	for g := range takers {
		reqs.Go(func() {
			for r := range rounds {
				for i := range kept {
					k := (i + g + r) % kept
					d, err := s.Do(ctx, spigot.Op{Limit: b, Key: "kept" + strconv.Itoa(k), N: 1})
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed() {
						admitted[k].Add(1)
					}
				}
			}
		})
	}
	for k := range bounces {
		key := "bounce" + strconv.Itoa(k)
		for range bouncers {
			reqs.Go(func() {
				for range cycles {
					d, err := s.Do(ctx, spigot.Op{Limit: bounce, Key: key, N: 1})
					if err != nil || !d.Allowed() {
						t.Errorf("%s: Take of 1 = %+v, %v; want it allowed", key, d, err)
						return
					}
					d, err = s.Do(ctx, spigot.Op{Limit: bounce, Key: key, Action: spigot.Refund, N: 1})
					if err != nil || d.N != 1 {
						t.Errorf("%s: Refund of 1 = %+v, %v; want N 1", key, d, err)
						return
					}
				}
			})
		}
	}
	reqs.Go(func() { // all-or-nothing batches over both bounce keys
		out := make([]spigot.Decision, bounces)
		for range cycles {
			for _, action := range []spigot.Action{spigot.Take, spigot.Refund} {
				ops := []spigot.Op{
					{Limit: bounce, Key: "bounce0", Action: action, N: 1},
					{Limit: bounce, Key: "bounce1", Action: action, N: 1},
				}
				if err := s.DoMulti(ctx, spigot.AllOrNothing, ops, out); err != nil || out[0].N != 1 || out[1].N != 1 {
					t.Errorf("a batch of %v: %+v, %v; want N 1 for each op", action, out, err)
					return
				}
			}
		}
	})
	var done atomic.Bool
	for g := range 2 { // keys that come and go, beyond the cap
		bg.Go(func() {
			for i := 0; !done.Load(); i++ {
				k := ip(g<<16 | i%5000)
				for _, op := range []spigot.Op{
					{Limit: churn, Key: k, N: 1},
					{Limit: churn, Key: k, Action: spigot.Reset},
				} {
					if _, err := s.Do(ctx, op); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	bg.Go(func() {
		// Past the time a full key is kept, 100 times at most: under an
		// hour in all, so that b and bounce refill no whole token.
		for i := 0; i < 100 && !done.Load(); i++ {
			clk.Advance(time.Duration(keepFull+1e6) * time.Microsecond)
			s.Sweep()
			s.Len()
		}
	})
	reqs.Wait()
	done.Store(true)
	bg.Wait()
	if n := s.Evictions(); n != 0 {
		t.Fatalf("%d keys evicted before they were full: the test needs a full key in every sample", n)
	}
	for k := range admitted {
		if got := admitted[k].Load(); got != capacity {
			t.Errorf("kept%d: %d of %d requests admitted, want %d", k, got, takers*rounds, capacity)
		}
	}
	for k := range bounces {
		if d := peek(t, s, bounce, "bounce"+strconv.Itoa(k), 0); d.Remaining != bouncers+1 {
			t.Errorf("bounce%d: Remaining = %d, want %d (every Take refunded)", k, d.Remaining, bouncers+1)
		}
	}
}
