package store_test

// What the script makes of any value a key may hold, and of any N: each
// value either reads as the State wire.ParseState gives, on which the
// script decides as Op.Apply does, or fails its own key alone, in a call
// of one key as in a batch, and never raises an error in the script; and
// an N that doubles cannot hold is decided exactly.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/redis"
)

// testBatchUnreadableValue: a batch of 8 ops whose fifth key holds "tb/1
// 1 2 3 -" (a token bucket's state with a '-' for its scale) fails that
// op alone: the other seven are decided and applied as Op.Apply says, and
// the bad key keeps its value. A call of one key on it, and an
// all-or-nothing call that names it, fail and change nothing.
func testBatchUnreadableValue(t *testing.T, ps protoStore, srv *testserver.Server) {
	ctx := context.Background()
	clk := clocktest.New(t0)
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
	raw := testclient.GoRedis(t, srv.Addr)
	g := spigot.MustBucket("g", 10, spigot.PerSecond(1))
	const badValue = "tb/1 1 2 3 -"
	bad := store.Key(p, g, "bad")
	mustDo(t, srv, "SET", bad, badValue)
	m := model{}
	// Some keys start part drained, so that every action has something to do.
	for _, k := range []string{"k1", "k3", "k6"} {
		m.apply(store.Key(p, g, k), takeOp(g, k, 4), clk.Now())
		take(t, s, g, k, 4)
	}
	clk.Advance(1500 * time.Millisecond)
	op := func(key string, a spigot.Action, n int64) spigot.Op {
		return spigot.Op{Limit: g, Key: key, Action: a, N: n}
	}
	ops := []spigot.Op{
		op("k0", spigot.Take, 3), op("k1", spigot.TakeUpTo, 20), op("k2", spigot.Take, 11), op("k3", spigot.Refund, 2),
		op("bad", spigot.Take, 1),
		op("k5", spigot.Peek, 4), op("k6", spigot.Reset, 0), op("k7", spigot.Take, 10),
	}
	out := make([]spigot.Decision, len(ops))
	err := s.DoMulti(ctx, spigot.Independent, ops, out)
	if !errors.Is(err, spigot.ErrRequestFailed) || !strings.Contains(err.Error(), "1 of 8 ops failed") || !strings.Contains(err.Error(), "unreadable state") {
		t.Errorf("DoMulti(Independent) with %q fifth: error %v; want one matching ErrRequestFailed: 1 of 8 ops failed, an unreadable state", badValue, err)
	}
	for i, o := range ops {
		key := store.Key(p, g, o.Key)
		want := spigot.Undecided()
		if o.Key != "bad" {
			want = m.apply(key, o, clk.Now())
		}
		if d := diffDecisions(out[i], want); d != "" {
			t.Errorf("step %d: %v: %s", i, o, d)
		}
		if o.Key != "bad" {
			if problem := m.checkStored(t, raw, key, clk.Now()); problem != "" {
				t.Errorf("step %d: %v: %s", i, o, problem)
			}
		}
	}
	checkUntouched(t, raw, srv.Addr, bad, badValue)

	d, err := s.Do(ctx, op("bad", spigot.Take, 1))
	if !errors.Is(err, spigot.ErrRequestFailed) || !strings.Contains(err.Error(), "spigot: unreadable state at "+bad) || d != (spigot.Decision{}) {
		t.Errorf("Do(Take 1) on %q = %s, %v; want the zero Decision and an unreadable state matching ErrRequestFailed", badValue, show(d), err)
	}
	all := []spigot.Op{op("k0", spigot.Take, 1), op("bad", spigot.Refund, 1), op("k7", spigot.Refund, 5)}
	if err := s.DoMulti(ctx, spigot.AllOrNothing, all, make([]spigot.Decision, len(all))); !errors.Is(err, spigot.ErrRequestFailed) {
		t.Errorf("DoMulti(AllOrNothing) naming %q: error %v; want one matching ErrRequestFailed", badValue, err)
	}
	for _, k := range []string{"k0", "k7"} {
		if problem := m.checkStored(t, raw, store.Key(p, g, k), clk.Now()); problem != "" {
			t.Errorf("after the all-or-nothing call: %s", problem)
		}
	}
	checkUntouched(t, raw, srv.Addr, bad, badValue)
}

