package store

import (
	"math"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/core"
)

// A Share is one key of a limit as a store that holds tokens of it apart
// from the store that keeps it (its remote) sees it, as store/lease holds
// tokens taken from its remote: the remote's state as the remote's last
// decision told it, the whole tokens held apart, and the key as one store
// holding both would have it (the key's own state), on which it decides.
// Its decisions are Apply's on that state, so a Share that is its
// remote's only client decides exactly what the remote alone would: it
// knows the remote's state by applying Apply to the ops it sent (Told),
// and reads it from the remote's decisions, whose durations are rounded
// up to the millisecond, only when that does not decide as the remote did
// (another client changed the state, or the remote had it before the
// Share).
//
// Only a token bucket and a fixed window can be shared (Shareable). The
// tokens held never make the key hold more than one store would: once a
// bucket's remote, refilling, lacks fewer than are held, they are what it
// lacks (the rest is in the remote again), rounded up to a whole token,
// of which the key counts only its share; and a fixed window's are of the
// window the remote told, spent by Decide only before its last
// millisecond (the remote's rounding) or at the instant of a Told that
// shows the same window, and they count for nothing once it ends. A decision that needs that
// share of a token and the remote's fraction of one spends the held
// token, and the remote's fraction is owed: the remote holds up to that
// fraction of a token more than the key would, until the Share next takes
// from it.
//
// The zero Share knows nothing. A Share is not safe for concurrent use.
type Share struct {
	// What a decision from what is held reads, first.
	limit   spigot.Limit
	central State // the key's own: the remote with the share held back in it
	held    int64 // the units held: whole tokens, at most a token above the share
	stands  int64 // µs: until then held needs no recount
	until   int64 // µs; a fixed window: the held tokens are spent from the lease before then
	toldAt  int64 // µs: when the remote last told its state
	known   bool
	dropped int64 // units trimmed from held, not yet reported by Dropped
	end     int64 // µs; a fixed window: its end, as the remote told it
	remote  State // as the remote's last decision told it
}

// Shareable reports whether a Share can hold a key of l: a token bucket
// or a fixed window.
func Shareable(l spigot.Limit) bool {
	k := l.Kind()
	return k == spigot.TokenBucket || k == spigot.FixedWindow
}

// Dropped returns the whole tokens s has stopped holding, since it was
// last called, because the remote has them again (a bucket that refilled
// past them, a window that ended), and not by a decision or GiveBack.
func (s *Share) Dropped() int64 {
	if s.dropped == 0 {
		return 0
	}
	n := s.dropped / unit(configOf(s.limit))
	s.dropped = 0
	return n
}

// ToldAt returns when the remote last told s its state (the instant its
// op was asked for), or the zero Time.
func (s *Share) ToldAt() time.Time {
	if !s.known {
		return time.Time{}
	}
	return time.UnixMicro(s.toldAt)
}

// Known reports whether s has been told the remote's state.
func (s *Share) Known() bool { return s.known }

// Limit returns the limit s was last told of.
func (s *Share) Limit() spigot.Limit { return s.limit }

// Unit returns the units of one token: a token bucket's scale, 1 for a
// window; 0 for a Share that knows nothing.
func (s *Share) Unit() int64 {
	if !s.known {
		return 0
	}
	return unit(configOf(s.limit))
}

func unit(c *core.Config) int64 {
	if kind(c) == spigot.TokenBucket {
		return c.Scale
	}
	return 1
}

// Held returns the units s holds at now, whole tokens: what it was told
// it took, less what it spent and what the remote has again (a bucket
// that refilled past them, a window that ended).
func (s *Share) Held(now time.Time) int64 {
	if !s.known {
		return 0
	}
	s.recount(now.UnixMicro())
	return s.held
}

// share returns the key's units that are not the remote's, at t: what s
// holds of the key, below 0 when it owes the remote a fraction of a token.
func (s *Share) share(c *core.Config, t int64) int64 {
	return free(s.limit, c, &s.central, t) - free(s.limit, c, &s.remote, t)
}

// recount trims the held tokens at t, when t is past stands, to the share
// rounded up to a whole token.
func (s *Share) recount(t int64) {
	if t <= s.stands {
		return
	}
	s.trim(configOf(s.limit), t)
}

