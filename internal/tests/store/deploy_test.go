package store_test

// A rolling deploy mixes versions of the script on one server: the stored
// formats each version reads and writes, checked against spigot's Go model
// (Apply), with a fake clock passed as now (WithClock).
//
// testdata/spigot-v1.lua is the script before operations (git show
// ccfabd6:store/spigot.lua): ARGV capacity, scale, refill, a cost or
// "reset", now in µs or "", the TTL slack in ms; it replies {allowed,
// remaining, retry_ms, reset_ms} to a cost and 1/0 (the bucket was not
// full) to a reset, and stores "<tokens> <stamp> <scale> <fullat>": the
// State{Kind: 0, …} of today's model. Before it, states had no FullAt:
// "<tokens> <stamp> <scale>".

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

//go:embed testdata/spigot-v1.lua
var scriptV1 string

// testdata/spigot-v2.lua is the script before the kinds besides the token
// bucket (git show 9e09a20:internal/wire/spigot.lua): today's arguments
// and replies for a token bucket; it stores "tb/2 …", and reads any other
// "<kind>/<version> <fullat> …" by its FullAt alone.
//
//go:embed testdata/spigot-v2.lua
var scriptV2 string

// slackMs is the TTL slack, in ms, of a store with WithClock, which the
// tests here pass to the script before operations too.
var slackMs = wire.ClockTTLSlack.Milliseconds()

// runV1 runs the script before operations on key, at now, for op: a Take
// (a cost) or a Reset. It returns the Decision its reply gives (N, not in
// that reply, is the cost when allowed, else 0), and for a Reset, whether
// the bucket was not full.
func runV1(t testing.TB, c goredis.UniversalClient, key string, op spigot.Op, now time.Time) (spigot.Decision, bool) {
	t.Helper()
	cost := strconv.FormatInt(op.N, 10)
	if op.Action == spigot.Reset {
		cost = "reset"
	} else if op.Action != spigot.Take {
		t.Fatalf("runV1: the script before operations has no %v", op.Action)
	}
	l := op.Limit
	reply, err := c.Eval(context.Background(), scriptV1, []string{key},
		l.Capacity(), scaleOf(l), refillOf(l), cost, now.UnixMicro(), slackMs).Result()
	if err != nil {
		t.Fatalf("EVAL spigot-v1.lua %s %v: %v", key, op, err)
	}
	if op.Action == spigot.Reset {
		n, ok := reply.(int64)
		if !ok || n < 0 || n > 1 {
			t.Fatalf("spigot-v1.lua %v: reply %#v; want 0 or 1", op, reply)
		}
		return spigot.Decision{}, n == 1
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) != 4 {
		t.Fatalf("spigot-v1.lua %v: reply %#v; want 4 integers", op, reply)
	}
	var n [4]int64
	for i, v := range vals {
		if n[i], ok = v.(int64); !ok {
			t.Fatalf("spigot-v1.lua %v: reply %#v; want 4 integers", op, reply)
		}
	}
	// The script's {allowed, remaining, retry, reset} are today's
	// {moved, remaining, retry, reset} with allowed for moved: allowed
	// exactly when there is no retry-after, and then the cost was moved.
	allowed, retry := n[0], n[2]
	if (allowed != 0 && allowed != 1) || (allowed == 1) != (retry == 0) {
		t.Fatalf("spigot-v1.lua %v: reply %v: allowed %d with a retry-after of %d ms", op, n, allowed, retry)
	}
	d, err := decodeOld([4]int64{allowed * op.N, n[1], n[2], n[3]})
	if err != nil {
		t.Fatalf("spigot-v1.lua %v: reply %v: %v", op, n, err)
	}
	return d, false
}

// decodeOld decodes the reply of a script before RefillAfter, {moved,
// remaining, retry, reset}: today's reply without its refill-after, so
// that the Decision has a RefillAfter of 0.
func decodeOld(n [4]int64) (spigot.Decision, error) {
	return wire.DecodeInts([wire.Fields]int64{n[0], n[1], n[2], n[3], 0})
}

// withoutRefill returns d without its RefillAfter, which the scripts
// before it do not report: a model's decision, to compare with theirs.
func withoutRefill(d spigot.Decision) spigot.Decision {
	d.RefillAfter = 0
	return d
}