// checkUntouched checks that key holds value, with no TTL.
func checkUntouched(t *testing.T, raw goredis.UniversalClient, addr, key, value string) {
	t.Helper()
	if got, ok := getValue(t, raw, key); !ok || got != value || pttl(t, addr, key) != -1 {
		t.Errorf("GET %s = %q (%v); want %q untouched, with no TTL", key, got, ok, value)
	}
}

// testLeadingZeros: a token bucket's state whose fields have leading zeros
// (which the script never writes, but reads, as wire.ParseState does), of
// digits 0 to 7 only, so that a reading in octal would differ, at a fixed
// instant, for every action: the decision and the value left are
// Op.Apply's on the decimal fields, on the servers and on miniredis (whose
// Lua reads a leading 0 as octal in arithmetic).
func testLeadingZeros(t *testing.T, ps protoStore, addr string) {
	clk := clocktest.New(t0)
	T := t0.UnixMicro()
	p := prefix(t)
	s := ps.new(t, []string{addr}, storeOpts{clock: clk, prefix: p})
	raw := testclient.GoRedis(t, addr)
	ctx := context.Background()
	values := []struct {
		value string
		state store.State
	}{
		{fmt.Sprintf("tb/1 0%d 0%d 01000000 02000000", T+17_000_000, T-1_000_000), store.State{Kind: spigot.TokenBucket, FullAt: T + 17_000_000, Stamp: T - 1_000_000, Tokens: 1_000_000, Scale: 2_000_000}},
		{fmt.Sprintf("tb/1 %d %d 01000000 2000000", T+17_000_000, T-1_000_000), store.State{Kind: spigot.TokenBucket, FullAt: T + 17_000_000, Stamp: T - 1_000_000, Tokens: 1_000_000, Scale: 2_000_000}},
		{fmt.Sprintf("tb/1 %d %d 0 02000000", T+20_000_000, T), store.State{Kind: spigot.TokenBucket, FullAt: T + 20_000_000, Stamp: T, Scale: 2_000_000}},
		{fmt.Sprintf("tb/1 %d 00%d 0 2000000", T+20_000_000, T), store.State{Kind: spigot.TokenBucket, FullAt: T + 20_000_000, Stamp: T, Scale: 2_000_000}},
		{fmt.Sprintf("tb/1 %d %d 06000000 -02000000", T+5_000_000, T-1_000_000), store.State{Kind: spigot.TokenBucket, FullAt: T + 5_000_000, Stamp: T - 1_000_000, Tokens: 6_000_000, Scale: -2_000_000}},
	}
	for i, v := range values {
		if got, err := wire.ParseState(v.value, spigot.TokenBucket); err != nil || !reflect.DeepEqual(got, v.state) {
			t.Fatalf("value %d: ParseState(%q) = %+v, %v; the test wants %+v", i, v.value, got, err, v.state)
		}
		for j, a := range allActions {
			op := spigot.Op{Limit: valueLimit, Key: fmt.Sprintf("z%d-%d", i, j), Action: a, N: 1}
			key := store.Key(p, valueLimit, op.Key)
			if err := raw.Set(ctx, key, v.value, 0).Err(); err != nil {
				t.Fatalf("SET %s %q: %v", key, v.value, err)
			}
			next, want := apply(op, v.state, clk.Now())
			got := do(t, s, op)
			if problem := diffDecisions(got, want); problem != "" {
				t.Errorf("step %d.%d: %v on %q: %s", i, j, op, v.value, problem)
			}
			value, ok := getValue(t, raw, key)
			switch {
			case a == spigot.Peek:
				if value != v.value {
					t.Errorf("step %d.%d: %v on %q: GET %s = %q; want it untouched", i, j, op, v.value, key, value)
				}
			case next.IsZero():
				if ok {
					t.Errorf("step %d.%d: %v on %q: GET %s = %q; want no key", i, j, op, v.value, key, value)
				}
			case !ok || value != formatState(next):
				t.Errorf("step %d.%d: %v on %q: GET %s = %q (%v); want %q", i, j, op, v.value, key, value, ok, formatState(next))
			}
		}
	}
}

