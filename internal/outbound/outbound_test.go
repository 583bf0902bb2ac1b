package outbound

import (
	"strconv"
	"testing"
	"time"

	"github.com/spigot-go/spigot/clock/clocktest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestHoldsCap: Holds keeps at most HoldCap keys, forgetting the holds
// that have ended, then the ones that end first.
func TestHoldsCap(t *testing.T) {
	// Filled with holds that all outlast the new ones but the last.
	h := &Holds{}
	for i := range HoldCap + 100 {
		h.hold(strconv.Itoa(i), t0.Add(time.Hour+time.Duration(i)*time.Millisecond), t0)
		if n := h.Len(); n > HoldCap {
			t.Fatalf("after %d holds: %d kept, want at most %d", i+1, n, HoldCap)
		}
	}
	if d := h.remaining("0", t0); d != 0 {
		t.Errorf("the hold that ends first is still there, for %v", d)
	}
	if d := h.remaining(strconv.Itoa(HoldCap+99), t0); d == 0 {
		t.Error("the hold that ends last is gone")
	}
	h.hold("new", t0.Add(3*time.Hour), t0.Add(2*time.Hour)) // every other hold has ended
	if n := h.Len(); n != 1 {
		t.Errorf("after every hold ended: %d kept, want 1", n)
	}
}

// TestHoldBounds: a hold of 0 or less, or longer than HoldMax, is a
// server's mistake and holds nothing; the later of two holds wins.
func TestHoldBounds(t *testing.T) {
	clk := clocktest.New(t0)
	g := &Gate{Clock: clk}
	for _, d := range []time.Duration{-time.Second, 0, HoldMax + time.Nanosecond, 1<<63 - 1} {
		g.Hold("k", d)
		if n := g.Holds.Len(); n != 0 {
			t.Errorf("Hold(%v): %d keys held; want none", d, n)
		}
	}
	g.Hold("k", HoldMax)
	g.Hold("k", time.Minute)
	if got := g.Holds.remaining("k", clk.Now()); got != HoldMax {
		t.Errorf("after holds of %v and 1m: held %v; want the later, %v", HoldMax, got, HoldMax)
	}
	clk.Advance(HoldMax)
	if got := g.Holds.remaining("k", clk.Now()); got != 0 || g.Holds.Len() != 0 {
		t.Errorf("at the hold's end: held %v, %d keys; want 0, none", got, g.Holds.Len())
	}
}
