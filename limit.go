package spigot

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/spigot-go/spigot/internal/core"
)

// Never is the RetryAfter of a request that no amount of waiting can admit:
// its cost is larger than the limit's capacity.
const Never = time.Duration(math.MaxInt64)

// A Limit is a named rule for how much a key may do: how many tokens it
// may take and how fast they come back. Its Kind is the algorithm, chosen
// by the constructor: NewBucket (a token bucket), NewFixedWindow,
// NewSlidingWindow, NewSlidingLog and NewLeakyBucket. Every store runs
// every kind, and every action means something for each (see Kind).
//
// A Limit is an immutable, comparable value, one word long: copy it
// freely, share it between goroutines, use it as a map key. Limits made
// with the same arguments are equal. The zero Limit is invalid;
// every store rejects it with ErrInvalidLimit. Create one with a
// constructor, or Must of one for constants.
//
// Internally a token bucket counts in scaled units so that its arithmetic
// is exact: with the period p in microseconds and g = gcd(Rate.Tokens, p),
// one token is p/g units and the bucket gains Rate.Tokens/g units every
// microsecond. Every quantity is then an integer, and no rate drifts.
type Limit struct {
	// c is the config, interned (see intern): one word, so that an Op
	// fits in registers, and equal configs are equal Limits. It is nil for
	// the zero Limit.
	c *core.Config
}

// zero is the config of the zero Limit.
var zero core.Config

// config returns l's config; the zero Limit's is the zero config.
func (l Limit) config() *core.Config {
	if l.c == nil {
		return &zero
	}
	return l.c
}

func init() { core.Register(Limit.config) }

// interned holds every config a live Limit has, so that NewBucket returns
// the same pointer for equal configs, and forgets a config once no Limit
// holds it (as package unique does, whose Handle.Value copies the value).
var interned struct {
	sync.Mutex
	m map[core.Config]weak.Pointer[core.Config]
}

// intern returns the canonical pointer to c.
func intern(c core.Config) *core.Config {
	interned.Lock()
	defer interned.Unlock()
	if p := interned.m[c].Value(); p != nil {
		return p
	}
	if interned.m == nil {
		interned.m = make(map[core.Config]weak.Pointer[core.Config])
	}
	p := new(core.Config)
	*p = c
	interned.m[c] = weak.Make(p)
	runtime.AddCleanup(p, forget, c)
	return p
}

// forget drops c's entry once its pointer has been collected, unless a
// new one took its place.
func forget(c core.Config) {
	interned.Lock()
	defer interned.Unlock()
	if interned.m[c].Value() == nil {
		delete(interned.m, c)
	}
}

// Kind is the algorithm of a Limit. The zero Kind is none: it marks the
// zero Limit.
//
// Every kind takes every action, with these meanings (N is tokens, or
// requests of that weight), and any number of keys at once, all or
// nothing or as a batch (Store.DoMulti):
//
//	kind           Take, Peek                TakeUpTo     Refund                 Reset
//	TokenBucket    N, if it holds N          what it has  adds N, to capacity    fills it
//	LeakyBucket    N places in the queue,    what fits,   frees N places         empties the queue
//	               with a Delay              with a Delay
//	FixedWindow    N, if N more fit in this  what fits    uncounts N             forgets the count
//	               window
//	SlidingWindow  N, if N more fit in the   what fits    uncounts N, this       forgets the counts
//	               weighted count                         window's first
//	SlidingLog     N, if N more fit in the   what fits    uncounts the N latest  forgets the log
//	               last window
//
// Decisions mean the same on every kind: N is what moved, Remaining the
// whole tokens (or requests) that a Take could have now, RetryAfter the
// exact wait after which the same Take is admitted if nothing else takes
// capacity (Never when N is above the capacity), ResetAfter the time until
// the limit is whole again, after which its state is forgotten, and
// RefillAfter the time until one more token than Remaining is admitted
// (the effective window of the IETF RateLimit field). Only a leaky bucket
// sets Decision.Delay.
type Kind uint8

