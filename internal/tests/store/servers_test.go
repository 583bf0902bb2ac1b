package store_test

// The real-server suite of every Redis-protocol store: each row of
// protoStores runs on redis-server 7 and valkey-server 8 (and, for the
// differential, on miniredis). conformance.Run and RunRealTime check the
// model for each store in its own package; this file checks what needs a
// server or the memory store beside it: that the script is Take's exact
// twin, that key TTLs follow ResetAfter, and how a store behaves under
// concurrency, clock skew, SCRIPT FLUSH, a restart, a bad reply and a
// timeout.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/scriptstore/storetest"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/memory"
	"github.com/spigot-go/spigot/store/redis"
	"github.com/spigot-go/spigot/store/rueidis"
	"github.com/spigot-go/spigot/store/valkey"
)

// A protoStore is a Redis-protocol store under test.
type protoStore struct {
	name string
	// new connects a new client of the store's library to the server at
	// addrs (one server, or a cluster's seed nodes), closes it when t
	// ends, and returns a store on it with opts.
	new func(t *testing.T, addrs []string, opts storeOpts) spigot.Store
}

// storeOpts are the options every Redis-protocol store takes.
type storeOpts struct {
	clock  clock.Clock // WithClock when not nil; the server's TIME otherwise
	prefix string      // WithPrefix when not ""
	tags   bool        // WithKeyHashTags
	group  bool        // WithGroupCommit(true); WithGroupCommit(false) otherwise
}

// options turns opts into the options of package store.
func options(opts storeOpts) []store.Option {
	o := []store.Option{store.WithGroupCommit(opts.group)}
	if opts.clock != nil {
		o = append(o, store.WithClock(opts.clock))
	}
	if opts.prefix != "" {
		o = append(o, store.WithPrefix(opts.prefix))
	}
	if opts.tags {
		o = append(o, store.WithKeyHashTags())
	}
	return o
}

// protoStores lists every Redis-protocol store. Each client is built as
// its store's documentation advises for exact accounting.
var protoStores = []protoStore{
	{"go-redis", func(t *testing.T, addrs []string, opts storeOpts) spigot.Store {
		// MaxRetries keeps its default: the store's commands are never
		// resent whatever it says, which TestNoReplay checks.
		return redis.New(testclient.GoRedis(t, addrs...), options(opts)...)
	}},
	{"valkey-go", func(t *testing.T, addrs []string, opts storeOpts) spigot.Store {
		return valkey.New(testclient.Valkey(t, addrs...), options(opts)...)
	}},
	{"rueidis", func(t *testing.T, addrs []string, opts storeOpts) spigot.Store {
		return rueidis.New(testclient.Rueidis(t, addrs...), options(opts)...)
	}},
}

// A serverCase is a test of a store on a running server.
type serverCase struct {
	name string
	f    func(t *testing.T, ps protoStore, srv *testserver.Server)
}

var serverCases = []serverCase{
	{"differential", testDifferentialServer},
	{"differential-multi", testDifferentialMulti},
	{"ttl-follows-reset-after", testTTL},
	{"full-bucket-leaves-no-key", testFullBucketNoKey},
	{"key-gone-when-full-again", testKeyGoneWhenFull},
	{"sub-second-rate", testSubSecondRate},
	{"concurrent-one-key", testConcurrentOneKey},
	{"config-change", testConfigChange},
	{"clock-skew", testClockSkew},
	{"script-flush-under-load", testScriptFlush},
	{"restart", testRestart},
	{"rolling-deploy", testRollingDeploy},
	{"kind-reuse", testKindReuse},
	{"other-states", testOtherStates},
	{"unreadable-state", testUnreadableState},
	{"format-v0.1.0", testFormatV010},
	{"batch-unreadable-value", testBatchUnreadableValue},
	{"costs-beyond-exact", testCostsBeyondExact},
	{"fullat-past-exact", testFullAtPastExact},
	{"leading-zeros", func(t *testing.T, ps protoStore, srv *testserver.Server) { testLeadingZeros(t, ps, srv.Addr) }},
	{"stored-values", testStoredValues},
}

// TestServers runs every serverCase for every store on one server of each
// kind. Cases tell their data apart by their key prefix; they run one at a
// time, since some of them (SCRIPT FLUSH) touch the whole server.
func TestServers(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			for _, ps := range protoStores {
				t.Run(ps.name, func(t *testing.T) {
					for _, c := range serverCases {
						t.Run(c.name, func(t *testing.T) { c.f(t, ps, srv) })
					}
				})
			}
		})
	}
}

// prefix returns a key prefix of t's own.
func prefix(t *testing.T) string { return t.Name() + ":" }

// allActions are every Action, for tests that try each.
var allActions = []spigot.Action{spigot.Take, spigot.TakeUpTo, spigot.Refund, spigot.Reset, spigot.Peek}

// takeOp returns a Take of n tokens of key under l.
func takeOp(l spigot.Limit, key string, n int64) spigot.Op {
	return spigot.Op{Limit: l, Key: key, N: n}
}

// resetOp returns a Reset of key under l.
func resetOp(l spigot.Limit, key string) spigot.Op {
	return spigot.Op{Limit: l, Key: key, Action: spigot.Reset}
}

// do applies op on s, and fails t on an error.
func do(t testing.TB, s spigot.Store, op spigot.Op) spigot.Decision {
	t.Helper()
	d, err := s.Do(context.Background(), op)
	if err != nil {
		t.Fatalf("Do(%v): %v", op, err)
	}
	return d
}

