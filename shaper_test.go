package spigot_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
)

// newShaper returns a Limiter of a leaky bucket of capacity 3 at 100/s in a
// memory store, on a fake clock.
func newShaper(t *testing.T) (*spigot.Limiter, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(tFuture)
	shaper := spigot.Must(spigot.NewLeakyBucket("shape", 3, spigot.PerSecond(100)))
	return spigot.New(memory.New(memory.WithClock(clk)), shaper, spigot.WithClock(clk)), clk
}

// TestWaitShaper: Wait on a leaky bucket sleeps the Delay of its turn,
// once, and returns when the requests before it have left.
func TestWaitShaper(t *testing.T) {
	l, clk := newShaper(t)
	ctx := context.Background()
	if d, err := l.Wait(ctx, "k"); err != nil || d.Delay != 0 || !d.Allowed() {
		t.Fatalf("Wait on an empty queue = %+v, %v; want allowed at once", d, err)
	}
	done := make(chan spigot.Decision)
	go func() {
		d, err := l.Wait(ctx, "k")
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		done <- d
	}()
	clk.BlockUntil(1)
	clk.Advance(9 * time.Millisecond)
	select {
	case d := <-done:
		t.Fatalf("Wait returned %+v before its turn", d)
	default:
	}
	clk.Advance(time.Millisecond)
	if d := <-done; d.Delay != 10*time.Millisecond || d.N != 1 || d.Remaining != 1 {
		t.Errorf("Wait = %+v; want N 1, Remaining 1, Delay 10ms", d)
	}
	if n := clk.Waiters(); n != 0 {
		t.Errorf("Wait left %d timers on the clock", n)
	}
}

// TestWaitShaperPastDeadline: a turn that falls past the context's
// deadline is given back at once, and a turn abandoned by a cancelled
// context is given back too.
func TestWaitShaperPastDeadline(t *testing.T) {
	l, clk := newShaper(t)
	ctx := context.Background()
	l.AllowN(ctx, "k", 2) // the next turn is 20ms away
	dctx, cancel := context.WithDeadline(ctx, clk.Now().Add(15*time.Millisecond))
	defer cancel()
	if _, err := l.Wait(dctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with a deadline before its turn = %v; want context.DeadlineExceeded", err)
	}
	if d, _ := l.Peek(ctx, "k", 1); d.Remaining != 1 || d.Delay != 20*time.Millisecond {
		t.Errorf("after the deadline: Peek = %+v; want the turn given back (Remaining 1, Delay 20ms)", d)
	}

	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error)
	go func() {
		_, err := l.Wait(cctx, "k")
		errc <- err
	}()
	clk.BlockUntil(1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Wait cancelled during its delay = %v; want context.Canceled", err)
	}
	if d, _ := l.Peek(ctx, "k", 1); d.Remaining != 1 {
		t.Errorf("after the cancel: Peek = %+v; want the turn given back (Remaining 1)", d)
	}
}
