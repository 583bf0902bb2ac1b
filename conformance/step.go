package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
)

// A step is one Take of a table: cost tokens at t0+at, and the decision
// the model gives it (whose N, the cost when allowed, play fills in).
type step struct {
	at   time.Duration
	cost int64
	want spigot.Decision
}

// An opStep is one operation of a table: act of n tokens at t0+at, and
// the decision the model gives it, N included.
type opStep struct {
	at   time.Duration
	act  spigot.Action
	n    int64
	want spigot.Decision
}

// take asks s to take cost tokens from key's bucket b.
func take(ctx context.Context, s spigot.Store, b spigot.Limit, key string, cost int64) (spigot.Decision, error) {
	return s.Do(ctx, spigot.Op{Limit: b, Key: key, Action: spigot.Take, N: cost})
}

// resetKey asks s to reset key's bucket b, and reports whether it was not
// full.
func resetKey(ctx context.Context, s spigot.Store, b spigot.Limit, key string) (bool, error) {
	d, err := s.Do(ctx, spigot.Op{Limit: b, Key: key, Action: spigot.Reset})
	return d.N > 0, err
}

// allow is the admission of an allowed request.
func allow(remaining int64, resetAfter time.Duration) spigot.Decision {
	return spigot.Decision{Remaining: remaining, ResetAfter: resetAfter}
}

// withRefill returns want with RefillAfter r.
func withRefill(want spigot.Decision, r time.Duration) spigot.Decision {
	want.RefillAfter = r
	return want
}

// took is the decision of an allowed operation that moved n tokens.
func took(n, remaining int64, resetAfter time.Duration) spigot.Decision {
	return spigot.Decision{N: n, Remaining: remaining, ResetAfter: resetAfter}
}

// deny is the admission of a denied request.
func deny(remaining int64, retryAfter, resetAfter time.Duration) spigot.Decision {
	return spigot.Decision{Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter}
}

// play applies steps, in order, to key of bucket b, moving the fake clock
// to each step's instant, and reports the first step whose admission
// differs from the model's. The steps after it are not run: they depend on
// it. It reports whether every step matched.
func play(t testing.TB, e env, b spigot.Limit, key string, steps []step) bool {
	t.Helper()
	ops := make([]opStep, len(steps))
	for i, st := range steps {
		ops[i] = opStep{st.at, spigot.Take, st.cost, st.want}
		if st.want.Allowed() {
			ops[i].want.N = st.cost
		}
	}
	return playOps(t, e, b, key, ops)
}

// playOps is play for steps of any action.
func playOps(t testing.TB, e env, b spigot.Limit, key string, steps []opStep) bool {
	t.Helper()
	for i, st := range steps {
		e.at(st.at)
		got, err := e.s.Do(t.Context(), spigot.Op{Limit: b, Key: key, Action: st.act, N: st.n})
		where := fmt.Sprintf("bucket %v, key %q, step %d (t0+%v, cost %d)", b, key, i+1, st.at, st.n)
		if st.act != spigot.Take {
			where = fmt.Sprintf("bucket %v, key %q, step %d (t0+%v, %v %d)", b, key, i+1, st.at, st.act, st.n)
		}
		if err != nil {
			t.Errorf("%s: Do: unexpected error: %v", where, err)
			return false
		}
		if d := diff(got, st.want); d != "" {
			t.Errorf("%s: %s", where, d)
			return false
		}
	}
	return true
}

// diff describes how got differs from want, field by field, or returns ""
// when they are equal. RefillAfter counts unless want leaves it 0, as the
// tables written by hand without it do: the models always set it (it is
// 0 only for a Degraded decision).
func diff(got, want spigot.Decision) string {
	var d []string
	if got.Allowed() != want.Allowed() {
		if got.Allowed() {
			d = append(d, "allowed, want denied")
		} else {
			d = append(d, "denied, want allowed")
		}
	}
	if got.N != want.N {
		d = append(d, fmt.Sprintf("N = %d, want %d", got.N, want.N))
	}
	if got.Degraded() != want.Degraded() {
		d = append(d, fmt.Sprintf("Degraded = %v, want %v", got.Degraded(), want.Degraded()))
	}
	if got.Remaining != want.Remaining {
		d = append(d, fmt.Sprintf("Remaining = %d, want %d", got.Remaining, want.Remaining))
	}
	if got.RetryAfter != want.RetryAfter {
		d = append(d, fmt.Sprintf("RetryAfter = %s, want %s", dur(got.RetryAfter), dur(want.RetryAfter)))
	}
	if got.ResetAfter != want.ResetAfter {
		d = append(d, fmt.Sprintf("ResetAfter = %s, want %s", dur(got.ResetAfter), dur(want.ResetAfter)))
	}
	if want.RefillAfter != 0 && got.RefillAfter != want.RefillAfter {
		d = append(d, fmt.Sprintf("RefillAfter = %s, want %s", dur(got.RefillAfter), dur(want.RefillAfter)))
	}
	if got.Delay != want.Delay {
		d = append(d, fmt.Sprintf("Delay = %s, want %s", got.Delay, want.Delay))
	}
	return strings.Join(d, "; ")
}

// dur formats a duration, with Never by name.
func dur(d time.Duration) string {
	if d == spigot.Never {
		return "Never"
	}
	return d.String()
}

// reset calls Reset on key of bucket b at t0+at and checks its result;
// why says what the model expects of the key.
func reset(t testing.TB, e env, b spigot.Limit, key string, at time.Duration, want bool, why string) {
	t.Helper()
	e.at(at)
	got, err := resetKey(t.Context(), e.s, b, key)
	if err != nil {
		t.Errorf("bucket %v, Reset(%q) at t0+%v: unexpected error: %v", b, key, at, err)
		return
	}
	if got != want {
		t.Errorf("bucket %v, Reset(%q) at t0+%v = %v, want %v: %s", b, key, at, got, want, why)
	}
}

// show formats an admission, with Never by name.
func show(a spigot.Decision) string {
	if a.Delay != 0 {
		return fmt.Sprintf("{Allowed:%v N:%d Remaining:%d RetryAfter:%s ResetAfter:%s RefillAfter:%s Delay:%s}", a.Allowed(), a.N, a.Remaining, dur(a.RetryAfter), dur(a.ResetAfter), dur(a.RefillAfter), a.Delay)
	}
	return fmt.Sprintf("{Allowed:%v N:%d Remaining:%d RetryAfter:%s ResetAfter:%s RefillAfter:%s}", a.Allowed(), a.N, a.Remaining, dur(a.RetryAfter), dur(a.ResetAfter), dur(a.RefillAfter))
}
