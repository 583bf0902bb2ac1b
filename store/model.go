package store

import (
	"math"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/core"
)

// MaxExact is the largest quantity the model holds: 2^53, below which
// every integer is exact in a float64, so that a twin of Apply in a
// language whose numbers are doubles (the Redis stores' Lua) computes
// exactly what Go does. A bucket's capacity in scaled units, its refill
// per microsecond and a window's capacity are at most MaxExact: the
// constructors of package spigot reject any other limit.
const MaxExact = 1 << 53

// MaxExact is core.MaxExact, which package spigot's constructors check.
const (
	_ uint = MaxExact - core.MaxExact
	_ uint = core.MaxExact - MaxExact
)

// State is what a store keeps for one key of one limit, between
// operations: everything Apply needs, as integers a store can persist
// anywhere (a Redis string, a SQL row, an etcd value). A store that runs
// Apply inside an atomic read-modify-write of a State keeps spigot's whole
// model.
//
// The zero State is a full limit, so a key with no stored state (never
// seen, expired or evicted) needs no special case. Every kind of limit
// keeps Kind, Stamp and FullAt; the other fields are the kind's own:
//
//	kind                       fields
//	TokenBucket, LeakyBucket   Tokens, Scale
//	FixedWindow                Start, Window, Count
//	SlidingWindow              Start, Window, Count, Prev
//	SlidingLog                 Log
//
// A later kind that needs more adds fields whose zero value keeps older
// states valid.
//
// A sliding log's State holds a slice, so a State is not comparable with
// ==: use IsZero. Apply reuses the Log's array; copy it (slices.Clone) to
// keep a state from before an Apply.
type State struct {
	// Kind is the kind of the limit that stored the state; 0 in the zero
	// State. A state of another kind than the limit that reads it (a
	// limit's name reused for another algorithm) is read by its FullAt
	// alone, never as a full limit before then: see Apply.
	Kind spigot.Kind
	// Stamp is the instant of the last update, in microseconds since the
	// Unix epoch.
	Stamp int64
	// FullAt is the instant, in microseconds since the Unix epoch, from
	// which the state no longer matters: the limit is full again under the
	// config the state was stored with, and the clock has caught up with
	// Stamp. From then on Apply reads the state as a full limit, whatever
	// the limit's config has become, so a store may forget it then; until
	// then it must keep it, even when ResetAfter is 0 (a full bucket on a
	// clock that stepped back still holds its stamp).
	FullAt int64
	// Tokens is what a token bucket held at Stamp, in scaled units of
	// Scale per token (a leaky bucket's: the free places of its queue).
	Tokens int64
	// Scale is the bucket's units per token when the state was stored. It
	// lets Apply carry tokens over exactly when a bucket's rate changes.
	Scale int64
	// Start is the instant, in µs since the Unix epoch, at which the
	// window that Count counts started (a fixed or sliding window).
	Start int64
	// Window is the window's length in µs when the state was stored: a
	// window's counts carry over only to a limit with the same windows.
	Window int64
	// Count is the tokens taken in the window that started at Start.
	Count int64
	// Prev is the tokens a sliding window took in the window before it.
	Prev int64
	// Log is a sliding log's: the instant, in µs since the Unix epoch, of
	// each token taken in the last window, oldest first, one entry a token.
	// A sliding log's FullAt is its last entry plus its window, which tells
	// the window the log was kept for.
	Log []int64
}

// IsZero reports whether s is the zero State: a full limit, with nothing
// to keep.
func (s *State) IsZero() bool {
	return s.Kind == 0 && s.Stamp == 0 && s.FullAt == 0 && s.Tokens == 0 && s.Scale == 0 &&
		s.Start == 0 && s.Window == 0 && s.Count == 0 && s.Prev == 0 && len(s.Log) == 0
}

// configOf returns a Limit's config.
var configOf = core.Of[spigot.Limit]()

// kind returns the kind of limit b is the config of.
func kind(b *core.Config) spigot.Kind { return spigot.Kind(b.Kind) }

// absent reports whether s, at t, is the zero State to every limit: it
// holds nothing, or its FullAt has come.
func absent(s *State, t int64) bool { return s.Kind == 0 || t >= s.FullAt }

// blocked is Apply on a state of another kind (or of other windows) whose
// FullAt is after t: the limit is used up until then, and whole from then
// on. Takes are denied until then, a Refund gives nothing back, and only a
// Reset changes it: it forgets it.
func blocked(b *core.Config, s *State, action spigot.Action, n, t int64) spigot.Decision {
	until := ceilMs(0, s.FullAt-t)
	d := spigot.Decision{ResetAfter: until, RefillAfter: until}
	switch action {
	case spigot.Take, spigot.Peek, spigot.TakeUpTo:
		switch {
		case n == 0:
		case n > b.Capacity && action != spigot.TakeUpTo:
			d.RetryAfter = spigot.Never
		default:
			d.RetryAfter = until
		}
	case spigot.Reset:
		*s = State{}
		return spigot.Decision{N: b.Capacity, Remaining: b.Capacity, RefillAfter: fresh(b, t)}
	}
	return d
}

// fresh returns the RefillAfter, at t, of the limit without state: the
// wait for one more token after the whole capacity was taken at t.
func fresh(b *core.Config, t int64) time.Duration {
	switch kind(b) {
	case spigot.FixedWindow, spigot.SlidingWindow:
		return ceilMs(0, windowRetry(b, t-mod(t-b.Offset, b.Window), t, b.Capacity, 0, 1))
	case spigot.SlidingLog:
		return ceilMs(0, b.Window)
	}
	if b.Capacity == 0 {
		return spigot.Never
	}
	return ceilMs(0, ceilDiv(b.Scale, b.Refill))
}

// mod returns a mod m in [0, m), for m > 0.
func mod(a, m int64) int64 {
	if r := a % m; r < 0 {
		return r + m
	}
	return a % m
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ceilUs returns lag+us microseconds as a Duration, saturating at Never.
func ceilUs(lag, us int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Microsecond)
	if lag > limit-us {
		return spigot.Never
	}
	return time.Duration(lag+us) * time.Microsecond
}

// ceilMs returns lag+us microseconds rounded up to the millisecond, as a
// Duration, saturating at Never.
func ceilMs(lag, us int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Millisecond) // whole ms a Duration holds
	if lag > limit*1000-us {
		return spigot.Never
	}
	return time.Duration(ceilDiv(lag+us, 1000)) * time.Millisecond
}

// Scaled returns how a token bucket or a leaky bucket counts, for a store
// that runs the model outside Go (as the Redis stores' Lua does): scale
// units make one token, and the bucket gains refill units a microsecond,
// so that every quantity is an integer. With the rate's period p in
// microseconds and g = gcd(Rate.Tokens, p), scale is p/g and refill is
// Rate.Tokens/g; capacity × scale is at most MaxExact. Both are 0 for a
// window and for the zero Limit.
func Scaled(l spigot.Limit) (scale, refill int64) {
	c := configOf(l)
	return c.Scale, c.Refill
}