// take is do of a Take of n tokens of key under l.
func take(t testing.TB, s spigot.Store, l spigot.Limit, key string, n int64) spigot.Decision {
	t.Helper()
	return do(t, s, takeOp(l, key, n))
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// pttl returns the PTTL of key on the server at addr: -2 when the key does
// not exist, -1 when it has no TTL.
func pttl(t testing.TB, addr, key string) int64 {
	t.Helper()
	reply, err := testserver.Do(addr, "PTTL", key)
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	n, err := strconv.ParseInt(reply, 10, 64)
	if err != nil {
		t.Fatalf("PTTL %s = %q: %v", key, reply, err)
	}
	return n
}

func exists(t testing.TB, addr, key string) bool {
	t.Helper()
	reply, err := testserver.Do(addr, "EXISTS", key)
	if err != nil {
		t.Fatalf("EXISTS %s: %v", key, err)
	}
	return reply == "1"
}

// getValue returns the string at key, and false when there is no key.
func getValue(t testing.TB, c goredis.UniversalClient, key string) (string, bool) {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if err == goredis.Nil {
		return "", false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v, true
}

func show(d spigot.Decision) string {
	retry := d.RetryAfter.String()
	if d.RetryAfter == spigot.Never {
		retry = "Never"
	}
	reset := d.ResetAfter.String()
	if d.ResetAfter == spigot.Never {
		reset = "Never"
	}
	refill := d.RefillAfter.String()
	if d.RefillAfter == spigot.Never {
		refill = "Never"
	}
	degraded := ""
	if d.Degraded() {
		degraded = ", Degraded"
	}
	if d.Delay != 0 {
		degraded += ", Delay " + d.Delay.String()
	}
	return fmt.Sprintf("{Allowed %v, N %d, Remaining %d, RetryAfter %s, ResetAfter %s, RefillAfter %s%s}", d.Allowed(), d.N, d.Remaining, retry, reset, refill, degraded)
}

// diffDecisions returns "" when got equals want, and otherwise the first
// field that differs, and both.
func diffDecisions(got, want spigot.Decision) string {
	var field string
	switch {
	case got == want:
		return ""
	case got.Allowed() != want.Allowed():
		field = "Allowed"
	case got.N != want.N:
		field = "N"
	case got.Remaining != want.Remaining:
		field = "Remaining"
	case got.RetryAfter != want.RetryAfter:
		field = "RetryAfter"
	case got.ResetAfter != want.ResetAfter:
		field = "ResetAfter"
	case got.RefillAfter != want.RefillAfter:
		field = "RefillAfter"
	case got.Delay != want.Delay:
		field = "Delay"
	default:
		field = "Degraded"
	}
	return fmt.Sprintf("%s differs: got %s, want %s", field, show(got), show(want))
}

// formatState returns how the script stores s, a state of a kind it
// writes: wire.FormatState.
func formatState(s store.State) string {
	if v := wire.FormatState(s); v != "" {
		return v
	}
	panic(fmt.Sprintf("formatState: the script writes no state of kind %v", s.Kind))
}

// storedAs reports whether v, a value the script left, stands for s: it is
// formatState(s), or, for a sliding log, a value that wire.ParseState reads
// as s (the script keeps the base and width of the entries it read until
// a new entry does not fit them, so that it need not rewrite them).
func storedAs(v string, s store.State) bool {
	if v == formatState(s) {
		return true
	}
	if s.Kind != spigot.SlidingLog {
		return false
	}
	got, err := wire.ParseState(v, spigot.SlidingLog)
	return err == nil && reflect.DeepEqual(got, s)
}

// A model is spigot's Go model of a server's keys: the State of each key,
// as op.Apply leaves it. A key whose state is the zero State has no key on
// the server.
type model map[string]store.State

// apply applies op at now to the state of key, and returns the decision.
func (m model) apply(key string, op spigot.Op, now time.Time) spigot.Decision {
	next, d := apply(op, m[key], now)
	if next.IsZero() {
		delete(m, key)
	} else {
		m[key] = next
	}
	return d
}

// checkStored compares the value at key on the server with the model's
// state of key at now: the formatted state, or no key for the zero State.
// A state whose FullAt has come may also be gone: a server's TTL may have
// dropped it (the model keeps it, and reads it as absent, as the script
// does).
func (m model) checkStored(t testing.TB, c goredis.UniversalClient, key string, now time.Time) string {
	t.Helper()
	got, ok := getValue(t, c, key)
	s, has := m[key]
	stale := has && now.UnixMicro() >= s.FullAt
	switch {
	case !has && ok:
		return fmt.Sprintf("GET %s = %q; want no key (the model's state is the zero State)", key, got)
	case has && !ok && !stale:
		return fmt.Sprintf("no key %s; want %q", key, formatState(s))
	case has && ok && !storedAs(got, s):
		return fmt.Sprintf("GET %s = %q; want %q", key, got, formatState(s))
	}
	return ""
}

// The differential: the same random operation sequences, every action with
// random N, on spigot's Go model (Op.Apply), on the memory store and on a
// Redis-protocol store, with one fake clock, give the same Decisions, field
// by field, and the server holds the model's State for every key.

// t0 is where the differential's fake clocks start.
var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// diffOp is one step of a differential sequence: the clock moves by step,
// then op.
type diffOp struct {
	step  time.Duration
	op    spigot.Op
	retry bool // a repeat of the previous denied op exactly its RetryAfter later
}

func (o diffOp) String() string {
	return fmt.Sprintf("clock %+v, %v", o.step, o.op)
}

// diffRates are the configs a sequence's limits are drawn from, besides
// random ones: rates that do not divide a second evenly, sub-millisecond
// and slow ones, and capacity 0.
var diffRates = []struct {
	capacity int64
	rate     spigot.Rate
}{
	{5, spigot.PerSecond(3)},
	{10, spigot.Per(7, 10*time.Second)},
	{13, spigot.Per(10, 13*time.Second)},
	{3, spigot.Per(1, 3*time.Second)},
	{20, spigot.Per(1, 3*time.Second)},
	{1000, spigot.Per(1000, time.Millisecond)},
	{1, spigot.Per(1, time.Millisecond)},
	{2, spigot.Per(1, 20*time.Millisecond)},
	{0, spigot.PerSecond(3)},
	{7, spigot.PerHour(1)},
	// At MaxExact: capacity+1 is no double (scale 1), or is (scale 2).
	{1 << 53, spigot.Per(1, time.Microsecond)},
	{1 << 52, spigot.Per(1, 2*time.Microsecond)},
}

// diffGen generates a sequence: limit "d" changes its config now and then
// (a deploy under the same name, which may change its kind), limit "e"
// keeps one.
type diffGen struct {
	rng     *rand.Rand
	kinds   []spigot.Kind // of the limits drawn
	forward bool          // never step the clock back
	d       []spigot.Limit
	cur     int // d's config now
	e       spigot.Limit
	prev    diffOp
	prevD   spigot.Decision
	hasPrev bool
	elapsed time.Duration // the sum of the steps so far
	seed    uint64
	history []string // the steps so far, for failure messages
}

// fail ends the test at step, with the seed, the limits and the last
// steps of g's history.
func (g *diffGen) fail(t testing.TB, step int, format string, args ...any) {
	t.Helper()
	n := max(0, len(g.history)-8)
	t.Fatalf("seed %d, step %d: %s\n(limits d %v, e %v; the last steps:\n%s)",
		g.seed, step, fmt.Sprintf(format, args...), g.d, g.e, strings.Join(g.history[n:], "\n"))
}

// allKinds are every kind of limit.
var allKinds = []spigot.Kind{spigot.TokenBucket, spigot.LeakyBucket, spigot.FixedWindow, spigot.SlidingWindow, spigot.SlidingLog}

// newDiffGen returns the generator of seed, whose limits are of the kinds
// given (every kind when none is).
func newDiffGen(seed uint64, forward bool, kinds ...spigot.Kind) *diffGen {
	if len(kinds) == 0 {
		kinds = allKinds
	}
	g := &diffGen{rng: rand.New(rand.NewPCG(seed, seed^0x5b16a7)), forward: forward, seed: seed, kinds: kinds}
	for range 1 + g.rng.IntN(3) {
		g.d = append(g.d, g.limit("d"))
	}
	// A name whose config changes kind keeps to buckets that are full
	// again within 2^53 µs of the epoch (the year 2255): another kind's
	// state is read by its FullAt, which the script reads within 2^53 only
	// (a later one fails its key, as the stored values test).
	for i := range g.d {
		for scaleOf(g.d[i]) > 0 && g.d[i].Capacity()*scaleOf(g.d[i])/refillOf(g.d[i]) > 1<<50 && slices.ContainsFunc(g.d, func(l spigot.Limit) bool { return l.Kind() != g.d[i].Kind() }) {
			g.d[i] = g.limit("d")
		}
	}
	g.e = g.limit("e")
	return g
}

func (g *diffGen) limit(name string) spigot.Limit {
	switch kind := g.kinds[g.rng.IntN(len(g.kinds))]; kind {
	case spigot.LeakyBucket:
		if g.rng.IntN(3) > 0 {
			c := diffRates[g.rng.IntN(len(diffRates))]
			return spigot.Must(spigot.NewLeakyBucket(name, c.capacity, c.rate))
		}
		for {
			period := time.Duration(1+g.rng.Int64N(20_000_000)) * time.Microsecond
			l, err := spigot.NewLeakyBucket(name, g.rng.Int64N(50), spigot.Per(1+g.rng.Int64N(20), period))
			if err == nil {
				return l
			}
		}
	case spigot.FixedWindow, spigot.SlidingWindow, spigot.SlidingLog:
		return g.window(name, kind)
	}
	if g.rng.IntN(3) > 0 {
		c := diffRates[g.rng.IntN(len(diffRates))]
		return spigot.MustBucket(name, c.capacity, c.rate)
	}
	for {
		period := time.Duration(1+g.rng.Int64N(20_000_000)) * time.Microsecond
		l, err := spigot.NewBucket(name, g.rng.Int64N(50), spigot.Per(1+g.rng.Int64N(20), period))
		if err == nil {
			return l
		}
	}
}

// diffWindows are the windows a sequence's window limits are drawn from,
// besides random ones.
var diffWindows = []time.Duration{time.Millisecond, 3 * time.Millisecond, time.Second, 7 * time.Second, time.Minute, time.Hour, 24 * time.Hour}

// window returns a window limit of kind, named name: 1 to 30 tokens or
// 1000 (MaxLog), a few at the bounds of exactness, over windows of 1 ms
// to a day, a fixed window's offset anywhere in its window.
func (g *diffGen) window(name string, kind spigot.Kind) spigot.Limit {
	r := g.rng
	for {
		w := diffWindows[r.IntN(len(diffWindows))]
		if r.IntN(3) == 0 {
			w = time.Duration(1+r.Int64N(20_000)) * time.Millisecond
		}
		tokens := 1 + r.Int64N(30)
		switch r.IntN(8) {
		case 0:
			tokens = spigot.MaxLog
		case 1:
			tokens = 1
		case 2:
			if kind == spigot.FixedWindow {
				tokens = store.MaxExact
			} else if kind == spigot.SlidingWindow {
				tokens = store.MaxExact / w.Milliseconds()
			}
		}
		var l spigot.Limit
		var err error
		switch kind {
		case spigot.FixedWindow:
			off := time.Duration(r.Int64N(w.Milliseconds()*2)-w.Milliseconds()) * time.Millisecond
			if r.IntN(2) == 0 {
				off = 0
			}
			l, err = spigot.NewFixedWindow(name, spigot.Per(tokens, w), off)
		case spigot.SlidingWindow:
			l, err = spigot.NewSlidingWindow(name, spigot.Per(tokens, w))
		default:
			l, err = spigot.NewSlidingLog(name, spigot.Per(tokens, w))
		}
		if err == nil {
			return l
		}
	}
}

// next returns the next operation, given the result of the previous one.
func (g *diffGen) next() diffOp {
	return g.bound(g.draw())
}

// diffHorizon is how far from t0 a sequence's clock may go: to 2^53 µs
// since the epoch (the year 2255), past which Lua's numbers, doubles, no
// longer hold every microsecond.
var diffHorizon = time.UnixMicro(store.MaxExact - 1).Sub(t0)

// bound keeps the clock within diffHorizon of t0: it counts every step it
// returns as taken (a caller may take fewer), and a step past the horizon
// is none.
func (g *diffGen) bound(o diffOp) diffOp {
	if o.step > diffHorizon-g.elapsed {
		o.step, o.retry = 0, false
	}
	g.elapsed += o.step
	return o
}

func (g *diffGen) draw() diffOp {
	r := g.rng
	p, pd := g.prev, g.prevD
	if g.hasPrev && !pd.Allowed() && pd.RetryAfter != spigot.Never && r.IntN(4) == 0 {
		p.step, p.retry = pd.RetryAfter, true // the retry the denial promised
		return p
	}
	var o diffOp
	if r.IntN(10) < 7 {
		if r.IntN(7) == 0 {
			g.cur = r.IntN(len(g.d))
		}
		o.op.Limit = g.d[g.cur]
	} else {
		o.op.Limit = g.e
	}
	o.op.Key = []string{"a", "b", "", "{t}c"}[r.IntN(4)]
	switch r.IntN(20) {
	case 0, 1, 2, 3, 4, 5, 6, 7, 8:
		o.op.Action = spigot.Take
	case 9, 10, 11:
		o.op.Action = spigot.TakeUpTo
	case 12, 13, 14:
		o.op.Action = spigot.Refund
	case 15:
		o.op.Action = spigot.Reset
	default:
		o.op.Action = spigot.Peek
	}
	c := o.op.Limit.Capacity()
	switch r.IntN(10) {
	case 0:
		o.op.N = 0
	case 1:
		o.op.N = c
	case 2:
		o.op.N = c + 1
	case 3: // past what doubles hold, and around it
		o.op.N = []int64{1 << 40, 1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<53 + 2, 1 << 54, math.MaxInt64}[r.IntN(7)]
	case 4, 5, 6:
		o.op.N = 1
	default:
		o.op.N = r.Int64N(c + 1)
	}
	perToken := o.op.Limit.Rate().Period / time.Duration(o.op.Limit.Rate().Tokens)
	switch r.IntN(14) {
	case 0, 1:
		o.step = 0
	case 2:
		o.step = time.Microsecond
	case 3:
		o.step = time.Duration(1 + r.Int64N(999)) // under a µs: truncated away, or not
	case 4:
		if g.hasPrev && pd.RetryAfter > 0 && pd.RetryAfter != spigot.Never {
			o.step = pd.RetryAfter - time.Microsecond // just short of a retry
		}
	case 5:
		if g.hasPrev && pd.ResetAfter != spigot.Never {
			o.step = pd.ResetAfter // full again, exactly
		}
	case 6, 7:
		if !g.forward {
			o.step = -time.Duration(1+r.Int64N(2_000_000)) * time.Microsecond // the clock steps back
		}
	case 8:
		o.step = time.Duration(1+r.Int64N(48)) * time.Hour
	case 9:
		if w := o.op.Limit.Window(); w > 0 { // across a window's boundaries
			o.step = time.Duration(r.Int64N(int64(2*w) + 1))
			break
		}
		fallthrough
	default:
		o.step = time.Duration(r.Int64N(int64(2*perToken) + 1))
	}
	return o
}

// record tells the generator the result of o.
func (g *diffGen) record(o diffOp, d spigot.Decision) {
	g.prev, g.prevD, g.hasPrev = o, d, true
}

// differential runs the sequence of seed, steps long, on the Go model, on
// a memory store and on remote, all on clk. remote keeps its keys under
// prefix on the server at addr, whose values are checked against the
// model's states after each step.
//
// setTime, if not nil, runs after each clock move, to set a server's
// clock, which then never steps back: once a server's clock has passed a
// key's expiry, whether a step back finds the key again depends on when
// the server evicted it, which the model, which keeps every state, cannot
// follow. check, if not nil, runs after each operation with remote's
// result and the model's state of the key after it.
func differential(t *testing.T, seed uint64, steps int, clk *clocktest.Clock, remote spigot.Store, addr, prefix string,
	setTime func(), check func(step int, o diffOp, d spigot.Decision, s store.State, unwritten bool)) {
	t.Helper()
	ctx := context.Background()
	mem := memory.New(memory.WithClock(clk))
	raw := testclient.GoRedis(t, addr)
	m := model{}
	g := newDiffGen(seed, setTime != nil)
	actions := map[spigot.Action]int{}
	for i := range steps {
		o := g.next()
		clk.Advance(o.step)
		if setTime != nil {
			setTime()
		}
		now := clk.Now()
		key := store.Key(prefix, o.op.Limit, o.op.Key)
		g.history = append(g.history, fmt.Sprintf("  step %d at %s: %v", i, now.Format("15:04:05.000000"), o))
		before, hadState := m[key]
		blocked := isBlocked(o.op.Limit, before, now)
		want := m.apply(key, o.op, now)
		md, merr := mem.Do(ctx, o.op)
		rd, rerr := remote.Do(ctx, o.op)
		switch {
		case merr != nil || rerr != nil:
			g.fail(t, i, "%v: memory error %v; remote error %v", o, merr, rerr)
		case diffDecisions(rd, want) != "":
			g.fail(t, i, "%v: remote and Op.Apply: %s", o, diffDecisions(rd, want))
		case diffDecisions(md, want) != "":
			g.fail(t, i, "%v: memory and Op.Apply: %s", o, diffDecisions(md, want))
		case o.retry && !rd.Allowed():
			g.fail(t, i, "%v: a retry exactly RetryAfter after a denial = %s; want allowed", o, show(rd))
		}
		if problem := m.checkStored(t, raw, key, now); problem != "" {
			state := "none"
			if hadState {
				state = formatState(before)
			}
			g.fail(t, i, "%v = %s, on the state %s: %s", o, show(rd), state, problem)
		}
		actions[o.op.Action]++
		g.history[len(g.history)-1] += " = " + show(rd)
		if check != nil {
			check(i, o, rd, m[key], o.op.Action == spigot.Peek || blocked && o.op.Action != spigot.Reset)
		}
		g.record(o, rd)
	}
	for _, a := range allActions {
		if actions[a] == 0 {
			t.Errorf("seed %d: %d steps had no %v; the differential must cover every action", seed, steps, a)
		}
	}
}

// isBlocked reports whether a window or a log l finds s, at now, used up
// until its FullAt (s of another kind, or of other windows): Apply then
// leaves s as it was, and the script writes nothing, unless it resets.
func isBlocked(l spigot.Limit, s store.State, now time.Time) bool {
	t := now.UnixMicro()
	if l.Window() == 0 || s.IsZero() || t >= s.FullAt {
		return false
	}
	w, off := l.Window().Microseconds(), l.Offset().Microseconds()
	switch {
	case s.Kind != l.Kind():
		return true
	case l.Kind() == spigot.SlidingLog:
		return len(s.Log) > 0 && s.FullAt-s.Log[len(s.Log)-1] != w
	}
	return s.Window != w || ((s.Start-off)%w+w)%w != 0
}

// diffSeeds and diffSteps size the differential on each server; miniredis
// runs fewer seeds, since its Lua is some twenty times slower.
const (
	diffSeeds     = 24
	diffMiniSeeds = 8
	diffSteps     = 150
)

// testDifferentialServer runs the differential with the store reading the
// shared fake clock (WithClock).
func testDifferentialServer(t *testing.T, ps protoStore, srv *testserver.Server) {
	for seed := range uint64(diffSeeds) {
		clk := clocktest.New(t0)
		p := fmt.Sprintf("%s-%d:", t.Name(), seed)
		s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
		differential(t, seed, diffSteps, clk, s, srv.Addr, p, nil, nil)
	}
}

// TestDifferentialMiniredis runs the differential on miniredis: with
// WithClock, and with the server's TIME, which the test sets to the shared
// fake clock, TTLs counting down with it. With server time, every key an
// operation writes has a PTTL of exactly its ResetAfter, and a full bucket
// leaves no key; a Peek, which writes nothing, finds the TTL of the last
// write counting down to the state's FullAt (under the config the state
// was stored with, which may not be the Peek's).
func TestDifferentialMiniredis(t *testing.T) {
	for _, ps := range protoStores {
		t.Run(ps.name, func(t *testing.T) {
			t.Run("with-clock", func(t *testing.T) {
				m := miniredis.RunT(t)
				for seed := range uint64(diffMiniSeeds) {
					clk := clocktest.New(t0)
					p := fmt.Sprintf("%d:", seed)
					s := ps.new(t, []string{m.Addr()}, storeOpts{clock: clk, prefix: p})
					differential(t, seed, diffSteps, clk, s, m.Addr(), p, nil, nil)
				}
			})
			t.Run("server-time", func(t *testing.T) {
				m := miniredis.RunT(t)
				m.SetTime(t0)
				m.ClockTTL(true)
				for seed := range uint64(diffMiniSeeds) {
					clk := clocktest.New(t0)
					m.SetTime(t0)
					p := fmt.Sprintf("%d:", seed)
					s := ps.new(t, []string{m.Addr()}, storeOpts{prefix: p})
					differential(t, seed, diffSteps, clk, s, m.Addr(), p, func() { m.SetTime(clk.Now()) },
						func(step int, o diffOp, d spigot.Decision, s store.State, unwritten bool) {
							key := store.Key(p, o.op.Limit, o.op.Key)
							// The time until the state's FullAt: ResetAfter, or later
							// for a bucket whose stamp is ahead (read from another
							// kind's state), rounded up to the ms.
							want := (s.FullAt - clk.Now().UnixMicro() + 999) / 1000
							switch {
							case s.IsZero():
								want = -2 // no key
							case d.ResetAfter == spigot.Never:
								want = d.ResetAfter.Milliseconds()
							}
							lowest := want
							if unwritten {
								// The TTL of the last write counts down in ns, truncated
								// to the ms, while the script counts in whole µs.
								switch rem := s.FullAt - clk.Now().UnixMicro(); {
								case s.IsZero():
									lowest, want = -2, -2
								case rem <= 0: // gone, or going within the µs
									lowest, want = -2, 0
								default:
									// A FullAt that is not a whole ms from the write (a
									// window's, a bucket's stamp ahead) has a TTL rounded up
									// past it.
									lowest, want = (rem-1)/1000, (rem+999)/1000
								}
							}
							if got := pttl(t, m.Addr(), key); got < lowest || got > want || got == -1 {
								t.Fatalf("seed %d, step %d: %v = %s; PTTL %s = %d, want %d to %d", seed, step, o, show(d), key, got, lowest, want)
							}
						})
				}
			})
		})
	}
}

// testTTL: after each request of the login scenario (capacity 20, 1 per
// 3 s), with the server's clock, the key's PTTL is ResetAfter less the
// whole milliseconds between the script's run and the PTTL.
func testTTL(t *testing.T, ps protoStore, srv *testserver.Server) {
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{prefix: p})
	login := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	key := store.Key(p, login, "203.0.113.7")
	for i := range 21 {
		start := time.Now()
		a := take(t, s, login, "203.0.113.7", 1)
		ttl := pttl(t, srv.Addr, key)
		bound := time.Since(start).Milliseconds() + 1 // ms the server's clock may have moved, truncated
		allowed := i < 20
		switch {
		case a.Allowed() != allowed || a.N != b2i(allowed):
			t.Fatalf("step %d: got %s; want Allowed %v, N %d", i, show(a), allowed, b2i(allowed))
		case allowed && a.Remaining != int64(19-i):
			t.Fatalf("step %d: got %s; want Remaining %d", i, show(a), 19-i)
		case a.ResetAfter <= 0 || a.ResetAfter > time.Duration(min(i+1, 20))*3*time.Second:
			t.Fatalf("step %d: got %s; want ResetAfter in (0, %v]", i, show(a), time.Duration(min(i+1, 20))*3*time.Second)
		}
		if d := a.ResetAfter.Milliseconds() - ttl; d < 0 || d > bound {
			t.Fatalf("step %d: got %s; PTTL %s = %d ms, want ResetAfter less 0 to %d ms", i, show(a), key, ttl, bound)
		}
	}
	d, err := s.Do(context.Background(), resetOp(login, "203.0.113.7"))
	// Empty, with at most a few ms of refill: it lacked 20 tokens.
	if want := (spigot.Decision{N: 20, Remaining: 20, RefillAfter: 3 * time.Second}); err != nil || d != want {
		t.Fatalf("Reset of the drained bucket = %s, %v; want %s, nil", show(d), err, show(want))
	}
	if got := pttl(t, srv.Addr, key); got != -2 {
		t.Fatalf("after Reset: PTTL %s = %d; want -2 (no key)", key, got)
	}
}

// testFullBucketNoKey: an operation that leaves the bucket full (a Take
// of 0 on a key never seen, a Reset or a Refund of a full bucket, a Take
// over the capacity, a Peek) writes no key, and a Reset of a full bucket
// gives back nothing (N 0: it was full).
func testFullBucketNoKey(t *testing.T, ps protoStore, srv *testserver.Server) {
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{prefix: p})
	b := spigot.MustBucket("full", 5, spigot.PerHour(1))
	full := spigot.Decision{Remaining: 5, RefillAfter: time.Hour}
	for i, c := range []struct {
		op   spigot.Op
		want spigot.Decision
	}{
		{takeOp(b, "k", 0), full},
		{resetOp(b, "k"), full},
		{takeOp(b, "k", 6), spigot.Decision{Remaining: 5, RetryAfter: spigot.Never, RefillAfter: time.Hour}},
		{takeOp(b, "", 0), full},
		{spigot.Op{Limit: b, Key: "k", Action: spigot.TakeUpTo, N: 0}, full},
		{spigot.Op{Limit: b, Key: "k", Action: spigot.Refund, N: 3}, full},
		{spigot.Op{Limit: b, Key: "k", Action: spigot.Peek, N: 5}, full},
		{spigot.Op{Limit: b, Key: "k", Action: spigot.Peek, N: 6}, spigot.Decision{Remaining: 5, RetryAfter: spigot.Never, RefillAfter: time.Hour}},
		{spigot.Op{Limit: b, Key: "", Action: spigot.Reset, N: 4}, full}, // Reset ignores N
	} {
		if got := do(t, s, c.op); got != c.want {
			t.Errorf("step %d: %v = %s; want %s", i, c.op, show(got), show(c.want))
		}
		for _, k := range []string{"k", ""} {
			if key := store.Key(p, b, k); exists(t, srv.Addr, key) {
				t.Errorf("step %d: after %v, %s exists; want no key for a full bucket", i, c.op, key)
			}
		}
	}
}

