package clock_test

import (
	"fmt"
	"time"

	"github.com/spigot-go/spigot/clock"
)

func ExampleSystem() {
	c := clock.System()
	start := c.Now()
	elapsed := c.Now().Sub(start) // measured on the monotonic clock
	fmt.Println(elapsed >= 0, elapsed < time.Minute)
	// Output: true true
}