// trim sets held to at most the share at t, rounded up to a whole token.
func (s *Share) trim(c *core.Config, t int64) {
	if kind(c) == spigot.FixedWindow && t >= s.end {
		s.dropped += s.held
		s.held, s.central, s.stands = 0, s.remote, math.MaxInt64 // the window the tokens were of has ended
		return
	}
	u := unit(c)
	share := s.share(c, t)
	if keep := max(ceilDiv(max(share, 0), u)*u, 0); keep < s.held {
		s.dropped += s.held - keep
		s.held = keep
	}
	s.stands = s.standsFor(c)
}

// standsFor returns the last instant, in µs, until which held needs no
// trim: the remote, refilling, lacks more than held less a token.
func (s *Share) standsFor(c *core.Config) int64 {
	if s.held <= 0 {
		return math.MaxInt64
	}
	if kind(c) == spigot.FixedWindow {
		return min(s.end, s.remote.Start+s.remote.Window) - 1
	}
	r := &s.remote
	if r.Kind != spigot.TokenBucket || r.Scale != c.Scale {
		return math.MinInt64 // recount every time
	}
	// The remote holds tokens + (t − stamp) × refill, up to Max: below
	// Max − held + unit it lacks more than held − unit.
	room := c.Max - s.held + c.Scale - r.Tokens
	if room <= 0 {
		return math.MinInt64
	}
	return r.Stamp + ceilDiv(room, c.Refill) - 1
}

// free returns the units st holds free at t for l, of config c (a token
// bucket or a fixed window): what Apply, moving it on to t, finds.
func free(l spigot.Limit, c *core.Config, st *State, t int64) int64 {
	if absent(st, t) {
		return whole(c)
	}
	if kind(c) == spigot.TokenBucket && st.Kind == spigot.TokenBucket && st.Scale == c.Scale && t >= st.Stamp {
		// Apply's refill, without the copy.
		if e, deficit := uint64(t-st.Stamp), c.Max-st.Tokens; e > uint64(deficit/c.Refill) {
			return c.Max
		}
		return st.Tokens + (t-st.Stamp)*c.Refill
	}
	moved := *st
	moved.Log = nil
	moveOn(l, &moved, t)
	switch {
	case moved.IsZero():
		return whole(c)
	case moved.Kind != kind(c) || kind(c) == spigot.FixedWindow && (moved.Window != c.Window || mod(moved.Start-c.Offset, c.Window) != 0):
		return 0 // another kind's or window's: used up until its FullAt
	case kind(c) == spigot.TokenBucket:
		return moved.Tokens
	default:
		return c.Capacity - moved.Count
	}
}

// whole returns the units a whole limit of config c holds: a bucket's Max,
// a window's capacity.
func whole(c *core.Config) int64 {
	if kind(c) == spigot.TokenBucket {
		return c.Max
	}
	return c.Capacity
}

// moveOn moves st on to t, as a Take of 0 does.
func moveOn(l spigot.Limit, st *State, t int64) {
	Apply(spigot.Op{Limit: l}, st, time.UnixMicro(t)) //nolint:errcheck // valid: l is
}

// give adds units (or, below 0, takes them) to st at t, within what l, of
// config c, holds, and leaves st as Apply would write it.
func give(l spigot.Limit, c *core.Config, st *State, units, t int64) {
	if units == 0 {
		return
	}
	moveOn(l, st, t)
	if !st.IsZero() && st.Kind != kind(c) {
		return // nothing to give, or another kind's state, used up until its FullAt
	}
	stamp := max(st.Stamp, t) // a clock behind the stamp keeps it
	if kind(c) == spigot.TokenBucket {
		tokens := c.Max
		if !st.IsZero() {
			tokens = st.Tokens
		}
		tokens = min(max(tokens+units, 0), c.Max)
		*st = State{Kind: spigot.TokenBucket, Stamp: stamp, Tokens: tokens, Scale: c.Scale, FullAt: stamp + 1}
	} else {
		start, count := t-mod(t-c.Offset, c.Window), int64(0)
		if !st.IsZero() {
			if st.Window != c.Window || mod(st.Start-c.Offset, c.Window) != 0 {
				return // another window's, used up until its FullAt
			}
			count, start = st.Count, st.Start
		}
		count = min(max(count-units, 0), c.Capacity)
		*st = State{Kind: spigot.FixedWindow, Stamp: stamp, Start: start, Window: c.Window, Count: count, FullAt: start + c.Window}
	}
	moveOn(l, st, t) // FullAt as Apply writes it, or the zero State when whole
}