// testKeyGoneWhenFull: with a fast rate, the key expires once the bucket is
// full again, not before, and the bucket then reads full. Real time is the
// point: the server expires the key.
func testKeyGoneWhenFull(t *testing.T, ps protoStore, srv *testserver.Server) {
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{prefix: p})
	b := spigot.MustBucket("fast", 2, spigot.Per(1, 20*time.Millisecond))
	key := store.Key(p, b, "k")
	start := time.Now()
	a := take(t, s, b, "k", 2)
	if !a.Allowed() || a.N != 2 || a.Remaining != 0 || a.ResetAfter <= 0 || a.ResetAfter > 40*time.Millisecond {
		t.Fatalf("Take 2 on a full bucket = %s; want allowed, N 2, Remaining 0, ResetAfter in (0, 40ms]", show(a))
	}
	for deadline := time.Now().Add(5 * time.Second); exists(t, srv.Addr, key); {
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists 5s after the bucket was full again (ResetAfter %v)", key, a.ResetAfter)
		}
		time.Sleep(2 * time.Millisecond)
	}
	// The server's clock truncates to the ms, and may differ a little from
	// ours in rate: allow 2 ms.
	if gone := time.Since(start); gone < a.ResetAfter-2*time.Millisecond {
		t.Errorf("%s was gone %v after the request; want it kept for ResetAfter, %v", key, gone, a.ResetAfter)
	}
	if a := take(t, s, b, "k", 0); a != (spigot.Decision{Remaining: 2, RefillAfter: 20 * time.Millisecond}) {
		t.Errorf("Take 0 after the key expired = %s; want a full bucket, {Allowed true, N 0, Remaining 2, RefillAfter 20ms}", show(a))
	}
}

