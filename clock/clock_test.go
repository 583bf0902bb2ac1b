package clock_test

import (
	"testing"
	"time"

	"github.com/spigot-go/spigot/clock"
)

func TestSystemIsWallTimeAndMonotonic(t *testing.T) {
	c := clock.System()
	before := time.Now()
	prev := c.Now()
	if d := prev.Sub(before); d < -time.Second || d > time.Second {
		t.Errorf("System().Now() = %v, %v away from time.Now()", prev, d)
	}
	for i := 0; i < 10_000; i++ {
		now := c.Now()
		if now.Before(prev) {
			t.Fatalf("reading %d went back: %v after %v", i, now, prev)
		}
		prev = now
	}
}
