package ratefield

import (
	"testing"
	"time"

	"github.com/spigot-go/spigot"
)

// TestSeconds: whole seconds rounded up, without overflow.
func TestSeconds(t *testing.T) {
	for i, c := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2}, {spigot.Never, 9223372037},
	} {
		if got := Seconds(c.d); got != c.want {
			t.Errorf("step %d: Seconds(%v) = %d; want %d", i+1, c.d, got, c.want)
		}
	}
}