// told returns the state that d, the remote's decision of an op at t on a
// key of config c, tells it left, and false when d tells nothing of it
// (a decision by policy, a ResetAfter of Never). A bucket's tokens are
// read from the time it takes to be full again, which is rounded up to the
// millisecond: they are never more than the remote holds.
func told(c *core.Config, d spigot.Decision, t int64) (State, bool) {
	if d.Degraded() || d.ResetAfter == spigot.Never || d.ResetAfter < 0 {
		return State{}, false
	}
	if d.ResetAfter == 0 {
		return State{}, true
	}
	us := d.ResetAfter.Microseconds()
	if kind(c) == spigot.TokenBucket {
		// At least the Remaining whole tokens, what refilling for
		// ResetAfter leaves it short of full, and what refilling for
		// RefillAfter leaves it short of one more token.
		rem := min(d.Remaining, c.Capacity)
		tokens := rem * c.Scale
		if us <= c.Max/c.Refill+1000 { // no overflow
			tokens = max(tokens, c.Max-us*c.Refill)
		}
		if next := d.RefillAfter.Microseconds(); rem < c.Capacity && d.RefillAfter != spigot.Never && next <= c.Scale/c.Refill+1000 {
			tokens = max(tokens, (rem+1)*c.Scale-next*c.Refill)
		}
		tokens = min(tokens, c.Max)
		st := State{Kind: spigot.TokenBucket, Stamp: t, Tokens: tokens, Scale: c.Scale, FullAt: t + us}
		return st, true
	}
	start := t - mod(t-c.Offset, c.Window)
	count := min(max(c.Capacity-d.Remaining, 0), c.Capacity)
	return State{Kind: spigot.FixedWindow, Stamp: t, Start: start, Window: c.Window, Count: count, FullAt: start + c.Window}, true
}

// Told tells s what the remote decided, out[i] for ops[i], asked for at
// now: ops on the key of one limit, in order, that take tokens or Peek,
// and that the remote applied if applied (an all-or-nothing batch that
// was denied applied none: out holds, with N 0, each denied op's decision
// and a Peek for each other, as spigot.Store's DoMulti says).
// What they took is now held. It reports false, changing nothing, when
// the decisions tell nothing of the remote's state (a decision by policy).
// A limit other than the one s was told of before starts s again,
// holding nothing: give back what s held under the old one first.
//
// s reads the remote's state as Apply would leave it from the state s
// saw it in before (or, for a key new to s, a whole limit), when that
// decides every op as the remote did; and otherwise from the last
// decision's fields, which are rounded to the millisecond.
func (s *Share) Told(ops []spigot.Op, out []spigot.Decision, now time.Time, applied bool) bool {
	l := ops[0].Limit
	if !Shareable(l) {
		return false
	}
	c, t := configOf(l), now.UnixMicro()
	var share, held int64
	var before *State
	if s.known && s.limit == l {
		s.recount(t)
		share, held, before = s.share(c, t), s.held, &s.remote
	}
	from, replayed, remote, ok := s.replay(before, ops, out, now, applied)
	if !ok {
		return false
	}
	var took int64
	if applied {
		for _, d := range out {
			took += d.N
		}
	}
	if kind(c) == spigot.FixedWindow {
		end := t + out[len(out)-1].ResetAfter.Microseconds()
		if before != nil && end > s.end+1000 {
			s.dropped += held
			share, held = 0, 0 // the remote's window has ended: the tokens held were of the last one
		}
		s.end, s.until = end, end-1000
	}
	u := unit(c)
	held += took * u
	switch {
	case from == fromBefore:
		// The remote's state is Apply's from the one s saw: the key's own
		// is as it was, with what the ops took now held.
	case from == fromTold:
		s.central = remote
		give(l, c, &s.central, share+took*u, t)
	default: // from a state s had not seen: the key's, with the share back in it
		s.central = replayed
		give(l, c, &s.central, share, t)
	}
	s.limit, s.known, s.remote, s.held, s.toldAt = l, true, remote, held, t
	s.trim(c, t)
	return true
}

// Where replay found the remote's state.
const (
	fromBefore = iota // Apply's, from the state the Share saw
	fromOther         // Apply's, from a whole limit or another kind's state
	fromTold          // the decisions' fields
)