// testSubSecondRate: a bucket that refills within a second keeps limiting
// (the EXPIRE 0 bug: a TTL in whole seconds deletes the key at once, and
// every request finds a full bucket).
func testSubSecondRate(t *testing.T, ps protoStore, srv *testserver.Server) {
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{prefix: p})

	// One token every 333⅓ ms: the key's TTL is 334 ms, not 0.
	b := spigot.MustBucket("third", 1, spigot.PerSecond(3))
	key := store.Key(p, b, "k")
	start := time.Now()
	a := take(t, s, b, "k", 1)
	ttl := pttl(t, srv.Addr, key)
	bound := time.Since(start).Milliseconds() + 1
	if !a.Allowed() || a.N != 1 || a.ResetAfter != 334*time.Millisecond {
		t.Fatalf("Take 1 on a full bucket of 1 at 3/s = %s; want allowed, N 1, ResetAfter 334ms", show(a))
	}
	if ttl <= 0 || ttl < 334-bound {
		t.Fatalf("PTTL %s = %d right after a request with ResetAfter 334ms; want 334 less at most %d", key, ttl, bound)
	}

	// A burst on 1000 per second admits no more than the capacity and the
	// refill over the burst's duration, and no key lives without a TTL.
	fast := spigot.MustBucket("milli", 1, spigot.PerSecond(1000))
	fkey := store.Key(p, fast, "k")
	const n = 300
	admitted := 0
	start = time.Now()
	for i := range n {
		if take(t, s, fast, "k", 1).Allowed() {
			admitted++
		}
		if i%10 == 0 {
			if ttl := pttl(t, srv.Addr, fkey); ttl == -1 {
				t.Fatalf("request %d: %s has no TTL", i, fkey)
			}
		}
	}
	elapsed := time.Since(start)
	// At most capacity + floor(T × refill); one more for the difference
	// between the server's clock and ours.
	if limit := 1 + int(elapsed/time.Millisecond) + 1; admitted > limit {
		t.Errorf("%d requests in %v on %v admitted %d; want at most %d", n, elapsed, fast, admitted, limit)
	}
	if admitted == 0 {
		t.Errorf("%d requests in %v on %v admitted none; want the first at least", n, elapsed, fast)
	}
}

