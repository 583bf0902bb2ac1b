package conformance

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
)

// A step is one request of a table: cost tokens at t0+at, and the
// admission the model gives it.
type step struct {
	at   time.Duration
	cost int64
	want spigot.Decision
}

// allow is the admission of an allowed request.
func allow(remaining int64, resetAfter time.Duration) spigot.Decision {
	return spigot.Decision{Allowed: true, Remaining: remaining, ResetAfter: resetAfter}
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
	for i, st := range steps {
		e.at(st.at)
		got, err := e.s.Acquire(t.Context(), b, key, st.cost)
		where := fmt.Sprintf("bucket %v, key %q, step %d (t0+%v, cost %d)", b, key, i+1, st.at, st.cost)
		if err != nil {
			t.Errorf("%s: Acquire: unexpected error: %v", where, err)
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
// when they are equal.
func diff(got, want spigot.Decision) string {
	var d []string
	if got.Allowed != want.Allowed {
		if got.Allowed {
			d = append(d, "allowed, want denied")
		} else {
			d = append(d, "denied, want allowed")
		}
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
	got, err := e.s.Reset(t.Context(), b, key)
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
	return fmt.Sprintf("{Allowed:%v Remaining:%d RetryAfter:%s ResetAfter:%s}", a.Allowed, a.Remaining, dur(a.RetryAfter), dur(a.ResetAfter))
}