// The kinds of limit.
const (
	// TokenBucket is a bucket of Capacity tokens that refills
	// continuously at Rate: bursts up to Capacity, then Rate on average.
	TokenBucket Kind = 1
	// FixedWindow admits its capacity, Rate.Tokens, in each window of
	// Rate.Period, the windows laid end to end from the Unix epoch (plus
	// an offset). Its count starts again at each window's start, so up to
	// twice the capacity can pass across a boundary: the capacity at the
	// end of one window and again at the start of the next.
	FixedWindow Kind = 2
	// SlidingWindow is the sliding window counter: fixed windows, and a
	// request counts the previous window's requests weighted by how much
	// of the sliding window still covers it, current + previous ×
	// (window − elapsed) / window, in whole milliseconds. It smooths the
	// fixed window's boundary burst at the cost of two counters a key.
	SlidingWindow Kind = 3
	// SlidingLog keeps the instant of every token taken in the last
	// window: exact, it never admits more than Rate.Tokens in any window of
	// Rate.Period, at the cost of a state that grows with the capacity
	// (see MaxLog).
	SlidingLog Kind = 4
	// LeakyBucket is the leaky bucket as a queue, a shaper: requests leave
	// at Rate, evenly spaced, and one that finds Capacity requests queued
	// (counting the one leaving now) is denied. An admitted request's
	// Decision.Delay says how long it must wait for its turn.
	LeakyBucket Kind = 5
)

var kindNames = [...]string{"none", "TokenBucket", "FixedWindow", "SlidingWindow", "SlidingLog", "LeakyBucket"}

// String returns the kind's name, as in "TokenBucket".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// MaxLog is the largest capacity of a sliding log. Its state holds one
// instant for each token taken in the last window, so the bound keeps what
// one key costs a store, in memory and in time, small whatever its
// traffic.
const MaxLog = 1000

// NewBucket returns a token bucket named name that holds up to capacity
// tokens and refills at rate. The name identifies the bucket's state in a store: two
// buckets with the same name share state, so a deploy that changes a
// bucket's capacity or rate keeps each key's tokens (clamped to the new
// capacity). On a Redis Cluster, a name with a {hash tag} (such as
// "{login}") puts every key of the bucket in one slot, on one primary;
// without one, the keys spread over the cluster.
//
// It rejects, with an error that wraps ErrInvalidLimit, an empty name, a
// name with a ':' (stores name a key's state prefix+name+":"+key, so the
// name must end at the first ':' for two buckets never to share a key), a
// name with a '{' that no '}' closes after it (a key could close that tag
// and choose its own cluster slot), a negative capacity, a rate that
// refills less than one token, a period that is under a microsecond or not
// a whole number of microseconds, and a bucket whose exact arithmetic
// would not fit (a capacity in scaled units above 2^53). A capacity of
// 0 is valid: such a bucket admits only cost 0.
func NewBucket(name string, capacity int64, rate Rate) (Limit, error) {
	return newBucket(TokenBucket, name, capacity, rate)
}

// NewLeakyBucket returns a leaky bucket named name: a queue of capacity
// places that lets requests leave at rate, evenly spaced (a shaper). A
// request of cost n takes n places, and the Decision of an admitted one
// says, in Delay, how long it must wait for its turn: 0 when the queue is
// empty, the time for the requests ahead of it to leave otherwise. A
// request that does not fit in the queue is denied, with the RetryAfter
// after which it fits. Across replicas sharing a store, requests leave
// spaced at the rate, whichever replica admitted them.
//
// A leaky bucket is a token bucket of that capacity whose requests wait
// until the bucket would have refilled what was taken before them: it
// takes the same arguments, with the same rules, and keeps the same state
// (Tokens is the queue's free room).
func NewLeakyBucket(name string, capacity int64, rate Rate) (Limit, error) {
	return newBucket(LeakyBucket, name, capacity, rate)
}