// testConcurrentOneKey: goroutines hammering one key through one store
// admit exactly the capacity (the bucket does not refill during the test),
// each remaining count once.
func testConcurrentOneKey(t *testing.T, ps protoStore, srv *testserver.Server) {
	s := ps.new(t, []string{srv.Addr}, storeOpts{prefix: prefix(t)})
	hammer(t, []spigot.Store{s})
}

// TestServersAllClientsOneKey: two stores of each library on one server,
// one with group commit and one without, hammering one key together.
func TestServersAllClientsOneKey(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			var stores []spigot.Store
			for _, ps := range protoStores {
				for i := range 2 {
					stores = append(stores, ps.new(t, []string{srv.Addr}, storeOpts{group: i == 1}))
				}
			}
			hammer(t, stores)
		})
	}
}

// hammer sends 400 requests on one key of a bucket of 150 from 16
// goroutines spread over stores, and checks that exactly 150 are admitted,
// with Remaining 149 down to 0 each once.
func hammer(t *testing.T, stores []spigot.Store) {
	t.Helper()
	storetest.ExactTakes(t, stores, spigot.MustBucket("hammer", 150, spigot.Per(1, 24*time.Hour)), []string{"hot"}, 16, 25)
}

// testConfigChange: a bucket's config changes under its name, at fixed
// instants (WithClock), on the store and on the memory store alike. A
// state past its old ResetAfter is a full bucket under the new config,
// even though the key outlives it on the server (its TTL has
// ClockTTLSlack on top); a state not yet past it carries its whole tokens.
func testConfigChange(t *testing.T, ps protoStore, srv *testserver.Server) {
	v1 := spigot.MustBucket("cfg", 5, spigot.PerSecond(1))
	v2 := spigot.MustBucket("cfg", 10, spigot.PerSecond(1))
	v3 := spigot.MustBucket("cfg", 10, spigot.Per(1, 2*time.Second)) // half the rate: another scale
	clk := clocktest.New(t0)
	stores := []struct {
		name string
		s    spigot.Store
	}{
		{"memory", memory.New(memory.WithClock(clk))},
		{ps.name, ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: prefix(t)})},
	}
	upTo := func(l spigot.Limit, key string, n int64) spigot.Op {
		return spigot.Op{Limit: l, Key: key, Action: spigot.TakeUpTo, N: n}
	}
	for i, c := range []struct {
		advance time.Duration
		op      spigot.Op
		want    spigot.Decision
	}{
		// RefillAfter: a token of v1 or v2 is 1 s, of v3 2 s.
		{0, takeOp(v1, "a", 5), spigot.Decision{N: 5, ResetAfter: 5 * time.Second, RefillAfter: time.Second}},
		{0, takeOp(v2, "b", 10), spigot.Decision{N: 10, ResetAfter: 10 * time.Second, RefillAfter: time.Second}},
		{0, takeOp(v2, "c", 10), spigot.Decision{N: 10, ResetAfter: 10 * time.Second, RefillAfter: time.Second}},
		// t0+6s: a's state was full again at t0+5s; under v2 it is a full
		// 10 (carried over, it would hold 6 and deny).
		{6 * time.Second, takeOp(v2, "a", 10), spigot.Decision{N: 10, ResetAfter: 10 * time.Second, RefillAfter: time.Second}},
		// t0+10s-1µs: b's whole tokens (0) carry to v3, which refills
		// 9999999 of its 2000000 units per token since t0: a fifth token
		// 1 µs later.
		{4*time.Second - time.Microsecond, takeOp(v3, "b", 0), spigot.Decision{Remaining: 4, ResetAfter: 10001 * time.Millisecond, RefillAfter: time.Millisecond}},
		// t0+10s: c's state is full again, exactly: a full v3.
		{time.Microsecond, takeOp(v3, "c", 0), spigot.Decision{Remaining: 10, RefillAfter: 2 * time.Second}},
		{0, takeOp(v3, "c", 10), spigot.Decision{N: 10, ResetAfter: 20 * time.Second, RefillAfter: 2 * time.Second}},
		// A Refund under v2 of the empty v3 state: 3 tokens of v2.
		{0, spigot.Op{Limit: v2, Key: "c", Action: spigot.Refund, N: 3}, spigot.Decision{N: 3, Remaining: 3, ResetAfter: 7 * time.Second, RefillAfter: time.Second}},
		// Back to v3: the 3 whole tokens carry over, and TakeUpTo takes them.
		{0, upTo(v3, "c", 5), spigot.Decision{N: 3, ResetAfter: 20 * time.Second, RefillAfter: 2 * time.Second}},
		// t0+11s: half a token of v3: a Peek of 1 would wait 1s more.
		{time.Second, spigot.Op{Limit: v3, Key: "c", Action: spigot.Peek, N: 1}, spigot.Decision{RetryAfter: time.Second, ResetAfter: 19 * time.Second, RefillAfter: time.Second}},
		// Under v1 the same state is 1 whole token of v3: 1 of v1's 5.
		{0, upTo(v1, "c", 5), spigot.Decision{N: 1, ResetAfter: 5 * time.Second, RefillAfter: time.Second}},
		// A Reset under v2 of v1's empty state: it lacked all 10 of v2's.
		{0, resetOp(v2, "c"), spigot.Decision{N: 10, Remaining: 10, RefillAfter: time.Second}},
	} {
		clk.Advance(c.advance)
		for _, s := range stores {
			if got := do(t, s.s, c.op); got != c.want {
				t.Errorf("step %d: %s: at t0+%v, %v = %s; want %s", i, s.name, clk.Now().Sub(t0), c.op, show(got), show(c.want))
			}
		}
	}
}

