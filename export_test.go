package spigot

import "time"

// WithJitter makes WaitN draw the random extra of its later tries from f,
// which gets the most it may return.
func WithJitter(f func(max time.Duration) time.Duration) Option {
	return func(l *Limiter) { l.jitter = f }
}

// WaitingBehind reports how many callers of WaitN wait on key behind the
// one that asks the store.
func WaitingBehind(l *Limiter, key string) int { return l.waiters.Behind(key) }

// WaitingKeys reports how many keys have callers of WaitN waiting on them.
func WaitingKeys(l *Limiter) int { return l.waiters.Len() }