func newBucket(kind Kind, name string, capacity int64, rate Rate) (Limit, error) {
	if err := checkName(name); err != nil {
		return Limit{}, err
	}
	bad := func(format string, args ...any) (Limit, error) {
		return Limit{}, fmt.Errorf("%w %q: %s", ErrInvalidLimit, name, fmt.Sprintf(format, args...))
	}
	switch {
	case capacity < 0:
		return bad("capacity %d is negative", capacity)
	case rate.Tokens < 1:
		return bad("rate %v: a rate must refill at least one token", rate)
	case rate.Period < time.Microsecond:
		return bad("rate %v: the period must be at least 1µs", rate)
	case rate.Period%time.Microsecond != 0:
		return bad("rate %v: the period must be a whole number of microseconds", rate)
	}
	period := int64(rate.Period / time.Microsecond)
	g := gcd(rate.Tokens, period)
	b := core.Config{
		Name:     name,
		Kind:     uint8(kind),
		Capacity: capacity,
		Tokens:   rate.Tokens,
		Period:   rate.Period,
		Scale:    period / g,
		Refill:   rate.Tokens / g,
	}
	switch {
	case b.Scale > core.MaxExact:
		return bad("rate %v: one token is %d scaled units, more than 2^53; use a shorter period or more tokens", rate, b.Scale)
	case b.Refill > core.MaxExact:
		return bad("rate %v: refills %d scaled units per microsecond, more than 2^53", rate, b.Refill)
	case capacity > core.MaxExact/b.Scale:
		return bad("capacity %d at rate %v is %d×%d scaled units, more than 2^53; lower the capacity or use a rate with a period that divides more evenly",
			capacity, rate, capacity, b.Scale)
	}
	b.Max = capacity * b.Scale
	return Limit{intern(b)}, nil
}

// NewFixedWindow returns a fixed window named name that admits its
// capacity, rate.Tokens tokens, in each window of rate.Period: at most
// 10 000 a day is NewFixedWindow("export", PerDay(10_000), 0). The windows
// are laid end to end from the Unix epoch shifted by offset: with an
// offset of 0, daily windows start at 00:00 UTC; an offset of 5h starts
// them at 05:00 UTC (midnight in UTC−5). The offset is taken modulo the
// window, so −1h is 23h for daily windows.
//
// A fixed window is the cheapest limit, and the coarsest: a key may take
// the whole capacity at the end of one window and again at the start of
// the next, twice the capacity in a moment. A denial's RetryAfter is the
// time until the next window.
//
// It rejects, with an error that wraps ErrInvalidLimit, what NewBucket
// rejects of a name, a rate of fewer than 1 token, a window under a
// millisecond or not a whole number of milliseconds, an offset that is not
// a whole number of milliseconds, and a capacity above 2^53.
func NewFixedWindow(name string, rate Rate, offset time.Duration) (Limit, error) {
	if offset%time.Millisecond != 0 {
		return Limit{}, fmt.Errorf("%w %q: offset %v: want a whole number of milliseconds", ErrInvalidLimit, name, offset)
	}
	return newWindow(FixedWindow, name, rate, offset)
}

// NewSlidingWindow returns a sliding window counter named name that admits
// about its capacity, rate.Tokens tokens, in any window of rate.Period: a
// request is admitted when current + previous × (window − elapsed) /
// window, plus its cost, is at most the capacity, where current and
// previous are the tokens taken in this fixed window and the one before,
// and elapsed is the time since this one started, in whole milliseconds
// (the windows are laid end to end from the Unix epoch). With a capacity
// of 10, 8 taken in the previous window and 3 in this one, 30% of the way
// in, the count is 3 + 8 × 0.7 = 8.6 and one more is admitted. The
// comparison is exact, in integers, and so is a denial's RetryAfter, which
// may fall in the next window.
//
// It assumes that the previous window's tokens were taken evenly, so it
// suits public APIs rather than exact guarantees: use NewSlidingLog for
// those.
//
// It rejects, with an error that wraps ErrInvalidLimit, what
// NewFixedWindow rejects, and a capacity whose exact arithmetic would not
// fit: rate.Tokens × the window in milliseconds above 2^53 (10⁸ a day).
func NewSlidingWindow(name string, rate Rate) (Limit, error) {
	return newWindow(SlidingWindow, name, rate, 0)
}

