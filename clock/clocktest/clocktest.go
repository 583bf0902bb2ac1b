// Package clocktest provides a fake [clock.Clock] for tests, in the manner of
// httptest and fstest: time stands still until the test moves it.
package clocktest

import (
	"sync"
	"time"

	"github.com/spigot-go/spigot/clock"
)

var _ clock.Clock = (*Clock)(nil)

// Clock is a fake clock. It never sleeps: Now returns the instant the test
// last set, and channels from After fire only when Advance or Set moves the
// clock to or past their deadline. The zero value is not usable; call New.
// A Clock is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	changed *sync.Cond // broadcast whenever waiters changes
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// New returns a fake clock that reads start until it is moved. The
// monotonic reading of start, if any, is stripped, so instants compare by
// wall time only.
func New(start time.Time) *Clock {
	c := &Clock{now: start.Round(0)}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// Now returns the clock's current instant.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (backward when d < 0) and fires every
// After channel whose deadline has been reached.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(c.now.Add(d))
}

// Set moves the clock to t, forward or backward, and fires every After
// channel whose deadline has been reached.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(t.Round(0))
}

func (c *Clock) set(t time.Time) {
	c.now = t
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(t) {
			kept = append(kept, w)
			continue
		}
		w.ch <- t // buffered, never blocks
	}
	clear(c.waiters[len(kept):])
	c.waiters = kept
	c.changed.Broadcast()
}

// After returns a channel that receives the clock's time once the clock has
// been moved d past the current instant. When d <= 0 the channel is ready at
// once. Like time.After, the channel has a buffer of one and is never closed.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	c.changed.Broadcast()
	return ch
}

// Waiters reports how many After channels are waiting for the clock to move.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// BlockUntil blocks until at least n After channels are waiting for the clock
// to move. A test calls it before Advance to be sure that the goroutine it
// started (for example one in Limiter.Wait) is already waiting, without
// sleeping.
func (c *Clock) BlockUntil(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.waiters) < n {
		c.changed.Wait()
	}
}