// replay returns where it found the remote's state after it decided out
// for ops at now, and that state: Apply's from before (the state s last
// saw) or from a whole limit or another kind's state, when one decides
// every op as out says (and then the state it found it from), and otherwise
// what the decisions' fields tell (with what a denied batch's Takes would
// have taken given back); false when they tell nothing.
func (s *Share) replay(before *State, ops []spigot.Op, out []spigot.Decision, now time.Time, applied bool) (from int, replayed, after State, ok bool) {
	l := ops[0].Limit
	c, t := configOf(l), now.UnixMicro()
	try := func(from State) (State, bool) {
		st := from
		for i, op := range ops {
			d, err := Apply(op, &st, now)
			if !applied {
				// A denied batch: an op that did not deny is a Peek on
				// the state the batch found.
				if !Denies(op, d) {
					found := from
					d, err = Apply(PeekOf(op), &found, now)
				}
				d.N = 0
			}
			if err != nil || d != out[i] {
				return State{}, false
			}
		}
		if !applied {
			return from, true
		}
		return st, true
	}
	if before != nil {
		if st, ok := try(*before); ok {
			return fromBefore, *before, st, true
		}
	}
	candidates := []State{{}}
	// Another kind's state (a limit's name reused), used up until its
	// FullAt, as the first decision tells.
	if d := out[0]; d.ResetAfter > 0 && d.ResetAfter != spigot.Never && !d.Degraded() {
		candidates = append(candidates, State{Kind: spigot.SlidingLog, Stamp: t, FullAt: t + d.ResetAfter.Microseconds()})
	}
	for _, c := range candidates {
		if st, ok := try(c); ok {
			return fromOther, c, st, true
		}
	}
	if !applied {
		// A denied batch: the first op's decision, a Peek or a denial, is
		// on the state the batch found, which nothing changed.
		remote, ok := told(c, out[0], t)
		if !ok {
			return 0, State{}, State{}, false
		}
		return fromTold, State{}, remote, true
	}
	st, ok := told(c, out[len(out)-1], t)
	return fromTold, State{}, st, ok
}

// Decide applies op, a Take or a TakeUpTo, at now, to the key's own state
// and reports true when the whole tokens it takes are held: it then spends
// them, and the decision is the key's. Otherwise d is what the key decides:
// a denial (which leaves the key's state as Apply leaves it), or an
// admission that needs the remote's tokens too (which changes nothing).
func (s *Share) Decide(op spigot.Op, now time.Time) (d spigot.Decision, ok bool) {
	if !s.known || op.Limit != s.limit {
		return spigot.Decision{}, false
	}
	t := now.UnixMicro()
	s.recount(t)
	c := configOf(s.limit)
	if kind(c) == spigot.FixedWindow && t >= s.until && t != s.toldAt {
		// Too close to the window's end, as the remote told it, for its
		// tokens to be spent before it ends: the remote tells again.
		return s.Central(op, now), false
	}
	u := unit(c)
	if op.Action == spigot.Take && op.N <= s.held/u {
		// What it takes is held: decided in place, admitted or denied.
		d, err := Apply(op, &s.central, now)
		s.held -= d.N * u
		return d, err == nil && d.Allowed()
	}
	st := s.central // a bucket's or a window's: no log to share
	d, err := Apply(op, &st, now)
	if err == nil && !d.Allowed() {
		s.central = st // as Apply leaves it on a denial
	}
	if err != nil || !d.Allowed() || d.N*u > s.held {
		return d, false
	}
	s.central = st
	s.held -= d.N * u
	return d, true
}

// Spend applies op, at now, to the key's own state, and spends what it
// takes from the tokens held (all of them at most): for a Take that the
// remote admitted together with the tokens held for it.
//
// A key's own state that lacks a fraction of what the remote admitted (one
// the Share owed the remote, or a refill of the remote's, on its clock,
// that the Share's has not reached) is raised to it: a Take the remote
// admitted is admitted.
func (s *Share) Spend(op spigot.Op, now time.Time) spigot.Decision {
	t := now.UnixMicro()
	s.recount(t)
	c := configOf(s.limit)
	u := unit(c)
	if op.Action == spigot.Take && op.N > 0 {
		if lack := op.N*u - free(s.limit, c, &s.central, t); lack > 0 {
			give(s.limit, c, &s.central, lack, t)
		}
	}
	d, _ := Apply(op, &s.central, now)
	s.held = max(s.held-d.N*u, 0)
	s.stands = s.standsFor(c)
	return d
}

// Central returns what op would decide, at now, on the key's own state,
// and changes nothing.
func (s *Share) Central(op spigot.Op, now time.Time) spigot.Decision {
	s.recount(now.UnixMicro())
	st := s.central
	d, _ := Apply(op, &st, now)
	return d
}