// NewSlidingLog returns a sliding window log named name that admits at
// most rate.Tokens tokens in any window of rate.Period, exactly: "at most
// 5 password resets in any 24 hours" is NewSlidingLog("reset",
// PerDay(5)). A denial's RetryAfter is the time until enough of the
// tokens in the log are a whole window old.
//
// Its state keeps the instant of each token taken in the last window:
// 8 bytes a token in memory, and a few bytes a token in Redis. Its
// capacity, rate.Tokens, is at most MaxLog.
//
// It rejects, with an error that wraps ErrInvalidLimit, what
// NewFixedWindow rejects, and a rate of more than MaxLog tokens.
func NewSlidingLog(name string, rate Rate) (Limit, error) {
	return newWindow(SlidingLog, name, rate, 0)
}

func newWindow(kind Kind, name string, rate Rate, offset time.Duration) (Limit, error) {
	if err := checkName(name); err != nil {
		return Limit{}, err
	}
	bad := func(format string, args ...any) (Limit, error) {
		return Limit{}, fmt.Errorf("%w %q: %s", ErrInvalidLimit, name, fmt.Sprintf(format, args...))
	}
	switch {
	case rate.Tokens < 1:
		return bad("rate %v: a window must admit at least one token", rate)
	case rate.Period < time.Millisecond || rate.Period%time.Millisecond != 0:
		return bad("rate %v: the window must be a whole number of milliseconds", rate)
	case rate.Tokens > core.MaxExact:
		return bad("rate %v: more than 2^53 tokens", rate)
	case kind == SlidingLog && rate.Tokens > MaxLog:
		return bad("rate %v: a sliding log keeps every token of its window, and holds at most MaxLog (%d); use a sliding window counter for more", rate, MaxLog)
	}
	w := int64(rate.Period / time.Microsecond)
	if kind == SlidingWindow && rate.Tokens > core.MaxExact/(w/1000) {
		return bad("rate %v: %d tokens × %d ms is more than 2^53, where the weighted count is exact; use a fixed window or a shorter window", rate, rate.Tokens, w/1000)
	}
	off := int64(offset/time.Microsecond) % w
	if off < 0 {
		off += w
	}
	return Limit{intern(core.Config{Name: name, Kind: uint8(kind), Capacity: rate.Tokens, Tokens: rate.Tokens, Period: rate.Period, Window: w, Offset: off})}, nil
}

// checkName returns the error of a name no limit may have.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty", ErrInvalidLimit)
	case strings.Contains(name, ":"):
		return fmt.Errorf("%w %q: the name must not contain ':', which separates it from the key in a store", ErrInvalidLimit, name)
	case unclosedTag(name):
		return fmt.Errorf("%w %q: the name's first '{' must be closed by a '}' after it: a hash tag that a key could close would let the key choose its cluster slot", ErrInvalidLimit, name)
	}
	return nil
}

// unclosedTag reports whether name has a '{' and no '}' after its first.
func unclosedTag(name string) bool {
	i := strings.IndexByte(name, '{')
	return i >= 0 && strings.IndexByte(name[i+1:], '}') < 0
}

// MustBucket is like NewBucket but panics on invalid input. It is meant for
// package-level variables whose arguments are constants.
func MustBucket(name string, capacity int64, rate Rate) Limit {
	return Must(NewBucket(name, capacity, rate))
}

// Must returns l, and panics if err is not nil. It is meant for
// package-level variables whose arguments are constants:
//
//	var resets = spigot.Must(spigot.NewSlidingLog("reset", spigot.PerDay(5)))
func Must(l Limit, err error) Limit {
	if err != nil {
		panic(err)
	}
	return l
}

