package store_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// t0 is the fixed instant every step table starts from.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const ms, s = time.Millisecond, time.Second

type step struct {
	at   time.Duration // since t0
	cost int64
	want spigot.Decision
}

func allow(remaining int64, reset time.Duration) spigot.Decision {
	return spigot.Decision{Remaining: remaining, ResetAfter: reset}
}

func deny(remaining int64, retry, reset time.Duration) spigot.Decision {
	return spigot.Decision{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// refillAfter returns Decision.RefillAfter by its definition, for l's key
// in state s after an operation at now that left remaining tokens: on a
// copy of s, a Take of remaining, then the RetryAfter of a Take of one,
// at now.
func refillAfter(l spigot.Limit, s store.State, now time.Time, remaining int64) time.Duration {
	op := spigot.Op{Limit: l, Key: "k", N: remaining}
	s, _ = applyCopy(op, s, now)
	op.N = 1
	_, d := apply(op, s, now)
	return d.RetryAfter
}

// refilled returns want with the RefillAfter of refillAfter for op at now
// leaving the state next, when want leaves it 0: the tables written before
// RefillAfter, whose other fields were worked out by hand, check it by its
// definition.
func refilled(op spigot.Op, next store.State, now time.Time, want spigot.Decision) spigot.Decision {
	if want.RefillAfter == 0 && !want.Degraded() {
		want.RefillAfter = refillAfter(op.Limit, next, now, want.Remaining)
	}
	return want
}

// apply is store.Apply on a copy of s: it returns the new state and the
// decision.
func apply(op spigot.Op, s store.State, now time.Time) (store.State, spigot.Decision) {
	d, _ := store.Apply(op, &s, now) // an invalid op's error leaves s as it was
	return s, d
}

// take applies a Take of cost tokens on b to s at now.
func take(b spigot.Limit, s store.State, now time.Time, cost int64) (store.State, spigot.Decision) {
	return apply(spigot.Op{Limit: b, Key: "k", Action: spigot.Take, N: cost}, s, now)
}

// taken returns want with the N of a Take of cost: cost when allowed.
func taken(want spigot.Decision, cost int64) spigot.Decision {
	if want.Allowed() {
		want.N = cost
	}
	return want
}

// play applies steps to one key's state with Take and checks each decision.
func play(t *testing.T, b spigot.Limit, st store.State, steps []step) store.State {
	t.Helper()
	for i, s := range steps {
		var got spigot.Decision
		st, got = take(b, st, t0.Add(s.at), s.cost)
		if want := refilled(spigot.Op{Limit: b, N: s.cost}, st, t0.Add(s.at), taken(s.want, s.cost)); got != want {
			t.Errorf("%v step %d (t0+%v, cost %d): got %+v, want %+v", b, i, s.at, s.cost, got, want)
		}
	}
	return st
}

func TestTake(t *testing.T) {
	tests := []struct {
		name   string
		bucket spigot.Limit
		steps  []step
	}{
		{"login burst then one per 3s", spigot.MustBucket("login", 3, spigot.Per(1, 3*s)), []step{
			{0, 1, allow(2, 3*s)},
			{0, 1, allow(1, 6*s)},
			{0, 1, allow(0, 9*s)},
			{0, 1, deny(0, 3*s, 9*s)},
			{2 * s, 1, deny(0, 1*s, 7*s)}, // denied: took nothing
			{3 * s, 1, allow(0, 9*s)},     // exactly RetryAfter
			{3*s + 1*ms, 0, allow(0, 8999*ms)},
			{12 * s, 0, allow(3, 0)},
		}},
		{"3/s has no drift", spigot.MustBucket("b", 1, spigot.PerSecond(3)), []step{
			{0, 1, allow(0, 334*ms)}, // 1/3 s = 333.333… ms, rounded up
			{333 * ms, 1, deny(0, 1*ms, 1*ms)},
			{333334 * time.Microsecond, 1, allow(0, 334*ms)},
			{666667 * time.Microsecond, 1, deny(0, 1*ms, 1*ms)}, // 1/3 token minus 1/3 µs short
			{666668 * time.Microsecond, 1, allow(0, 334*ms)},
			{1666668 * time.Microsecond, 3, deny(1, spigot.Never, 0)}, // takes nothing
			{1666668 * time.Microsecond, 1, allow(0, 334*ms)},
		}},
		{"7/10s", spigot.MustBucket("b", 7, spigot.Per(7, 10*s)), []step{
			{0, 7, allow(0, 10*s)},
			{1 * s, 1, deny(0, 429*ms, 9*s)},   // a token is 10/7 s = 1428.57… ms; 0.7 held
			{1429 * ms, 1, allow(0, 10000*ms)}, // 1.0003 held: 1 taken, 0.0003 left
			{11429 * ms, 7, allow(0, 10*s)},
		}},
		{"cost above capacity", spigot.MustBucket("b", 5, spigot.PerSecond(1)), []step{
			{0, 6, deny(5, spigot.Never, 0)},
			{0, 5, allow(0, 5*s)},
			{0, 6, deny(0, spigot.Never, 5*s)},
		}},
		{"capacity 0", spigot.MustBucket("b", 0, spigot.PerSecond(1)), []step{
			{0, 1, deny(0, spigot.Never, 0)},
			{0, 0, allow(0, 0)},
			{time.Hour, 1, deny(0, spigot.Never, 0)},
		}},
		{"cost 0 peeks", spigot.MustBucket("b", 2, spigot.PerSecond(1)), []step{
			{0, 0, allow(2, 0)},
			{0, 2, allow(0, 2*s)},
			{0, 0, allow(0, 2*s)},
			{500 * ms, 0, allow(0, 1500*ms)},
			{1500 * ms, 0, allow(1, 500*ms)},
		}},
		{"sub-millisecond refill", spigot.MustBucket("b", 2, spigot.Per(1000, ms)), []step{
			{0, 2, allow(0, 1*ms)}, // 2 µs to full, rounded up to 1 ms
			{0, 1, deny(0, 1*ms, 1*ms)},
			{1 * time.Microsecond, 1, allow(0, 1*ms)},
			{3 * time.Microsecond, 2, allow(0, 1*ms)},
		}},
		{"1/24h", spigot.MustBucket("b", 2, spigot.Per(1, 24*time.Hour)), []step{
			{0, 2, allow(0, 48*time.Hour)},
			{time.Hour, 1, deny(0, 23*time.Hour, 47*time.Hour)},
			{24 * time.Hour, 1, allow(0, 48*time.Hour)},
		}},
		{"10/13s", spigot.MustBucket("b", 10, spigot.Per(10, 13*s)), []step{
			{0, 10, allow(0, 13*s)},
			{1 * s, 1, deny(0, 300*ms, 12*s)}, // a token is 1.3 s
			{1300 * ms, 1, allow(0, 13*s)},
			{14300 * ms, 10, allow(0, 13*s)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { play(t, tt.bucket, store.State{}, tt.steps) })
	}
}

// TestTakeNoDrift checks over a long run that a rate with a period that is
// not a whole number of milliseconds per token neither gains nor loses: the
// k-th token of 7/10s arrives at exactly k×10/7 s.
func TestTakeNoDrift(t *testing.T) {
	// Capacity 2 so that the fraction left after each token is never
	// clamped away by a full bucket.
	b := spigot.MustBucket("b", 2, spigot.Per(7, 10*s))
	st, _ := take(b, store.State{}, t0, 2)
	for k := int64(1); k <= 20_000; k++ {
		due := t0.Add(time.Duration((k*10_000_000+6)/7) * time.Microsecond) // ⌈k×10/7 s⌉ in µs
		var a spigot.Decision
		if _, a = take(b, st, due.Add(-time.Microsecond), 1); a.Allowed() {
			t.Fatalf("token %d admitted 1µs before it is due at t0+%v", k, due.Sub(t0))
		}
		if st, a = take(b, st, due, 1); !a.Allowed() {
			t.Fatalf("token %d denied when due at t0+%v: %+v", k, due.Sub(t0), a)
		}
	}
}

func TestTakeConfigChange(t *testing.T) {
	login := spigot.MustBucket("login", 10, spigot.PerSecond(1))
	st := play(t, login, store.State{}, []step{{0, 4, allow(6, 4*s)}})

	tests := []struct {
		name   string
		bucket spigot.Limit
		steps  []step
	}{
		{"capacity lowered clamps", spigot.MustBucket("login", 3, spigot.PerSecond(1)), []step{
			{0, 0, allow(3, 0)}, {0, 3, allow(0, 3*s)}}},
		{"capacity raised keeps tokens", spigot.MustBucket("login", 100, spigot.PerSecond(1)), []step{
			{0, 0, allow(6, 94*s)}, {0, 7, deny(6, 1*s, 94*s)}}},
		{"rate changed keeps whole tokens", spigot.MustBucket("login", 10, spigot.PerSecond(2)), []step{
			{0, 0, allow(6, 2*s)}, {500 * ms, 7, allow(0, 5*s)}}},
		{"rate and capacity changed", spigot.MustBucket("login", 5, spigot.Per(7, 10*s)), []step{
			{0, 0, allow(5, 0)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { play(t, tt.bucket, st, tt.steps) })
	}

	// A fraction of a token is dropped when the scale changes, never
	// rounded up: 0.5 token at 1/s (10^6 units a token) becomes 0 at 2/s
	// (5×10^5 units a token). At 3/s the scale is 10^6 again, and the half
	// token carries over exactly.
	half, _ := take(login, store.State{}, t0, 10)
	half, _ = take(login, half, t0.Add(500*ms), 0)
	play(t, spigot.MustBucket("login", 10, spigot.PerSecond(2)), half, []step{{500 * ms, 1, deny(0, 500*ms, 5000*ms)}})
	play(t, spigot.MustBucket("login", 10, spigot.PerSecond(3)), half, []step{{500 * ms, 1, deny(0, 167*ms, 3167*ms)}})
}

func TestTakeClockSteppedBack(t *testing.T) {
	b := spigot.MustBucket("b", 2, spigot.PerSecond(1))
	play(t, b, store.State{}, []step{
		{10 * s, 2, allow(0, 2*s)},
		{9 * s, 1, deny(0, 2*s, 3*s)}, // the stamp stays at t0+10s: 1 s of lag
		{10 * s, 1, deny(0, 1*s, 2*s)},
		{11 * s, 1, allow(0, 2*s)}, // the second 9..10 was not counted twice
	})
}

func TestTakeCorruptState(t *testing.T) {
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	stamp := t0.UnixMicro()
	tests := []struct {
		name  string
		state store.State
		want  spigot.Decision
	}{
		{"negative tokens", store.State{Kind: spigot.TokenBucket, Tokens: -7, Stamp: stamp, Scale: scaleOf(b), FullAt: stamp + 5e6}, deny(0, 1*s, 5*s)},
		{"too many tokens", store.State{Kind: spigot.TokenBucket, Tokens: 99 * scaleOf(b), Stamp: stamp, Scale: scaleOf(b), FullAt: stamp + 5e6}, allow(4, 1*s)},
		{"negative scale", store.State{Kind: spigot.TokenBucket, Tokens: 1, Stamp: stamp, Scale: -3, FullAt: stamp + 5e6}, allow(4, 1*s)},
		{"far future stamp", store.State{Kind: spigot.TokenBucket, Tokens: 0, Stamp: 1 << 62, Scale: scaleOf(b), FullAt: 1<<62 + 5e6}, deny(0, spigot.Never, spigot.Never)},
	}
	for _, tt := range tests {
		next, got := take(b, tt.state, t0, 1)
		if want := refilled(spigot.Op{Limit: b, N: 1}, next, t0, taken(tt.want, 1)); got != want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, want)
		}
	}
}

func TestApplyInvalid(t *testing.T) {
	st := store.State{Kind: spigot.TokenBucket, Tokens: 1, Stamp: 2, Scale: 3, FullAt: 4}
	b := spigot.MustBucket("b", 5, spigot.PerSecond(1))
	for _, tt := range []struct {
		name string
		op   spigot.Op
		want error
	}{
		{"zero Limit", spigot.Op{N: 1}, spigot.ErrInvalidLimit},
		{"zero Limit, Reset", spigot.Op{Action: spigot.Reset}, spigot.ErrInvalidLimit},
		{"N -1", spigot.Op{Limit: b, N: -1}, spigot.ErrInvalidCost},
		{"Refund of -1", spigot.Op{Limit: b, Action: spigot.Refund, N: -1}, spigot.ErrInvalidCost},
		{"Action(5)", spigot.Op{Limit: b, Action: 5, N: 1}, errors.ErrUnsupported},
		{"Action(255)", spigot.Op{Limit: b, Action: 255}, errors.ErrUnsupported},
	} {
		if err := tt.op.Check(); !errors.Is(err, tt.want) || !strings.HasPrefix(err.Error(), "spigot: ") {
			t.Errorf("%s: Check() = %v, want an error starting with \"spigot: \" that matches %v", tt.name, err, tt.want)
		}
		got := st
		if d, err := store.Apply(tt.op, &got, t0); !reflect.DeepEqual(got, st) || d != (spigot.Decision{}) || err == nil || err.Error() != tt.op.Check().Error() {
			t.Errorf("%s: Apply = %+v, %+v, %v; want the state unchanged, the zero Decision and Check's error", tt.name, got, d, err)
		}
	}
	for _, a := range []spigot.Action{spigot.Take, spigot.TakeUpTo, spigot.Refund, spigot.Reset, spigot.Peek} {
		if err := (spigot.Op{Limit: b, Action: a}).Check(); err != nil {
			t.Errorf("%v of 0: Check() = %v, want nil", a, err)
		}
	}
}

func TestTakeTruncatesToMicroseconds(t *testing.T) {
	b := spigot.MustBucket("b", 1, spigot.Per(1000, ms)) // 1 token per µs
	st, _ := take(b, store.State{}, t0, 1)
	// 999 ns later is the same microsecond: no refill yet.
	if _, a := take(b, st, t0.Add(999*time.Nanosecond), 1); a.Allowed() {
		t.Errorf("admitted 999ns after emptying a 1/µs bucket: %+v", a)
	}
	if _, a := take(b, st, t0.Add(time.Microsecond), 1); !a.Allowed() {
		t.Errorf("denied 1µs after emptying a 1/µs bucket: %+v", a)
	}
}

// TestSplitAdmitsTheShare: n replicas enforcing Split(n) from empty admit
// together, over any time, at most the bucket's own capacity plus what its
// rate refills, and as much over a long time.
func TestSplitAdmitsTheShare(t *testing.T) {
	b := spigot.MustBucket("api", 100, spigot.Per(20, 3*time.Second))
	const n = 4
	split := b.Split(n)
	var st store.State
	var admitted int64
	const hours = 10
	for ms := int64(0); ms <= hours*3600*1000; ms += 10 {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		var a spigot.Decision
		if st, a = take(split, st, now, 1); a.Allowed() {
			admitted++
		}
	}
	total := admitted * n
	bound := b.Capacity() + hours*3600*20/3
	if total > bound || total < bound-n*b.Capacity() {
		t.Errorf("%d replicas of %v admitted %d in %d h, want at most %d and at least %d", n, split, total, hours, bound, bound-n*b.Capacity())
	}
}
