package store

import (
	"math"
	"math/bits"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/core"
)

// An Answer is a store's decision on one key of a token bucket, and the
// instant it was asked for: what a store that decides from tokens taken
// from another store and held apart (store/lease) knows of the bucket
// there. Its methods read it as the model would: the bucket refilling at
// its rate since At, nothing else taking tokens meanwhile, and held tokens
// counted in it as if they were back. The zero Answer tells nothing.
//
// A Decision's durations are rounded up to the millisecond, so an Answer
// may see the bucket lack up to a millisecond of refill more than it does.
type Answer struct {
	Limit    spigot.Limit
	At       time.Time // when the decision was asked for
	Decision spigot.Decision
}

// lack returns the scaled units the bucket, of config c, lacks of full at
// now, rounded up; false when the answer does not tell (none, or a
// ResetAfter of Never) or it lacks more than an int64 counts.
func (a *Answer) lack(c *core.Config, now time.Time) (int64, bool) {
	if a.At.IsZero() || a.Decision.ResetAfter == spigot.Never {
		return 0, false
	}
	refill := c.Refill
	left := (a.Decision.ResetAfter - now.Sub(a.At) + time.Microsecond - 1).Microseconds()
	switch {
	case refill == 0:
		return 0, false
	case left <= 0:
		return 0, true
	case left > math.MaxInt64/refill:
		return 0, false
	}
	return left * refill, true
}

// Lacks returns the whole tokens the bucket lacks of full at now, as far
// as the answer tells, rounded down: with held tokens up to Lacks back in
// it, the bucket holds no more than its capacity. (It counts a microsecond
// of refill less, since a store counts time in whole microseconds from
// instants rounded down.) It is math.MaxInt64 when the answer does not
// tell.
func (a *Answer) Lacks(now time.Time) int64 {
	c := configOf(a.Limit)
	lack, ok := a.lack(c, now)
	if !ok || lack > math.MaxInt64-c.Refill {
		return math.MaxInt64
	}
	return (lack + c.Refill) / c.Scale
}

// Held returns the decision of an allowed Take of n, at now, on the bucket
// of the answer with held tokens back in it (the Take's n already out of
// them): Remaining is the whole tokens it holds, at least the answer's
// Remaining plus held, and ResetAfter and RefillAfter are worked out from
// what it lacks at now. Held must be at most Lacks(now).
func (a *Answer) Held(held, n int64, now time.Time) spigot.Decision {
	d := spigot.Decision{N: n}
	c := configOf(a.Limit)
	lack, ok := a.lack(c, now)
	if !ok { // far from full: the answer, aged
		since := now.Sub(a.At)
		d.Remaining, d.ResetAfter, d.RefillAfter = a.Decision.Remaining, aged(a.Decision.ResetAfter, since), a.nextToken(since)
		return Credit(d, a.Limit, held)
	}
	whole, part := lack/c.Scale, lack%c.Scale
	remote := c.Capacity - whole
	if part > 0 {
		remote--
	}
	d.Remaining = max(remote, a.Decision.Remaining) + held
	if short := lack - held*c.Scale; short > 0 { // held ≤ whole
		d.ResetAfter = ceilMs(0, ceilDiv(short, c.Refill))
	}
	next := c.Scale // the units the next whole token lacks
	if part > 0 {
		next = part
	}
	d.RefillAfter = ceilMs(0, ceilDiv(next, c.Refill))
	return d
}

// nextToken returns the answer's RefillAfter, since after it was asked
// for: the wait for the next token once RefillAfter has passed, a token's
// refill time apart, rounded up to the millisecond.
func (a *Answer) nextToken(since time.Duration) time.Duration {
	r := a.Decision.RefillAfter
	if r == spigot.Never || since < r {
		return aged(r, since)
	}
	c := configOf(a.Limit)
	if c.Refill == 0 {
		return time.Millisecond
	}
	// The units refilled since the token RefillAfter told of, modulo a
	// token: the next one lacks the rest.
	us := uint64((since - r).Microseconds())
	hi, lo := bits.Mul64(us%uint64(c.Scale), uint64(c.Refill))
	into := int64(bits.Rem64(hi, lo, uint64(c.Scale)))
	return max(ceilMs(0, ceilDiv(c.Scale-into, c.Refill)), time.Millisecond)
}

// aged returns d less since, rounded up to the millisecond, at least 0;
// Never stays Never.
func aged(d, since time.Duration) time.Duration {
	if d == spigot.Never || since <= 0 {
		return d
	}
	if d <= since {
		return 0
	}
	return (d - since + time.Millisecond - 1).Truncate(time.Millisecond)
}

// Credit returns d, a store's decision on a key of bucket l, with held
// tokens that are held apart back in the bucket: in Remaining, and the
// bucket full again sooner by their refill time, rounded down to the
// millisecond (so ResetAfter may be up to a millisecond late, never
// early).
func Credit(d spigot.Decision, l spigot.Limit, held int64) spigot.Decision {
	if held <= 0 {
		return d
	}
	d.Remaining += held
	if d.ResetAfter == spigot.Never || d.ResetAfter == 0 {
		return d
	}
	c := configOf(l)
	us := min(held, c.Capacity) * c.Scale / c.Refill // capacity × scale ≤ MaxExact
	d.ResetAfter = max(d.ResetAfter-(time.Duration(us)*time.Microsecond).Truncate(time.Millisecond), 0)
	return d
}