// Name returns the limit's name.
func (l Limit) Name() string { return l.config().Name }

// Kind returns the limit's algorithm.
func (l Limit) Kind() Kind { return Kind(l.config().Kind) }

// Capacity returns the most tokens the limit holds: the capacity given to
// NewBucket or NewLeakyBucket (the places of its queue), or a window's
// Rate.Tokens, what it admits in one window.
func (l Limit) Capacity() int64 { return l.config().Capacity }

// Rate returns how fast a bucket refills, or how many tokens a window
// admits (Tokens) in how long (Period).
func (l Limit) Rate() Rate { c := l.config(); return Rate{Tokens: c.Tokens, Period: c.Period} }

// Window returns a window's length, and 0 for a bucket.
func (l Limit) Window() time.Duration { return time.Duration(l.config().Window) * time.Microsecond }

// Offset returns where a fixed window's windows start, after each whole
// multiple of the window since the Unix epoch, in [0, Window).
func (l Limit) Offset() time.Duration { return time.Duration(l.config().Offset) * time.Microsecond }

// String describes the limit, as in login(cap 20, 1/3s),
// reset(sliding log 5/24h) or export(fixed window 10000/24h+5h).
func (l Limit) String() string {
	c, rate := l.config(), l.Rate()
	switch k := Kind(c.Kind); k {
	case LeakyBucket:
		return fmt.Sprintf("%s(leaky bucket %d, %v)", c.Name, c.Capacity, rate)
	case FixedWindow, SlidingWindow, SlidingLog:
		kind := [...]string{FixedWindow: "fixed window", SlidingWindow: "sliding window", SlidingLog: "sliding log"}[k]
		if c.Offset != 0 {
			_, offset, _ := strings.Cut(Per(1, l.Offset()).String(), "/") // "5h", not "5h0m0s"
			return fmt.Sprintf("%s(%s %v+%s)", c.Name, kind, rate, offset)
		}
		return fmt.Sprintf("%s(%s %v)", c.Name, kind, rate)
	}
	return fmt.Sprintf("%s(cap %d, %v)", c.Name, c.Capacity, rate)
}

// Split returns the limit each of n replicas enforces so that together
// they admit about what l admits: the same name and kind, the capacity
// divided by n (rounded down, but at least 1 unless l's is 0) and a
// bucket's rate divided by n exactly (20/3s split 4 ways is 5/3s; 1/s
// split 4 ways is 1/4s); a window keeps its length. It is meant for
// store/hybrid's local fallback while Redis is down:
//
//	hybrid.WithLocalLimit(func(b spigot.Limit) spigot.Limit { return b.Split(4) })
//
// With fewer tokens than replicas each keeps 1, so together they may
// admit up to n at once. A request that costs more than the split
// capacity is never admitted by the split limit (RetryAfter Never): for
// weighted costs, split fewer ways. Split returns l itself when n < 2,
// for the zero Limit, and when the divided rate would not be exact (the
// checks of the constructors).
func (l Limit) Split(n int) Limit {
	c := l.config()
	if n < 2 || c.Kind == 0 {
		return l
	}
	kind, capacity := Kind(c.Kind), c.Capacity
	if capacity > 0 {
		capacity = max(capacity/int64(n), 1)
	}
	if c.Window > 0 {
		split, err := newWindow(kind, c.Name, Per(capacity, c.Period), time.Duration(c.Offset)*time.Microsecond)
		if err != nil {
			return l
		}
		return split
	}
	g := gcd(c.Tokens, int64(n))
	tokens, times := c.Tokens/g, int64(n)/g
	if c.Period > math.MaxInt64/time.Duration(times) {
		return l
	}
	split, err := newBucket(kind, c.Name, capacity, Per(tokens, c.Period*time.Duration(times)))
	if err != nil {
		return l
	}
	return split
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
