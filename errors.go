package spigot

import "errors"

// The sentinel errors. Errors returned by spigot's packages wrap them with
// detail; match them with errors.Is. A denial is never an error: it is a
// Decision whose RetryAfter is above 0. What a store cannot do matches
// errors.ErrUnsupported.
var (
	// ErrInvalidLimit reports a limit that NewBucket rejected, or the zero
	// Limit handed to a store.
	ErrInvalidLimit = errors.New("spigot: invalid limit")

	// ErrInvalidKey reports a key longer than MaxKeyLen.
	ErrInvalidKey = errors.New("spigot: invalid key")

	// ErrInvalidCost reports a negative cost: an Op's N below 0.
	ErrInvalidCost = errors.New("spigot: invalid cost")

	// ErrNeverAdmitted reports that Limiter.WaitN was asked for more tokens
	// than the limit can ever hold.
	ErrNeverAdmitted = errors.New("spigot: cost exceeds the limit's capacity and can never be admitted")

	// ErrRequestFailed is matched by the error of a store that is up but
	// failed this one operation: in Redis, a key that holds another type
	// (WRONGTYPE) or a value the script cannot read, a script that failed
	// on it, or a reply that is not the script's. Other keys are
	// unaffected, so store/hybrid returns such an error to its caller
	// instead of counting it as the remote store being unavailable. A store's other errors (a lost connection, a timeout, a
	// server that is loading or has no primary) say that the store cannot
	// serve requests now.
	ErrRequestFailed = errors.New("spigot: the store failed the request")
)