// TestLeadingZerosMiniredis runs testLeadingZeros on miniredis.
func TestLeadingZerosMiniredis(t *testing.T) {
	for _, ps := range protoStores {
		t.Run(ps.name, func(t *testing.T) {
			testLeadingZeros(t, ps, miniredis.RunT(t).Addr())
		})
	}
}

// testFullAtPastExact: a bucket and a leaky bucket of 2^53 units refilling
// one a µs whose stamp is just under 2^53, far ahead of a clock that
// stepped back, and empty: the ResetAfter of any operation is Never, and
// the FullAt written, now plus a Duration's largest µs, is past 2^53, where
// the script writes it digit by digit. At instants whose µs past the ms are
// 0, 224, 225 (where the 775 µs past Never's last ms carry into the ms) and
// 999, each action's decision and the value left are Op.Apply's.
func testFullAtPastExact(t *testing.T, ps protoStore, srv *testserver.Server) {
	clk := clocktest.New(t0)
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
	raw := testclient.GoRedis(t, srv.Addr)
	limits := []spigot.Limit{
		spigot.MustBucket("edge", 1<<53, spigot.Per(1, time.Microsecond)),
		spigot.Must(spigot.NewLeakyBucket("edge", 1<<53, spigot.Per(1, time.Microsecond))),
	}
	step := 0
	for _, l := range limits {
		for _, us := range []int64{0, 224, 225, 999} {
			for _, a := range allActions {
				step++
				now := t0.Add(time.Duration(us) * time.Microsecond)
				clk.Set(now)
				before := store.State{Kind: l.Kind(), FullAt: 1<<53 + 1, Stamp: 1<<53 - 1, Scale: 1}
				key := fmt.Sprintf("k%d", step)
				k := store.Key(p, l, key)
				mustDo(t, srv, "SET", k, formatState(before))
				m := model{k: before}
				o := spigot.Op{Limit: l, Key: key, Action: a, N: 1}
				want := m.apply(k, o, now)
				got := do(t, s, o)
				if d := diffDecisions(got, want); d != "" {
					t.Errorf("step %d: %v at µs %d past the ms: %s", step, o, us, d)
				}
				if next, ok := m[k]; ok && next.FullAt <= store.MaxExact && a != spigot.Peek {
					t.Errorf("step %d: %v at µs %d past the ms: the model's FullAt is %d; the test means it past 2^53", step, o, us, next.FullAt)
				}
				if problem := m.checkStored(t, raw, k, now); problem != "" {
					t.Errorf("step %d: %v at µs %d past the ms: %s", step, o, us, problem)
				}
			}
		}
	}
}

// testCostsBeyondExact: N around 2^53 and up to MaxInt64, for every
// action, on buckets of capacity 2^53 (scale 1: capacity+1 is no double),
// 2^52 (scale 2), 5 and 0, full and part drained: the decisions and the
// stored states are Op.Apply's, field by field.
func testCostsBeyondExact(t *testing.T, ps protoStore, srv *testserver.Server) {
	clk := clocktest.New(t0)
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
	raw := testclient.GoRedis(t, srv.Addr)
	m := model{}
	limits := []spigot.Limit{
		spigot.MustBucket("edge", 1<<53, spigot.Per(1, time.Microsecond)),
		spigot.MustBucket("half", 1<<52, spigot.Per(1, 2*time.Microsecond)),
		spigot.MustBucket("small", 5, spigot.PerSecond(1)),
		spigot.MustBucket("zero", 0, spigot.PerSecond(1)),
	}
	step := 0
	for _, l := range limits {
		c := l.Capacity()
		ns := []int64{0, 1, c - 1, c, c + 1, c + 2, 1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<53 + 2, 1<<54 - 1, 1 << 54, 1<<54 + 1, math.MaxInt64 - 1, math.MaxInt64}
		for _, drained := range []bool{false, true} {
			for _, a := range allActions {
				for _, n := range ns {
					if n < 0 {
						continue
					}
					step++
					key := fmt.Sprintf("k%d", step)
					k := store.Key(p, l, key)
					now := clk.Now()
					if drained {
						prep := takeOp(l, key, c/2+1)
						if c == 0 {
							prep = takeOp(l, key, 0)
						}
						m.apply(k, prep, now)
						do(t, s, prep)
					}
					now = now.Add(time.Microsecond) // a little refill, at fixed instants
					clk.Set(now)
					o := spigot.Op{Limit: l, Key: key, Action: a, N: n}
					want := m.apply(k, o, now)
					got := do(t, s, o)
					if d := diffDecisions(got, want); d != "" {
						t.Errorf("step %d: %v (drained %v): %s", step, o, drained, d)
					}
					if problem := m.checkStored(t, raw, k, now); problem != "" {
						t.Errorf("step %d: %v (drained %v): %s", step, o, drained, problem)
					}
				}
			}
		}
	}
}

