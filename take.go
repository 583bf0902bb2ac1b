package spigot

import (
	"math"
	"time"
)

// State is what a store keeps for one key of one bucket, between requests:
// everything Take needs, as integers a store can persist anywhere (a Redis
// hash, a SQL row, an etcd value). A store that runs Take inside an atomic
// read-modify-write of a State keeps spigot's whole model.
//
// The zero State is a full bucket, so a key with no stored state (never
// seen, expired or evicted) needs no special case.
type State struct {
	// Tokens is what the bucket held at Stamp, in scaled units of Scale
	// per token.
	Tokens int64
	// Stamp is the instant of the last update, in microseconds since the
	// Unix epoch.
	Stamp int64
	// Scale is the bucket's Scale when the state was stored. It lets Take
	// carry tokens over exactly when a bucket's rate changes. A Scale of 0
	// marks the zero State.
	Scale int64
	// FullAt is the instant, in microseconds since the Unix epoch, from
	// which the state no longer matters: the bucket is full again under the
	// config the state was stored with (the request's instant plus its
	// ResetAfter), and the clock has caught up with Stamp. From then on Take
	// reads the state as a full bucket, whatever the bucket's config has
	// become, so a store may forget it then; until then it must keep it,
	// even when ResetAfter is 0 (a full bucket on a clock that stepped
	// back still holds its stamp). A FullAt of 0, in a state stored before
	// FullAt existed, is unknown: the state counts until it refills.
	FullAt int64
}

// Decision is a store's decision on one request.
type Decision struct {
	// Allowed reports whether the request took its tokens.
	Allowed bool
	// Remaining is the whole number of tokens left in the bucket after the
	// request, allowed or denied.
	Remaining int64
	// RetryAfter is 0 when the request was allowed. Otherwise it is how long
	// to wait, rounded up to the millisecond, before the same request would
	// be allowed if nothing else takes tokens meanwhile; a retry after
	// exactly RetryAfter is allowed. It is Never when the cost exceeds the
	// bucket's capacity.
	RetryAfter time.Duration
	// ResetAfter is how long, rounded up to the millisecond, until the
	// bucket is full again; 0 when it is full. Stores that expire state
	// use it as the key's time to live.
	ResetAfter time.Duration
}

// Take applies one request of cost tokens, made at now, to the state s of
// a key of bucket b, and returns the new state to store and the decision.
// It is a pure function: it neither reads a clock nor keeps anything, so a
// store only has to make the read of s, the call, and the write of the
// result atomic. The new state is the zero State when the bucket is full
// and the clock is not behind its stamp: there is nothing to keep, and a
// store may delete the key.
//
// Time counts in whole microseconds (now is truncated). The bucket first
// refills for the time since s.Stamp (none if now is earlier: a clock that
// steps back never adds tokens, and the stamp never moves back). Only a
// kept state remembers its stamp: once a full bucket's state is the zero
// State, a clock that steps back starts the bucket again, full, at the
// earlier instant. Then a cost above b.Capacity() is denied with
// RetryAfter Never; a cost the bucket holds is taken and allowed; anything
// else is denied and takes nothing. A cost of 0 is always allowed and
// still refills the state.
//
// A state whose FullAt has come is a full bucket, as if it had never been
// stored: the bucket was full again under the config it was stored with.
// Otherwise, when s was stored under another rate (s.Scale differs from
// b.Scale()), its whole tokens carry over, clamped to the capacity; the
// fraction of a token is dropped. A state the bucket cannot hold (more
// tokens than its capacity, negative tokens) is clamped.
//
// Take does not validate its input: with the zero Limit or a negative cost
// (see Check) it returns s unchanged and a denial with RetryAfter Never.
func (b Limit) Take(s State, now time.Time, cost int64) (State, Decision) {
	if b.Check(cost) != nil {
		return s, Decision{RetryAfter: Never}
	}
	t := now.UnixMicro()
	tokens, stamp := b.max, t
	if s.Scale > 0 && (s.FullAt == 0 || t < s.FullAt) {
		tokens, stamp = b.carry(s), s.Stamp
	}
	if t > stamp {
		// Refill for the elapsed time without overflow: past deficit/refill
		// microseconds the bucket is full whatever the time.
		if e, deficit := t-stamp, b.max-tokens; e > deficit/b.refill {
			tokens = b.max
		} else {
			tokens += e * b.refill
		}
		stamp = t
	}
	lag := stamp - t // > 0 only when the clock stepped back

	a := Decision{}
	switch need := cost * b.scale; {
	case cost > b.capacity:
		a.RetryAfter = Never
	case tokens >= need:
		tokens -= need
		a.Allowed = true
	default:
		a.RetryAfter = ceilMs(lag, ceilDiv(need-tokens, b.refill))
	}
	if tokens < b.max {
		a.ResetAfter = ceilMs(lag, ceilDiv(b.max-tokens, b.refill))
	}
	a.Remaining = tokens / b.scale
	full := max(t+a.ResetAfter.Microseconds(), stamp)
	if full <= t { // full, and nothing to remember: as if never seen
		return State{}, a
	}
	return State{Tokens: tokens, Stamp: stamp, Scale: b.scale, FullAt: full}, a
}

// carry returns s's tokens in b's units, clamped to [0, b.max].
func (b Limit) carry(s State) int64 {
	tokens := s.Tokens
	if s.Scale != b.scale {
		whole := s.Tokens / s.Scale
		if whole >= b.capacity {
			return b.max
		}
		tokens = whole * b.scale
	}
	return min(max(tokens, 0), b.max)
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ceilMs returns lag+us microseconds rounded up to the millisecond, as a
// Duration, saturating at Never.
func ceilMs(lag, us int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Millisecond) // whole ms a Duration holds
	if lag > limit*1000-us {
		return Never
	}
	return time.Duration(ceilDiv(lag+us, 1000)) * time.Millisecond
}
