package store_test

// The Redis-protocol stores on a real Redis Cluster and Valkey Cluster
// (three primaries, one replica each), built by the same protoStores rows
// as on one server (go-redis with a ClusterClient for several addresses,
// valkey-go and rueidis given them as seeds): each request's script
// touches one key, so the cluster routes it by that key's slot.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/internal/scriptstore/storetest"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	"github.com/spigot-go/spigot/store/redis"
)

// TestCluster runs, on one cluster of each kind and in this order: the
// conformance suites, limits under load on keys of every primary, hash
// tags, several limits per request and batches, a manual failover, and a primary killed under load. The failovers
// come last: they leave the cluster with other primaries.
func TestCluster(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			cl := testserver.StartCluster(t, kind)
			t.Run("conformance", func(t *testing.T) { testClusterConformance(t, cl) })
			t.Run("limits-on-every-primary", func(t *testing.T) { testClusterLimits(t, cl) })
			t.Run("hash-tag", func(t *testing.T) { testClusterHashTag(t, cl) })
			t.Run("several-limits", func(t *testing.T) { testClusterSeveral(t, cl) })
			t.Run("kinds-in-one-slot", func(t *testing.T) { testClusterKinds(t, cl) })
			t.Run("manual-failover", func(t *testing.T) { testClusterManualFailover(t, cl) })
			t.Run("takeover", func(t *testing.T) { testClusterManualFailover(t, cl, "TAKEOVER") })
			t.Run("kill-primary", func(t *testing.T) { testClusterKillPrimary(t, cl) })
		})
	}
}

// testClusterConformance runs conformance.Run (caller's clock, with group
// commit off and on) and RunRealTime (server time) for each store, and for the go-redis store on
// a UniversalClient given the cluster's addresses, which makes a
// ClusterClient of its own.
func testClusterConformance(t *testing.T, cl *testserver.Cluster) {
	universal := protoStore{"go-redis-universal", func(t *testing.T, addrs []string, opts storeOpts) spigot.Store {
		c := goredis.NewUniversalClient(&goredis.UniversalOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		if _, ok := c.(*goredis.ClusterClient); !ok {
			t.Fatalf("NewUniversalClient with %d addresses made a %T; want a *ClusterClient", len(addrs), c)
		}
		return redis.New(c, options(opts)...)
	}}
	for _, ps := range slices.Concat(protoStores, []protoStore{universal}) {
		t.Run(ps.name, func(t *testing.T) {
			t.Run("fake-clock", func(t *testing.T) {
				conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
					return ps.new(t, cl.Addrs(), storeOpts{clock: clk, prefix: prefix(t)})
				})
			})
			t.Run("fake-clock-group-commit", func(t *testing.T) {
				conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
					return ps.new(t, cl.Addrs(), storeOpts{clock: clk, prefix: prefix(t), group: true})
				})
			})
			t.Run("server-time", func(t *testing.T) {
				conformance.RunRealTime(t, func(t *testing.T) spigot.Store {
					return ps.new(t, cl.Addrs(), storeOpts{})
				})
			})
		})
	}
}

// spreadKeys returns keys of bucket b under prefix, per keys on each
// primary, in an order that takes turns between the primaries, and the
// primary of each, as CLUSTER KEYSLOT and CLUSTER NODES say.
func spreadKeys(t *testing.T, cl *testserver.Cluster, pfx string, b spigot.Limit, per int) ([]string, map[string]*testserver.Server) {
	t.Helper()
	primaries, err := cl.Primaries()
	if err != nil || len(primaries) != 3 {
		t.Fatalf("Primaries() = %d nodes, %v; want 3", len(primaries), err)
	}
	byPrimary := make(map[*testserver.Server][]string)
	owners := make(map[string]*testserver.Server)
	for i := 0; len(owners) < per*len(primaries); i++ {
		if i == 1000 {
			t.Fatalf("1000 keys do not give %d on each of %d primaries: %v", per, len(primaries), byPrimary)
		}
		key := "user-" + strconv.Itoa(i)
		owner := keyOwner(t, cl, store.Key(pfx, b, key))
		if len(byPrimary[owner]) < per {
			byPrimary[owner] = append(byPrimary[owner], key)
			owners[key] = owner
		}
	}
	var keys []string
	for i := range per {
		for _, p := range primaries {
			keys = append(keys, byPrimary[p][i])
		}
	}
	return keys, owners
}

