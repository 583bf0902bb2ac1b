package store

import (
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/core"
)

// Apply applies op, at now, to *s, the state of op's key, and returns the
// decision. It is a pure function of its arguments: it neither reads a
// clock nor keeps anything, so a store only has to make the read of the
// state, the call, and the write of *s atomic. Time counts in whole
// microseconds (now is truncated). The pointer lets a store apply an op in
// place.
//
// It leaves *s the zero State when the limit is whole and the clock is not
// behind its stamp: there is nothing to keep, and a store may delete the
// key. A Peek leaves *s as it was. A state with no Kind, or whose FullAt
// has come, is read as the zero State. A state of another kind than op's
// limit, or of a window of another length or offset, is read by its FullAt:
// the limit is not whole before then (the package doc says how each kind
// reads it). A Take then a Refund of the Take's N, at the same instant,
// leave the state as a Take of 0 there would: as if neither happened.
//
// On every kind, a decision's RefillAfter is, on the state Apply leaves (a
// Peek's, the state it was given), the RetryAfter of a Take of one after a
// Take of Remaining, both at now.
//
// For an invalid op, Apply returns the error of op.Check, as every store
// must, and leaves *s as it was.
func Apply(op spigot.Op, s *State, now time.Time) (spigot.Decision, error) {
	b, t := configOf(op.Limit), now.UnixMicro()
	// op.Check's test, written here: Check itself is not inlined, and this
	// is every store's hot path. The zero Limit's config has Kind 0.
	if b.Kind == 0 || op.N < 0 || op.Action > spigot.Peek || len(op.Key) > spigot.MaxKeyLen {
		return spigot.Decision{}, op.Check()
	}
	switch kind(b) {
	case spigot.FixedWindow, spigot.SlidingWindow:
		return applyWindow(b, s, op.Action, op.N, t), nil
	case spigot.SlidingLog:
		return applyLog(b, s, op.Action, op.N, t), nil
	}
	// A token bucket, or a leaky bucket: the rest of this function (the
	// package doc says what each action does). It is written here, not in a
	// function of its own, to keep every store's busiest path one call.
	action, n := op.Action, op.N
	tokens, stamp := b.Max, t
	switch {
	case absent(s, t): // full: as if never seen
	case s.Kind == kind(b):
		if s.Scale > 0 {
			tokens, stamp = carry(b, s), s.Stamp
		}
	default: // another kind: full again at its FullAt, not sooner
		tokens, stamp = fullAt(b, s.FullAt, t)
	}
	if t > stamp {
		// Refill for the elapsed time without overflow: past deficit/refill
		// microseconds the bucket is full whatever the time. (The elapsed
		// time is exact as a uint64, even from a stamp far in the past.)
		if e, deficit := uint64(t-stamp), b.Max-tokens; e > uint64(deficit/b.Refill) {
			tokens = b.Max
		} else {
			tokens += int64(e) * b.Refill
		}
		stamp = t
	}
	lag := stamp - t // > 0 only when the clock stepped back

	var d spigot.Decision
	switch action {
	case spigot.Take, spigot.Peek:
		switch need := n * b.Scale; {
		case n > b.Capacity:
			d.RetryAfter = spigot.Never
		case tokens >= need:
			if kind(b) == spigot.LeakyBucket {
				d.Delay = delay(b, lag, tokens)
			}
			if action == spigot.Take {
				tokens -= need
				d.N = n
			}
		default:
			d.RetryAfter = ceilMs(lag, ceilDiv(need-tokens, b.Refill))
		}
	case spigot.TakeUpTo:
		switch k := min(n, tokens/b.Scale); {
		case k > 0 || n == 0:
			if kind(b) == spigot.LeakyBucket {
				d.Delay = delay(b, lag, tokens)
			}
			tokens -= k * b.Scale
			d.N = k
		case b.Capacity == 0:
			d.RetryAfter = spigot.Never
		default:
			d.RetryAfter = ceilMs(lag, ceilDiv(b.Scale-tokens, b.Refill))
		}
	case spigot.Refund:
		add := b.Max - tokens
		if n < b.Capacity { // else n × scale ≥ max ≥ add
			add = min(n*b.Scale, add)
		}
		tokens += add
		d.N = ceilDiv(add, b.Scale)
	case spigot.Reset:
		*s = State{}
		return spigot.Decision{N: ceilDiv(b.Max-tokens, b.Scale), Remaining: b.Capacity, RefillAfter: fresh(b, t)}, nil
	}
	if tokens < b.Max {
		d.ResetAfter = ceilMs(lag, ceilDiv(b.Max-tokens, b.Refill))
	}
	d.Remaining = tokens / b.Scale
	// With the Remaining tokens taken, the fraction of a token left refills
	// to one.
	d.RefillAfter = spigot.Never
	if b.Capacity > 0 {
		d.RefillAfter = ceilMs(lag, ceilDiv(b.Scale-(tokens-d.Remaining*b.Scale), b.Refill))
	}
	if action == spigot.Peek {
		return d, nil
	}
	if full := max(t+d.ResetAfter.Microseconds(), stamp); full > t {
		if s.Kind != kind(b) || s.Start|s.Window|s.Count|s.Prev != 0 || s.Log != nil {
			*s = State{}
		}
		s.Kind, s.Stamp, s.FullAt, s.Tokens, s.Scale = kind(b), stamp, full, tokens, b.Scale
	} else { // full, and nothing to remember: as if never seen
		*s = State{}
	}
	return d, nil
}

// delay returns a leaky bucket's Delay for a request admitted when it
// holds tokens, lag µs behind its stamp: the time until it would be full,
// that is until the requests queued before this one have left.
func delay(b *core.Config, lag, tokens int64) time.Duration {
	return ceilUs(lag, ceilDiv(b.Max-tokens, b.Refill))
}

// carry returns s's tokens in b's units, clamped to [0, b.Max].
func carry(b *core.Config, s *State) int64 {
	tokens := s.Tokens
	if s.Scale != b.Scale {
		whole := s.Tokens / s.Scale
		if whole >= b.Capacity {
			return b.Max
		}
		tokens = max(whole, 0) * b.Scale // below b.Max: no overflow
	}
	return min(max(tokens, 0), b.Max)
}

// fullAt returns the tokens and the stamp, at t, of the bucket that is
// full again at the instant full > t and not sooner: it holds what
// refilling at b's rate to be full exactly then leaves it, stamped t; when
// that would take longer than refilling from empty, it holds nothing, and
// its stamp is the refill time before full, ahead of t.
func fullAt(b *core.Config, full, t int64) (tokens, stamp int64) {
	if us := full - t; us <= b.Max/b.Refill { // us × refill ≤ max
		return b.Max - us*b.Refill, t
	}
	return 0, full - ceilDiv(b.Max, b.Refill)
}