// storedLimits are the limits the stored values are read under: scales of
// 1, 3 and 2000000 units a token, refills of 1 to 1000 units a µs,
// capacities of 0 to 2^53 units.
var storedLimits = []spigot.Limit{
	spigot.MustBucket("v", 10, spigot.Per(1, 2*time.Second)),
	spigot.MustBucket("v", 10, spigot.PerSecond(3)),
	spigot.MustBucket("v", 1000, spigot.Per(1000, time.Microsecond)),
	spigot.MustBucket("v", 1<<53, spigot.Per(1, time.Microsecond)),
	spigot.MustBucket("v", 1<<53/3, spigot.Per(1, 3*time.Microsecond)),
	spigot.MustBucket("v", 0, spigot.PerSecond(1)),
	spigot.MustBucket("v", 3, spigot.Per(1, 3*time.Microsecond)),
	spigot.Must(spigot.NewLeakyBucket("v", 10, spigot.PerSecond(3))),
	spigot.Must(spigot.NewLeakyBucket("v", 1<<53, spigot.Per(1, time.Microsecond))),
	spigot.Must(spigot.NewFixedWindow("v", spigot.Per(10, 20*time.Second), 0)),
	spigot.Must(spigot.NewFixedWindow("v", spigot.Per(1<<53, 20*time.Second), 7*time.Second)),
	spigot.Must(spigot.NewSlidingWindow("v", spigot.Per(10, 20*time.Second))),
	spigot.Must(spigot.NewSlidingWindow("v", spigot.Per(1<<53/20_000, 20*time.Second))),
	spigot.Must(spigot.NewSlidingLog("v", spigot.Per(10, 20*time.Second))),
	spigot.Must(spigot.NewSlidingLog("v", spigot.Per(3, 2*time.Second))),
}