// applyV1 is the Go model of the script before operations: Op.Apply on the
// states it reads, "<tokens> <stamp> <scale> <fullat>" (Kind 0 with a
// FullAt); it reads any other value (a state of today's script, or one
// without FullAt) as a full bucket, and stores its state as Kind 0.
func applyV1(s store.State, op spigot.Op, now time.Time) (store.State, spigot.Decision) {
	if s.Kind != 0 || s.FullAt == 0 {
		s = store.State{}
	}
	next, d := apply(op, s, now)
	if !next.IsZero() {
		next.Kind = 0
	}
	return next, d
}

// checkTTL checks, after an operation that wrote the model's state s of key
// at now (by the caller's clock) and began start (by real time), that the
// key's PTTL is the time until s.FullAt by the caller's clock, rounded up
// to the ms, plus the slack, less the ms that passed since.
func checkTTL(t testing.TB, addr, key string, s store.State, now, start time.Time) string {
	t.Helper()
	got := pttl(t, addr, key)
	if s.IsZero() {
		if got != -2 {
			return fmt.Sprintf("PTTL %s = %d; want -2 (no key) for the zero State", key, got)
		}
		return ""
	}
	us := s.FullAt - now.UnixMicro()
	want := (us+999)/1000 + slackMs
	bound := time.Since(start).Milliseconds() + 1
	if got > want || got < want-bound {
		return fmt.Sprintf("PTTL %s = %d; want %d (FullAt %d µs ahead, and %d ms of slack) less at most %d", key, got, want, us, slackMs, bound)
	}
	return ""
}

// testRollingDeploy: the script before operations and today's, run in
// turns on the same keys of one server, as during a rolling deploy, with
// the fake clock of the differential (config changes, clock steps back,
// every action of today's script, Take and Reset of the old one). Today's
// script reads the old one's states as the Go model reads State{Kind: 0,
// Tokens, Stamp, Scale, FullAt}; the old one reads only its own format,
// and today's as a full bucket (the cost of a rolling deploy from it: a
// key it finds in the new format refills). After each step the server
// holds the model's state of the key, in the format of the script that
// wrote it, with the TTL that state calls for.
func testRollingDeploy(t *testing.T, ps protoStore, srv *testserver.Server) {
	const (
		seeds = 6
		steps = 200
	)
	raw := testclient.GoRedis(t, srv.Addr)
	for seed := range uint64(seeds) {
		clk := clocktest.New(t0)
		p := fmt.Sprintf("%s-%d:", t.Name(), seed)
		s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
		g := newDiffGen(seed, false, spigot.TokenBucket)
		m := model{}
		runs := map[string]int{}
		for i := range steps {
			o := g.next()
			clk.Advance(o.step)
			now := clk.Now()
			key := store.Key(p, o.op.Limit, o.op.Key)
			// The script before operations has Take and Reset, and computes in
			// doubles past 2^53 (a FullAt 285 years ahead, for a bucket of 2^53
			// units): it runs on the limits far from that.
			old := (o.op.Action == spigot.Take || o.op.Action == spigot.Reset) && g.rng.IntN(5) < 2 && o.op.Limit.Capacity() < 1<<40
			before, hadState := m[key]
			state := "none"
			if hadState {
				state = formatState(before)
			}
			start := time.Now()
			var got spigot.Decision
			if old {
				g.history = append(g.history, fmt.Sprintf("  step %d at %s on %s: spigot-v1.lua %v", i, now.Format("15:04:05.000000"), state, o))
				next, want := applyV1(before, o.op, now)
				if next.IsZero() {
					delete(m, key)
				} else {
					m[key] = next
				}
				d, wasNotFull := runV1(t, raw, key, o.op, now)
				if o.op.Action == spigot.Reset {
					if wasNotFull != (want.N > 0) {
						g.fail(t, i, "%v: spigot-v1.lua: the bucket was not full: got %v; the model gives back N %d", o, wasNotFull, want.N)
					}
					got = want // what the generator goes on from
				} else {
					if problem := diffDecisions(d, withoutRefill(want)); problem != "" {
						g.fail(t, i, "%v: spigot-v1.lua and the model: %s", o, problem)
					}
					got = d
				}
				runs["v1 "+o.op.Action.String()]++
			} else {
				g.history = append(g.history, fmt.Sprintf("  step %d at %s on %s: %v", i, now.Format("15:04:05.000000"), state, o))
				want := m.apply(key, o.op, now)
				var err error
				got, err = s.Do(context.Background(), o.op)
				if err != nil {
					g.fail(t, i, "%v: %v", o, err)
				}
				if problem := diffDecisions(got, want); problem != "" {
					g.fail(t, i, "%v: the script and Op.Apply: %s", o, problem)
				}
				if o.retry && !got.Allowed() {
					g.fail(t, i, "%v: a retry exactly RetryAfter after a denial = %s; want allowed", o, show(got))
				}
				if hadState && before.Kind == 0 {
					runs["v2 "+o.op.Action.String()+" on a v1 state"]++
				}
			}
			g.history[len(g.history)-1] += " = " + show(got)
			if problem := m.checkStored(t, raw, key, now); problem != "" {
				g.fail(t, i, "%v: %s", o, problem)
			}
			if o.op.Action != spigot.Peek {
				if problem := checkTTL(t, srv.Addr, key, m[key], now, start); problem != "" {
					g.fail(t, i, "%v: %s", o, problem)
				}
			}
			g.record(o, got)
		}
		for _, what := range []string{"v1 Take", "v1 Reset", "v2 Take on a v1 state"} {
			if runs[what] == 0 {
				t.Errorf("seed %d: no step ran %s; the test means to (%v)", seed, what, runs)
			}
		}
	}
}

