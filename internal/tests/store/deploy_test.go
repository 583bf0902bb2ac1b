package store_test

// A rolling deploy mixes releases of the script on one server: each
// release reads the states of every release before it (the format of
// v0.1.0 is frozen in testdata/format-v0.1.0.txt, which format_test.go
// holds the script to), and reads a state of a later release by its
// FullAt. testRollingDeploy runs today's script beside the next release's,
// which does not exist yet: nextScript makes it from today's, as a
// release that changes a kind's format would. Here too, what each script
// decides is checked against spigot's Go model (Apply), with a fake clock
// passed as now (WithClock).

import (
	"context"
	"errors"
	"fmt"
	"reflect"
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

// slackMs is the TTL slack, in ms, of a store with WithClock.
var slackMs = wire.ClockTTLSlack.Milliseconds()

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
		state store.State // what the value stands for
	}{
		// A token bucket's at the bounds of its fields: clamped, none, not
		// a full bucket.
		{fmt.Sprintf("tb/1 %d %d %d %d", T+10_000_000, T, -(1 << 53), 7), store.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: -(1 << 53), Stamp: T, Scale: 7}},
		{fmt.Sprintf("tb/1 %d %d %d %d", T+10_000_000, T, 1<<53, 3), store.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: 1 << 53, Stamp: T, Scale: 3}},
		{fmt.Sprintf("tb/1 %d %d %d %d", T+10_000_000, T, 30_000_000, 2_000_000), store.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: 30_000_000, Stamp: T, Scale: 2_000_000}},
		{fmt.Sprintf("tb/1 %d %d %d %d", T+10_000_000, T, 7_500_000, 1_000_000), store.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: 7_500_000, Stamp: T, Scale: 1_000_000}}, // another rate: 7 whole tokens carry
		{fmt.Sprintf("tb/1 %d %d %d %d", T+10_000_000, T, 1_000_000, 0), store.State{Kind: spigot.TokenBucket, FullAt: T + 10_000_000, Tokens: 1_000_000, Stamp: T}},                           // no scale: absent
		// A FullAt of 0: full again since the epoch.
		{fmt.Sprintf("tb/1 0 %d %d %d", T, 0, 2_000_000), store.State{Kind: spigot.TokenBucket, Stamp: T, Scale: 2_000_000}},
		// A stamp far behind, a FullAt after 2^53 µs.
		{fmt.Sprintf("tb/1 %d %d %d %d", int64(1)<<54, -(1 << 53), 0, 2_000_000), store.State{Kind: spigot.TokenBucket, FullAt: 1 << 54, Stamp: -(1 << 53), Scale: 2_000_000}},
		// Another kind, and a later version of the token bucket: read by
		// their FullAt alone, as the bucket that is full again then.
		{fmt.Sprintf("xx/1 %d 1 2 3", T+3_000_000), store.State{Kind: wire.OtherKind, FullAt: T + 3_000_000}},
		{fmt.Sprintf("xx/1 %d", T+1), store.State{Kind: wire.OtherKind, FullAt: T + 1}},
		{fmt.Sprintf("xx/1 %d 1 2 3", T), store.State{Kind: wire.OtherKind, FullAt: T}},                         // full again, exactly
		{fmt.Sprintf("xx/1 %d 1 2 3", T-5), store.State{Kind: wire.OtherKind, FullAt: T - 5}},                   // full again
		{fmt.Sprintf("xx/1 %d anything", T+max+1), store.State{Kind: wire.OtherKind, FullAt: T + max + 1}},      // further than an empty bucket refills
		{fmt.Sprintf("xx/1 %d", T+3_600_000_000), store.State{Kind: wire.OtherKind, FullAt: T + 3_600_000_000}}, // an hour
		{fmt.Sprintf("xx/1 %d", T+max+2_000_001), store.State{Kind: wire.OtherKind, FullAt: T + max + 2_000_001}},
		{fmt.Sprintf("xx/1 %d", int64(1)<<53), store.State{Kind: wire.OtherKind, FullAt: 1 << 53}},
		{"xx/1 0 1 2 3", store.State{Kind: wire.OtherKind}}, // full again at the epoch
		{fmt.Sprintf("tb/2 %d %d %d %d", T+7_000_000, T, 0, 2_000_000), store.State{Kind: wire.OtherKind, FullAt: T + 7_000_000}},
		{fmt.Sprintf("tb/9 %d x y z", T+12_345_678), store.State{Kind: wire.OtherKind, FullAt: T + 12_345_678}},
		{fmt.Sprintf("tb/10 %d", T+999), store.State{Kind: wire.OtherKind, FullAt: T + 999}},
		{fmt.Sprintf("lb/2 %d 1 2", T+2_000_001), store.State{Kind: wire.OtherKind, FullAt: T + 2_000_001}},
		{fmt.Sprintf("limit/3 %d 1 2", T+2_000_001), store.State{Kind: wire.OtherKind, FullAt: T + 2_000_001}},
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
func apply(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
	d, _ := store.Apply(op, &s, now) // an invalid op's error leaves s as it was
	return s, d
}

