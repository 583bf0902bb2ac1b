// Package spigot rate-limits anything by name: login attempts per IP
// address, API calls per tenant, exported rows per account.
//
// A Limit is applied to a key by operations: take n tokens, take up to n,
// refund, reset, peek. Its kind is the algorithm: a token bucket
// (bursts, then a steady rate), a fixed window (coarse quotas, "10 000 a
// day"), a sliding window counter (public APIs), a sliding log (exact:
// "at most 5 password resets in any 24 hours") or a leaky bucket (a
// shaper: admitted requests wait their turn, and leave at the rate). One
// exact model decides every operation, behind a small Store interface,
// with stores in process (store/memory), shared by every replica of a
// service (store/redis, store/valkey, store/rueidis), and a hybrid of the
// two (store/hybrid) that keeps limiting in process while Redis is down. A
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
//
// This package is what an application uses. What a store's author uses
// (the state a store keeps, the model that applies an Op to it, the checks
// a store makes) is package store, as database/sql/driver is to
// database/sql; the conformance package tests a store against it.
//
// # Stability
//
// spigot's modules (this one, each store on a Redis client, grpclimit,
// otelspigot and its integrations) are released together at one version,
// each requiring the others at exactly that version: upgrade them
// together. While the major version is 0, a minor version may change the
// API, and a patch version only fixes; CHANGELOG.md has every change.
// From v0.1.0 on, every release reads the states every earlier release
// stored, and releases mixed on one server, as in a rolling deploy, never
// refill a key. Within a minor version, the HTTP fields and the gRPC
// metadata that httplimit and grpclimit send keep their names, syntax and
// meaning.
package spigot

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/internal/wait"
)

// A Store keeps the state of every key of every limit and applies
// operations to it atomically. Implementations must be safe for concurrent
// use and keep spigot's model (store.Apply), every action of it (Refund
// too, which DoMulti needs to undo); package conformance checks that they
// do.
//
// A store that cannot do what it is asked (an Action or a Kind it does not
// know, or operations in one call of DoMulti) returns an error that matches
// errors.ErrUnsupported and changes nothing, so a store that wraps another
// (store/hybrid) has the same two methods, passes every operation through,
// and loses nothing. The smallest store is a Do that runs store.Apply on a
// store.State it keeps, and a DoMulti that returns errors.ErrUnsupported:
// the function DoMulti then applies several ops with Do.
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
	// is applied (see store.CheckMulti).
	//
	// With AllOrNothing, the ops are applied in order, each on the state
	// the ones before it left (two ops on one key are charged together),
	// and kept only if no Take or TakeUpTo among them was denied. Else
	// nothing changes and every decision's N is 0: each denied op carries
	// its decision on the state the ones before it left (its RetryAfter),
	// and every other op is a Peek on its key as the call found it (of N,
	// or of 1 for a TakeUpTo, 0 for a Refund or a Reset), so that it says
	// what its limit holds. With an error, nothing was applied, or the
	// error says what was.
	//
	// With Independent, each op is decided as by Do: a batch. An op that
	// fails alone (ErrRequestFailed) gets Undecided(), the others
	// keep theirs, and the error joins the failed ops' errors.
	//
	// A store that cannot apply these ops in one call returns an error
	// matching errors.ErrUnsupported and applies nothing: a *store.PartsError
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

	// waiters queues the callers of WaitN on each key.
	waiters wait.Queues[Decision]
	// jitter returns a random duration from 0 to max; nil: jitter.
	jitter func(max time.Duration) time.Duration
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

// Undecided returns the Decision that stands for one the store could not
// make: denied (RetryAfter Never) and Degraded (Remaining -1), so that a
// caller that ignores the error denies. The Limiter's and Group's methods
// return it with an error, and a store gives it to each op of a batch that
// failed alone.
func Undecided() Decision { return Decision{Remaining: -1, RetryAfter: Never} }