// storedValue returns a random value for a key: states of every format
// the script reads, with fields near now and near every bound, states
// of other kinds, and those with a byte or a field changed, cut short or
// lengthened, or random bytes.
func storedValue(rng *rand.Rand, now int64) string {
	pick := func(v ...string) string { return v[rng.IntN(len(v))] }
	num := func() string {
		switch rng.IntN(8) {
		case 0:
			return pick("0", "-0", "1", "-1", "00", "007", "-", "")
		case 1:
			return pick("9007199254740991", "9007199254740992", "9007199254740993", "-9007199254740992", "-9007199254740993",
				"09007199254740992", "18014398509481984", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
				"999999999999999999", "1000000000000000000", "-999999999999999999", "4611686018427387904", strings.Repeat("9", 400))
		case 2, 3:
			return strconv.FormatInt(now+rng.Int64N(40_000_000_000)-20_000_000_000, 10)
		case 4:
			return strconv.FormatInt(now+rng.Int64N(1<<52)-1<<51, 10)
		case 5:
			return strconv.FormatInt(rng.Int64N(40_000_000)-1_000_000, 10)
		case 6:
			return strconv.FormatInt(rng.Int64()>>rng.IntN(63)*int64(1-2*rng.IntN(2)), 10)
		}
		return pick("1", "2", "3", "1000", "1000000", "2000000", "3000000")
	}
	// An instant near now, or a number of any kind.
	near := func() string {
		if rng.IntN(3) == 0 {
			return num()
		}
		return strconv.FormatInt(now+rng.Int64N(40_000_000)-20_000_000, 10)
	}
	// A window near the limits' (20 s, 2 s), or a number of any kind.
	window := func() string {
		if rng.IntN(4) == 0 {
			return num()
		}
		return pick("20000000", "2000000", "1000")
	}
	var v string
	switch rng.IntN(16) {
	case 10:
		v = fmt.Sprintf("lb/1 %s %s %s %s", near(), near(), num(), pick("333334", "1", "3", num()))
	case 11:
		// A window that starts where one of 20 s does (or not).
		start := now - now%20_000_000 - 20_000_000*rng.Int64N(3) + 7_000_000*rng.Int64N(2)
		v = fmt.Sprintf("fw/1 %s %s %d %s %s", near(), near(), start, window(), pick("0", "3", "10", "11", num()))
	case 12:
		start := now - now%20_000_000 - 20_000_000*rng.Int64N(3)
		v = fmt.Sprintf("sw/1 %s %s %d %s %s %s", near(), near(), start, window(), pick("0", "3", "10", num()), pick("0", "4", "10", num()))
	case 13, 14:
		// A log of 1 to 12 tokens from a base, in the width that holds them
		// or a wider one, in order (equal instants now and then) but now
		// and then out of it, its FullAt its last entry plus 20 s or 2 s (or
		// not).
		count := 1 + rng.IntN(12)
		base := now - rng.Int64N(25_000_000)
		width := 8 + rng.IntN(3)
		var entries strings.Builder
		x, last := int64(0), base
		for range count {
			if rng.IntN(3) > 0 {
				x += rng.Int64N(3_000_000)
			}
			o := x
			if rng.IntN(10) == 0 {
				o = rng.Int64N(30_000_000) // out of order
			}
			fmt.Fprintf(&entries, "%0*d", width, o)
			last = base + o
		}
		full := strconv.FormatInt(last+[]int64{20_000_000, 2_000_000, 1_000_000}[rng.IntN(3)], 10)
		if rng.IntN(8) == 0 {
			full = num()
		}
		v = fmt.Sprintf("sl/1 %s %s %d %d %s", full, near(), base, width, entries.String())
	case 15:
		v = fmt.Sprintf("%s/%s %s", pick("lb", "fw", "sw", "sl"), pick("0", "1", "2", "01"), num())
	case 0, 1, 2:
		v = fmt.Sprintf("tb/1 %s %s %s %s", num(), num(), num(), num())
	case 3:
		v = fmt.Sprintf("%s %s %s %s", num(), num(), num(), num()) // no tag
	case 4:
		v = fmt.Sprintf("tb/%s %s %s %s %s%s", pick("2", "3", "02", "0"), num(), num(), num(), num(), pick("", " 0", " x"))
	case 5:
		v = fmt.Sprintf("%s/%s %s%s", pick("xx", "tb", "limit", "Tb", "", "x1"), pick("1", "2", "3", "02", "9", "10", ""), num(), pick("", " ", " 1 2 3", "x", " anything"))
	case 6:
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = pick(" ", "-", "/", "t", "b", "2", "0", "9", "\x00", "x")[0]
		}
		v = string(b)
	default:
		v = fmt.Sprintf("tb/1 %d %d %d %d", now+rng.Int64N(20_000_000), now-rng.Int64N(20_000_000), rng.Int64N(20_000_000), []int64{1, 3, 1000000, 2000000}[rng.IntN(4)])
	}
	if rng.IntN(4) == 0 && len(v) > 0 { // a byte changed, dropped or added
		i := rng.IntN(len(v))
		c := pick(" ", "-", "0", "9", "a", "/", "\n", "+", ".", "e")
		switch rng.IntN(3) {
		case 0:
			v = v[:i] + c + v[i+1:]
		case 1:
			v = v[:i] + v[i+1:]
		default:
			v = v[:i] + c + v[i:]
		}
	}
	return v
}

