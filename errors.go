package spigot

import "errors"

// The sentinel errors. Errors returned by this module wrap them with detail;
// match them with errors.Is. A denial is never an error: it is an Admission
// with Allowed false.
var (
	// ErrInvalidBucket reports a bucket that NewBucket rejected, or the zero
	// Bucket handed to a store.
	ErrInvalidBucket = errors.New("spigot: invalid bucket")

	// ErrInvalidCost reports a negative cost.
	ErrInvalidCost = errors.New("spigot: invalid cost")

	// ErrNeverAdmitted reports that Limiter.Wait was asked for more tokens
	// than the bucket can ever hold.
	ErrNeverAdmitted = errors.New("spigot: cost exceeds the bucket's capacity and can never be admitted")
)