// keyOwner returns the primary that serves the Redis key full now.
func keyOwner(t *testing.T, cl *testserver.Cluster, full string) *testserver.Server {
	t.Helper()
	slot, err := cl.KeySlot(full)
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", full, err)
	}
	owner, err := cl.Owner(slot)
	if err != nil {
		t.Fatal(err)
	}
	return owner
}

// testClusterLimits: two stores of each library hammer keys of all three
// primaries at once; each key admits exactly its capacity, and its state
// is on the primary that CLUSTER KEYSLOT names.
func testClusterLimits(t *testing.T, cl *testserver.Cluster) {
	for _, b := range spreadLimits(time.Now()) {
		t.Run(b.Kind().String(), func(t *testing.T) {
			keys, owners := spreadKeys(t, cl, prefix(t), b, 3)
			var stores []spigot.Store
			for _, ps := range protoStores {
				for range 2 {
					stores = append(stores, ps.new(t, cl.Addrs(), storeOpts{prefix: prefix(t)}))
				}
			}
			storetest.ExactTakes(t, stores, b, keys, 24, 4)
			for _, k := range keys {
				full := store.Key(prefix(t), b, k)
				if !exists(t, owners[k].Addr, full) {
					t.Errorf("key %s is not on %s, the primary of its slot", full, owners[k].Addr)
				}
			}
		})
	}
}

// spreadLimits are limits of every kind that admit 40 in a day and
// nothing more during a test that starts at now: the fixed window's
// windows start 12 hours before now.
func spreadLimits(now time.Time) []spigot.Limit {
	day := 24 * time.Hour
	offset := now.Add(12 * time.Hour).Sub(now.Truncate(day)).Truncate(time.Millisecond)
	return []spigot.Limit{
		spigot.MustBucket("spread", 40, spigot.Per(1, day)),
		spigot.Must(spigot.NewLeakyBucket("spread-lb", 40, spigot.Per(1, day))),
		spigot.Must(spigot.NewFixedWindow("spread-fw", spigot.Per(40, day), offset)),
		spigot.Must(spigot.NewSlidingWindow("spread-sw", spigot.Per(40, day))),
		spigot.Must(spigot.NewSlidingLog("spread-sl", spigot.Per(40, day))),
	}
}

// testClusterHashTag: by default a key never chooses its slot: keys that
// a client wrote with one hash tag spread over every primary. With
// WithKeyHashTags, only the part of a key in braces decides its slot, so
// keys with the same tag share a primary, whatever their bucket.
func testClusterHashTag(t *testing.T, cl *testserver.Cluster) {
	login := spigot.MustBucket("login", 5, spigot.PerMinute(1))
	export := spigot.MustBucket("export", 100, spigot.PerHour(100))
	slot, err := cl.KeySlot("tenant-7")
	if err != nil {
		t.Fatal(err)
	}
	owner, err := cl.Owner(slot)
	if err != nil {
		t.Fatal(err)
	}
	primaries, err := cl.Primaries()
	if err != nil || len(primaries) != 3 {
		t.Fatalf("Primaries() = %d nodes, %v; want 3", len(primaries), err)
	}
	for _, ps := range protoStores {
		t.Run(ps.name+"/client-keys", func(t *testing.T) {
			pfx := prefix(t)
			s := ps.new(t, cl.Addrs(), storeOpts{prefix: pfx})
			held := make(map[*testserver.Server]int)
			for i := range 60 {
				key := "{tenant-7}:" + strconv.Itoa(i)
				if a := take(t, s, login, key, 1); !a.Allowed() || a.Remaining != login.Capacity()-1 {
					t.Fatalf("Take(%v, %q, 1) = %s; want the first of a full bucket", login, key, show(a))
				}
				full := store.Key(pfx, login, key)
				o := keyOwner(t, cl, full)
				if !exists(t, o.Addr, full) {
					t.Fatalf("%s is not on %s, the primary of its slot", full, o.Addr)
				}
				held[o]++
			}
			if len(held) != len(primaries) {
				t.Errorf("60 keys with the client's tag {tenant-7} landed on %d primaries; want all %d: the tag must not choose the slot", len(held), len(primaries))
			}
		})
		t.Run(ps.name+"/WithKeyHashTags", func(t *testing.T) {
			pfx := prefix(t)
			s := ps.new(t, cl.Addrs(), storeOpts{prefix: pfx, tags: true})
			for _, c := range []struct {
				b   spigot.Limit
				key string
			}{{login, "{tenant-7}:alice"}, {login, "{tenant-7}:bob"}, {export, "{tenant-7}"}} {
				if a := take(t, s, c.b, c.key, 1); !a.Allowed() || a.N != 1 || a.Remaining != c.b.Capacity()-1 {
					t.Errorf("Take(%v, %q, 1) = %s; want the first of a full bucket", c.b, c.key, show(a))
				}
				full := store.TaggedKey(pfx, c.b, c.key)
				if s, err := cl.KeySlot(full); err != nil || s != slot {
					t.Errorf("KEYSLOT %s = %d, %v; want %d, the slot of its tag", full, s, err, slot)
				}
				if !exists(t, owner.Addr, full) {
					t.Errorf("%s is not on %s, the primary of tenant-7", full, owner.Addr)
				}
			}
		})
	}
}

