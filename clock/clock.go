// Package clock is the source of time for spigot's stores and limiters.
//
// A store needs only the current instant, so [Clock] has a single method.
// Production code uses [System]; tests use the fake clock in package
// clocktest, which never sleeps.
package clock

import "time"

// Clock tells the current time. Implementations must be safe for concurrent
// use.
//
// A Clock that also has a method
//
//	After(d time.Duration) <-chan time.Time
//
// (as clocktest.Clock does) is waited on by spigot.Limiter.Wait instead of a
// real timer, which makes waiting testable without real sleeps.
type Clock interface {
	Now() time.Time
}

// System returns the real clock. Its readings advance with the monotonic
// clock from the moment the process first asked for it, so elapsed time
// between two readings is immune to wall-clock jumps (NTP steps, manual
// changes); the absolute instants start at the wall time of that first
// reading. It is safe for concurrent use.
func System() Clock { return systemClock{} }

// base is taken once; it carries a monotonic reading, so base.Add(time.Since(base))
// moves forward with the monotonic clock only.
var base = time.Now()

type systemClock struct{}

func (systemClock) Now() time.Time { return base.Add(time.Since(base)) }