// nextEdits turn today's script into the next release's (nextScript): a
// release that changes the token bucket's format to version 2, "tb/2
// <fullat> <stamp> <tokens> <scale> 0", with a field more at its end (0
// here), and reads version 1 as well, as every release must read the
// states of the ones before it. Each edit replaces text that today's
// script holds exactly count times.
var nextEdits = []struct {
	old, new string
	count    int
}{
	// It writes version 2, with its field more.
	{`local f = 'tb/1 %'`, `local f, extra = 'tb/2 %', ' 0'`, 1},
	{`f = 'lb/1 %'`, `f, extra = 'lb/1 %', ''`, 1},
	{`.. scaled, `, `.. scaled .. extra, `, 2},
	// It reads version 2 on its common path, and, in read, version 1 too.
	{`'^tb/1 (%-?[1-9][0-9]*) (%-?[1-9][0-9]*) (%-?[0-9]+) (%-?[1-9][0-9]*)$'`,
		`'^tb/2 (%-?[1-9][0-9]*) (%-?[1-9][0-9]*) (%-?[0-9]+) (%-?[1-9][0-9]*) 0$'`, 1},
	{`if known and ver == '1' then`, `if known and (ver == '1' or tag == 'tb' and ver == '2') then`, 1},
	{`string.match(v, '^ (%-?%d+) (%-?%d+) (%-?%d+)$', rp)`,
		`string.match(v, ver == '2' and '^ (%-?%d+) (%-?%d+) (%-?%d+) 0$' or '^ (%-?%d+) (%-?%d+) (%-?%d+)$', rp)`, 1},
	{`elseif known and tonumber(ver) <= 1 then`, `elseif known and tonumber(ver) <= (tag == 'tb' and 2 or 1) then`, 1},
}

// nextScript returns the next release's script: today's, with nextEdits.
func nextScript(t testing.TB) string {
	t.Helper()
	s := wire.Script()
	for _, e := range nextEdits {
		if n := strings.Count(s, e.old); n != e.count {
			t.Fatalf("nextScript: today's script holds %q %d times; the edit means %d", e.old, n, e.count)
		}
		s = strings.ReplaceAll(s, e.old, e.new)
	}
	return s
}

// nextParse is the next release's reading of a value of a token bucket's
// key, in the formats the rolling deploy meets: its own tb/2, and today's
// tb/1, both whole.
func nextParse(v string) (store.State, error) {
	if f, ok := strings.CutPrefix(v, "tb/2 "); ok {
		f, ok = strings.CutSuffix(f, " 0")
		if !ok {
			return store.State{}, wire.ErrUnreadable
		}
		v = "tb/1 " + f
	}
	return wire.ParseState(v, spigot.TokenBucket)
}

// nextFormat is the value the next release writes for s, a token bucket's
// state.
func nextFormat(s store.State) string {
	return "tb/2 " + strings.TrimPrefix(wire.FormatState(s), "tb/1 ") + " 0"
}

// runScript runs the script src (EVALSHA, then EVAL) on key, at now by
// the caller's clock, for op, and returns its decision.
func runScript(c goredis.UniversalClient, src, key string, op spigot.Op, now time.Time) (spigot.Decision, error) {
	argv := wire.NewArgs(clocktest.New(now)).Op(op)
	args := make([]any, len(argv))
	for i, a := range argv {
		args[i] = a
	}
	reply, err := goredis.NewScript(src).Run(context.Background(), c, []string{key}, args...).Result()
	if err != nil {
		return spigot.Decision{}, err
	}
	return wire.Decode(reply)
}