// legacyLimit is the limit the table tests of stored values run under:
// scale 2000000 units per token, refill 1 unit per µs, 20000000 units in
// all.
var legacyLimit = spigot.MustBucket("legacy", 10, spigot.Per(1, 2*time.Second))

// testLegacyStates: every action of today's script on values it did not
// write, at a fixed instant T: the format before versions with and without
// FullAt, a state of another kind ("xx/1") and of a later version of the
// token bucket ("tb/9"), each at instants around T, gives the Decision of
// Op.Apply on the State the value stands for, and leaves the value of the
// State Apply returns (a Peek leaves the value, and its lack of a TTL,
// untouched).
func testLegacyStates(t *testing.T, ps protoStore, srv *testserver.Server) {
	clk := clocktest.New(t0)
	T := t0.UnixMicro()
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
	raw := testclient.GoRedis(t, srv.Addr)
	const max = 20_000_000 // legacyLimit's capacity in units
	values := []struct {
		value string
		state store.State // what the value stands for
	}{
		// Before FullAt: "<tokens> <stamp> <scale>", FullAt unknown.
		{fmt.Sprintf("%d %d %d", 5_000_000, T-1_000_000, 2_000_000), store.State{Tokens: 5_000_000, Stamp: T - 1_000_000, Scale: 2_000_000}},
		{fmt.Sprintf("%d %d %d", 0, T, 2_000_000), store.State{Stamp: T, Scale: 2_000_000}},
		{fmt.Sprintf("%d %d %d", 3_000_000, T+3_000_000, 2_000_000), store.State{Tokens: 3_000_000, Stamp: T + 3_000_000, Scale: 2_000_000}}, // the clock stepped back
		{fmt.Sprintf("%d %d %d", 7_500_000, T-10, 1_000_000), store.State{Tokens: 7_500_000, Stamp: T - 10, Scale: 1_000_000}},               // another rate: 7 whole tokens carry
		{fmt.Sprintf("%d %d %d", 30_000_000, T, 2_000_000), store.State{Tokens: 30_000_000, Stamp: T, Scale: 2_000_000}},                     // over the capacity: clamped
		{fmt.Sprintf("%d %d %d", -4_000_000, T, 2_000_000), store.State{Tokens: -4_000_000, Stamp: T, Scale: 2_000_000}},                     // negative: clamped
		{fmt.Sprintf("%d %d %d", 1_000_000, T, 0), store.State{Tokens: 1_000_000, Stamp: T, Scale: 0}},                                       // no scale: absent
		{fmt.Sprintf("%d %d %d", 1_000_000, T-40_000_000_000, 2_000_000), store.State{Tokens: 1_000_000, Stamp: T - 40_000_000_000, Scale: 2_000_000}},
		// Far out of range, under another scale: none, not a full bucket.
		{fmt.Sprintf("%d %d %d", -(1 << 53), T, 3), store.State{Tokens: -(1 << 53), Stamp: T, Scale: 3}},
		{fmt.Sprintf("tb/2 %d %d %d %d", T+10_000_000, T, -(1 << 53), 7), store.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: -(1 << 53), Stamp: T, Scale: 7}},
		{fmt.Sprintf("tb/2 %d %d %d %d", T+10_000_000, T, 1<<53, 3), store.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: 1 << 53, Stamp: T, Scale: 3}},
		// A stamp far behind, a FullAt after 2^53 µs.
		{fmt.Sprintf("tb/2 %d %d %d %d", int64(1)<<54, -(1 << 53), 0, 2_000_000), store.State{Kind: spigot.TokenBucket, FullAt: 1 << 54, Stamp: -(1 << 53), Scale: 2_000_000}},
		// The script before operations: "<tokens> <stamp> <scale> <fullat>".
		{fmt.Sprintf("%d %d %d %d", 4_000_000, T-2_000_000, 2_000_000, T+14_000_000), store.State{Tokens: 4_000_000, Stamp: T - 2_000_000, Scale: 2_000_000, FullAt: T + 14_000_000}},
		{fmt.Sprintf("%d %d %d %d", 4_000_000, T-2_000_000, 2_000_000, T), store.State{Tokens: 4_000_000, Stamp: T - 2_000_000, Scale: 2_000_000, FullAt: T}}, // full again, exactly
		{fmt.Sprintf("%d %d %d %d", max, T+5_000_000, 2_000_000, T+5_000_000), store.State{Tokens: max, Stamp: T + 5_000_000, Scale: 2_000_000, FullAt: T + 5_000_000}},
		// Another kind, and a later version of the token bucket: read by
		// their FullAt alone, as the bucket that is full again then.
		{fmt.Sprintf("xx/1 %d 1 2 3", T+3_000_000), store.State{Kind: 7, FullAt: T + 3_000_000}},
		{fmt.Sprintf("xx/1 %d", T+1), store.State{Kind: 7, FullAt: T + 1}},
		{fmt.Sprintf("xx/1 %d 1 2 3", T), store.State{Kind: 7, FullAt: T}},                         // full again, exactly
		{fmt.Sprintf("xx/1 %d 1 2 3", T-5), store.State{Kind: 7, FullAt: T - 5}},                   // full again
		{fmt.Sprintf("xx/1 %d anything", T+max+1), store.State{Kind: 7, FullAt: T + max + 1}},      // further than an empty bucket refills
		{fmt.Sprintf("xx/1 %d", T+3_600_000_000), store.State{Kind: 7, FullAt: T + 3_600_000_000}}, // an hour
		{fmt.Sprintf("xx/1 %d", T+max+2_000_001), store.State{Kind: 7, FullAt: T + max + 2_000_001}},
		{fmt.Sprintf("xx/1 %d", int64(1)<<53), store.State{Kind: 7, FullAt: 1 << 53}},
		{"xx/1 0 1 2 3", store.State{Kind: 7}}, // without a FullAt: absent
		{fmt.Sprintf("tb/9 %d %d %d %d", T+7_000_000, T, 0, 2_000_000), store.State{Kind: 7, FullAt: T + 7_000_000}},
		{fmt.Sprintf("tb/9 %d x y z", T+12_345_678), store.State{Kind: 7, FullAt: T + 12_345_678}},
		{fmt.Sprintf("tb/10 %d", T+999), store.State{Kind: 7, FullAt: T + 999}},
		{fmt.Sprintf("limit/3 %d 1 2", T+2_000_001), store.State{Kind: 7, FullAt: T + 2_000_001}},
	}
	ops := []spigot.Op{
		{Action: spigot.Take, N: 1},
		{Action: spigot.Take, N: 3},
		{Action: spigot.Take, N: 0},
		{Action: spigot.TakeUpTo, N: 4},
		{Action: spigot.Refund, N: 2},
		{Action: spigot.Reset},
		{Action: spigot.Peek, N: 2},
	}
	for i, v := range values {
		for j, op := range ops {
			op.Limit, op.Key = legacyLimit, fmt.Sprintf("k%d-%d", i, j)
			key := store.Key(p, legacyLimit, op.Key)
			if _, err := srv.Do("SET", key, v.value); err != nil {
				t.Fatalf("SET %s %q: %v", key, v.value, err)
			}
			next, want := apply(op, v.state, clk.Now())
			start := time.Now()
			got := do(t, s, op)
			if problem := diffDecisions(got, want); problem != "" {
				t.Errorf("step %d.%d: %v on %q: %s", i, j, op, v.value, problem)
			}
			value, ok := getValue(t, raw, key)
			switch {
			case reflect.DeepEqual(next, v.state): // a Peek: untouched, with no TTL
				if ttl := pttl(t, srv.Addr, key); !ok || value != v.value || ttl != -1 {
					t.Errorf("step %d.%d: %v on %q: the value is %q (%v) with PTTL %d; want it untouched, with no TTL", i, j, op, v.value, value, ok, ttl)
				}
			case next.IsZero():
				if ok {
					t.Errorf("step %d.%d: %v on %q: GET %s = %q; want no key", i, j, op, v.value, key, value)
				}
			default:
				if want := formatState(next); !ok || !storedAs(value, next) {
					t.Errorf("step %d.%d: %v on %q: GET %s = %q (%v); want %q", i, j, op, v.value, key, value, ok, want)
				}
				if problem := checkTTL(t, srv.Addr, key, next, clk.Now(), start); problem != "" {
					t.Errorf("step %d.%d: %v on %q: %s", i, j, op, v.value, problem)
				}
			}
		}
	}
}

