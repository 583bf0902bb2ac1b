package clocktest_test

import (
	"fmt"
	"time"

	"github.com/spigot-go/spigot/clock/clocktest"
)

func Example() {
	c := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	done := make(chan struct{})
	go func() {
		<-c.After(3 * time.Second) // fires only when the test moves the clock
		fmt.Println("woke at", c.Now().Format(time.TimeOnly))
		close(done)
	}()
	c.BlockUntil(1) // the goroutine is waiting
	c.Advance(3 * time.Second)
	<-done
	// Output: woke at 03:04:08
}
