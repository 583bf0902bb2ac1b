package outbound

import (
	"strconv"
	"testing"
	"time"
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
