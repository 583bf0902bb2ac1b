package spigot

import (
	"errors"
	"fmt"
	"math"
	"slices"
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
// otherwise. Apply returns the same error; a store
// that does not call Apply (the Redis stores run the model in Lua)
// returns it before doing anything else.
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

// State is what a store keeps for one key of one limit, between
// operations: everything Apply needs, as integers a store can persist
// anywhere (a Redis string, a SQL row, an etcd value). A store that runs
// Apply inside an atomic read-modify-write of a State keeps spigot's whole
// model.
//
// The zero State is a full limit, so a key with no stored state (never
// seen, expired or evicted) needs no special case. Every kind of limit
// keeps Kind, Stamp and FullAt with the meaning below; the other fields
// are the kind's own (a token or leaky bucket's are Tokens and Scale, a
// window's Start, Window and Count, and Prev too for a sliding window, a
// sliding log's Log), and a later kind that needs more adds fields whose
// zero value keeps older states valid.
//
// A sliding log's State holds a slice, so a State is not comparable with
// ==: use IsZero. Apply reuses the Log's array; copy it (slices.Clone) to
// keep a state from before an Apply.
type State struct {
	// Kind is the kind of the limit that stored the state. A state of
	// another kind than the limit that reads it (a limit's name reused for
	// another algorithm) is read by its FullAt alone, never as a full
	// limit before then: see Apply. A Kind of 0 with a Scale above 0 is a
	// token bucket's state stored before states had a kind.
	Kind Kind
	// Stamp is the instant of the last update, in microseconds since the
	// Unix epoch.
	Stamp int64
	// FullAt is the instant, in microseconds since the Unix epoch, from
	// which the state no longer matters: the limit is full again under the
	// config the state was stored with, and the clock has caught up with
	// Stamp. From then on Apply reads the state as a full limit, whatever
	// the limit's config has become, so a store may forget it then; until
	// then it must keep it, even when ResetAfter is 0 (a full bucket on a
	// clock that stepped back still holds its stamp). A FullAt of 0, in a
	// state stored before FullAt existed, is unknown: the state counts
	// until it refills.
	FullAt int64
	// Tokens is what a token bucket held at Stamp, in scaled units of
	// Scale per token.
	Tokens int64
	// Scale is the token bucket's Scale when the state was stored. It lets
	// Apply carry tokens over exactly when a bucket's rate changes.
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

// Apply applies op, at now, to *s, the state of op's key, and returns the
// decision. It is a pure function of its arguments: it neither reads a
// clock nor keeps anything, so a store only has to make the read of the
// state, the call, and the write of *s atomic. It leaves *s the zero State
// when the limit is whole and the clock is not behind its stamp: there is
// nothing to keep, and a store may delete the key. A Peek leaves *s as it
// was. The pointers let a store apply an op in place, without copying
// either. Time counts in whole microseconds (now is truncated).
//
// For a token bucket, the bucket first refills for the time since
// s.Stamp (none if now is earlier: a clock that steps back never adds
// tokens, and the stamp never moves back). Only a kept state remembers its
// stamp: once a full bucket's state is the zero State, a clock that steps
// back starts the bucket again, full, at the earlier instant. Then:
//
//   - Take of more than the capacity is denied with RetryAfter Never;
//     Take of what the bucket holds takes it; anything else is denied
//     and takes nothing.
//   - TakeUpTo takes the whole tokens the bucket holds, up to N; with
//     none to take (and N > 0) it is denied, with the RetryAfter of one
//     token (Never for a capacity of 0).
//   - Refund adds N tokens, up to the capacity.
//   - Reset leaves the zero State.
//   - Peek decides as Take would, and changes nothing.
//
// A state whose FullAt has come is a full bucket, as if it had never been
// stored: the bucket was full again under the config it was stored with.
// Otherwise, when s was stored under another rate (s.Scale differs from
// the limit's Scale), its whole tokens carry over, clamped to the
// capacity; the fraction of a token is dropped. A state the bucket cannot
// hold (more tokens than its capacity, negative tokens, under its own
// scale or another) is clamped; one with a Scale of 0 or less is absent.
// A state of another kind, before its FullAt, becomes the bucket that is
// full again at that same instant, and not sooner: it holds what refilling
// at the limit's rate to be full exactly then leaves it now, and when that
// is further off than the limit's refill from empty, it holds nothing and
// its stamp is ahead of now (as after a clock that stepped back), so that
// it starts to refill that refill time before FullAt. Unless a Refund
// gives tokens back, the state Apply leaves then is forgotten no sooner
// than that FullAt. A state of another kind without a FullAt is absent.
//
// A leaky bucket is a token bucket whose tokens are the free places of
// its queue, with the same rules, and one more: an admitted Take, Peek or
// TakeUpTo has the Delay until the bucket would be full again before it,
// that is until the requests admitted before it have left.
//
// A fixed window counts the tokens taken in the window of now (Count, from
// Start); a sliding window also the previous window's (Prev), weighted by
// (window − elapsed) / window with elapsed in whole milliseconds since
// Start, and a request's tokens are admitted while the weighted count,
// plus them, is at most the limit (the weight of a token rounds up in
// Remaining). A sliding log keeps the instant of every token taken in the
// last window, each of which counts until it is a window old. For all
// three, Take, TakeUpTo and Peek decide as for a bucket, with RetryAfter
// the time until the request fits; Refund uncounts up to N tokens (a
// sliding window's from the current window first, a log's most recent
// first); Reset leaves the zero State; a clock that steps back counts in
// the latest window seen, and new entries of a log take the latest instant
// seen. Counts the limit cannot hold are clamped to it. A state of the
// same kind and windows carries over whatever the limit, and one whose
// FullAt has come is absent. A state of another kind, or of a window of
// another length or offset, is the limit used up until its FullAt: every
// Take or TakeUpTo of N > 0 is denied until then, a Refund gives nothing
// back, and only a Reset forgets it.
//
// A Take then a Refund of the Take's N, at the same instant, leave the
// state as a Take of 0 there would: as if neither happened.
//
// On every kind, a decision's RefillAfter is, on the state Apply leaves
// (a Peek's, the state it was given), the RetryAfter of a Take of one
// after a Take of Remaining, both at now; Apply works it out without
// applying them.
//
// For an invalid op, Apply returns the error of Op.Check, as a store must,
// and leaves *s as it was.
func (op Op) Apply(s *State, now time.Time) (Decision, error) {
	b, action, n := op.Limit.c, op.Action, op.N
	if b == nil || n < 0 || action > Peek || len(op.Key) > MaxKeyLen { // Check's test; a helper for both costs Check its inlining
		return Decision{}, op.invalid()
	}
	t := now.UnixMicro()
	switch b.kind {
	case FixedWindow, SlidingWindow:
		return b.applyWindow(s, action, n, t), nil
	case SlidingLog:
		return b.applyLog(s, action, n, t), nil
	}
	// A token bucket, or a leaky bucket, at t µs since the epoch.
	tokens, stamp := b.max, t
	switch {
	case s.FullAt != 0 && t >= s.FullAt: // full again: as if never seen
	case s.Kind == b.kind || s.Kind == 0 && b.kind == TokenBucket:
		if s.Scale > 0 {
			tokens, stamp = b.carry(s), s.Stamp
		}
	case s.FullAt > t && s.FullAt != 0: // another kind: full again at its FullAt, not sooner (0 is none)
		tokens, stamp = b.fullAt(s.FullAt, t)
	}
	if t > stamp {
		// Refill for the elapsed time without overflow: past deficit/refill
		// microseconds the bucket is full whatever the time. (The elapsed
		// time is exact as a uint64, even from a stamp far in the past.)
		if e, deficit := uint64(t-stamp), b.max-tokens; e > uint64(deficit/b.refill) {
			tokens = b.max
		} else {
			tokens += int64(e) * b.refill
		}
		stamp = t
	}
	lag := stamp - t // > 0 only when the clock stepped back

	var d Decision
	switch action {
	case Take, Peek:
		switch need := n * b.scale; {
		case n > b.capacity:
			d.RetryAfter = Never
		case tokens >= need:
			if b.kind == LeakyBucket {
				d.Delay = b.delay(lag, tokens)
			}
			if action == Take {
				tokens -= need
				d.N = n
			}
		default:
			d.RetryAfter = ceilMs(lag, ceilDiv(need-tokens, b.refill))
		}
	case TakeUpTo:
		switch k := min(n, tokens/b.scale); {
		case k > 0 || n == 0:
			if b.kind == LeakyBucket {
				d.Delay = b.delay(lag, tokens)
			}
			tokens -= k * b.scale
			d.N = k
		case b.capacity == 0:
			d.RetryAfter = Never
		default:
			d.RetryAfter = ceilMs(lag, ceilDiv(b.scale-tokens, b.refill))
		}
	case Refund:
		add := b.max - tokens
		if n < b.capacity { // else n × scale ≥ max ≥ add
			add = min(n*b.scale, add)
		}
		tokens += add
		d.N = ceilDiv(add, b.scale)
	case Reset:
		*s = State{}
		return Decision{N: ceilDiv(b.max-tokens, b.scale), Remaining: b.capacity, RefillAfter: b.fresh(t)}, nil
	}
	if tokens < b.max {
		d.ResetAfter = ceilMs(lag, ceilDiv(b.max-tokens, b.refill))
	}
	d.Remaining = tokens / b.scale
	// With the Remaining tokens taken, the fraction of a token left refills
	// to one.
	d.RefillAfter = Never
	if b.capacity > 0 {
		d.RefillAfter = ceilMs(lag, ceilDiv(b.scale-(tokens-d.Remaining*b.scale), b.refill))
	}
	if action == Peek {
		return d, nil
	}
	if full := max(t+d.ResetAfter.Microseconds(), stamp); full > t {
		if s.Kind != b.kind || s.Start|s.Window|s.Count|s.Prev != 0 || s.Log != nil {
			*s = State{}
		}
		s.Kind, s.Stamp, s.FullAt, s.Tokens, s.Scale = b.kind, stamp, full, tokens, b.scale
	} else { // full, and nothing to remember: as if never seen
		*s = State{}
	}
	return d, nil
}

// delay returns a leaky bucket's Delay for a request admitted when it
// holds tokens, lag µs behind its stamp: the time until it would be full,
// that is until the requests queued before this one have left.
func (b *limit) delay(lag, tokens int64) time.Duration {
	return ceilUs(lag, ceilDiv(b.max-tokens, b.refill))
}

// applyWindow is Apply for a fixed or sliding window, at t µs.
func (b *limit) applyWindow(s *State, action Action, n, t int64) Decision {
	w, limit := b.window, b.capacity
	startT := t - mod(t-b.offset, w) // the window of t
	start, stamp := startT, t
	var cur, prev int64
	switch {
	case s.FullAt != 0 && t >= s.FullAt: // as if never seen
	case s.Kind == b.kind && s.Window == w && mod(s.Start-b.offset, w) == 0:
		stamp = max(s.Stamp, t)
		switch s.Start - start {
		case 0:
			cur, prev = s.Count, s.Prev
		case -w: // the previous window
			prev = s.Count
		default:
			if s.Start > start { // the clock stepped back: still its window
				start, cur, prev = s.Start, s.Count, s.Prev
			}
		}
		cur, prev = min(max(cur, 0), limit), min(max(prev, 0), limit)
		if b.kind == FixedWindow {
			prev = 0
		}
	case s.FullAt > t && s.FullAt != 0: // another kind or window: used up until its FullAt
		return b.blocked(s, action, n, t)
	}
	// The weighted count, in tokens × ms: cur×wms + prev×(wms−e) ≤ limit×wms
	// (for a fixed window prev is 0). e is the whole ms since start; the
	// clock may be behind start, and then e is 0.
	wms := w / 1000
	e := min(max(t-start, 0)/1000, wms)
	// used returns the whole tokens the counts stand for: cur, and prev's
	// weight rounded up.
	used := cur + ceilDiv(prev*(wms-e), wms)
	// admits reports whether k more tokens fit now. (With prev at 0, as
	// for every fixed window, free alone decides: a fixed window's limit ×
	// wms may pass int64.)
	admits := func(k int64) bool {
		free := limit - cur - k
		return free >= 0 && (prev == 0 || prev*(wms-e) <= free*wms)
	}
	retry := func(k int64) int64 { return b.windowRetry(start, t, cur, prev, k) }

	var d Decision
	switch action {
	case Take, Peek:
		switch {
		case n > limit:
			d.RetryAfter = Never
		case n == 0 || admits(n): // a Take of 0 is allowed, even over the limit
			if action == Take {
				cur += n
				d.N = n
			}
		default:
			d.RetryAfter = ceilMs(0, retry(n))
		}
	case TakeUpTo:
		switch k := min(n, max(limit-used, 0)); {
		case k > 0 || n == 0:
			cur += k
			d.N = k
		default:
			d.RetryAfter = ceilMs(0, retry(1))
		}
	case Refund:
		k := min(n, cur)
		cur -= k
		j := min(n-k, prev)
		prev -= j
		d.N = k + j
	case Reset:
		*s = State{}
		return Decision{N: min(used, limit), Remaining: limit, RefillAfter: b.fresh(t)}
	}
	d.Remaining = max(limit-cur-ceilDiv(prev*(wms-e), wms), 0)
	full := t // the instant the counts no longer matter: now, when none count
	switch {
	case cur > 0 && b.kind == SlidingWindow:
		full = start + 2*w
	case cur > 0 || prev > 0 && e < wms:
		full = start + w
	}
	if full > t {
		d.ResetAfter = ceilMs(0, full-t)
	}
	// RefillAfter: one more token after the Remaining ones, counted in the
	// window of the state left behind (none is the window of t).
	if full <= t && action != Peek {
		start = startT
	}
	d.RefillAfter = ceilMs(0, b.windowRetry(start, t, cur+d.Remaining, prev, 1))
	if action == Peek {
		return d
	}
	if full > t {
		if s.Kind != b.kind || s.Tokens|s.Scale != 0 || s.Log != nil {
			*s = State{}
		}
		s.Kind, s.Stamp, s.FullAt, s.Start, s.Window, s.Count, s.Prev = b.kind, stamp, full, start, w, cur, prev
	} else {
		*s = State{}
	}
	return d
}

// applyLog is Apply for a sliding log, at t µs.
func (b *limit) applyLog(s *State, action Action, n, t int64) Decision {
	w, limit := b.window, b.capacity
	var log []int64
	stamp := t
	switch {
	case s.FullAt != 0 && t >= s.FullAt: // as if never seen
	case s.Kind == SlidingLog && (len(s.Log) == 0 || s.FullAt-s.Log[len(s.Log)-1] == w): // a log of this window
		stamp = max(s.Stamp, t)
		log = s.Log
		// The tokens older than a window have left it: the entries at or
		// before t−w, the first ones, since the log is in order. (The
		// expired prefix, read one by one: each entry leaves once, and a
		// log out of order, which only a store's value can hold, is read
		// as the script reads it, by its prefix.)
		old := 0
		for old < len(log) && log[old] <= t-w {
			old++
		}
		if old > 0 && action != Peek {
			log = log[:copy(log, log[old:])]
		} else {
			log = log[old:]
		}
	case s.FullAt > t && s.FullAt != 0: // another kind or window: used up until its FullAt
		return b.blocked(s, action, n, t)
	}
	count := int64(len(log))
	// retry returns the µs from t until k ≤ limit more tokens fit: until
	// the entry that must leave for them has been in the log a window.
	retry := func(k int64) int64 { return log[count+k-limit-1] + w - t }

	var d Decision
	switch action {
	case Take, Peek:
		switch {
		case n > limit:
			d.RetryAfter = Never
		case n == 0 || count+n <= limit: // a Take of 0 is allowed, even over the limit
			if action == Take {
				log = appendN(log, stamp, n)
				d.N = n
			}
		default:
			d.RetryAfter = ceilMs(0, retry(n))
		}
	case TakeUpTo:
		switch k := min(n, max(limit-count, 0)); {
		case k > 0 || n == 0:
			log = appendN(log, stamp, k)
			d.N = k
		default:
			d.RetryAfter = ceilMs(0, retry(1))
		}
	case Refund:
		k := min(n, count)
		log = log[:count-k]
		d.N = k
	case Reset:
		*s = State{}
		return Decision{N: min(count, limit), Remaining: limit, RefillAfter: b.fresh(t)}
	}
	count = int64(len(log))
	d.Remaining = max(limit-count, 0)
	// RefillAfter: with the Remaining tokens taken, the log holds the limit
	// (or more), and one more fits when its oldest entry past the excess
	// leaves; an empty log's oldest is the first taken, at the stamp of
	// the state left behind (none is t).
	if count > 0 {
		d.ResetAfter = ceilMs(0, log[count-1]+w-t)
		d.RefillAfter = ceilMs(0, log[max(count-limit, 0)]+w-t)
	} else if action == Peek {
		d.RefillAfter = ceilMs(0, stamp+w-t)
	} else {
		d.RefillAfter = ceilMs(0, w)
	}
	if action == Peek {
		return d
	}
	if count > 0 {
		*s = State{Kind: SlidingLog, Stamp: stamp, FullAt: log[count-1] + w, Log: log}
	} else {
		*s = State{}
	}
	return d
}

// appendN appends n copies of x to log.
func appendN(log []int64, x, n int64) []int64 {
	log = slices.Grow(log, int(n))
	for range n {
		log = append(log, x)
	}
	return log
}

// blocked is Apply on a state of another kind (or of other windows) whose
// FullAt is after t: the limit is used up until then, and whole from then
// on. Takes are denied until then, a Refund gives nothing back, and a
// Reset forgets it; only a Reset changes it.
func (b *limit) blocked(s *State, action Action, n, t int64) Decision {
	until := ceilMs(0, s.FullAt-t)
	d := Decision{ResetAfter: until, RefillAfter: until}
	switch action {
	case Take, Peek, TakeUpTo:
		switch {
		case n == 0:
		case n > b.capacity && action != TakeUpTo:
			d.RetryAfter = Never
		default:
			d.RetryAfter = until
		}
	case Reset:
		*s = State{}
		return Decision{N: b.capacity, Remaining: b.capacity, RefillAfter: b.fresh(t)}
	}
	return d
}

// windowRetry returns the µs from t until k ≤ limit more tokens fit in a
// window (of b's kind) that started at start and counts cur, after a
// previous window that counted prev, when they do not fit at t.
func (b *limit) windowRetry(start, t, cur, prev, k int64) int64 {
	wms := b.window / 1000
	if free := b.capacity - cur - k; free >= 0 { // prev's weight falls enough in this window
		return start + (wms-free*wms/prev)*1000 - t
	}
	// In the next window cur is the previous one's; a fixed window starts
	// again.
	if b.kind == FixedWindow {
		return start + b.window - t
	}
	return start + b.window + (wms-(b.capacity-k)*wms/cur)*1000 - t
}

// fresh returns the RefillAfter, at t, of the limit without state: the
// wait for one more token after the whole capacity was taken at t.
func (b *limit) fresh(t int64) time.Duration {
	switch b.kind {
	case FixedWindow, SlidingWindow:
		return ceilMs(0, b.windowRetry(t-mod(t-b.offset, b.window), t, b.capacity, 0, 1))
	case SlidingLog:
		return ceilMs(0, b.window)
	}
	if b.capacity == 0 {
		return Never
	}
	return ceilMs(0, ceilDiv(b.scale, b.refill))
}

// mod returns a mod m in [0, m), for m > 0.
func mod(a, m int64) int64 {
	if r := a % m; r < 0 {
		return r + m
	}
	return a % m
}

// ceilUs returns lag+us microseconds as a Duration, saturating at Never.
func ceilUs(lag, us int64) time.Duration {
	const limit = math.MaxInt64 / int64(time.Microsecond)
	if lag > limit-us {
		return Never
	}
	return time.Duration(lag+us) * time.Microsecond
}

// carry returns s's tokens in b's units, clamped to [0, b.max].
func (b *limit) carry(s *State) int64 {
	tokens := s.Tokens
	if s.Scale != b.scale {
		whole := s.Tokens / s.Scale
		if whole >= b.capacity {
			return b.max
		}
		tokens = max(whole, 0) * b.scale // below b.max: no overflow
	}
	return min(max(tokens, 0), b.max)
}

// fullAt returns the tokens and the stamp, at t, of the bucket that is
// full again at the instant full > t and not sooner: it holds what
// refilling at b's rate to be full exactly then leaves it, stamped t; when
// that would take longer than refilling from empty, it holds nothing, and
// its stamp is the refill time before full, ahead of t.
func (b *limit) fullAt(full, t int64) (tokens, stamp int64) {
	if us := full - t; us <= b.max/b.refill { // us × refill ≤ max
		return b.max - us*b.refill, t
	}
	return 0, full - ceilDiv(b.max, b.refill)
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