// testClockSkew: two stores on one server whose callers' clocks are 10 s
// apart. With the server's clock, the callers' clocks take no part: the
// stores see one bucket and agree exactly. With WithClock(their own
// clocks) they do not: the caller ahead sees the bucket refilled 10 s
// early (a whole capacity here), and the one behind is then held back for
// the skew on top of the refill. This is why the stores read the server's
// TIME by default, and why WithClock documents that it gives that up.
func testClockSkew(t *testing.T, ps protoStore, srv *testserver.Server) {
	t.Run("server-time", func(t *testing.T) {
		// A slow bucket, so that nothing refills during the test.
		b := spigot.MustBucket("skew", 10, spigot.PerHour(1))
		p := prefix(t)
		x := ps.new(t, []string{srv.Addr}, storeOpts{prefix: p})
		y := ps.new(t, []string{srv.Addr}, storeOpts{prefix: p})
		start := time.Now()
		for i := range 10 {
			if a := take(t, []spigot.Store{x, y}[i%2], b, "k", 1); !a.Allowed() || a.N != 1 || a.Remaining != int64(9-i) {
				t.Fatalf("step %d: store %d: got %s; want allowed, N 1, Remaining %d", i, i%2, show(a), 9-i)
			}
		}
		for i, s := range []spigot.Store{x, y} {
			a := take(t, s, b, "k", 1)
			elapsed := time.Since(start)
			if a.Allowed() || a.N != 0 || a.Remaining != 0 || a.RetryAfter > time.Hour || a.RetryAfter < time.Hour-elapsed-time.Millisecond {
				t.Fatalf("store %d, %v after the first request: got %s; want denied, Remaining 0, RetryAfter in [1h-%v, 1h]", i, elapsed, show(a), elapsed)
			}
		}
	})

	t.Run("with-clock", func(t *testing.T) {
		b := spigot.MustBucket("skew", 10, spigot.PerSecond(1))
		p := prefix(t)
		behind := clocktest.New(t0)
		ahead := clocktest.New(t0.Add(10 * time.Second))
		x := ps.new(t, []string{srv.Addr}, storeOpts{clock: behind, prefix: p})
		y := ps.new(t, []string{srv.Addr}, storeOpts{clock: ahead, prefix: p})
		for i, c := range []struct {
			s    spigot.Store
			who  string
			cost int64
			want spigot.Decision
		}{
			{x, "behind", 10, spigot.Decision{N: 10, Remaining: 0, ResetAfter: 10 * time.Second, RefillAfter: time.Second}},
			// 10 s later by its clock: the bucket refilled, a second capacity.
			{y, "ahead", 10, spigot.Decision{N: 10, Remaining: 0, ResetAfter: 10 * time.Second, RefillAfter: time.Second}},
			// The stamp is now 10 s ahead of this caller: it waits the skew too.
			{x, "behind", 1, spigot.Decision{Remaining: 0, RetryAfter: 11 * time.Second, ResetAfter: 20 * time.Second, RefillAfter: 11 * time.Second}},
			{y, "ahead", 1, spigot.Decision{Remaining: 0, RetryAfter: time.Second, ResetAfter: 10 * time.Second, RefillAfter: time.Second}},
		} {
			if got := take(t, c.s, b, "k", c.cost); got != c.want {
				t.Errorf("step %d: the caller %s, cost %d: got %s; want %s", i, c.who, c.cost, show(got), show(c.want))
			}
		}
	})
}

