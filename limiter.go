// Package spigot rate-limits anything by name: login attempts per IP
// address, API calls per tenant, exported rows per account.
//
// It has one exact token-bucket model (Limit.Take) behind a small Store
// interface, with stores in process (store/memory), shared by every
// replica of a service (store/redis, store/valkey, store/rueidis), and a
// hybrid of the two (store/hybrid) that keeps limiting in process while
// Redis is down. A Limiter ties a Store to a Limit:
//
//	var login = spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
//	limiter := spigot.New(memory.New(), login)
//	a, err := limiter.Allow(ctx, clientIP)
//	if err != nil { /* the store failed */ }
//	if !a.Allowed { /* deny; retry after a.RetryAfter */ }
//
// The arithmetic is exact: a bucket counts in scaled integers, so waiting
// exactly RetryAfter admits the retry, no interval admits more than the
// capacity plus what the rate refilled, and rates such as 3/s or 7/10s
// never drift. A denied request takes nothing.
package spigot

import (
	"context"
	"fmt"
	"time"

	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/nilcheck"
)

// A Store keeps the state of every key of every bucket and applies requests
// to it atomically. Implementations must be safe for concurrent use and keep
// the model of Limit.Take; package conformance checks that they do.
type Store interface {
	// Acquire takes cost tokens from the bucket b of key if it holds that
	// many, and reports the decision. A denial is an Decision with Allowed
	// false, not an error. It returns an error wrapping ErrInvalidLimit for
	// the zero Limit and ErrInvalidCost for a negative cost (see
	// Limit.Check), and the store's own errors (a lost connection, a
	// cancelled context) wrapped.
	Acquire(ctx context.Context, b Limit, key string, cost int64) (Decision, error)

	// Reset fills the bucket b of key again, by forgetting its state. It
	// reports whether the bucket was not full before. It returns an error
	// wrapping ErrInvalidLimit for the zero Limit.
	Reset(ctx context.Context, b Limit, key string) (bool, error)
}

// A Limiter applies one Limit to many keys in one Store. It is safe for
// concurrent use. Create one with New; the zero Limiter is not usable.
type Limiter struct {
	store  Store
	bucket Limit
	clock  clock.Clock
}

// An Option configures a Limiter.
type Option func(*Limiter)

// WithClock makes Wait read the time from c instead of the system clock,
// both to sleep and to compare the context's deadline with the time a
// retry needs. When c also has a method After(time.Duration) <-chan
// time.Time, as clocktest.Clock does, Wait waits on it, so tests of Wait
// need no real sleeps. It does not change the store's clock: give the
// store the same clock with its own option.
func WithClock(c clock.Clock) Option {
	return func(l *Limiter) { l.clock = c }
}

// New returns a Limiter that applies b in s. It panics if s is nil (a
// programmer error, found at once rather than at the first request); a
// zero b makes every call fail with ErrInvalidLimit.
func New(s Store, b Limit, opts ...Option) *Limiter {
	if nilcheck.Nil(s) {
		panic("spigot: New: nil Store")
	}
	l := &Limiter{store: s, bucket: b, clock: clock.System()}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Limit returns the bucket the limiter applies.
func (l *Limiter) Limit() Limit { return l.bucket }

// Allow is Acquire with a cost of 1.
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.store.Acquire(ctx, l.bucket, key, 1)
}

// Acquire takes cost tokens for key if the bucket holds them; see
// Store.Acquire. A cost of 0 peeks: it is always allowed and reports what
// remains.
func (l *Limiter) Acquire(ctx context.Context, key string, cost int64) (Decision, error) {
	return l.store.Acquire(ctx, l.bucket, key, cost)
}

// Reset fills key's bucket again, as after a successful login. It reports
// whether the bucket was not full.
func (l *Limiter) Reset(ctx context.Context, key string) (bool, error) {
	return l.store.Reset(ctx, l.bucket, key)
}

// Wait blocks until cost tokens for key are taken, and returns that
// admission. Between tries it sleeps RetryAfter on the limiter's clock;
// another caller may take the tokens meanwhile, so it may try more than
// once.
//
// It returns at once, having taken nothing: ErrNeverAdmitted when cost
// exceeds the bucket's capacity; the context's error when ctx is done; and
// an error wrapping context.DeadlineExceeded when ctx's deadline falls
// before the retry would be allowed (as x/time/rate does), so a caller with
// a deadline does not sleep in vain.
func (l *Limiter) Wait(ctx context.Context, key string, cost int64) (Decision, error) {
	if err := l.bucket.Check(cost); err != nil {
		return Decision{}, err
	}
	if cost > l.bucket.capacity {
		return Decision{RetryAfter: Never}, fmt.Errorf("%w: cost %d, capacity %d", ErrNeverAdmitted, cost, l.bucket.capacity)
	}
	for {
		if err := ctx.Err(); err != nil {
			return Decision{}, err
		}
		a, err := l.store.Acquire(ctx, l.bucket, key, cost)
		if err != nil || a.Allowed {
			return a, err
		}
		if a.RetryAfter == Never { // the store holds a config we did not expect
			return a, fmt.Errorf("%w: cost %d", ErrNeverAdmitted, cost)
		}
		if deadline, ok := ctx.Deadline(); ok && deadline.Sub(l.clock.Now()) < a.RetryAfter {
			return a, fmt.Errorf("spigot: Wait(%q, cost %d) needs %v, past the context's deadline: %w",
				key, cost, a.RetryAfter, context.DeadlineExceeded)
		}
		if err := l.sleep(ctx, a.RetryAfter); err != nil {
			return Decision{}, err
		}
	}
}

// afterer is the optional capability of a clock that can wait, such as
// clocktest.Clock.
type afterer interface {
	After(d time.Duration) <-chan time.Time
}

func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	var ch <-chan time.Time
	if c, ok := l.clock.(afterer); ok {
		ch = c.After(d)
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
