package spigot

import (
	"testing"
	"time"
)

// TestJitterBounds: the random extra of WaitN's later tries is from 0 to a
// tenth of RetryAfter, and at most 10 ms; it is not always 0.
func TestJitterBounds(t *testing.T) {
	l := &Limiter{}
	for i, r := range []time.Duration{0, 9, time.Millisecond, 50 * time.Millisecond, time.Second, time.Hour} {
		most := min(r/10, 10*time.Millisecond)
		var got time.Duration
		for range 1000 {
			j := l.jitterFor(r)
			if j < 0 || j > most {
				t.Fatalf("step %d: jitter for %v: got %v, want from 0 to %v", i, r, j, most)
			}
			got = max(got, j)
		}
		if most >= time.Microsecond && got < most/2 {
			t.Errorf("step %d: jitter for %v: got at most %v in 1000 draws, want some above %v", i, r, got, most/2)
		}
	}
}
