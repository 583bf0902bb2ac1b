// Package spigot rate-limits anything by name: login attempts per IP
// address, API calls per tenant, exported rows per account.
//
// A Limit is applied to a key by operations: take n tokens, take up to n,
// refund, reset, peek. Its kind is the algorithm: a token bucket
// (bursts, then a steady rate), a fixed window (coarse quotas, "10 000 a
// day"), a sliding window counter (public APIs), a sliding log (exact:
// "at most 5 password resets in any 24 hours") or a leaky bucket (a
// shaper: admitted requests wait their turn, and leave at the rate). One exact model (Op.Apply)
// decides every operation, behind a small Store interface, with stores in
// process (store/memory), shared by every replica of a service
// (store/redis, store/valkey, store/rueidis), and a hybrid of the two
// (store/hybrid) that keeps limiting in process while Redis is down. A
// Limiter ties a Store to a Limit:
//
//	var login = spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
//	limiter := spigot.New(memory.New(), login)
//	d, err := limiter.Allow(ctx, clientIP)
//	if err != nil { /* the store failed */ }
//	if !d.Allowed() { /* deny; retry after d.RetryAfter */ }
//
// A Group applies several limits to one request (per address and per
// user, say) all or nothing, so that a request one limit denies is charged
// to none; DoMulti applies a batch of operations in one call.
//
// The arithmetic is exact: every kind counts in integers, so waiting
// exactly RetryAfter admits the retry, a bucket admits in no interval more
// than its capacity plus what the rate refilled, and rates such as 3/s or
// 7/10s never drift. A denied request takes nothing.
package spigot

import (
	"context"
	"fmt"
	"time"

	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/internal/wait"
)

// A Store keeps the state of every key of every limit and applies
// operations to it atomically. Implementations must be safe for concurrent
// use and keep the model of Op.Apply, every action of it (Refund too,
// which DoMulti needs to undo); package conformance checks that they do.
//
// A store that cannot do what it is asked (an Action or a Kind it does not
// know, or operations in one call of DoMulti) returns an error that matches
// errors.ErrUnsupported and changes nothing, so a store that wraps another
// (store/hybrid) has the same two methods, passes every operation through,
// and loses nothing. The smallest store is a Do that runs Op.Apply on a
// State it keeps, and a DoMulti that returns errors.ErrUnsupported: the
// function DoMulti then applies several ops with Do.
type Store interface {
	// Do applies op and returns its decision. A denial is a Decision
	// (RetryAfter above 0), not an error. It returns the error of
	// op.Check for an invalid op, and the store's own errors (a lost
	// connection, a cancelled context) wrapped; an error that concerns
	// this op alone, not the store, matches ErrRequestFailed. With an
	// error, the Decision means nothing.
	Do(ctx context.Context, op Op) (Decision, error)

	// DoMulti applies ops and sets out[i] to the decision on ops[i]; out
	// must be as long as ops. An invalid op fails the call, and nothing
	// is applied (see CheckMulti).
	//
	// With AllOrNothing, the ops are applied in order, each on the state
	// the ones before it left (two ops on one key are charged together),
	// and kept only if no Take or TakeUpTo among them was denied; else
	// nothing changes, every decision's N is 0, and each denied op carries
	// its RetryAfter. With an error, nothing was applied, or the error
	// says what was.
	//
	// With Independent, each op is decided as by Do: a batch. An op that
	// fails alone (ErrRequestFailed) gets the Failed decision, the others
	// keep theirs, and the error joins the failed ops' errors.
	//
	// A store that cannot apply these ops in one call returns an error
	// matching errors.ErrUnsupported and applies nothing: a *PartsError
	// when it applies ops all or nothing only within parts of them (a
	// Redis Cluster within one hash slot), or any other such error when
	// it applies one op per call, whatever their number. The function
	// DoMulti then applies them another way.
	DoMulti(ctx context.Context, mode Mode, ops []Op, out []Decision) error
}

// A Mode says how DoMulti applies several operations.
type Mode uint8

// The modes.
const (
	// Independent decides each operation as Do would: a batch.
	Independent Mode = iota
	// AllOrNothing applies the operations only if every one is allowed:
	// a request limited by several limits is charged to none of them
	// when one denies it.
	AllOrNothing
)

// A Limiter applies one Limit to many keys in one Store. It is safe for
// concurrent use. Create one with New; the zero Limiter is not usable.
//
// With an error, each of its methods returns a denied and Degraded
// Decision (RetryAfter Never, Remaining -1), so that a caller that ignores
// the error denies.
type Limiter struct {
	store Store
	limit Limit
	clock clock.Clock
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

// New returns a Limiter that applies limit in s. It panics if s is nil (a
// programmer error, found at once rather than at the first request); the
// zero Limit makes every call fail with ErrInvalidLimit.
func New(s Store, limit Limit, opts ...Option) *Limiter {
	if nilcheck.Nil(s) {
		panic("spigot: New: nil Store")
	}
	l := &Limiter{store: s, limit: limit, clock: clock.System()}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Limit returns the limit the limiter applies.
func (l *Limiter) Limit() Limit { return l.limit }

// Failed returns the Decision that stands for one the store could not
// make: denied (RetryAfter Never) and Degraded (Remaining -1), so that a
// caller that ignores the error denies. The Limiter's and Group's methods
// return it with an error, and a store gives it to each op of a batch that
// failed alone.
func Failed() Decision { return Decision{Remaining: -1, RetryAfter: Never} }

// do applies op in the limiter's store.
func (l *Limiter) do(ctx context.Context, op Op) (Decision, error) {
	d, err := l.store.Do(ctx, op)
	if err != nil {
		return Failed(), err
	}
	return d, nil
}

// Allow takes one token for key if the limit holds it: AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.do(ctx, Op{Limit: l.limit, Key: key, Action: Take, N: 1})
}

// AllowN takes n tokens for key if the limit holds them all, and nothing
// otherwise. A denial is a Decision, not an error; an n of 0 is always
// allowed. On a leaky bucket, an allowed request must wait its Decision's
// Delay before it goes ahead (WaitN does).
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	return l.do(ctx, Op{Limit: l.limit, Key: key, Action: Take, N: n})
}