// testUnreadableState: a value that is no state of any kind or version is
// an error for every action, naming the key and matching
// spigot.ErrRequestFailed, never a full bucket; the value stays as it was.
func testUnreadableState(t *testing.T, ps protoStore, srv *testserver.Server) {
	clk := clocktest.New(t0)
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
	raw := testclient.GoRedis(t, srv.Addr)
	for i, value := range []string{
		"garbage",
		"",
		"1 2",
		"1 2 3 4 5",
		"1.5 2 3 4",
		" 1 2 3",
		"tb/2",
		"tb/2 1767323045000000 5 6",     // this format, a field short
		"tb/2 1767323045000000 5 6 7 8", // this format, a field too many
		"tb/1 1767323045000000 5 6 7",   // no such token-bucket format
		"tb/x 5",
		"TB/2 5 1 2 3",
		"xx/1 soon",
		"xx/1",
		"/1 5",
		"{\"tokens\": 5}",
		"1 2 3 -", // the format before versions, with a '-' for its FullAt
		"1 2 3 ",
		"1 2 3-5",
		"1 2 -",
		"tb/2 1 2 3 -",
		"tb/2 1 9007199254740993 3 4",     // past 2^53
		"tb/2 1 2 -9007199254740993 4",    // past -2^53
		"tb/2 1000000000000000000 2 3 4",  // a FullAt of 19 digits
		"1 2 " + strings.Repeat("9", 400), // past what a double holds
		"xx/1 9007199254740993",           // another kind's FullAt past 2^53
		"xx/1 5abc",
	} {
		for _, a := range allActions {
			op := spigot.Op{Limit: legacyLimit, Key: fmt.Sprintf("bad%d", i), Action: a, N: 1}
			key := store.Key(p, legacyLimit, op.Key)
			if _, err := srv.Do("SET", key, value); err != nil {
				t.Fatalf("SET %s %q: %v", key, value, err)
			}
			d, err := s.Do(context.Background(), op)
			if want := "spigot: unreadable state at " + key; !errors.Is(err, spigot.ErrRequestFailed) || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "spigot: ") {
				t.Errorf("step %d: %v on %q = %s, %v; want an error naming %q that matches ErrRequestFailed", i, op, value, show(d), err, want)
			}
			if d != (spigot.Decision{}) {
				t.Errorf("step %d: %v on %q = %s with its error; want the zero Decision", i, op, value, show(d))
			}
			if got, ok := getValue(t, raw, key); !ok || got != value || pttl(t, srv.Addr, key) != -1 {
				t.Errorf("step %d: after %v, GET %s = %q (%v); want %q untouched, with no TTL", i, op, key, got, ok, value)
			}
		}
	}
}