// A recorder is a store that remembers what its inner store answered: the
// Remaining of every admission per key (the buckets in these tests never
// refill, so two admissions reporting the same Remaining on one key mean
// that a token was admitted twice), and every error, telling apart the
// errors of requests sent after settle.
type recorder struct {
	spigot.Store
	onKey   func(key string) bool // whether after counts this key's decisions
	settled atomic.Bool           // set by settle

	mu        sync.Mutex
	remaining map[string][]int64
	errs      map[string]int // error text with digits masked → count
	lateErrs  map[string]int // the same, of requests sent after settle
	admitted  int64          // admissions on onKey's keys
	want      int64          // decisions on onKey's keys to wait for
	after     int64          // decisions on onKey's keys since arm
	reached   chan struct{}  // closed when after reaches want
}

func newRecorder(s spigot.Store) *recorder {
	return &recorder{Store: s, remaining: make(map[string][]int64), errs: make(map[string]int), lateErrs: make(map[string]int)}
}

// Do implements spigot.Store, recording what the inner store answered.
func (r *recorder) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	key := op.Key
	late := r.settled.Load()
	a, err := r.Store.Do(ctx, op)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs[maskDigits(err.Error())]++
		if late {
			r.lateErrs[maskDigits(err.Error())]++
		}
		return a, err
	}
	if a.Allowed() {
		r.remaining[key] = append(r.remaining[key], a.Remaining)
		if r.onKey(key) {
			r.admitted++
		}
	}
	if r.reached != nil && r.onKey(key) {
		if r.after++; r.after == r.want {
			close(r.reached)
		}
	}
	return a, err
}

// arm starts counting decisions on onKey's keys, and returns a channel
// closed at the n-th.
func (r *recorder) arm(n int64) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want, r.after, r.reached = n, 0, make(chan struct{})
	return r.reached
}

// settle marks the requests sent from now on as sent once the cluster is
// settled: lateErrorSummary reports their errors apart.
func (r *recorder) settle() { r.settled.Store(true) }

// maskDigits replaces runs of digits with "N", so that errors that differ
// only in an address or a slot count as one.
func maskDigits(s string) string {
	var b strings.Builder
	digits := false
	for _, c := range s {
		if '0' <= c && c <= '9' {
			if !digits {
				b.WriteByte('N')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(c)
	}
	return b.String()
}

// merge returns a recorder of every admission recs saw.
func merge(recs []*recorder) *recorder {
	all := newRecorder(nil)
	for _, r := range recs {
		r.mu.Lock()
		for k, rs := range r.remaining {
			all.remaining[k] = append(all.remaining[k], rs...)
		}
		all.admitted += r.admitted
		r.mu.Unlock()
	}
	return all
}

// accounting checks the Remaining values that r saw admitted on each key
// of a bucket of capacity that never refills, and returns how many came
// more than once (a repeat is a token admitted twice, as after a lost
// write) and how many below the lowest never came (a skip is a token
// charged without an admission: a request that timed out, or was sent
// twice).
func (r *recorder) accounting(capacity int64) (repeats, skips int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range r.remaining {
		seen := make(map[int64]bool, len(rs))
		lowest := capacity
		for _, v := range rs {
			if seen[v] {
				repeats++
			}
			seen[v] = true
			lowest = min(lowest, v)
		}
		skips += int(capacity-lowest) - len(seen)
	}
	return repeats, skips
}

// errorSummary lists every error, with its count.
func (r *recorder) errorSummary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return summary(r.errs)
}

// lateErrorSummary lists the errors of requests sent after settle.
func (r *recorder) lateErrorSummary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return summary(r.lateErrs)
}