func pick[T any](rng *rand.Rand, v ...T) T { return v[rng.IntN(len(v))] }

// storedOp returns a random op on key under a random limit of storedLimits.
func storedOp(rng *rand.Rand, key string) spigot.Op {
	l := pick(rng, storedLimits...)
	c := l.Capacity()
	n := pick(rng, 0, 1, 2, c, c+1, rng.Int64N(c+1), 1<<53+1, math.MaxInt64)
	return spigot.Op{Limit: l, Key: key, Action: pick(rng, allActions...), N: n}
}

// checkStoredValue sets key to value, applies op on it with s at now,
// alone or in a batch between two ops on other keys, and checks the
// result against wire.ParseState and Op.Apply: the decision, and the
// value left.
func checkStoredValue(t testing.TB, s spigot.Store, raw goredis.UniversalClient, p, value string, op spigot.Op, now time.Time, batch bool) {
	t.Helper()
	ctx := context.Background()
	key := store.Key(p, op.Limit, op.Key)
	if err := raw.Set(ctx, key, value, 0).Err(); err != nil {
		t.Fatalf("SET %s %q: %v", key, value, err)
	}
	state, perr := wire.ParseState(value, op.Limit.Kind())
	var (
		got spigot.Decision
		err error
	)
	if batch {
		a := spigot.Op{Limit: op.Limit, Key: op.Key + "-a", N: 1}
		b := spigot.Op{Limit: op.Limit, Key: op.Key + "-b", Action: spigot.TakeUpTo, N: 2}
		raw.Del(ctx, store.Key(p, a.Limit, a.Key), store.Key(p, b.Limit, b.Key))
		ops := []spigot.Op{a, op, b}
		out := make([]spigot.Decision, 3)
		err = s.DoMulti(ctx, spigot.Independent, ops, out)
		got = out[1]
		for _, i := range []int{0, 2} {
			_, want := apply(ops[i], store.State{}, now)
			if d := diffDecisions(out[i], want); d != "" {
				t.Fatalf("a batch with %v on %q: the op %v beside it: %s (error %v)", op, value, ops[i], d, err)
			}
		}
		if err != nil && !strings.Contains(err.Error(), "1 of 3 ops failed") {
			t.Fatalf("a batch with %v on %q: error %v; want one op of 3 failed, or none", op, value, err)
		}
	} else {
		got, err = s.Do(ctx, op)
	}
	if perr != nil {
		want := spigot.Decision{}
		if batch {
			want = spigot.Undecided()
		}
		if !errors.Is(err, spigot.ErrRequestFailed) || !strings.Contains(err.Error(), "unreadable state") || got != want {
			t.Fatalf("%v on %q (unreadable: %v) = %s, %v; want %s and an unreadable state matching ErrRequestFailed (batch %v)",
				op, value, perr, show(got), err, show(want), batch)
		}
		if v, ok := getValue(t, raw, key); !ok || v != value {
			t.Fatalf("%v on the unreadable %q left %q (%v); want it untouched", op, value, v, ok)
		}
		return
	}
	in := state
	in.Log = slices.Clone(state.Log) // Apply reuses the Log's array
	next, want := apply(op, in, now)
	if err != nil {
		t.Fatalf("%v on %q (%+v) failed: %v; want %s (batch %v)", op, value, state, err, show(want), batch)
	}
	if d := diffDecisions(got, want); d != "" {
		t.Fatalf("%v at %d on %q (%+v): %s (batch %v)", op, now.UnixMicro(), value, state, d, batch)
	}
	v, ok := getValue(t, raw, key)
	switch {
	case op.Action == spigot.Peek || isBlocked(op.Limit, state, now) && op.Action != spigot.Reset:
		if !ok || v != value {
			t.Fatalf("%v on %q left %q (%v); want it untouched", op, value, v, ok)
		}
	case next.IsZero():
		if ok {
			t.Fatalf("%v on %q (%+v) left %q; want no key", op, value, state, v)
		}
	case !ok || !storedAs(v, next):
		t.Fatalf("%v at %d on %q (%+v) left %q (%v); want %q (batch %v)", op, now.UnixMicro(), value, state, v, ok, wire.FormatState(next), batch)
	}
}