// testStoredFormat: what today's script stores, read with GET after each
// step: "tb/2 <fullat> <stamp> <tokens> <scale>", or no key for a full
// bucket, at fixed instants of the caller's clock (legacyLimit: 1 token per
// 2 s is 2000000 units, refilling 1 per µs).
func testStoredFormat(t *testing.T, ps protoStore, srv *testserver.Server) {
	clk := clocktest.New(t0)
	T := t0.UnixMicro()
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
	raw := testclient.GoRedis(t, srv.Addr)
	key := store.Key(p, legacyLimit, "k")
	op := func(a spigot.Action, n int64) spigot.Op {
		return spigot.Op{Limit: legacyLimit, Key: "k", Action: a, N: n}
	}
	m := model{}
	// RefillAfter: the wait for the next whole token after the remaining
	// ones, 2 s from none, plus the lag of a clock that stepped back.
	for i, c := range []struct {
		advance time.Duration
		op      spigot.Op
		want    spigot.Decision
		value   string // "" for no key
	}{
		{0, op(spigot.Take, 3), spigot.Decision{N: 3, Remaining: 7, ResetAfter: 6 * time.Second, RefillAfter: 2 * time.Second},
			fmt.Sprintf("tb/2 %d %d 14000000 2000000", T+6_000_000, T)},
		// T+1s: 7.5 tokens; TakeUpTo takes the 7 whole ones.
		{time.Second, op(spigot.TakeUpTo, 20), spigot.Decision{N: 7, ResetAfter: 19 * time.Second, RefillAfter: 1 * time.Second},
			fmt.Sprintf("tb/2 %d %d 1000000 2000000", T+20_000_000, T+1_000_000)},
		{0, op(spigot.Peek, 1), spigot.Decision{RetryAfter: time.Second, ResetAfter: 19 * time.Second, RefillAfter: 1 * time.Second},
			fmt.Sprintf("tb/2 %d %d 1000000 2000000", T+20_000_000, T+1_000_000)},
		{0, op(spigot.Refund, 2), spigot.Decision{N: 2, Remaining: 2, ResetAfter: 15 * time.Second, RefillAfter: 1 * time.Second},
			fmt.Sprintf("tb/2 %d %d 5000000 2000000", T+16_000_000, T+1_000_000)},
		// T-2s: the clock stepped back 3 s; the stamp stays, and the lag
		// adds to ResetAfter.
		{-3 * time.Second, op(spigot.Take, 1), spigot.Decision{N: 1, Remaining: 1, ResetAfter: 20 * time.Second, RefillAfter: 4 * time.Second},
			fmt.Sprintf("tb/2 %d %d 3000000 2000000", T+18_000_000, T+1_000_000)},
		// A Reset gives back the 8.5 tokens lacking, rounded up.
		{0, op(spigot.Reset, 0), spigot.Decision{N: 9, Remaining: 10, RefillAfter: 2 * time.Second}, ""},
		{0, op(spigot.Take, 10), spigot.Decision{N: 10, ResetAfter: 20 * time.Second, RefillAfter: 2 * time.Second},
			fmt.Sprintf("tb/2 %d %d 0 2000000", T+18_000_000, T-2_000_000)},
		// T+18s: full again, exactly: a Take of 0 leaves no key.
		{20 * time.Second, op(spigot.Take, 0), spigot.Decision{Remaining: 10, RefillAfter: 2 * time.Second}, ""},
		{0, op(spigot.Take, 1), spigot.Decision{N: 1, Remaining: 9, ResetAfter: 2 * time.Second, RefillAfter: 2 * time.Second},
			fmt.Sprintf("tb/2 %d %d 18000000 2000000", T+20_000_000, T+18_000_000)},
		// A Refund that fills the bucket leaves no key.
		{0, op(spigot.Refund, 5), spigot.Decision{N: 1, Remaining: 10, RefillAfter: 2 * time.Second}, ""},
		{0, op(spigot.Take, 10), spigot.Decision{N: 10, ResetAfter: 20 * time.Second, RefillAfter: 2 * time.Second},
			fmt.Sprintf("tb/2 %d %d 0 2000000", T+38_000_000, T+18_000_000)},
		// T+17s: the clock stepped back 1 s. A Refund fills the bucket,
		// which keeps its key, full, until the clock is back at its stamp.
		{-time.Second, op(spigot.Refund, 10), spigot.Decision{N: 10, Remaining: 10, RefillAfter: 3 * time.Second},
			fmt.Sprintf("tb/2 %d %d 20000000 2000000", T+18_000_000, T+18_000_000)},
		// A Take there takes from the full bucket, and waits for the lag.
		{0, op(spigot.Take, 1), spigot.Decision{N: 1, Remaining: 9, ResetAfter: 3 * time.Second, RefillAfter: 3 * time.Second},
			fmt.Sprintf("tb/2 %d %d 18000000 2000000", T+20_000_000, T+18_000_000)},
	} {
		clk.Advance(c.advance)
		start := time.Now()
		got := do(t, s, c.op)
		if problem := diffDecisions(got, c.want); problem != "" {
			t.Errorf("step %d: at T%+v, %v: %s", i, clk.Now().Sub(t0), c.op, problem)
		}
		if model := m.apply(key, c.op, clk.Now()); model != c.want {
			t.Errorf("step %d: at T%+v, %v: Op.Apply gives %s; the test wants %s", i, clk.Now().Sub(t0), c.op, show(model), show(c.want))
		}
		value, ok := getValue(t, raw, key)
		switch {
		case c.value == "" && ok:
			t.Errorf("step %d: at T%+v, after %v: GET %s = %q; want no key", i, clk.Now().Sub(t0), c.op, key, value)
		case c.value != "" && value != c.value:
			t.Errorf("step %d: at T%+v, after %v: GET %s = %q (%v); want %q", i, clk.Now().Sub(t0), c.op, key, value, ok, c.value)
		}
		if c.value != "" && formatState(m[key]) != c.value {
			t.Errorf("step %d: at T%+v, after %v: the model's state is %q; the test wants %q", i, clk.Now().Sub(t0), c.op, formatState(m[key]), c.value)
		}
		if c.op.Action != spigot.Peek {
			if problem := checkTTL(t, srv.Addr, key, m[key], clk.Now(), start); problem != "" {
				t.Errorf("step %d: at T%+v, after %v: %s", i, clk.Now().Sub(t0), c.op, problem)
			}
		}
	}
}