// unexpectedErrors lists the errors of r that contain none of allowed.
func (r *recorder) unexpectedErrors(allowed ...string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	others := make(map[string]int)
	for e, n := range r.errs {
		if !slices.ContainsFunc(allowed, func(a string) bool { return strings.Contains(e, a) }) {
			others[e] = n
		}
	}
	return summary(others)
}

func summary(errs map[string]int) string {
	var lines []string
	for e, n := range errs {
		lines = append(lines, fmt.Sprintf("%d× %s", n, e))
	}
	slices.Sort(lines)
	return strings.Join(lines, "; ")
}

// failoverLoad is requests from goroutines on each of stores, each
// goroutine sending one every pace, taking turns over keys, until end.
type failoverLoad struct {
	wg      sync.WaitGroup
	stop    chan struct{}
	mu      sync.Mutex
	latency [][]time.Duration // per store, how long each answer took
	errs    atomic.Int64
	lastErr atomic.Value
}

func startLoad(stores []spigot.Store, b spigot.Limit, keys []string, goroutines int, pace, timeout time.Duration) *failoverLoad {
	l := &failoverLoad{stop: make(chan struct{}), latency: make([][]time.Duration, len(stores))}
	for si, s := range stores {
		for g := range goroutines {
			l.wg.Go(func() {
				tick := time.NewTicker(pace)
				defer tick.Stop()
				var latency []time.Duration
				defer func() {
					l.mu.Lock()
					l.latency[si] = append(l.latency[si], latency...)
					l.mu.Unlock()
				}()
				for i := g + si; ; i++ {
					select {
					case <-l.stop:
						return
					case <-tick.C:
					}
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					start := time.Now()
					_, err := s.Do(ctx, takeOp(b, keys[i%len(keys)], 1))
					latency = append(latency, time.Since(start))
					cancel()
					if err != nil {
						l.errs.Add(1)
						l.lastErr.Store(err)
					}
				}
			})
		}
	}
	return l
}

// end stops the load and waits for its goroutines; it may be called twice.
func (l *failoverLoad) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// latencies returns, after end, how many answers store si gave, how many
// of them took longer than bound, the 99th percentile and the longest.
func (l *failoverLoad) latencies(si int, bound time.Duration) (n, over int, p99, longest time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ds := slices.Clone(l.latency[si])
	if len(ds) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(ds)
	over = len(ds) - sort.Search(len(ds), func(i int) bool { return ds[i] > bound })
	return len(ds), over, ds[len(ds)*99/100], ds[len(ds)-1]
}

// waitFor arms every recorder for n decisions and waits for them, or
// fails t after timeout.
func waitFor(t *testing.T, recs []*recorder, n int64, timeout time.Duration, what string) {
	t.Helper()
	var reached []<-chan struct{}
	for _, r := range recs {
		reached = append(reached, r.arm(n))
	}
	expired := time.After(timeout)
	for i, c := range reached {
		select {
		case <-c:
		case <-expired:
			t.Fatalf("after %v, store %s made fewer than %d decisions %s", timeout, protoStores[i].name, n, what)
		}
	}
}

// scriptExists reports whether the server at addr has spigot's script in
// its cache.
func scriptExists(t *testing.T, addr string) bool {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	got, err := c.ScriptExists(context.Background(), wire.SHA1()).Result()
	if err != nil || len(got) != 1 {
		t.Fatalf("SCRIPT EXISTS on %s = %v, %v", addr, got, err)
	}
	return got[0]
}

// noscripts returns how many NOSCRIPT errors the server has replied, from
// INFO errorstats.
func noscripts(t *testing.T, srv *testserver.Server) int {
	t.Helper()
	info, err := srv.Info("errorstats")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(info["errorstat_NOSCRIPT"], "count="))
	return n
}

