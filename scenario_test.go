package spigot_test

// Scenarios of login, export and API limits, on the memory store with a
// fake clock.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
)

// TestScenarioLogin: capacity 20 refilled 1 every 3 s. 20 rapid attempts
// are allowed with Remaining 19…0, the 21st is denied with RetryAfter
// exactly 3 s, and after 60 s idle the bucket is full and the store holds
// nothing for it.
func TestScenarioLogin(t *testing.T) {
	l, clk, store := newMemoryLimiter(t, "login", 20, spigot.Per(1, 3*s))
	ctx := context.Background()
	for i := int64(0); i < 20; i++ {
		a, err := l.Allow(ctx, "203.0.113.7")
		if want := refill(taken(allow(19-i, time.Duration(i+1)*3*s), 1), 3*s); err != nil || a != want {
			t.Fatalf("attempt %d: got %+v, %v; want %+v", i+1, a, err, want)
		}
	}
	if a, _ := l.Allow(ctx, "203.0.113.7"); a != refill(deny(0, 3*s, 60*s), 3*s) {
		t.Fatalf("attempt 21: got %+v, want %+v", a, refill(deny(0, 3*s, 60*s), 3*s))
	}
	clk.Advance(60*s - time.Microsecond)
	if n := store.Len(); n != 1 {
		t.Errorf("1µs before full, the store holds %d keys, want 1", n)
	}
	clk.Advance(time.Microsecond)
	if n := store.Len(); n != 0 {
		t.Errorf("after 60 s idle, the store holds %d keys, want 0", n)
	}
	if a, _ := l.AllowN(ctx, "203.0.113.7", 0); a != refill(allow(20, 0), 3*s) {
		t.Errorf("after 60 s idle: got %+v, want a full bucket", a)
	}
}

// TestScenarioExport: an export quota of 10 000 rows at 50 rows/s, charged
// by the number of rows each export takes.
func TestScenarioExport(t *testing.T) {
	l, clk, _ := newMemoryLimiter(t, "export", 10_000, spigot.PerSecond(50))
	ctx := context.Background()
	steps := []struct {
		at   time.Duration
		rows int64
		want spigot.Decision
	}{
		{0, 4000, allow(6000, 80*s)},
		{0, 4000, allow(2000, 160*s)},
		{0, 3000, deny(2000, 20*s, 160*s)}, // 1000 rows short at 50/s
		{10 * s, 3000, deny(2500, 10*s, 150*s)},
		{20 * s, 3000, allow(0, 200*s)},
		{20 * s, 10_001, deny(0, spigot.Never, 200*s)}, // never fits
		{220 * s, 10_000, allow(0, 200*s)},
	}
	start := clk.Now()
	for i, st := range steps {
		clk.Set(start.Add(st.at))
		a, err := l.AllowN(ctx, "acct-42", st.rows)
		if want := refill(taken(st.want, st.rows), 20*ms); err != nil || a != want { // whole rows: one more in 1/50 s
			t.Errorf("step %d (t0+%v, %d rows): got %+v, %v; want %+v", i, st.at, st.rows, a, err, want)
		}
	}
	if _, err := l.WaitN(ctx, "acct-42", 10_001); !errors.Is(err, spigot.ErrNeverAdmitted) {
		t.Errorf("Wait for 10 001 rows = %v, want ErrNeverAdmitted", err)
	}
}

// TestScenarioBurstThenSteady: b = 10, r = 1/s; 15 requests at once, then
// one per second: the first 10 are admitted, the next 5 denied, and every
// later one admitted.
func TestScenarioBurstThenSteady(t *testing.T) {
	l, clk, _ := newMemoryLimiter(t, "api", 10, spigot.PerSecond(1))
	ctx := context.Background()
	for i := 0; i < 15; i++ {
		a, _ := l.Allow(ctx, "tenant")
		if want := i < 10; a.Allowed() != want {
			t.Errorf("burst request %d: Allowed = %v, want %v (%+v)", i+1, a.Allowed(), want, a)
		}
		if i >= 10 && a.RetryAfter != 1*s {
			t.Errorf("burst request %d: RetryAfter = %v, want 1s", i+1, a.RetryAfter)
		}
	}
	for i := 1; i <= 60; i++ {
		clk.Advance(1 * s)
		if a, _ := l.Allow(ctx, "tenant"); a != refill(taken(allow(0, 10*s), 1), 1*s) {
			t.Fatalf("steady request at t0+%ds: got %+v, want %+v", i, a, refill(taken(allow(0, 10*s), 1), 1*s))
		}
	}
}