// TakeUpTo takes as many of n tokens for key as the limit holds, and
// reports how many in the Decision's N: for work that can be done in
// part, such as exporting up to n rows. It is denied only when it takes
// none of n > 0.
func (l *Limiter) TakeUpTo(ctx context.Context, key string, n int64) (Decision, error) {
	return l.do(ctx, Op{Limit: l.limit, Key: key, Action: TakeUpTo, N: n})
}

// Refund gives n tokens back to key's limit, up to its capacity: for a
// request that was allowed but then not served. A Refund of what AllowN
// took, with nothing in between, leaves the limit as if neither happened.
func (l *Limiter) Refund(ctx context.Context, key string, n int64) (Decision, error) {
	return l.do(ctx, Op{Limit: l.limit, Key: key, Action: Refund, N: n})
}

// Reset fills key's limit again, as after a successful login. The
// Decision's N is the whole tokens it gave back, above 0 exactly when the
// limit was not full.
func (l *Limiter) Reset(ctx context.Context, key string) (Decision, error) {
	return l.do(ctx, Op{Limit: l.limit, Key: key, Action: Reset})
}

// Peek reports what AllowN(ctx, key, n) would decide now, and takes
// nothing.
func (l *Limiter) Peek(ctx context.Context, key string, n int64) (Decision, error) {
	return l.do(ctx, Op{Limit: l.limit, Key: key, Action: Peek, N: n})
}

// Wait blocks until one token for key is taken: WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until n tokens for key are taken, and returns that
// decision. Between tries it sleeps RetryAfter on the limiter's clock;
// another caller may take the tokens meanwhile, so it may try more than
// once. On a leaky bucket, once the tokens are taken it sleeps the
// decision's Delay, once, so that it returns at the request's turn.
//
// It returns at once, having taken nothing: ErrNeverAdmitted when n
// exceeds the limit's capacity; the context's error when ctx is done; and
// an error wrapping context.DeadlineExceeded when ctx's deadline falls
// before the retry would be allowed (as x/time/rate does), so a caller with
// a deadline does not sleep in vain. When a leaky bucket's Delay would end
// past the deadline, or ctx is done during it, it refunds the n tokens
// and returns such an error.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) (Decision, error) {
	op := Op{Limit: l.limit, Key: key, Action: Take, N: n}
	if err := op.Check(); err != nil {
		return Failed(), err
	}
	if capacity := l.limit.Capacity(); n > capacity {
		return Failed(), fmt.Errorf("%w: %d tokens, capacity %d", ErrNeverAdmitted, n, capacity)
	}
	for {
		if err := ctx.Err(); err != nil {
			return Failed(), err
		}
		d, err := l.do(ctx, op)
		if err != nil {
			return d, err
		}
		if d.Allowed() {
			return l.delay(ctx, op, d)
		}
		if d.RetryAfter == Never { // the store holds a config we did not expect
			return d, fmt.Errorf("%w: %d tokens", ErrNeverAdmitted, n)
		}
		if deadline, ok := ctx.Deadline(); ok && deadline.Sub(l.clock.Now()) < d.RetryAfter {
			return d, fmt.Errorf("spigot: WaitN(%q, %d) needs %v, past the context's deadline: %w",
				key, n, d.RetryAfter, context.DeadlineExceeded)
		}
		if err := l.sleep(ctx, d.RetryAfter); err != nil {
			return Failed(), err
		}
	}
}

// refundTimeout bounds the refund of an abandoned turn.
const refundTimeout = time.Second

// delay sleeps d.Delay, the turn of the request op that d admitted, and
// refunds op's tokens when that turn falls past ctx's deadline or ctx is
// done before it.
func (l *Limiter) delay(ctx context.Context, op Op, d Decision) (Decision, error) {
	if d.Delay <= 0 {
		return d, nil
	}
	err := fmt.Errorf("spigot: WaitN(%q, %d) must wait %v for its turn, past the context's deadline: %w",
		op.Key, op.N, d.Delay, context.DeadlineExceeded)
	if deadline, ok := ctx.Deadline(); !ok || !deadline.Before(l.clock.Now().Add(d.Delay)) {
		if err = l.sleep(ctx, d.Delay); err == nil {
			return d, nil
		}
	}
	// Give the turn back: the caller's context may be done, but the refund
	// should still reach the store, in the time a store call takes.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
	defer cancel()
	op.Action = Refund
	_, _ = l.do(rctx, op) // best effort: the request is abandoned either way
	return Failed(), err
}

func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	return wait.Sleep(ctx, l.clock, d)
}
