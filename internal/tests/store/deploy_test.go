package store_test

// What the script makes of values it did not write, checked against
// spigot's Go model (Apply), with a fake clock passed as now (WithClock).
// What it writes is frozen in testdata/format-v0.1.0.txt (format_test.go).

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

// slackMs is the TTL slack, in ms, of a store with WithClock.
var slackMs = wire.ClockTTLSlack.Milliseconds()

// checkTTL checks, after an operation that wrote the model's state s of key
// at now (by the caller's clock) and began start (by real time), that the
// key's PTTL is the time until s.FullAt by the caller's clock, rounded up
// to the ms, plus the slack, less the ms that passed since.
func checkTTL(t testing.TB, addr, key string, s spigot.State, now, start time.Time) string {
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

// valueLimit is the limit the table tests of stored values run under:
// scale 2000000 units per token, refill 1 unit per µs, 20000000 units in
// all.
var valueLimit = spigot.MustBucket("values", 10, spigot.Per(1, 2*time.Second))

// testOtherStates: every action of today's script on values it did not
// write, at a fixed instant T: a token bucket's at the bounds of its
// fields, and a state of another kind ("xx/1") and of a later version
// ("tb/2", "lb/2"), each at instants around T, gives the Decision of
// Op.Apply on the State the value stands for, and leaves the value of the
// State Apply returns (a Peek leaves the value, and its lack of a TTL,
// untouched).
func testOtherStates(t *testing.T, ps protoStore, srv *testserver.Server) {
	clk := clocktest.New(t0)
	T := t0.UnixMicro()
	p := prefix(t)
	s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
	raw := testclient.GoRedis(t, srv.Addr)
	const max = 20_000_000 // valueLimit's capacity in units
	values := []struct {
		value string
		state spigot.State // what the value stands for
	}{
		// A token bucket's at the bounds of its fields: clamped, none, not
		// a full bucket.
		{fmt.Sprintf("tb/1 %d %d %d %d", T+10_000_000, T, -(1 << 53), 7), spigot.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: -(1 << 53), Stamp: T, Scale: 7}},
		{fmt.Sprintf("tb/1 %d %d %d %d", T+10_000_000, T, 1<<53, 3), spigot.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: 1 << 53, Stamp: T, Scale: 3}},
		{fmt.Sprintf("tb/1 %d %d %d %d", T+10_000_000, T, 30_000_000, 2_000_000), spigot.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: 30_000_000, Stamp: T, Scale: 2_000_000}},
		{fmt.Sprintf("tb/1 %d %d %d %d", T+10_000_000, T, 7_500_000, 1_000_000), spigot.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: 7_500_000, Stamp: T, Scale: 1_000_000}}, // another rate: 7 whole tokens carry
		{fmt.Sprintf("tb/1 %d %d %d %d", T+10_000_000, T, 1_000_000, 0), spigot.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: 1_000_000, Stamp: T}},                           // no scale: absent
		// A stamp far behind, a FullAt after 2^53 µs.
		{fmt.Sprintf("tb/1 %d %d %d %d", int64(1)<<54, -(1 << 53), 0, 2_000_000), spigot.State{Kind: spigot.TokenBucket, FullAt: 1 << 54, Stamp: -(1 << 53), Scale: 2_000_000}},
		// Another kind, and a later version of the token bucket: read by
		// their FullAt alone, as the bucket that is full again then.
		{fmt.Sprintf("xx/1 %d 1 2 3", T+3_000_000), spigot.State{Kind: wire.OtherKind, FullAt: T + 3_000_000}},
		{fmt.Sprintf("xx/1 %d", T+1), spigot.State{Kind: wire.OtherKind, FullAt: T + 1}},
		{fmt.Sprintf("xx/1 %d 1 2 3", T), spigot.State{Kind: wire.OtherKind, FullAt: T}},                         // full again, exactly
		{fmt.Sprintf("xx/1 %d 1 2 3", T-5), spigot.State{Kind: wire.OtherKind, FullAt: T - 5}},                   // full again
		{fmt.Sprintf("xx/1 %d anything", T+max+1), spigot.State{Kind: wire.OtherKind, FullAt: T + max + 1}},      // further than an empty bucket refills
		{fmt.Sprintf("xx/1 %d", T+3_600_000_000), spigot.State{Kind: wire.OtherKind, FullAt: T + 3_600_000_000}}, // an hour
		{fmt.Sprintf("xx/1 %d", T+max+2_000_001), spigot.State{Kind: wire.OtherKind, FullAt: T + max + 2_000_001}},
		{fmt.Sprintf("xx/1 %d", int64(1)<<53), spigot.State{Kind: wire.OtherKind, FullAt: 1 << 53}},
		{"xx/1 0 1 2 3", spigot.State{Kind: wire.OtherKind}}, // full again at the epoch
		{fmt.Sprintf("tb/2 %d %d %d %d", T+7_000_000, T, 0, 2_000_000), spigot.State{Kind: wire.OtherKind, FullAt: T + 7_000_000}},
		{fmt.Sprintf("tb/9 %d x y z", T+12_345_678), spigot.State{Kind: wire.OtherKind, FullAt: T + 12_345_678}},
		{fmt.Sprintf("tb/10 %d", T+999), spigot.State{Kind: wire.OtherKind, FullAt: T + 999}},
		{fmt.Sprintf("lb/2 %d 1 2", T+2_000_001), spigot.State{Kind: wire.OtherKind, FullAt: T + 2_000_001}},
		{fmt.Sprintf("limit/3 %d 1 2", T+2_000_001), spigot.State{Kind: wire.OtherKind, FullAt: T + 2_000_001}},
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
			op.Limit, op.Key = valueLimit, fmt.Sprintf("k%d-%d", i, j)
			key := store.Key(p, valueLimit, op.Key)
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
		"1 2 3 4", // no tag
		"1 2 3",
		"tb/1",
		"tb/1 1767323045000000 5 6",     // this format, a field short
		"tb/1 1767323045000000 5 6 7 8", // this format, a field too many
		"tb/0 1767323045000000 5 6 7",   // a version before the first
		"tb/01 1767323045000000 5 6 7",  // the first, written otherwise
		"tb/x 5",
		"TB/1 5 1 2 3",
		"xx/1 soon",
		"xx/1",
		"/1 5",
		"{\"tokens\": 5}",
		"tb/1 1 2 3 -",
		"tb/1 1 2 3 ",
		"tb/1 1 2 3-5",
		"tb/1 1.5 2 3 4",
		"tb/1  1 2 3 4",
		"tb/1 1 9007199254740993 3 4",            // past 2^53
		"tb/1 1 2 -9007199254740993 4",           // past -2^53
		"tb/1 1000000000000000000 2 3 4",         // a FullAt of 19 digits
		"tb/1 1 2 3 " + strings.Repeat("9", 400), // past what a double holds
		"xx/1 9007199254740993",                  // another kind's FullAt past 2^53
		"lb/1 9007199254740993 1767323045000000 5 6", // another kind's FullAt past 2^53
		"xx/1 5abc",
	} {
		for _, a := range allActions {
			op := spigot.Op{Limit: valueLimit, Key: fmt.Sprintf("bad%d", i), Action: a, N: 1}
			key := store.Key(p, valueLimit, op.Key)
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

// apply is spigot.Op.Apply on a copy of s: it returns the new state and the
// decision.
func apply(op spigot.Op, s spigot.State, now time.Time) (spigot.State, spigot.Decision) {
	d, _ := op.Apply(&s, now) // an invalid op's error leaves s as it was
	return s, d
}