// ApplyCentral applies op, at now, to the key's own state alone, holding
// what it held: for a batch that is denied, which of its ops deny, each
// on what the ones before it left, on a copy of s.
func (s *Share) ApplyCentral(op spigot.Op, now time.Time) spigot.Decision {
	s.recount(now.UnixMicro())
	d, _ := Apply(op, &s.central, now)
	return d
}

// Rest returns the whole tokens to take from the remote, in a batch that
// is admitted or denied whole, for Takes of n on the key at now, of which
// reserved units are set aside from what s holds: as s sees the remote,
// the remote admits that Take if and only if the key admits n.
func (s *Share) Rest(n, reserved int64, now time.Time) int64 {
	if !s.known {
		return n
	}
	t := now.UnixMicro()
	s.recount(t)
	c := configOf(s.limit)
	u := unit(c)
	rest := n - reserved/u // what the held tokens lack
	if free(s.limit, c, &s.central, t) >= n*u {
		return rest // the remote holds it
	}
	// Denied: a Take the remote denies too.
	return max(rest, ceilDiv(max(n*u-s.share(c, t), 0), u))
}

// Reserve sets aside up to units of the tokens s holds at now, whole
// tokens, for a request that asks the remote for the rest, and returns how
// many it set aside: they are not held until Release puts them back.
func (s *Share) Reserve(now time.Time, units int64) int64 {
	if !s.known || units <= 0 {
		return 0
	}
	s.recount(now.UnixMicro())
	r := min(units, s.held)
	s.held -= r
	return r
}

// Release puts back units that Reserve set aside, at now: they are held
// again, but for what the remote has meanwhile again.
func (s *Share) Release(now time.Time, units int64) {
	if !s.known || units <= 0 {
		return
	}
	t := now.UnixMicro()
	c := configOf(s.limit)
	s.recount(t)
	s.held += units
	s.trim(c, t)
}

// GiveBack empties s at now and returns the whole tokens to refund to the
// remote for what it held: a bucket's share rounded up when the key is full
// with it (the remote's refund stops at its capacity, so the key is then
// exactly whole), rounded down otherwise, and nothing for a fixed window,
// whose tokens a refund could give to the next window. The key's own state
// stays as it was (with the fraction of a token of a share rounded down,
// which no store then holds, until the bucket is full again), and s sees
// the remote as that refund leaves it.
func (s *Share) GiveBack(now time.Time) int64 {
	if !s.known {
		return 0
	}
	t := now.UnixMicro()
	s.recount(t)
	c := configOf(s.limit)
	share, held := s.share(c, t), s.held
	s.held, s.stands = 0, math.MaxInt64
	if held <= 0 || share <= 0 || kind(c) != spigot.TokenBucket {
		return 0
	}
	n := share / c.Scale
	if free(s.limit, c, &s.remote, t)+share >= c.Max {
		n = ceilDiv(share, c.Scale)
	}
	n = min(n, held/c.Scale)
	if n > 0 {
		Apply(spigot.Op{Limit: s.limit, Action: spigot.Refund, N: n}, &s.remote, now) //nolint:errcheck // valid
	}
	return n
}

// Moved tells s the remote's decision d of op, asked for at now, which
// changed the key (a Refund, a Reset): s applies op to the key's own state
// and returns that decision, and what it holds is then what the key has
// beyond the remote's state, read as Told reads it. It reports false,
// changing nothing, when d tells nothing of that state.
func (s *Share) Moved(op spigot.Op, d spigot.Decision, now time.Time) (spigot.Decision, bool) {
	if !s.known || op.Limit != s.limit {
		return d, false
	}
	c, t := configOf(op.Limit), now.UnixMicro()
	s.recount(t)
	_, _, remote, ok := s.replay(&s.remote, []spigot.Op{op}, []spigot.Decision{d}, now, true)
	if !ok {
		return d, false
	}
	central, _ := Apply(op, &s.central, now)
	s.remote, s.toldAt = remote, t
	if kind(c) == spigot.FixedWindow {
		if end := t + d.ResetAfter.Microseconds(); end > s.end+1000 {
			s.dropped += s.held
			s.held, s.central = 0, remote // the remote's window has ended
		}
		s.end, s.until = t+d.ResetAfter.Microseconds(), t+d.ResetAfter.Microseconds()-1000
	}
	s.trim(c, t)
	return central, true
}
