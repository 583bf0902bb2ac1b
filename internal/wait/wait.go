// Package wait sleeps on a clock.Clock, for the waits of spigot.Limiter
// and httplimit.Transport.
package wait

import (
	"context"
	"time"

	"github.com/spigot-go/spigot/clock"
)

// afterer is the optional capability of a clock that can wait, such as
// clocktest.Clock.
type afterer interface {
	After(d time.Duration) <-chan time.Time
}

// Sleep waits d on c, or until ctx is done, and returns ctx's error then.
// When c has a method After(time.Duration) <-chan time.Time, as
// clocktest.Clock does, it waits on it, so that a test moves the time;
// otherwise on a real timer.
func Sleep(ctx context.Context, c clock.Clock, d time.Duration) error {
	var ch <-chan time.Time
	if a, ok := c.(afterer); ok {
		ch = a.After(d)
	} else {
		t := time.NewTimer(d)
		defer t.Stop()
		ch = t.C
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
