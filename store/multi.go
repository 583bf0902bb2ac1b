package store

import (
	"errors"
	"fmt"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/core"
)

// CheckMulti returns the error of a call of Store.DoMulti that must apply
// nothing: an unknown mode (matching errors.ErrUnsupported), out not as
// long as ops, or an invalid op (the error of its Check). A store's
// DoMulti calls it before anything else.
func CheckMulti(mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	return core.CheckMulti(mode, spigot.AllOrNothing, ops, len(out))
}

// A PartsError is what Store.DoMulti returns, having applied nothing, for
// ops that it applies all or nothing only within parts of them, such as a
// Redis Cluster within one hash slot, when they fall in several parts.
// spigot.DoMulti then applies the parts one by one. It matches
// errors.ErrUnsupported.
type PartsError struct {
	// Parts[i] names the part of the call's ops[i]: the store applies ops
	// of one part all or nothing in one call.
	Parts []uint64
}

func (e *PartsError) Error() string {
	return fmt.Sprintf("spigot: DoMulti: %d ops in several parts (hash slots) cannot be applied all or nothing in one call", len(e.Parts))
}

// Unwrap returns errors.ErrUnsupported.
func (e *PartsError) Unwrap() error { return errors.ErrUnsupported }

// OpParts returns e.Parts: how spigot.DoMulti, which cannot import this
// package, finds them.
func (e *PartsError) OpParts() []uint64 { return e.Parts }

// Denies reports whether d, an op's decision on the state the ops before
// it in an all-or-nothing batch left, denies the batch: a Take or a
// TakeUpTo that was denied.
func Denies(op spigot.Op, d spigot.Decision) bool {
	return !d.Allowed() && (op.Action == spigot.Take || op.Action == spigot.TakeUpTo)
}

// PeekOf returns the Peek that decides op in an all-or-nothing batch that
// another op denied (see spigot.Store's DoMulti): on its key as the batch
// found it, of op's N for a Take or a Peek, of 1 for a TakeUpTo of 1 or
// more, of 0 for a Refund or a Reset.
func PeekOf(op spigot.Op) spigot.Op {
	switch op.Action {
	case spigot.TakeUpTo:
		op.N = min(op.N, 1)
	case spigot.Refund, spigot.Reset:
		op.N = 0
	}
	op.Action = spigot.Peek
	return op
}
