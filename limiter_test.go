package spigot_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
)

// tFuture is an instant of a fake clock ahead of real time, so that a
// context deadline set from it is still in the future.
var tFuture = time.Date(2100, 1, 2, 3, 4, 5, 0, time.UTC)

func newLimiter(t *testing.T, capacity int64, r spigot.Rate) (*spigot.Limiter, *clocktest.Clock) {
	t.Helper()
	l, clk, _ := newMemoryLimiter(t, "test", capacity, r)
	return l, clk
}

// TestLimiterMethods: each of the Limiter's calls is one operation on the
// limit of its key, in one step table at fixed instants.
func TestLimiterMethods(t *testing.T) {
	l, clk := newLimiter(t, 3, spigot.PerSecond(1))
	ctx := context.Background()
	type call func() (spigot.Decision, error)
	steps := []struct {
		at   time.Duration
		what string
		do   call
		want spigot.Decision
	}{
		{0, "Allow", func() (spigot.Decision, error) { return l.Allow(ctx, "k") }, taken(allow(2, 1*s), 1)},
		{0, "AllowN 3", func() (spigot.Decision, error) { return l.AllowN(ctx, "k", 3) }, deny(2, 1*s, 1*s)},
		{0, "Peek 3", func() (spigot.Decision, error) { return l.Peek(ctx, "k", 3) }, deny(2, 1*s, 1*s)},
		{0, "Peek 2", func() (spigot.Decision, error) { return l.Peek(ctx, "k", 2) }, allow(2, 1*s)},
		{0, "TakeUpTo 5", func() (spigot.Decision, error) { return l.TakeUpTo(ctx, "k", 5) }, taken(allow(0, 3*s), 2)},
		{0, "TakeUpTo 1 of none", func() (spigot.Decision, error) { return l.TakeUpTo(ctx, "k", 1) }, deny(0, 1*s, 3*s)},
		{0, "Refund 1", func() (spigot.Decision, error) { return l.Refund(ctx, "k", 1) }, taken(allow(1, 2*s), 1)},
		{0, "Refund 5, capped", func() (spigot.Decision, error) { return l.Refund(ctx, "k", 5) }, taken(allow(3, 0), 2)},
		{0, "AllowN 2", func() (spigot.Decision, error) { return l.AllowN(ctx, "k", 2) }, taken(allow(1, 2*s), 2)},
		{500 * ms, "Reset", func() (spigot.Decision, error) { return l.Reset(ctx, "k") }, taken(allow(3, 0), 2)}, // 1.5 short: 2
		{500 * ms, "Reset of a full limit", func() (spigot.Decision, error) { return l.Reset(ctx, "k") }, allow(3, 0)},
		{500 * ms, "AllowN 3 after Reset", func() (spigot.Decision, error) { return l.AllowN(ctx, "k", 3) }, taken(allow(0, 3*s), 3)},
		{500 * ms, "Allow on another key", func() (spigot.Decision, error) { return l.Allow(ctx, "other") }, taken(allow(2, 1*s), 1)},
	}
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		got, err := st.do()
		want := refill(st.want, 1*s) // whole tokens, or a Reset: one more in a second
		if err != nil || got != want {
			t.Errorf("step %d (t0+%v, %s): got %+v, %v; want %+v", i, st.at, st.what, got, err, want)
		}
	}
	if l.Limit().Name() != "test" {
		t.Errorf("Limit().Name() = %q", l.Limit().Name())
	}
}

