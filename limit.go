package spigot

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"
)

// Never is the RetryAfter of a request that no amount of waiting can admit:
// its cost is larger than the bucket's capacity.
const Never = time.Duration(math.MaxInt64)

// MaxExact is the largest scaled quantity a bucket may hold: 2^53, the
// largest integer below which every integer is exact in a float64, so that
// the Lua twin of Op.Apply (Lua numbers are doubles) computes exactly what Go
// does. NewBucket rejects buckets whose capacity, in scaled units, exceeds
// it.
const MaxExact = 1 << 53

// A Limit is a named rule for how much a key may do: how many tokens it
// may take and how fast they come back. Its Kind is the algorithm; today
// there is one, the token bucket (NewBucket): it holds up to Capacity
// tokens and refills continuously at Rate, and a request takes its tokens
// when the bucket holds that many, and nothing otherwise.
//
// A Limit is an immutable, comparable value, one word long: copy it
// freely, share it between goroutines, use it as a map key. Limits made
// with the same arguments are equal. The zero Limit is invalid;
// every store rejects it with ErrInvalidLimit. Create one with NewBucket
// or MustBucket.
//
// Internally a token bucket counts in scaled units so that its arithmetic
// is exact: with the period p in microseconds and g = gcd(Rate.Tokens, p),
// one token is p/g units and the bucket gains Rate.Tokens/g units every
// microsecond. Every quantity is then an integer, and no rate drifts.
type Limit struct {
	// c is the config, interned (see intern): one word, so that an Op
	// fits in registers, and equal configs are equal Limits. It is nil for
	// the zero Limit.
	c *limit
}

// limit is the config of a Limit.
type limit struct {
	name     string
	kind     Kind
	capacity int64
	rate     Rate
	scale    int64 // units per token: period_µs / g
	refill   int64 // units per microsecond: Rate.Tokens / g
	max      int64 // capacity in units: capacity × scale
}

// zero is the config of the zero Limit.
var zero limit

// config returns l's config; the zero Limit's is the zero limit.
func (l Limit) config() *limit {
	if l.c == nil {
		return &zero
	}
	return l.c
}

// interned holds every config a live Limit has, so that NewBucket returns
// the same pointer for equal configs, and forgets a config once no Limit
// holds it (as package unique does, whose Handle.Value copies the value).
var interned struct {
	sync.Mutex
	m map[limit]weak.Pointer[limit]
}

// intern returns the canonical pointer to c.
func intern(c limit) *limit {
	interned.Lock()
	defer interned.Unlock()
	if p := interned.m[c].Value(); p != nil {
		return p
	}
	if interned.m == nil {
		interned.m = make(map[limit]weak.Pointer[limit])
	}
	p := new(limit)
	*p = c
	interned.m[c] = weak.Make(p)
	runtime.AddCleanup(p, forget, c)
	return p
}

// forget drops c's entry once its pointer has been collected, unless a
// new one took its place.
func forget(c limit) {
	interned.Lock()
	defer interned.Unlock()
	if interned.m[c].Value() == nil {
		delete(interned.m, c)
	}
}

// Kind is the algorithm of a Limit. The zero Kind is none: it marks the
// zero Limit and the zero State.
type Kind uint8

// The kinds of limit.
const (
	// TokenBucket is a bucket of Capacity tokens that refills
	// continuously at Rate: bursts up to Capacity, then Rate on average.
	TokenBucket Kind = 1
)