// apply is spigot.Op.Apply on a copy of s: it returns the new state and the
// decision.
func apply(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
	d, _ := store.Apply(op, &s, now) // an invalid op's error leaves s as it was
	return s, d
}

// runV2 runs the script before the other kinds (testdata/spigot-v2.lua,
// which takes the same arguments for a token bucket) on key, at the store's
// clock, for op, and returns its decision (from its four integers: it has
// no RefillAfter), or its error.
func runV2(c goredis.UniversalClient, key string, op spigot.Op, now time.Time) (spigot.Decision, error) {
	clk := clocktest.New(now)
	argv := wire.NewArgs(clk).Op(op)
	args := make([]any, len(argv))
	for i, a := range argv {
		args[i] = a
	}
	reply, err := c.Eval(context.Background(), scriptV2, []string{key}, args...).Result()
	if err != nil {
		return spigot.Decision{}, err
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) != 4 {
		return spigot.Decision{}, fmt.Errorf("spigot-v2.lua %v: reply %#v; want 4 integers", op, reply)
	}
	var n [4]int64
	for i, v := range vals {
		if n[i], ok = v.(int64); !ok {
			return spigot.Decision{}, fmt.Errorf("spigot-v2.lua %v: reply %#v; want 4 integers", op, reply)
		}
	}
	return decodeOld(n)
}