// TestWait waits on the fake clock: the goroutine in Wait blocks until the
// test advances the clock past RetryAfter.
func TestWait(t *testing.T) {
	l, clk := newLimiter(t, 3, spigot.Per(1, 3*s))
	ctx := context.Background()
	if _, err := l.AllowN(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	done := make(chan spigot.Decision)
	go func() {
		a, err := l.WaitN(ctx, "k", 2)
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		done <- a
	}()
	clk.BlockUntil(1)
	clk.Advance(5999 * ms) // 1.999… tokens: Wait must not return yet
	select {
	case a := <-done:
		t.Fatalf("Wait returned %+v before the clock reached RetryAfter", a)
	default:
	}
	clk.Advance(1 * ms)
	if a, want := <-done, refill(taken(allow(0, 9*s), 2), 3*s); a != want {
		t.Errorf("Wait = %+v, want %+v", a, want)
	}
}

// TestWaitRetriesWhenRaced: another caller takes the tokens the waiter was
// waiting for, so Wait sleeps again instead of returning a denial, this
// time with a random extra (here its most, 10 ms).
func TestWaitRetriesWhenRaced(t *testing.T) {
	clk := clocktest.New(t0)
	l := spigot.New(memory.New(memory.WithClock(clk)), spigot.MustBucket("test", 1, spigot.PerSecond(1)),
		spigot.WithClock(clk), spigot.WithJitter(func(max time.Duration) time.Duration { return max }))
	ctx := context.Background()
	l.Allow(ctx, "k")
	done := make(chan spigot.Decision)
	go func() {
		a, err := l.WaitN(ctx, "k", 1)
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		done <- a
	}()
	clk.BlockUntil(1)
	clk.Advance(1 * s)
	if a, _ := l.Allow(ctx, "k"); !a.Allowed() { // may race with the waiter's retry
		// The waiter won: it returns now.
		if a := <-done; !a.Allowed() {
			t.Errorf("Wait = %+v, want allowed", a)
		}
		return
	}
	clk.BlockUntil(1) // the waiter lost and sleeps again
	clk.Advance(1*s + 9*ms)
	select {
	case a := <-done:
		t.Fatalf("Wait returned %+v before its random extra", a)
	default:
	}
	clk.Advance(1 * ms)
	if a, want := <-done, refill(taken(allow(0, 1*s), 1), 1*s); a != want {
		t.Errorf("Wait = %+v, want %+v", a, want)
	}
}

func TestWaitReturnsAtOnce(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	// The limiter's clock is ahead of real time, where a context's
	// deadline can still be in the future: Wait reads the deadline on it.
	short, cancel2 := context.WithDeadline(context.Background(), tFuture.Add(time.Hour))
	defer cancel2()
	tests := []struct {
		name string
		ctx  context.Context
		cost int64
		want error
	}{
		{"cost above capacity", context.Background(), 4, spigot.ErrNeverAdmitted},
		{"negative cost", context.Background(), -1, spigot.ErrInvalidCost},
		{"cancelled context", cancelled, 1, context.Canceled},
		{"deadline before the retry", short, 3, context.DeadlineExceeded}, // retry in 2 h
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktest.New(tFuture)
			b := spigot.MustBucket("test", 3, spigot.PerHour(1))
			l := spigot.New(memory.New(memory.WithClock(clk)), b, spigot.WithClock(clk))
			l.AllowN(context.Background(), "k", 2)
			_, err := l.WaitN(tt.ctx, "k", tt.cost)
			if !errors.Is(err, tt.want) {
				t.Errorf("Wait = %v, want %v", err, tt.want)
			}
			if n := clk.Waiters(); n != 0 {
				t.Errorf("Wait left %d timers waiting on the clock", n)
			}
			// Nothing was taken: the 1 token left is still there.
			if a, _ := l.AllowN(context.Background(), "k", 0); a.Remaining != 1 {
				t.Errorf("after Wait, Remaining = %d, want 1", a.Remaining)
			}
		})
	}
}

func TestWaitCancelledWhileWaiting(t *testing.T) {
	l, clk := newLimiter(t, 1, spigot.PerSecond(1))
	l.Allow(context.Background(), "k")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := l.WaitN(ctx, "k", 1)
		errc <- err
	}()
	clk.BlockUntil(1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
}

// wallClock is a clock without After, so Wait falls back to a real timer.
type wallClock struct{ clock.Clock }

func TestWaitRealTimerCancelled(t *testing.T) {
	clk := clocktest.New(t0)
	b := spigot.MustBucket("test", 1, spigot.PerHour(1))
	l := spigot.New(memory.New(memory.WithClock(clk)), b, spigot.WithClock(wallClock{clk}))
	l.Allow(context.Background(), "k")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := l.WaitN(ctx, "k", 1)
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
}

// failing is a store whose every call fails.
type failing struct{}

var errDown = errors.New("store down")

func (failing) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	return spigot.Decision{}, errDown
}

func (failing) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return errDown
}

// TestErrorsDeny: with an error, every method of the Limiter returns a
// denied, Degraded Decision, so that a caller that ignores the error
// denies (the zero Decision is an allowed one).
func TestErrorsDeny(t *testing.T) {
	l := spigot.New(failing{}, spigot.MustBucket("b", 5, spigot.PerSecond(1)))
	ctx := context.Background()
	for _, c := range []struct {
		name string
		do   func() (spigot.Decision, error)
	}{
		{"Allow", func() (spigot.Decision, error) { return l.Allow(ctx, "k") }},
		{"AllowN", func() (spigot.Decision, error) { return l.AllowN(ctx, "k", 2) }},
		{"TakeUpTo", func() (spigot.Decision, error) { return l.TakeUpTo(ctx, "k", 2) }},
		{"Refund", func() (spigot.Decision, error) { return l.Refund(ctx, "k", 2) }},
		{"Reset", func() (spigot.Decision, error) { return l.Reset(ctx, "k") }},
		{"Peek", func() (spigot.Decision, error) { return l.Peek(ctx, "k", 2) }},
		{"Wait", func() (spigot.Decision, error) { return l.Wait(ctx, "k") }},
		{"WaitN of more than the capacity", func() (spigot.Decision, error) { return l.WaitN(ctx, "k", 6) }},
		{"WaitN of -1", func() (spigot.Decision, error) { return l.WaitN(ctx, "k", -1) }},
	} {
		d, err := c.do()
		if err == nil || d.Allowed() || !d.Degraded() {
			t.Errorf("%s on a failing store = %+v, %v; want an error and a denied, Degraded Decision", c.name, d, err)
		}
	}
	if d := (spigot.Decision{}); !d.Allowed() || d.Degraded() {
		t.Errorf("the zero Decision: Allowed %v, Degraded %v; want allowed, not degraded", d.Allowed(), d.Degraded())
	}
}