// String returns the kind's name, as in "TokenBucket".
func (k Kind) String() string {
	switch k {
	case 0:
		return "none"
	case TokenBucket:
		return "TokenBucket"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// NewBucket returns a bucket named name that holds up to capacity tokens and
// refills at rate. The name identifies the bucket's state in a store: two
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
// would not fit (a capacity in scaled units above MaxExact). A capacity of
// 0 is valid: such a bucket admits only cost 0.
func NewBucket(name string, capacity int64, rate Rate) (Limit, error) {
	bad := func(format string, args ...any) (Limit, error) {
		return Limit{}, fmt.Errorf("%w %q: %s", ErrInvalidLimit, name, fmt.Sprintf(format, args...))
	}
	switch {
	case name == "":
		return Limit{}, fmt.Errorf("%w: the name is empty", ErrInvalidLimit)
	case strings.Contains(name, ":"):
		return bad("the name must not contain ':', which separates it from the key in a store")
	case unclosedTag(name):
		return bad("the name's first '{' must be closed by a '}' after it: a hash tag that a key could close would let the key choose its cluster slot")
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
	b := limit{
		name:     name,
		kind:     TokenBucket,
		capacity: capacity,
		rate:     rate,
		scale:    period / g,
		refill:   rate.Tokens / g,
	}
	switch {
	case b.scale > MaxExact:
		return bad("rate %v: one token is %d scaled units, more than 2^53; use a shorter period or more tokens", rate, b.scale)
	case b.refill > MaxExact:
		return bad("rate %v: refills %d scaled units per microsecond, more than 2^53", rate, b.refill)
	case capacity > MaxExact/b.scale:
		return bad("capacity %d at rate %v is %d×%d scaled units, more than 2^53; lower the capacity or use a rate with a period that divides more evenly",
			capacity, rate, capacity, b.scale)
	}
	b.max = capacity * b.scale
	return Limit{intern(b)}, nil
}

// unclosedTag reports whether name has a '{' and no '}' after its first.
func unclosedTag(name string) bool {
	i := strings.IndexByte(name, '{')
	return i >= 0 && strings.IndexByte(name[i+1:], '}') < 0
}

// MustBucket is like NewBucket but panics on invalid input. It is meant for
// package-level variables whose arguments are constants.
func MustBucket(name string, capacity int64, rate Rate) Limit {
	b, err := NewBucket(name, capacity, rate)
	if err != nil {
		panic(err)
	}
	return b
}

// Name returns the limit's name.
func (l Limit) Name() string { return l.config().name }

// Kind returns the limit's algorithm.
func (l Limit) Kind() Kind { return l.config().kind }

// Capacity returns the most tokens the bucket holds.
func (l Limit) Capacity() int64 { return l.config().capacity }

// Rate returns how fast the bucket refills.
func (l Limit) Rate() Rate { return l.config().rate }

// Scale returns how many scaled units make one token (see Limit). Stores
// that run the model outside Go, such as the Redis Lua script, pass it
// along with Refill and the capacity. It is 0 for the zero Limit.
func (l Limit) Scale() int64 { return l.config().scale }

// Refill returns how many scaled units the bucket gains per microsecond.
func (l Limit) Refill() int64 { return l.config().refill }

// String describes the bucket, as in login(cap 20, 1/3s).
func (l Limit) String() string {
	c := l.config()
	return fmt.Sprintf("%s(cap %d, %v)", c.name, c.capacity, c.rate)
}

// Split returns the bucket each of n replicas enforces so that together
// they admit about what l admits: the same name, the capacity divided by
// n (rounded down, but at least 1 unless l's is 0) and the rate divided
// by n exactly (20/3s split 4 ways is 5/3s; 1/s split 4 ways is 1/4s).
// It is meant for store/hybrid's local fallback while Redis is down:
//
//	hybrid.WithLocalLimit(func(b spigot.Limit) spigot.Limit { return b.Split(4) })
//
// With fewer tokens than replicas each keeps 1, so together they may
// admit up to n at once. A request that costs more than the split
// capacity is never admitted by the split bucket (RetryAfter Never): for
// weighted costs, split fewer ways. Split returns l itself when n < 2,
// for the zero Limit, and when the divided rate would not be exact (the
// checks of NewBucket).
func (l Limit) Split(n int) Limit {
	c := l.config()
	if n < 2 || c.scale == 0 {
		return l
	}
	capacity := c.capacity
	if capacity > 0 {
		capacity = max(capacity/int64(n), 1)
	}
	g := gcd(c.rate.Tokens, int64(n))
	tokens, times := c.rate.Tokens/g, int64(n)/g
	if c.rate.Period > math.MaxInt64/time.Duration(times) {
		return l
	}
	split, err := NewBucket(c.name, capacity, Per(tokens, c.rate.Period*time.Duration(times)))
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
