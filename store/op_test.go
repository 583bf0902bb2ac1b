package store_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// TestApplyActions pins every action to values worked out by hand, on a
// bucket of 3 tokens refilled at 1/s.
func TestApplyActions(t *testing.T) {
	b := spigot.MustBucket("b", 3, spigot.PerSecond(1))
	empty := spigot.MustBucket("empty", 0, spigot.PerSecond(1))
	const (
		take   = spigot.Take
		upTo   = spigot.TakeUpTo
		refund = spigot.Refund
		reset  = spigot.Reset
		peek   = spigot.Peek
	)
	steps := []struct {
		at     time.Duration
		limit  spigot.Limit
		action spigot.Action
		n      int64
		want   spigot.Decision
	}{
		// RefillAfter: with the remaining whole tokens taken, the fraction
		// left refills to one token, a second from none.
		{0, b, take, 1, spigot.Decision{N: 1, Remaining: 2, ResetAfter: 1 * s, RefillAfter: 1 * s}},
		{0, b, peek, 3, spigot.Decision{Remaining: 2, RetryAfter: 1 * s, ResetAfter: 1 * s, RefillAfter: 1 * s}},
		{0, b, peek, 2, spigot.Decision{Remaining: 2, ResetAfter: 1 * s, RefillAfter: 1 * s}}, // takes nothing
		{0, b, peek, 4, spigot.Decision{Remaining: 2, RetryAfter: spigot.Never, ResetAfter: 1 * s, RefillAfter: 1 * s}},
		{0, b, upTo, 5, spigot.Decision{N: 2, Remaining: 0, ResetAfter: 3 * s, RefillAfter: 1 * s}},              // all it holds
		{0, b, upTo, 1, spigot.Decision{Remaining: 0, RetryAfter: 1 * s, ResetAfter: 3 * s, RefillAfter: 1 * s}}, // none to take
		{500 * ms, b, upTo, 0, spigot.Decision{ResetAfter: 2500 * ms, RefillAfter: 500 * ms}},                    // 0.5 token
		{500 * ms, b, refund, 1, spigot.Decision{N: 1, Remaining: 1, ResetAfter: 1500 * ms, RefillAfter: 500 * ms}},
		{500 * ms, b, refund, 2, spigot.Decision{N: 2, Remaining: 3, RefillAfter: 1 * s}}, // 1.5 to full: rounded up
		{500 * ms, b, refund, 1, spigot.Decision{Remaining: 3, RefillAfter: 1 * s}},       // full: nothing to give
		{500 * ms, b, take, 3, spigot.Decision{N: 3, Remaining: 0, ResetAfter: 3 * s, RefillAfter: 1 * s}},
		{1 * s, b, reset, 0, spigot.Decision{N: 3, Remaining: 3, RefillAfter: 1 * s}}, // 2.5 short: rounded up
		{1 * s, b, reset, 0, spigot.Decision{Remaining: 3, RefillAfter: 1 * s}},       // already full
		{1 * s, b, take, 0, spigot.Decision{Remaining: 3, RefillAfter: 1 * s}},
		// A capacity of 0 never admits a token.
		{1 * s, empty, upTo, 1, spigot.Decision{RetryAfter: spigot.Never, RefillAfter: spigot.Never}},
		{1 * s, empty, upTo, 0, spigot.Decision{RefillAfter: spigot.Never}},
		{1 * s, empty, refund, 5, spigot.Decision{RefillAfter: spigot.Never}},
		{1 * s, empty, peek, 1, spigot.Decision{RetryAfter: spigot.Never, RefillAfter: spigot.Never}},
	}
	states := map[string]store.State{}
	for i, st := range steps {
		op := spigot.Op{Limit: st.limit, Key: "k", Action: st.action, N: st.n}
		before := states[st.limit.Name()]
		next, got := apply(op, before, t0.Add(st.at))
		if got != st.want {
			t.Errorf("step %d (t0+%v, %v %d on %v): got %+v, want %+v", i, st.at, st.action, st.n, st.limit, got, st.want)
		}
		if st.action == peek && !reflect.DeepEqual(next, before) {
			t.Errorf("step %d (t0+%v, Peek %d): the state changed from %+v to %+v", i, st.at, st.n, before, next)
		}
		states[st.limit.Name()] = next
	}
}