// do applies op in the limiter's store.
func (l *Limiter) do(ctx context.Context, op Op) (Decision, error) {
	d, err := l.store.Do(ctx, op)
	if err != nil {
		return Undecided(), err
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
// decision; an n of 0 is allowed at once. It is safe for concurrent use,
// and fair within the Limiter: the calls of WaitN on one key that must
// wait are admitted in the order they came, so a large n is not passed by
// smaller ones that came after it. Of those, only the one whose turn it is
// asks the store; the others wait without calling it. Calls on different
// keys do not wait for each other, and a key nobody waits on costs
// nothing.
//
// While the tokens are not there, the waiter whose turn it is sleeps
// RetryAfter on the limiter's clock, then asks again: callers of AllowN,
// or of WaitN in other processes that share the store, may take the
// tokens meanwhile. A WaitN that finds nobody waiting on its key asks
// again after exactly RetryAfter; every later try sleeps RetryAfter plus a
// random extra of at most a tenth of it and at most 10 ms (never past the
// context's deadline), so that waiters in several processes do not all
// ask at once. On a leaky bucket, once the tokens are taken it sleeps the
// decision's Delay, once, so that it returns at the request's turn; the
// next waiter does not wait for that.
//
// It returns at once, having taken nothing: ErrNeverAdmitted when n
// exceeds the limit's capacity; the context's error when ctx is done; and
// an error wrapping context.DeadlineExceeded when ctx's deadline falls
// before the tokens can be taken (as x/time/rate does), so a caller with
// a deadline does not sleep in vain. That is when the deadline falls
// before the retry its denial allows, or before the waiter ahead of it
// asks again, possibly after it joined the queue; the Decision returned
// with that error has in RetryAfter how long at least the call would have
// waited. When ctx is done while it waits, it leaves the queue at once,
// having taken nothing, and the next waiter goes on. When a leaky
// bucket's Delay would end past the deadline, it refunds the n tokens at
// once and returns such an error, with the Delay in the Decision's
// RetryAfter; when ctx is done during the Delay, it refunds them too.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) (Decision, error) {
	op := Op{Limit: l.limit, Key: key, Action: Take, N: n}
	if err := op.Check(); err != nil {
		return Undecided(), err
	}
	if capacity := l.limit.Capacity(); n > capacity {
		return Undecided(), fmt.Errorf("%w: %d tokens, capacity %d", ErrNeverAdmitted, n, capacity)
	}
	if err := ctx.Err(); err != nil {
		return Undecided(), err
	}
	if n == 0 || !l.waiters.Busy(key) {
		// Nobody waits on key (or n is 0, always allowed): try at once,
		// as AllowN does, and queue only if denied.
		d, err := l.try(ctx, op)
		if err != nil {
			return d, err
		}
		if d.Allowed() {
			return l.delay(ctx, op, d)
		}
		return l.queue(ctx, op, d, true)
	}
	return l.queue(ctx, op, Decision{}, false)
}

// queue waits in the queue of op's key for its turn, then asks the store
// until op is allowed. When first, d is the denial of a try made while
// nobody waited on the key, and it checks its retry against ctx's
// deadline before it joins.
func (l *Limiter) queue(ctx context.Context, op Op, d Decision, first bool) (Decision, error) {
	deadline, _ := ctx.Deadline()
	if first {
		if err := l.tooLate(op, d, deadline); err != nil {
			return d, err
		}
	}
	w, head, wake, note := l.waiters.Join(op.Key, deadline, l.clock.Now())
	if w == nil {
		return l.turnedAway(op, wake, note)
	}
	if !head {
		first = false
		if d, err := l.waitTurn(ctx, op, w); err != nil {
			return d, err
		}
	}
	// w is at the head of key's queue: it alone asks the store, until it
	// leaves.
	for {
		if !first {
			if err := ctx.Err(); err != nil {
				l.waiters.Leave(w)
				return Undecided(), err
			}
			var err error
			d, err = l.try(ctx, op)
			if err != nil || d.Allowed() {
				// The next waiter need not wait for a leaky bucket's Delay.
				l.waiters.Leave(w)
				if err != nil {
					return d, err
				}
				return l.delay(ctx, op, d)
			}
		}
		now := l.clock.Now()
		if err := l.tooLate(op, d, deadline); err != nil {
			l.waiters.Leave(w)
			return d, err
		}
		pause := d.RetryAfter
		if !first {
			pause += l.jitterFor(d.RetryAfter)
			if !deadline.IsZero() {
				pause = min(pause, max(deadline.Sub(now), d.RetryAfter))
			}
		}
		first = false
		l.waiters.Sleeping(w, now.Add(pause), now, d)
		if err := l.sleep(ctx, pause); err != nil {
			l.waiters.Leave(w)
			return Undecided(), err
		}
	}
}

// try applies op, a Take, and returns its decision, or an error for a
// denial that no wait can change.
func (l *Limiter) try(ctx context.Context, op Op) (Decision, error) {
	d, err := l.do(ctx, op)
	switch {
	case err != nil:
		return d, err
	case d.RetryAfter == Never: // the store holds a config we did not expect
		return d, fmt.Errorf("%w: %d tokens", ErrNeverAdmitted, op.N)
	}
	return d, nil
}

// tooLate returns an error wrapping context.DeadlineExceeded when the
// retry the denial d allows comes after deadline (zero: none).
func (l *Limiter) tooLate(op Op, d Decision, deadline time.Time) error {
	if !deadline.IsZero() && deadline.Sub(l.clock.Now()) < d.RetryAfter {
		return fmt.Errorf("spigot: WaitN(%q, %d) needs %v, past the context's deadline: %w",
			op.Key, op.N, d.RetryAfter, context.DeadlineExceeded)
	}
	return nil
}

// turnedAway returns the denial and error of a waiter whose deadline falls
// before wake, when the waiter ahead of it asks the store next, having
// learnt note.
func (l *Limiter) turnedAway(op Op, wake time.Time, note Decision) (Decision, error) {
	d := note
	d.N = 0
	d.RetryAfter = (wake.Sub(l.clock.Now()) + time.Millisecond - 1).Truncate(time.Millisecond)
	return d, fmt.Errorf("spigot: WaitN(%q, %d) waits behind others for at least %v, past the context's deadline: %w",
		op.Key, op.N, d.RetryAfter, context.DeadlineExceeded)
}

// waitTurn waits until w is at the head of its queue. It returns an error
// when ctx is done first, or when w is turned away, having left the queue.
func (l *Limiter) waitTurn(ctx context.Context, op Op, w *wait.Waiter[Decision]) (Decision, error) {
	for {
		select {
		case <-w.C:
			head, late, wake, note := l.waiters.Turn(w)
			if head {
				return Decision{}, nil
			}
			if late {
				return l.turnedAway(op, wake, note)
			}
		case <-ctx.Done():
			l.waiters.Leave(w)
			return Undecided(), ctx.Err()
		}
	}
}

// maxJitter bounds the random extra of WaitN's later tries.
const maxJitter = 10 * time.Millisecond

// jitterFor returns a random extra for a sleep of r: from 0 to a tenth of
// r, and at most maxJitter.
func (l *Limiter) jitterFor(r time.Duration) time.Duration {
	m := min(r/10, maxJitter)
	if m <= 0 {
		return 0
	}
	if l.jitter != nil {
		return min(max(l.jitter(m), 0), m)
	}
	return rand.N(m + 1)
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
	late := true // the turn comes past the deadline: the wait is not even begun
	if deadline, ok := ctx.Deadline(); !ok || !deadline.Before(l.clock.Now().Add(d.Delay)) {
		late = false
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
	if late {
		// As for a denial whose retry falls past the deadline: how long
		// at least the call would have waited.
		return Decision{Remaining: d.Remaining, RetryAfter: (d.Delay + time.Millisecond - 1).Truncate(time.Millisecond), ResetAfter: d.ResetAfter, RefillAfter: d.RefillAfter}, err
	}
	return Undecided(), err
}

func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	return wait.Sleep(ctx, l.clock, d)
}