// testStoredValues: a random corpus of values (storedValue), each under a
// random op at a fixed instant, alone and in batches: checkStoredValue.
func testStoredValues(t *testing.T, ps protoStore, srv *testserver.Server) {
	clk := clocktest.New(t0)
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
	raw := testclient.GoRedis(t, srv.Addr)
	rng := rand.New(rand.NewPCG(21, 5))
	unreadable := 0
	for i := range 1500 {
		v := storedValue(rng, t0.UnixMicro())
		if _, err := wire.ParseState(v, spigot.TokenBucket); err != nil {
			unreadable++
		}
		checkStoredValue(t, s, raw, p, v, storedOp(rng, fmt.Sprint(i%50)), clk.Now(), i%3 == 0)
	}
	if unreadable < 250 || unreadable > 1200 {
		t.Errorf("%d of 1500 values were unreadable; the corpus means to have both kinds in numbers", unreadable)
	}
}

// FuzzStoredValue is checkStoredValue on a real redis-server (or valkey-
// server) through go-redis, for any value, op and instant: the value
// either reads as wire.ParseState says, and the script then decides as
// Op.Apply does, or it fails its own key alone; never an error of the
// whole script.
func FuzzStoredValue(f *testing.F) {
	srv := testserver.Start(f, testserver.Kinds[0])
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
	f.Cleanup(func() { c.Close() })
	clk := clocktest.New(t0)
	s := redis.New(c, store.WithClock(clk), store.WithPrefix("fuzz:"))
	T := t0.UnixMicro()
	for _, v := range []string{
		"tb/1 1 2 3 -", "tb/1 " + fmt.Sprint(T+5e6) + " " + fmt.Sprint(T) + " 0 2000000", "xx/1 " + fmt.Sprint(T+86_400_000_000),
		"tb/1 18014398509481984 9007199254740992 9007199254740992 1", "5 6 7 8", "tb/2 1 x", "tb/0 1 2 3 4", "garbage",
		"lb/1 " + fmt.Sprint(T+5e6) + " " + fmt.Sprint(T) + " 0 333334",
		"fw/1 " + fmt.Sprint(T+5e6) + " " + fmt.Sprint(T) + " " + fmt.Sprint(T-T%20_000_000) + " 20000000 4",
		"sw/1 " + fmt.Sprint(T+5e6) + " " + fmt.Sprint(T) + " " + fmt.Sprint(T-T%20_000_000) + " 20000000 4 9",
		"sl/1 " + fmt.Sprint(T+19e6) + " " + fmt.Sprint(T) + " " + fmt.Sprint(T-1e6) + " 7 0000000000000005000001000000",
		"sl/1 " + fmt.Sprint(T+19e6) + " " + fmt.Sprint(T) + " " + fmt.Sprint(T-1e6) + " 7 000000000000000500000100000",
		"sl/1 " + fmt.Sprint(T+19e6) + " " + fmt.Sprint(T) + " " + fmt.Sprint(T-1e6) + " 7 1500000000000005000001000000",
	} {
		f.Add(v, uint8(0), int64(1), int64(0), uint8(0), false)
	}
	f.Add("tb/1 1 9007199254740992 -9007199254740993 1", uint8(3), int64(1<<53+1), int64(-5), uint8(3), true)
	f.Fuzz(func(t *testing.T, value string, action uint8, n, at int64, limit uint8, batch bool) {
		if n < 0 || at < -1<<50 || at > 1<<50 {
			return
		}
		clk.Set(time.UnixMicro(T + at))
		op := spigot.Op{Limit: storedLimits[int(limit)%len(storedLimits)], Key: "k", Action: allActions[int(action)%len(allActions)], N: n}
		checkStoredValue(t, s, c, "fuzz:", value, op, clk.Now(), batch)
	})
}