func TestWaitReturnsStoreError(t *testing.T) {
	l := spigot.New(failing{}, spigot.MustBucket("b", 1, spigot.PerSecond(1)))
	if _, err := l.Wait(context.Background(), "k"); !errors.Is(err, errDown) {
		t.Errorf("Wait = %v, want the store's error", err)
	}
}

func newMemoryLimiter(t *testing.T, name string, capacity int64, r spigot.Rate) (*spigot.Limiter, *clocktest.Clock, *memory.Store) {
	t.Helper()
	clk := clocktest.New(t0)
	store := memory.New(memory.WithClock(clk))
	return spigot.New(store, spigot.MustBucket(name, capacity, r), spigot.WithClock(clk)), clk, store
}

// TestWaitDeadlineOnLimiterClock: Wait compares the context's deadline
// with the limiter's clock, not the system's, so a fake clock far from
// real time still sees a deadline too close for the retry.
func TestWaitDeadlineOnLimiterClock(t *testing.T) {
	future := tFuture
	clk := clocktest.New(future)
	b := spigot.MustBucket("test", 1, spigot.PerHour(1))
	l := spigot.New(memory.New(memory.WithClock(clk)), b, spigot.WithClock(clk))
	l.Allow(context.Background(), "k")
	// The retry is 1 h away on the limiter's clock, the deadline 1 min.
	ctx, cancel := context.WithDeadline(context.Background(), future.Add(time.Minute))
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := l.WaitN(ctx, "k", 1)
		errc <- err
	}()
	slept := make(chan struct{})
	go func() {
		clk.BlockUntil(1)
		close(slept)
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait = %v, want context.DeadlineExceeded", err)
		}
	case <-slept:
		cancel()
		<-errc
		t.Fatal("Wait slept for a retry past the context's deadline on the limiter's clock")
	}
	if n := clk.Waiters(); n != 0 {
		t.Errorf("Wait left %d timers waiting on the clock", n)
	}
}

// nilMemory is a typed nil pointer in a Store.
var nilMemory *memory.Store

func TestNewNilStorePanics(t *testing.T) {
	b := spigot.MustBucket("b", 1, spigot.PerSecond(1))
	for _, tt := range []struct {
		name  string
		store spigot.Store
	}{
		{"nil", nil},
		{"typed nil pointer", nilMemory},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if got, want := recover(), "spigot: New: nil Store"; got != want {
					t.Errorf("New(%s, b) panicked with %v, want %q", tt.name, got, want)
				}
			}()
			spigot.New(tt.store, b)
		})
	}
}

// TestWaitTurnPastDeadline: on a leaky bucket, a WaitN whose turn comes
// past its context's deadline gives the turn back at once and returns, with
// its error, a Decision whose RetryAfter is the wait it did not begin.
func TestWaitTurnPastDeadline(t *testing.T) {
	clk := clocktest.New(tFuture)
	shaper := spigot.Must(spigot.NewLeakyBucket("turns", 2, spigot.PerSecond(1)))
	l := spigot.New(memory.New(memory.WithClock(clk)), shaper, spigot.WithClock(clk))
	if d, err := l.Allow(context.Background(), "k"); err != nil || !d.Allowed() || d.Delay != 0 {
		t.Fatalf("first Allow = %+v, %v; want admitted at once", d, err)
	}
	// The next turn is 1 s away; the deadline 500 ms away on the clock.
	ctx, cancel := context.WithDeadline(context.Background(), tFuture.Add(500*time.Millisecond))
	defer cancel()
	d, err := l.WaitN(ctx, "k", 1)
	if !errors.Is(err, context.DeadlineExceeded) || d.RetryAfter != time.Second || d.N != 0 {
		t.Errorf("WaitN = %+v, %v; want RetryAfter 1s, N 0, and an error wrapping DeadlineExceeded", d, err)
	}
	if n := clk.Waiters(); n != 0 {
		t.Errorf("WaitN left %d timers waiting on the clock", n)
	}
	if p, _ := l.Peek(context.Background(), "k", 1); p.Remaining != 1 {
		t.Errorf("after WaitN, Peek = %+v; want the turn given back (Remaining 1)", p)
	}
}