// The failover tests run three stores, one of each library, on the same
// keys of a bucket that never refills (each store's clock stands still):
// the Remaining of each admission counts the tokens the bucket's state has
// lost, so a token admitted twice shows as a Remaining seen twice.
var failoverBucket = spigot.MustBucket("failover", 1_000_000, spigot.PerHour(1))

// failoverTarget returns keys of failoverBucket on every primary, the
// primary of each, and the primary of the first key with its replica,
// which must not have spigot's script yet: the failover tests promote it
// and check that the stores meet its NOSCRIPT.
func failoverTarget(t *testing.T, cl *testserver.Cluster) (keys []string, owners map[string]*testserver.Server, primary, replica *testserver.Server) {
	t.Helper()
	keys, owners = spreadKeys(t, cl, prefix(t), failoverBucket, 2)
	primary = owners[keys[0]]
	replica, err := cl.Replica(primary)
	if err != nil {
		t.Fatal(err)
	}
	if scriptExists(t, replica.Addr) {
		t.Fatalf("the replica %s has spigot's script before the failover; the test needs it not to", replica.Addr)
	}
	return keys, owners, primary, replica
}

// testClusterManualFailover: CLUSTER FAILOVER [mode], sent to a replica,
// moves its primary's slots to it under load from all three stores. The
// promoted replica has never seen spigot's script, and the old primary
// answers MOVED for its old slots: neither ever reaches the caller. Once
// the failover is over (every node sees the replica serve the slots, and
// every node is ok), no request fails; while it lasts, a request may meet
// the cluster's own CLUSTERDOWN or TRYAGAIN, which store/hybrid turns into
// a fallback, and nothing else.
//
// A plain CLUSTER FAILOVER waits for the replica to catch up, so no token
// is lost or charged twice. TAKEOVER promotes the replica at once, as a
// failover after a network partition does: the old primary keeps
// admitting until it hears of the new epoch, and those writes are lost, so
// a bucket may be fuller afterwards by at most what was admitted in that
// window.
func testClusterManualFailover(t *testing.T, cl *testserver.Cluster, mode ...string) {
	cl.WaitOK(t, 30*time.Second) // a replica that has not synced would not take over
	keys, owners, primary, replica := failoverTarget(t, cl)
	slot, _ := cl.KeySlot(store.Key(prefix(t), failoverBucket, keys[0]))
	noscriptsBefore := noscripts(t, replica)

	clk := clocktest.New(t0)
	onMoved := func(key string) bool { return owners[key] == primary }
	var recs []*recorder
	var stores []spigot.Store
	for _, ps := range protoStores {
		r := newRecorder(ps.new(t, cl.Addrs(), storeOpts{clock: clk, prefix: prefix(t)}))
		r.onKey = onMoved
		recs = append(recs, r)
		stores = append(stores, r)
	}
	const goroutines = 4
	load := startLoad(stores, failoverBucket, keys, goroutines, time.Millisecond, 10*time.Second)
	defer load.end()
	waitFor(t, recs, 50, 30*time.Second, "before the failover")
	before := merge(recs).admitted
	if reply, err := replica.Do(append([]string{"CLUSTER", "FAILOVER"}, mode...)...); err != nil || reply != "OK" {
		t.Fatalf("CLUSTER FAILOVER %v on %s = %q, %v", mode, replica.Addr, reply, err)
	}
	cl.WaitOwner(t, slot, replica, 30*time.Second)
	window := merge(recs).admitted - before
	// The failover is over once every node is ok again (and the old
	// primary has synced with the new one): from then on no request may
	// fail.
	cl.WaitOK(t, 30*time.Second)
	for _, r := range recs {
		r.settle()
	}
	waitFor(t, recs, 50, 30*time.Second, "on the moved slots after the failover")
	load.end()

	for i, r := range recs {
		if errs := r.lateErrorSummary(); errs != "" {
			t.Errorf("%s: requests sent after the failover was over failed: %s", protoStores[i].name, errs)
		}
		if errs := r.unexpectedErrors("CLUSTERDOWN", "TRYAGAIN"); errs != "" {
			t.Errorf("%s: errors other than the cluster's CLUSTERDOWN or TRYAGAIN during a manual failover: %s", protoStores[i].name, errs)
		}
		if errs := r.errorSummary(); errs != "" {
			t.Logf("%s: while the failover lasted: %s", protoStores[i].name, errs)
		}
	}
	all := merge(recs)
	repeats, skips := all.accounting(failoverBucket.Capacity())
	if len(mode) == 0 && (repeats != 0 || skips != 0) {
		t.Errorf("over %d keys: %d tokens admitted twice and %d charged without an admission; want none", len(keys), repeats, skips)
	}
	// Lost writes are admissions by the old primary after the promotion,
	// before it heard of it; an answer can be counted a little late, so
	// allow the requests in flight too.
	if inFlight := len(stores) * goroutines; repeats > int(window)+inFlight {
		t.Errorf("%d tokens admitted twice; want at most the %d admitted on the moved slots between the failover and every node knowing of it, and %d in flight", repeats, window, inFlight)
	}
	t.Logf("%s: CLUSTER FAILOVER %v: %d admissions on the moved slots until every node knew; tokens admitted twice: %d; charged but not admitted: %d",
		cl.Kind, mode, window, repeats, skips)
	if n := noscripts(t, replica) - noscriptsBefore; n == 0 || !scriptExists(t, replica.Addr) {
		t.Errorf("the promoted replica replied NOSCRIPT %d times and has the script: %v; want the stores to have met NOSCRIPT and loaded it", n, scriptExists(t, replica.Addr))
	}
}