// applyV2 is the Go model of the script before the other kinds: Op.Apply
// on the states it reads, a token bucket's as today's script does, and a
// state of any other kind (today's lb/1, fw/1, sw/1, sl/1) by its FullAt
// alone, which must be within 2^53 (or it is unreadable: ok is false).
func applyV2(s store.State, op spigot.Op, now time.Time) (next store.State, d spigot.Decision, ok bool) {
	if s.Kind != 0 && s.Kind != spigot.TokenBucket {
		if s.FullAt > store.MaxExact || s.FullAt < -store.MaxExact {
			return s, spigot.Decision{}, false
		}
		s = store.State{Kind: wire.OtherKind, FullAt: s.FullAt}
	}
	next, d = apply(op, s, now)
	if next.Kind == wire.OtherKind { // a Peek or Refund that left it: the key is untouched
		return next, d, true
	}
	return next, d, true
}

// testRollingDeployKinds: the script before the other kinds (v2) and
// today's, in turns on the same keys of one server, as during a rolling
// deploy to them: limits of every kind, a name whose config changes kind,
// the old script running the token buckets' operations now and then. The
// old script reads the new kinds' states by their FullAt alone (a token
// bucket full again then, not sooner); today's reads the old one's states
// as its own. No step refills a key: each decision is Op.Apply's on the
// state the script that runs it reads, and the server holds that state
// after it (a state the old script left untouched where Apply left the
// state of another kind as it was).
func testRollingDeployKinds(t *testing.T, ps protoStore, srv *testserver.Server) {
	const (
		seeds = 24
		steps = 300
	)
	raw := testclient.GoRedis(t, srv.Addr)
	runs := map[string]int{}
	for seed := range uint64(seeds) {
		clk := clocktest.New(t0)
		p := fmt.Sprintf("%s-%d:", t.Name(), seed)
		s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
		// A token bucket beside each other kind in turn.
		g := newDiffGen(100+seed, false, spigot.TokenBucket, allKinds[1+seed%4])
		m := model{}
		for i := range steps {
			o := g.next()
			clk.Advance(o.step)
			now := clk.Now()
			key := store.Key(p, o.op.Limit, o.op.Key)
			old := o.op.Limit.Kind() == spigot.TokenBucket && g.rng.IntN(2) == 0
			before, hadState := m[key]
			state := "none"
			if hadState {
				state = formatState(before)
			}
			var got spigot.Decision
			if old {
				g.history = append(g.history, fmt.Sprintf("  step %d at %s on %s: spigot-v2.lua %v", i, now.Format("15:04:05.000000"), state, o))
				next, want, readable := applyV2(before, o.op, now)
				d, err := runV2(raw, key, o.op, now)
				switch {
				case !readable:
					if err == nil || !strings.Contains(err.Error(), "unreadable state") {
						g.fail(t, i, "%v: spigot-v2.lua on %s = %s, %v; want an unreadable state", o, state, show(d), err)
					}
					continue
				case err != nil:
					g.fail(t, i, "%v: spigot-v2.lua: %v", o, err)
				case diffDecisions(d, withoutRefill(want)) != "":
					g.fail(t, i, "%v: spigot-v2.lua and the model: %s", o, diffDecisions(d, withoutRefill(want)))
				}
				switch {
				case next.Kind == wire.OtherKind: // untouched
				case next.IsZero():
					delete(m, key)
				default:
					m[key] = next
				}
				got = d
				if hadState && before.Kind != spigot.TokenBucket && before.Kind != 0 {
					runs["v2 on "+before.Kind.String()]++
				}
			} else {
				g.history = append(g.history, fmt.Sprintf("  step %d at %s on %s: %v", i, now.Format("15:04:05.000000"), state, o))
				want := m.apply(key, o.op, now)
				var err error
				got, err = s.Do(context.Background(), o.op)
				if err != nil {
					g.fail(t, i, "%v: %v", o, err)
				}
				if problem := diffDecisions(got, want); problem != "" {
					g.fail(t, i, "%v: the script and Op.Apply: %s", o, problem)
				}
				if hadState && before.Kind != o.op.Limit.Kind() {
					runs["today on another kind"]++
				}
			}
			g.history[len(g.history)-1] += " = " + show(got)
			if problem := m.checkStored(t, raw, key, now); problem != "" {
				g.fail(t, i, "%v: %s", o, problem)
			}
			g.record(o, got)
		}
	}
	for _, what := range []string{"v2 on LeakyBucket", "v2 on FixedWindow", "v2 on SlidingWindow", "v2 on SlidingLog", "today on another kind"} {
		if runs[what] == 0 {
			t.Errorf("no step ran %s; the test means to (%v)", what, runs)
		}
	}
}