// testScriptFlush: goroutines send requests while SCRIPT FLUSH empties the
// server's script cache again and again: not one request fails, and the
// bucket admits exactly its capacity.
func testScriptFlush(t *testing.T, ps protoStore, srv *testserver.Server) {
	const (
		capacity   = 300
		goroutines = 8
		each       = 60
	)
	s := ps.new(t, []string{srv.Addr}, storeOpts{prefix: prefix(t)})
	b := spigot.MustBucket("flush", capacity, spigot.Per(1, 24*time.Hour))
	evals := evalCalls(t, srv.Addr)
	flush := func() {
		if _, err := testserver.Do(srv.Addr, "SCRIPT", "FLUSH"); err != nil {
			t.Errorf("SCRIPT FLUSH: %v", err)
		}
	}
	flush() // the first request finds no script
	var (
		admitted, failed atomic.Int64
		wg               sync.WaitGroup
		done             = make(chan struct{})
		flushes          = 1
	)
	for range goroutines {
		wg.Go(func() {
			for range each {
				a, err := s.Do(context.Background(), takeOp(b, "k", 1))
				switch {
				case err != nil:
					if failed.Add(1) == 1 {
						t.Errorf("Take during SCRIPT FLUSH: %v", err)
					}
				case a.Allowed() != (a.N == 1):
					t.Errorf("Take 1 during SCRIPT FLUSH = %s; want N 1 exactly when allowed", show(a))
				case a.Allowed():
					admitted.Add(1)
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	for loop := true; loop; {
		select {
		case <-done:
			loop = false
		default:
			flush()
			flushes++
			time.Sleep(time.Millisecond)
		}
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed during %d SCRIPT FLUSHes; want none", n, goroutines*each, flushes)
	}
	if n := admitted.Load(); n != capacity {
		t.Errorf("%d requests during %d SCRIPT FLUSHes admitted %d; want exactly %d", goroutines*each, flushes, n, capacity)
	}
	if n := evalCalls(t, srv.Addr) - evals; n < 1 {
		t.Errorf("the server ran EVAL %d times; want at least once, after a NOSCRIPT", n)
	}
}

// evalCalls returns how many EVAL commands the server has run, from INFO
// commandstats.
func evalCalls(t *testing.T, addr string) int {
	t.Helper()
	info, err := testserver.Info(addr, "commandstats")
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	// calls=3,usec=…; a command never called has no line.
	calls, _, _ := strings.Cut(strings.TrimPrefix(info["cmdstat_eval"], "calls="), ",")
	n, _ := strconv.Atoi(calls)
	return n
}

// testRestart: while the server is down a request fails with a spigot
// error; once it is back (empty: the server keeps nothing on disk) the
// next request succeeds on the client's new connection and finds a full
// bucket.
func testRestart(t *testing.T, ps protoStore, shared *testserver.Server) {
	testserver.SkipShort(t, "kills and restarts a server")
	srv := testserver.Start(t, shared.Kind) // a server of its own, to kill
	s := ps.new(t, []string{srv.Addr}, storeOpts{prefix: prefix(t)})
	b := spigot.MustBucket("restart", 5, spigot.PerHour(1))
	for i := range 3 {
		if a := take(t, s, b, "k", 1); !a.Allowed() || a.N != 1 || a.Remaining != int64(4-i) {
			t.Fatalf("step %d: got %s; want allowed, N 1, Remaining %d", i, show(a), 4-i)
		}
	}

	srv.Kill()
	// Clients retry a refused connection for a while: don't wait for that.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	a, err := s.Do(ctx, takeOp(b, "k", 1))
	if err == nil || !strings.HasPrefix(err.Error(), "spigot: ") {
		t.Fatalf("Take with the server down = %s, %v; want an error starting %q", show(a), err, "spigot: ")
	}
	if _, err := s.Do(ctx, resetOp(b, "k")); err == nil || !strings.HasPrefix(err.Error(), "spigot: ") {
		t.Fatalf("Reset with the server down: error %v; want one starting %q", err, "spigot: ")
	}

	srv.Restart()
	// valkey-go and rueidis may first send on a connection from before
	// the restart and get an error, which the store returns rather than
	// replay; the next call reconnects. go-redis reconnects at once.
	for i := 0; ; i++ {
		a, err = s.Do(context.Background(), takeOp(b, "k", 1))
		if err == nil {
			// State is lost with the server; a failed call may or may not
			// have reached the new one.
			if !a.Allowed() || a.N != 1 || a.Remaining > 4 || a.Remaining < int64(4-i) {
				t.Fatalf("Take %d after the restart = %s; want allowed, N 1, Remaining 4 (or less by the %d failed calls)", i, show(a), i)
			}
			break
		}
		if !strings.HasPrefix(err.Error(), "spigot: ") || i == 2 || ps.name == "go-redis" {
			t.Fatalf("Take %d after the restart: %v", i, err)
		}
	}
}

// A fakeServer speaks just enough RESP to stand in for a server that
// answers EVALSHA and EVAL as a test says; it answers PING, and rejects
// every other command (HELLO included, so clients fall back to RESP2) as
// an unknown command. It counts the EVALSHA and EVAL it receives, and can
// tell when it has read everything a client sent (waitRead).
type fakeServer struct {
	addr          string
	evalsha, eval atomic.Int64
	// answer returns the raw RESP reply to an EVALSHA or EVAL, "" to
	// answer nothing more on that connection (it still reads and counts),
	// or "drop" to close the connection.
	answer func(cmd string) string

	mu       sync.Mutex
	closed   bool
	accepted []net.Conn        // in the order accepted
	read     map[net.Conn]bool // read to its end, or dropped
	changed  chan struct{}     // closed, and replaced, at each change
}

func startFake(t *testing.T, answer func(cmd string) string) *fakeServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{addr: l.Addr().String(), answer: answer, read: map[net.Conn]bool{}, changed: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			if f.closed {
				f.mu.Unlock()
				c.Close()
				return
			}
			f.accepted = append(f.accepted, c)
			f.notify()
			wg.Go(func() { f.serve(c) }) // this goroutine still counts: Wait has not returned
			f.mu.Unlock()
		}
	})
	t.Cleanup(func() {
		l.Close()
		f.mu.Lock()
		f.closed = true
		for _, c := range f.accepted {
			c.Close()
		}
		f.mu.Unlock()
		wg.Wait()
	})
	return f
}

// notify wakes waitRead; f.mu is held.
func (f *fakeServer) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeServer) serve(c net.Conn) {
	defer func() {
		c.Close()
		f.mu.Lock()
		f.read[c] = true
		f.notify()
		f.mu.Unlock()
	}()
	r := bufio.NewReader(c)
	mute := false // once a command goes unanswered, so do all that follow
	for {
		args, err := readCommand(r)
		if err != nil {
			return // the client closed the connection, or the test ended
		}
		var reply string
		switch cmd := strings.ToUpper(args[0]); cmd {
		case "PING":
			reply = "+PONG\r\n"
		case "EVALSHA", "EVAL":
			if cmd == "EVALSHA" {
				f.evalsha.Add(1)
			} else {
				f.eval.Add(1)
			}
			reply = f.answer(cmd)
			if reply == "drop" {
				return
			}
			mute = mute || reply == ""
		default:
			reply = fmt.Sprintf("-ERR unknown command '%s'\r\n", args[0])
		}
		if mute {
			continue
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// waitRead waits, once the client is closed, until the server has read
// everything the client sent: it connects once more itself and waits until
// that connection is accepted (connections are accepted in the order they
// were made, so every connection of the client is accepted by then), and
// until every connection accepted before it has been read to its end. It
// fails t after 10 seconds.
func (f *fakeServer) waitRead(t *testing.T) {
	t.Helper()
	marker, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer marker.Close()
	timeout := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		pending := -1 // until the marker is accepted
		for i, c := range f.accepted {
			if c.RemoteAddr().String() == marker.LocalAddr().String() {
				pending = 0
				for _, c := range f.accepted[:i] {
					if !f.read[c] {
						pending++
					}
				}
				break
			}
		}
		changed := f.changed
		f.mu.Unlock()
		if pending == 0 {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("after 10s the server has not read to their end the connections of a closed client (%d left, -1: its own not accepted)", pending)
		}
	}
}

// readCommand reads one command: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[0] != '*' {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array: %q", line)
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if line[0] != '$' {
			return nil, fmt.Errorf("not a bulk string: %q", line)
		}
		size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil || size < 0 {
			return nil, fmt.Errorf("bad bulk string: %q", line)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

// TestMalformedReply: a reply the store cannot decode is an error that
// names the problem; an error reply is the server's error, wrapped.
func TestMalformedReply(t *testing.T) {
	b := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	for _, ps := range protoStores {
		t.Run(ps.name, func(t *testing.T) {
			for i, c := range []struct {
				reply  string
				action spigot.Action
				want   string // in the error
			}{
				{"*3\r\n:1\r\n:19\r\n:0\r\n", spigot.Take, "spigot: malformed reply from the script: want 5 integers, got 3 values"},
				// The replies of the scripts before this one, {moved,
				// remaining, retry, reset} and, before operations, {allowed,
				// remaining, retry, reset}. (That of the script between them,
				// {allowed, moved, remaining, retry, reset}, has today's
				// length and reads as today's: no case here.)
				{"*4\r\n:1\r\n:19\r\n:0\r\n:3000\r\n", spigot.Take, "spigot: malformed reply from the script: want 5 integers, got 4 values"},
				{"*6\r\n:1\r\n:19\r\n:0\r\n:0\r\n:0\r\n:0\r\n", spigot.Take, "spigot: malformed reply from the script: want 5 integers, got 6 values"},
				{"+OK\r\n", spigot.Take, "spigot: malformed reply from the script: want an array of 5 integers, got string"},
				{":1\r\n", spigot.Take, "spigot: malformed reply from the script: want an array of 5 integers, got int64"},
				{"*5\r\n$1\r\n1\r\n:19\r\n:0\r\n:3000\r\n:3000\r\n", spigot.Take, "spigot: malformed reply from the script: value 1 is string, want an integer"},
				{"*5\r\n:1\r\n:19\r\n*-1\r\n:3000\r\n:3000\r\n", spigot.Take, "spigot: malformed reply from the script: value 3 is <nil>, want an integer"},
				{"*5\r\n:1\r\n*1\r\n:1\r\n:0\r\n:3000\r\n:3000\r\n", spigot.Take, "spigot: malformed reply from the script: value 2 is []interface {}, want an integer"},
				{"*5\r\n:-1\r\n:19\r\n:0\r\n:3000\r\n:3000\r\n", spigot.Take, "spigot: malformed reply from the script: moved -1 tokens"},
				{"*5\r\n:0\r\n:-1\r\n:5\r\n:3000\r\n:3000\r\n", spigot.Take, "spigot: malformed reply from the script: remaining is -1"},
				{"*5\r\n:0\r\n:19\r\n:-2\r\n:3000\r\n:3000\r\n", spigot.Take, "spigot: malformed reply from the script: retry-after is -2 ms"},
				{"*5\r\n:0\r\n:19\r\n:0\r\n:9223372036855\r\n:3000\r\n", spigot.Take, "spigot: malformed reply from the script: reset-after is 9223372036855 ms"},
				{"*5\r\n:0\r\n:19\r\n:0\r\n:3000\r\n:-7\r\n", spigot.Take, "spigot: malformed reply from the script: refill-after is -7 ms"},
				{"*5\r\n:2\r\n:0\r\n:5\r\n:3000\r\n:5\r\n", spigot.TakeUpTo, "spigot: malformed reply from the script: denied, yet moved 2 tokens"},
				{"$-1\r\n", spigot.Take, "nil"},
				{"-ERR something broke\r\n", spigot.Take, "something broke"}, // some clients drop the "ERR"
				// The replies of the script before operations to a reset,
				// and the scripts before this one's, {1, moved, capacity, 0,
				// 0} and {moved, capacity, 0, 0}.
				{":1\r\n", spigot.Reset, "spigot: malformed reply from the script: want an array of 5 integers, got int64"},
				{":0\r\n", spigot.Reset, "spigot: malformed reply from the script: want an array of 5 integers, got int64"},
				{"*4\r\n:1\r\n:20\r\n:0\r\n:0\r\n", spigot.Reset, "spigot: malformed reply from the script: want 5 integers, got 4 values"},
				{"+1\r\n", spigot.Refund, "spigot: malformed reply from the script: want an array of 5 integers, got string"},
				{"*5\r\n:1\r\n:19\r\n:7\r\n:3000\r\n:7\r\n", spigot.Peek, "spigot: malformed reply from the script: denied, yet moved 1 tokens"},
			} {
				f := startFake(t, func(string) string { return c.reply })
				s := ps.new(t, []string{f.addr}, storeOpts{})
				op := spigot.Op{Limit: b, Key: "k", Action: c.action, N: 1}
				d, err := s.Do(context.Background(), op)
				if err != nil && d != (spigot.Decision{}) {
					t.Errorf("step %d: %v returned %s with its error; want the zero Decision", i, op, show(d))
				}
				if err == nil || !strings.HasPrefix(err.Error(), "spigot: ") || !strings.Contains(err.Error(), c.want) {
					t.Errorf("step %d: %v, reply %q: error %v; want one starting %q that contains %q", i, op, c.reply, err, "spigot: ", c.want)
				}
				if n := f.evalsha.Load() + f.eval.Load(); n != 1 {
					t.Errorf("step %d: reply %q: the server got %d EVALSHA and EVAL; want 1", i, c.reply, n)
				}
			}
		})
	}
}

// TestNoReplay: a request is sent once. After a timeout the server may
// have run it, so it is not sent again; after NOSCRIPT the server ran
// nothing, so the script follows with EVAL, once.
//
// A replay could come after Do returned (a client may write from a
// goroutine of its own), so the timeout and connection-lost cases count
// what the server got only once the client is closed and the server has
// read everything it sent, on every connection (fakeServer.waitRead).
func TestNoReplay(t *testing.T) {
	b := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	for _, ps := range protoStores {
		t.Run(ps.name, func(t *testing.T) {
			t.Run("timeout", func(t *testing.T) {
				// On a loaded machine the deadline may pass before the
				// client sends the request at all: the server then gets
				// nothing, which is no replay but tests nothing either, so
				// the test tries again with a longer deadline.
				for deadline := 50 * time.Millisecond; ; deadline *= 2 {
					f := startFake(t, func(string) string { return "" }) // never answers
					ok := t.Run(fmt.Sprintf("deadline=%v", deadline), func(t *testing.T) {
						s := ps.new(t, []string{f.addr}, storeOpts{}) // closed when this test ends
						ctx, cancel := context.WithTimeout(context.Background(), deadline)
						defer cancel()
						start := time.Now()
						a, err := s.Do(ctx, takeOp(b, "k", 1))
						if err == nil || !strings.HasPrefix(err.Error(), "spigot: ") {
							t.Fatalf("Take on a server that never answers = %s, %v; want an error starting %q", show(a), err, "spigot: ")
						}
						// A client that waited for the answer would never return.
						if d := time.Since(start); d > deadline+5*time.Second {
							t.Errorf("Take with a deadline of %v on a server that never answers returned after %v", deadline, d)
						}
					})
					if !ok {
						return
					}
					f.waitRead(t)
					sha, eval := f.evalsha.Load(), f.eval.Load()
					if sha == 0 && eval == 0 && deadline < 5*time.Second {
						t.Logf("the deadline of %v passed before the request was sent; again with %v", deadline, 2*deadline)
						continue
					}
					if sha != 1 || eval != 0 {
						t.Errorf("after a timeout the server got %d EVALSHA and %d EVAL; want 1 and 0", sha, eval)
					}
					return
				}
			})
			t.Run("connection-lost", func(t *testing.T) {
				// The server reads the request and drops the connection: it
				// may have run the script.
				f := startFake(t, func(string) string { return "drop" })
				ok := t.Run("take", func(t *testing.T) {
					s := ps.new(t, []string{f.addr}, storeOpts{}) // closed when this test ends
					a, err := s.Do(context.Background(), takeOp(b, "k", 1))
					if err == nil || !strings.HasPrefix(err.Error(), "spigot: ") {
						t.Fatalf("Take on a server that drops the connection = %s, %v; want an error starting %q", show(a), err, "spigot: ")
					}
				})
				if !ok {
					return
				}
				f.waitRead(t)
				if sha, eval := f.evalsha.Load(), f.eval.Load(); sha != 1 || eval != 0 {
					t.Errorf("after a lost connection the server got %d EVALSHA and %d EVAL; want 1 and 0", sha, eval)
				}
			})
			t.Run("noscript", func(t *testing.T) {
				f := startFake(t, func(cmd string) string {
					if cmd == "EVALSHA" {
						return "-NOSCRIPT No matching script. Please use EVAL.\r\n"
					}
					return "*5\r\n:1\r\n:19\r\n:0\r\n:3000\r\n:3000\r\n"
				})
				s := ps.new(t, []string{f.addr}, storeOpts{})
				a, err := s.Do(context.Background(), takeOp(b, "k", 1))
				if want := (spigot.Decision{N: 1, Remaining: 19, ResetAfter: 3 * time.Second, RefillAfter: 3 * time.Second}); err != nil || a != want {
					t.Errorf("Take after NOSCRIPT = %s, %v; want %s", show(a), err, show(want))
				}
				if sha, eval := f.evalsha.Load(), f.eval.Load(); sha != 1 || eval != 1 {
					t.Errorf("after NOSCRIPT the server got %d EVALSHA and %d EVAL; want 1 and 1", sha, eval)
				}
			})
			t.Run("noscript-twice", func(t *testing.T) {
				// A server that rejects the script twice gets it twice,
				// not forever: the error of the EVAL is returned.
				f := startFake(t, func(string) string { return "-NOSCRIPT No matching script. Please use EVAL.\r\n" })
				s := ps.new(t, []string{f.addr}, storeOpts{})
				_, err := s.Do(context.Background(), takeOp(b, "k", 1))
				if err == nil || !strings.HasPrefix(err.Error(), "spigot: ") || !strings.Contains(err.Error(), "NOSCRIPT") {
					t.Errorf("Take on a server that answers NOSCRIPT to EVAL too: error %v; want one starting %q naming NOSCRIPT", err, "spigot: ")
				}
				if sha, eval := f.evalsha.Load(), f.eval.Load(); sha != 1 || eval != 1 {
					t.Errorf("the server got %d EVALSHA and %d EVAL; want 1 and 1", sha, eval)
				}
			})
		})
	}
}

// scaleOf and refillOf return a bucket's scaled units (see store.Scaled).
func scaleOf(l spigot.Limit) int64  { s, _ := store.Scaled(l); return s }
func refillOf(l spigot.Limit) int64 { _, r := store.Scaled(l); return r }