// testClusterKillPrimary: a primary is killed (SIGKILL) under load through
// hybrid stores, one on each library. While its slots are unavailable the
// stores decide locally, within their deadline; once its replica is
// promoted and the cluster is ok, the remote decides again. The test
// reports how many requests fell back, the longest answer, and how many
// tokens were admitted twice because the replica had not received the
// primary's last writes.
func testClusterKillPrimary(t *testing.T, cl *testserver.Cluster) {
	const (
		timeout    = 100 * time.Millisecond
		goroutines = 4
		pace       = 2 * time.Millisecond // per goroutine: 6000 requests/s in all
	)
	cl.WaitOK(t, 30*time.Second) // a replica that has not synced would not take over
	keys, owners, primary, replica := failoverTarget(t, cl)
	noscriptsBefore := noscripts(t, replica)

	clk := clocktest.New(t0)
	onKilled := func(key string) bool { return owners[key] == primary }
	type observed struct {
		paths       [hybrid.PathGuard + 1]atomic.Int64
		transitions atomic.Value // string
	}
	var (
		recs   []*recorder
		stores []spigot.Store
		obs    = make([]*observed, len(protoStores))
	)
	for i, ps := range protoStores {
		r := newRecorder(ps.new(t, cl.Addrs(), storeOpts{clock: clk, prefix: prefix(t)}))
		r.onKey = onKilled
		o := &observed{}
		o.transitions.Store("")
		obs[i] = o
		recs = append(recs, r)
		stores = append(stores, hybrid.New(r, memory.New(memory.WithClock(clk)),
			hybrid.WithTimeout(timeout),
			hybrid.WithBreaker(3, 200*time.Millisecond),
			hybrid.WithObserver(hybrid.Observer{
				Decision: func(_ context.Context, _ spigot.Op, p hybrid.Path, _ spigot.Decision) { o.paths[p].Add(1) },
				Transition: func(_ context.Context, from, to hybrid.Circuit) {
					o.transitions.Store(o.transitions.Load().(string) + " " + to.String())
				},
			}),
		))
	}
	// The caller's deadline is well past the store's own: what bounds an
	// answer is WithTimeout.
	load := startLoad(stores, failoverBucket, keys, goroutines, pace, 10*time.Second)
	defer load.end()
	waitFor(t, recs, 50, 30*time.Second, "before the kill")
	fallbacksBefore := make([]int64, len(obs))
	for i, o := range obs {
		fallbacksBefore[i] = o.paths[hybrid.PathLocal].Load()
	}
	if r := cl.AllowFailover(t, primary); r != replica {
		t.Fatalf("AllowFailover(%s) = %s; want its replica %s", primary.Addr, r.Addr, replica.Addr)
	}
	killed := time.Now()
	primary.Kill()
	cl.WaitOK(t, 30*time.Second)
	promoted := time.Since(killed)
	if owner := keyOwner(t, cl, store.Key(prefix(t), failoverBucket, keys[0])); owner != replica {
		t.Fatalf("after the failover %s serves the killed primary's slots; want its replica %s", owner.Addr, replica.Addr)
	}
	ok := time.Now()
	waitFor(t, recs, 1, 30*time.Second, "on the killed primary's keys after the failover")
	remoteAgain := time.Since(ok)
	waitFor(t, recs, 50, 30*time.Second, "on the killed primary's keys after the failover")
	load.end()

	if n := load.errs.Load(); n > 0 {
		t.Errorf("%d requests failed, the last with %v; under the Local policy none should", n, load.lastErr.Load())
	}
	// An answer takes about the store's timeout at worst. The bound allows
	// for six servers, three clients and the race detector on a shared
	// two-core machine; a moment the machine stalls delays every request
	// in flight, so at most 1% of the answers may take longer.
	const bound = timeout + 400*time.Millisecond
	var worst time.Duration
	latency := make([]string, len(stores))
	for i := range stores {
		n, over, p99, longest := load.latencies(i, bound)
		worst = max(worst, longest)
		latency[i] = fmt.Sprintf("%d of %d answers over %v, 99th percentile %v, longest %v", over, n, bound, p99.Round(time.Millisecond), longest.Round(time.Millisecond))
		if over*100 > n {
			t.Errorf("%s: %s; want at most 1%% over, the store's timeout being %v", protoStores[i].name, latency[i], timeout)
		}
	}
	var total, fallbacks int64
	for i, o := range obs {
		fb := o.paths[hybrid.PathLocal].Load() - fallbacksBefore[i]
		fallbacks += fb
		for p := range o.paths {
			total += o.paths[p].Load()
		}
		if fb == 0 {
			t.Errorf("%s: no request fell back during the failover", protoStores[i].name)
		}
		errs := recs[i].errorSummary()
		for _, redirect := range []string{"MOVED", "ASK", "NOSCRIPT"} {
			if strings.Contains(errs, redirect) {
				t.Errorf("%s: a %s reply reached the store as an error: %s", protoStores[i].name, redirect, errs)
			}
		}
		t.Logf("%s: %d fell back; %s; breaker:%s; remote errors: %s",
			protoStores[i].name, fb, latency[i], o.transitions.Load(), errs)
	}
	all := merge(recs)
	repeats, skips := all.accounting(failoverBucket.Capacity())
	// A token is admitted twice when the primary acknowledged a write its
	// replica never received: at most the requests in flight at the kill.
	if inFlight := len(stores) * goroutines; repeats > inFlight {
		t.Errorf("%d tokens admitted twice; want at most the %d requests in flight at the kill", repeats, inFlight)
	}
	if n := noscripts(t, replica) - noscriptsBefore; n == 0 {
		t.Errorf("the promoted replica never replied NOSCRIPT; the test meant to exercise it")
	}
	t.Logf("%s: cluster ok %v after SIGKILL, every store deciding remotely again %v later; %d of %d requests fell back; longest answer %v (timeout %v); tokens admitted twice: %d; charged but not admitted: %d",
		cl.Kind, promoted.Round(time.Millisecond), remoteAgain.Round(time.Millisecond), fallbacks, total, worst.Round(time.Millisecond), timeout, repeats, skips)
}

// TestAccounting: the failover tests' check of Remaining values finds a
// token admitted twice and one charged without an admission.
func TestAccounting(t *testing.T) {
	for _, c := range []struct {
		seen           map[string][]int64
		repeats, skips int
	}{
		{map[string][]int64{"a": {9, 8, 7}, "b": {9}}, 0, 0},
		{map[string][]int64{"a": {9, 7, 8}}, 0, 0},           // out of order: concurrent callers
		{map[string][]int64{"a": {9, 8, 8, 7}}, 1, 0},        // a lost write: 8 admitted twice
		{map[string][]int64{"a": {9, 8, 6}}, 0, 1},           // 7 charged, never admitted
		{map[string][]int64{"a": {9, 9, 7}, "b": {8}}, 1, 2}, // b: 9 skipped
	} {
		r := newRecorder(nil)
		r.remaining = c.seen
		if repeats, skips := r.accounting(10); repeats != c.repeats || skips != c.skips {
			t.Errorf("accounting(%v) = %d repeats, %d skips; want %d, %d", c.seen, repeats, skips, c.repeats, c.skips)
		}
	}
}