// testRollingDeploy: today's script and the next release's (nextScript),
// in turns on the same keys of one server, as during a rolling deploy
// from one to the other: token buckets, each name under one config (a
// deploy of the script, not of the limits), every action, the clock
// stepping back and forth. Each script decides as Apply does on the state
// it reads (today's reads the next's tb/2 by its FullAt alone, the next
// reads today's tb/1 whole), and leaves Apply's state in its own format,
// with the TTL that state calls for. No step refills a key: what a script
// reads of the other's state never holds more tokens, or is full again
// sooner, than the state read whole.
func testRollingDeploy(t *testing.T, ps protoStore, srv *testserver.Server) {
	const (
		seeds = 12
		steps = 200
	)
	next := nextScript(t)
	raw := testclient.GoRedis(t, srv.Addr)
	runs := map[string]int{}
	for seed := range uint64(seeds) {
		clk := clocktest.New(t0)
		p := fmt.Sprintf("%s-%d:", t.Name(), seed)
		s := ps.new(t, []string{srv.Addr}, storeOpts{clock: clk, prefix: p})
		g := newDiffGen(300+seed, false, spigot.TokenBucket)
		g.d = g.d[:1]
		g.d[0], g.e = deployLimit(g, g.d[0]), deployLimit(g, g.e)
		for i := range steps {
			o := g.next()
			clk.Advance(o.step)
			now := clk.Now()
			key := store.Key(p, o.op.Limit, o.op.Key)
			v, had := getValue(t, raw, key)
			runner, format := "today's", wire.FormatState
			if g.rng.IntN(2) == 0 {
				runner, format = "the next", nextFormat
			}
			g.history = append(g.history, fmt.Sprintf("  step %d at %s on %q: %s %v", i, now.Format("15:04:05.000000"), v, runner, o))
			var whole, read store.State // the state, read whole and as runner reads it
			if had {
				var err error
				if whole, err = nextParse(v); err != nil {
					g.fail(t, i, "%v: the next release cannot read %q: %v", o, v, err)
				}
				read = whole
				if runner == "today's" {
					if read, err = wire.ParseState(v, spigot.TokenBucket); err != nil {
						g.fail(t, i, "%v: today's script cannot read %q: %v", o, v, err)
					}
				}
				runs[runner+" on "+v[:4]]++
			}
			peek := spigot.Op{Limit: o.op.Limit, Key: o.op.Key, Action: spigot.Peek}
			if _, r := apply(peek, read, now); had {
				if _, w := apply(peek, whole, now); r.Remaining > w.Remaining || r.ResetAfter < w.ResetAfter && r.ResetAfter != spigot.Never {
					g.fail(t, i, "%v: %s script reads %q as %s; read whole it is %s: a refill", o, runner, v, show(r), show(w))
				}
			}
			after, want := apply(o.op, read, now)
			start := time.Now()
			var got spigot.Decision
			var err error
			if runner == "today's" {
				got, err = s.Do(context.Background(), o.op)
			} else {
				got, err = runScript(raw, next, key, o.op, now)
			}
			if err != nil {
				g.fail(t, i, "%v: %s script: %v", o, runner, err)
			}
			if problem := diffDecisions(got, want); problem != "" {
				g.fail(t, i, "%v: %s script and Op.Apply: %s", o, runner, problem)
			}
			g.history[len(g.history)-1] += " = " + show(got)
			value, ok := getValue(t, raw, key)
			switch {
			case o.op.Action == spigot.Peek:
				if ok != had || value != v {
					g.fail(t, i, "%v: %s script's Peek left %q (%v); want %q untouched", o, runner, value, ok, v)
				}
			case after.IsZero():
				if ok {
					g.fail(t, i, "%v: %s script left %q; want no key", o, runner, value)
				}
			case !ok || value != format(after):
				g.fail(t, i, "%v: %s script left %q (%v); want %q", o, runner, value, ok, format(after))
			default:
				if problem := checkTTL(t, srv.Addr, key, after, now, start); problem != "" {
					g.fail(t, i, "%v: %s script: %s", o, runner, problem)
				}
			}
			g.record(o, got)
		}
	}
	for _, what := range []string{"today's on tb/1", "today's on tb/2", "the next on tb/1", "the next on tb/2"} {
		if runs[what] == 0 {
			t.Errorf("no step ran %s; the test means to (%v)", what, runs)
		}
	}
}

// deployLimit returns l, or in its place another limit of g's that has
// its name, whose bucket refills from empty within 2^50 µs: a state of a
// later version is read by its FullAt, which the script reads within 2^53
// only (a later one fails its key, as the stored values test).
func deployLimit(g *diffGen, l spigot.Limit) spigot.Limit {
	for r := l.Rate(); float64(l.Capacity())*float64(r.Period.Microseconds())/float64(r.Tokens) > 1<<50; r = l.Rate() {
		l = g.limit(l.Name())
	}
	return l
}
