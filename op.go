package spigot

import (
	"errors"
	"fmt"
	"time"
)

// An Action is what an operation does to a key's limit.
type Action uint8

// The actions. Take, the zero Action, is the ordinary request.
const (
	// Take takes N tokens if the limit holds them all, and nothing
	// otherwise.
	Take Action = iota
	// TakeUpTo takes as many of N tokens as the limit holds, down to none.
	TakeUpTo
	// Refund gives N tokens back, up to the capacity, as for a request
	// that was taken but then not served.
	Refund
	// Reset fills the limit again by forgetting the key's state, as after
	// a successful login.
	Reset
	// Peek reports what Take of N would decide now, and changes nothing.
	Peek
)

var actionNames = [...]string{"Take", "TakeUpTo", "Refund", "Reset", "Peek"}

// String returns the action's name, as in "TakeUpTo".
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// MaxKeyLen is the longest key, in bytes, that an Op may name. Keys
// often come from clients (a user name, a header); the bound keeps what
// one request costs a store small, whatever the client sends. Longer keys
// are rejected with ErrInvalidKey by every store; to limit by a longer
// value, key by a hash of it.
const MaxKeyLen = 1024

// An Op is one operation on the limit of one key: the unit a Store
// applies. The zero Op is invalid (its Limit is the zero Limit).
type Op struct {
	Limit Limit
	// Key names whose limit the op applies to: an address, a user, a
	// tenant. Any bytes, at most MaxKeyLen of them.
	Key    string
	Action Action
	// N is the number of tokens: to take (Take, TakeUpTo), to give back
	// (Refund), or to ask about (Peek). Reset ignores it. It must not be
	// negative. A Take of 0 is always allowed, and stores the refill.
	N int64
}

// Check returns the error of an invalid op: one that wraps
// ErrInvalidLimit for the zero Limit, ErrInvalidKey for a key longer than
// MaxKeyLen, ErrInvalidCost for a negative N, and errors.ErrUnsupported
// for an Action this version of spigot does not define. It returns nil
// otherwise. Every store returns the same error for an invalid op, and
// applies nothing.
func (op Op) Check() error {
	if op.Limit.c != nil && op.N >= 0 && op.Action <= Peek && len(op.Key) <= MaxKeyLen {
		return nil
	}
	return op.invalid()
}

// invalid returns the error of Check for an invalid op.
func (op Op) invalid() error {
	switch {
	case op.Limit.c == nil:
		return fmt.Errorf("%w: the zero Limit; create one with NewBucket", ErrInvalidLimit)
	case len(op.Key) > MaxKeyLen:
		return fmt.Errorf("%w: the key is %d bytes long, more than MaxKeyLen (%d)", ErrInvalidKey, len(op.Key), MaxKeyLen)
	case op.N < 0:
		return fmt.Errorf("%w %d: a token count must be 0 or more", ErrInvalidCost, op.N)
	}
	return fmt.Errorf("spigot: %v is not an action this version of spigot knows: %w", op.Action, errors.ErrUnsupported)
}

// String describes op, as in login(cap 20, 1/3s) "10.0.0.1" Take 1.
func (op Op) String() string {
	return fmt.Sprintf("%v %q %v %d", op.Limit, op.Key, op.Action, op.N)
}

// Decision is what a store answers to one operation. A denial is a
// Decision whose RetryAfter is above 0, never an error. The zero Decision
// is an allowed operation that moved nothing.
type Decision struct {
	// N is the number of tokens the operation moved: taken by Take (N, or
	// 0 when denied) and TakeUpTo (from 0 to N), and given back by Refund
	// and Reset, rounded up to a whole token (capacity may cap a Refund,
	// and a Reset gives back what the limit lacked, so a Reset's N is
	// above 0 exactly when the limit was not full). Peek moves nothing.
	N int64
	// Remaining is the whole number of tokens left after the operation,
	// or -1 when the decision does not come from the key's state (see
	// Degraded).
	Remaining int64
	// RetryAfter is 0 when the operation was allowed. Otherwise it is how
	// long to wait, rounded up to the millisecond, before the same
	// operation would be allowed if nothing else takes tokens meanwhile; a
	// retry after exactly RetryAfter is allowed. It is Never when the
	// operation asks for more than the capacity.
	RetryAfter time.Duration
	// ResetAfter is how long, rounded up to the millisecond, until the
	// limit is full again; 0 when it is full, or unknown (Degraded).
	// Stores that expire state use it as the key's time to live.
	ResetAfter time.Duration
	// RefillAfter is how long, rounded up to the millisecond, the
	// Remaining tokens are all the key may take: the limit's effective
	// window, the t of the IETF RateLimit header field. If the Remaining
	// tokens were taken now, one more would be admitted after RefillAfter,
	// if nothing else takes tokens meanwhile: a token bucket's next token,
	// a leaky bucket's next place, a fixed window's next window, a sliding
	// window's count falling enough for one more, a sliding log's oldest
	// entry leaving it. When Remaining is 0, it is the RetryAfter of a
	// Take of one. It is Never for a capacity of 0, above 0 for every
	// other decision that comes from the key's state, and 0 when the
	// decision is Degraded.
	RefillAfter time.Duration
	// Delay is how long an admitted request must wait before it goes
	// ahead, to the microsecond: its turn in a leaky bucket's queue (see
	// NewLeakyBucket), after the requests admitted before it. It is 0 for
	// every other kind of limit, and for a denial.
	Delay time.Duration
}

// Allowed reports whether the operation was allowed: whether a Take or
// TakeUpTo took its tokens (or was for none), and whether a Peek's Take
// would. Refund and Reset are always allowed. It is RetryAfter == 0.
func (d Decision) Allowed() bool { return d.RetryAfter == 0 }

// Degraded reports that the decision does not come from the key's state:
// a store that could not reach it decided by a policy (such as
// store/hybrid's FailOpen and FailClosed), and Remaining is -1. Headers and
// metrics should not report its Remaining, ResetAfter and RefillAfter as
// the limit's.
func (d Decision) Degraded() bool { return d.Remaining < 0 }