// TestApplyForgetsAcrossConfigs is the case that moved "full again means
// absent" into the model: a bucket of 10 at 10/s, emptied, read under 1/s
// 2 s later, was full again under the config it was stored with.
func TestApplyForgetsAcrossConfigs(t *testing.T) {
	fast := spigot.MustBucket("api", 10, spigot.PerSecond(10))
	slow := spigot.MustBucket("api", 10, spigot.PerSecond(1))
	st, _ := apply(spigot.Op{Limit: fast, Key: "k", N: 10}, store.State{}, t0)
	if want := t0.Add(1 * s).UnixMicro(); st.FullAt != want {
		t.Fatalf("FullAt = %d, want t0+1s = %d", st.FullAt, want)
	}
	_, d := apply(spigot.Op{Limit: slow, Key: "k", Action: spigot.Peek}, st, t0.Add(2*s))
	if want := (spigot.Decision{Remaining: 10, RefillAfter: 1 * s}); d != want {
		t.Errorf("Peek under 1/s at t0+2s = %+v, want %+v: the bucket was full again at t0+1s", d, want)
	}
	// Before FullAt, the tokens (none) carry over and refill at the new
	// rate: 0.5 token at t0+500ms.
	_, d = apply(spigot.Op{Limit: slow, Key: "k", Action: spigot.Peek}, st, t0.Add(500*ms))
	if want := (spigot.Decision{ResetAfter: 9500 * ms, RefillAfter: 500 * ms}); d != want {
		t.Errorf("Peek under 1/s at t0+500ms = %+v, want %+v", d, want)
	}
}

// TestApplyOtherKind: a state of another kind of limit (a name reused for
// another algorithm) is read by its FullAt alone, as the bucket that is
// full again then, never as a full bucket before it.
func TestApplyOtherKind(t *testing.T) {
	b := spigot.MustBucket("b", 10, spigot.PerSecond(1))
	now := t0.UnixMicro()
	tests := []struct {
		name  string
		state store.State
		want  spigot.Decision // of a Take of 1 at t0
	}{
		{"full again in 2 s", store.State{Kind: 7, FullAt: now + 2e6, Tokens: 99, Scale: 1},
			spigot.Decision{N: 1, Remaining: 7, ResetAfter: 3 * s, RefillAfter: 1 * s}},
		{"full again in 1.5 s", store.State{Kind: 7, FullAt: now + 15e5}, // 7.5 left
			spigot.Decision{N: 1, Remaining: 7, ResetAfter: 2500 * ms, RefillAfter: 500 * ms}},
		{"full again in a day: empty until 10 s before", store.State{Kind: 200, FullAt: now + 86400e6},
			spigot.Decision{RetryAfter: 86391 * s, ResetAfter: 86400 * s, RefillAfter: 86391 * s}},
		{"full already", store.State{Kind: 7, FullAt: now, Tokens: 0, Scale: 1},
			spigot.Decision{N: 1, Remaining: 9, ResetAfter: 1 * s, RefillAfter: 1 * s}},
		{"no FullAt: absent", store.State{Kind: 7, Stamp: now, Tokens: 0, Scale: 1},
			spigot.Decision{N: 1, Remaining: 9, ResetAfter: 1 * s, RefillAfter: 1 * s}},
		{"no kind: absent", store.State{Stamp: now, FullAt: now + 10e6, Tokens: 0, Scale: 1},
			spigot.Decision{N: 1, Remaining: 9, ResetAfter: 1 * s, RefillAfter: 1 * s}},
	}
	for _, tt := range tests {
		st, got := apply(spigot.Op{Limit: b, Key: "k", N: 1}, tt.state, t0)
		if got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
		if got.Allowed() && st.Kind != spigot.TokenBucket {
			t.Errorf("%s: the new state %+v is not a token bucket's", tt.name, st)
		}
	}
}

func TestStrings(t *testing.T) {
	b := spigot.MustBucket("login", 20, spigot.Per(1, 3*s))
	for _, tt := range []struct{ got, want string }{
		{spigot.Take.String(), "Take"},
		{spigot.TakeUpTo.String(), "TakeUpTo"},
		{spigot.Refund.String(), "Refund"},
		{spigot.Reset.String(), "Reset"},
		{spigot.Peek.String(), "Peek"},
		{spigot.Action(9).String(), "Action(9)"},
		{spigot.TokenBucket.String(), "TokenBucket"},
		{spigot.Kind(0).String(), "none"},
		{spigot.Kind(9).String(), "Kind(9)"},
		{b.Kind().String(), "TokenBucket"},
		{spigot.Op{Limit: b, Key: "10.0.0.1", Action: spigot.TakeUpTo, N: 5}.String(), `login(cap 20, 1/3s) "10.0.0.1" TakeUpTo 5`},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
