// Package denycache is a spigot.Store that remembers the store behind it
// denying, and answers the requests that the store is sure to deny without
// asking it: a flood on a denied key then costs the store (a Redis server,
// say) nothing until the denial runs out.
//
//	s := denycache.New(redis.New(rdb))
//	limiter := spigot.New(s, login)
//
// It wraps any spigot.Store (memory, redis, valkey, rueidis, hybrid, or one
// of your own), and changes nothing else: every request it cannot answer
// for sure goes to the store, as without it.
//
// # What it remembers
//
// A Take (or Peek) of N tokens that the store denies with RetryAfter r, on
// a request sent at t0 (read from the Store's clock before sending it),
// says that no Take of N or more on that limit and key can be admitted
// before t0 + r, unless tokens are given back: what others take only puts
// it off. A denied TakeUpTo says the same of a Take of one, and so does any
// decision that leaves Remaining 0, for its RefillAfter (an admitted Take
// that empties the limit, too). The Store keeps these facts for each limit
// and key (a Limit value: its name and config) and, until t0 + r, answers a
// Take or Peek of N or more, or a TakeUpTo for a fact about one token,
// itself: denied, with no round trip. A smaller cost still goes to the
// store. A RetryAfter of spigot.Never (a cost above the capacity, which a
// Limit value never changes) is kept until the entry is evicted.
//
// A decision the Store answers itself has N 0, Delay 0, Remaining 0 (a
// lower bound: for a fact about N tokens, the key may hold up to N−1),
// and a RetryAfter of what is left of the store's, rounded up to the
// millisecond: the instant it names is the one the store named. Its
// RefillAfter is what is left of the store's RetryAfter for one token when
// the Store holds that fact, and otherwise its own RetryAfter (by then N
// tokens, so one, are there if nothing else takes them), or for a cost
// above the capacity what is left of the store's last RefillAfter, at
// least a millisecond. Its ResetAfter is what is left of the store's last
// ResetAfter, and at least the RetryAfter: what others took since can only
// put it off.
//
// Degraded decisions (such as store/hybrid's FailOpen and FailClosed) and
// errors are never remembered.
//
// When a fact that would answer a request of Do runs out, that request
// asks the store, and the requests like it that come before the store
// answers wait for that answer (or for their context to end) and are
// answered from it, so that a flood on a denied key costs the store one
// call for each RetryAfter it gives, however many goroutines take part.
//
// # What it guarantees, and what it cannot see
//
// On a store whose clock runs with the Store's (the same clock, or clocks
// that do not drift apart), a request the Store denies itself would be
// denied by the store at that instant, and its RetryAfter is no longer than
// the store's, but for the store's own rounding: the store rounds
// RetryAfter up to the millisecond, so in the last millisecond before the
// instant it named, the store may already admit what the Store still
// denies, and the Store's RetryAfter may be up to a millisecond longer
// than the store's would be. A client that retries when told is never
// denied by the Store alone. Since the Store measures from before it sends
// a request, and the store from when it decides it, a fact runs out here a
// little before it does in the store (by the time a request takes to reach
// it), so the first request after it may still be denied, for less than a
// millisecond, and that denial is remembered in turn.
//
// A Refund or Reset through the Store forgets what it remembers of that
// key (of every Limit of that name), before and after it reaches the
// store, and a denial in flight when it happens is not remembered. A
// Refund or Reset made elsewhere (by another process, or on the store
// directly) is not seen: it takes effect here once the denials the Store
// remembers run out, after at most the RetryAfter the store gave them (a
// cost above the capacity is denied whatever the key holds).
//
// A request the Store answers itself never reaches the store, so the
// store's state is as if it had not been made. A denial changes nothing a
// limit can tell, but when a limit name's config changes (a new capacity
// or rate), a key's tokens carry over from its last stored state, which
// may then be older: as after a quiet spell without the Store.
//
// # DoMulti
//
// With spigot.Independent, the Store answers the ops it can itself and
// sends the others to the store in one call. With spigot.AllOrNothing, it
// answers the request itself only when it denies every op itself (then
// nothing would be charged, and each op's decision is as above); when it
// can deny only some of them, it cannot tell what the store would answer
// for the others, so the whole request goes to the store. A request with a
// Refund or Reset always goes to the store. What the store answers an
// all-or-nothing request is remembered only for ops whose key appears once
// in it, and when it was denied, only for its denied ops. DoMulti does not
// make requests wait for one another as Do does.
//
// # Memory
//
// The Store holds at most WithMaxEntries entries (DefaultMaxEntries by
// default), one per limit name and key, about 220 bytes each besides the
// key. A new entry that finds its part of the Store full first drops the
// entries whose facts have all run out, then, if none had, the oldest
// ones. Entries run out by time, without a goroutine: the Store starts
// none and needs no Close. A request the Store answers itself allocates
// nothing.
package denycache

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/store"
)

var _ spigot.Store = (*Store)(nil)

// DefaultMaxEntries is the number of entries a Store holds at most, unless
// WithMaxEntries says otherwise: some 16 MB with keys of 32 bytes.
const DefaultMaxEntries = 65536

// maxShards is the most shards a Store splits its entries between, and
// minPerShard the fewest entries a shard holds (a cap split between
// shards that hold few entries each would fill them unevenly).
const (
	maxShards   = 64
	minPerShard = 64
)

// forever is the instant of a fact that never runs out.
const forever = math.MaxInt64

// Store answers the requests its store is sure to deny, and sends the
// others to it. It is safe for concurrent use. The zero Store is not
// usable; call New.
type Store struct {
	next   spigot.Store
	clock  clock.Clock
	seed   maphash.Seed
	mask   uint64
	shards []shard
	max    int
}

type shard struct {
	mu  sync.RWMutex
	m   map[ckey]entry
	cap int    // entries held at most
	seq uint64 // the age of the next new entry
	// gen counts the Refunds and Resets of the shard's keys that went
	// through the Store: a decision asked for before one of them is not
	// remembered after it. It changes under mu.
	gen atomic.Uint64
	_   [64]byte
}

// ckey names an entry: a limit's name and a key, as a store names state.
type ckey struct{ name, key string }

// entry is what the Store knows of one limit name and key. Instants are
// in nanoseconds since the Unix epoch, forever for never; 0 is none.
type entry struct {
	limit spigot.Limit // the Limit the facts are about
	one   int64        // no Take of 1 or more is admitted before one
	cost  int64        // above 1, or 0 for none:
	until int64        // no Take of cost or more is admitted before until
	reset int64        // the store's last ResetAfter, as an instant
	fill  int64        // the store's last RefillAfter, as an instant
	born  uint64       // the order in which entries were made
	// probe, when not nil, is closed once the request that asks the store
	// in the place of the others, its facts having run out, is answered.
	probe chan struct{}
}

// live reports whether e still knows something at now.
func (e *entry) live(now int64) bool { return e.one > now || e.cost > 0 && e.until > now }

// waitHook, when not nil, is called by a request about to wait for a
// probe: tests wait on it.
var waitHook func()

// An Option configures a Store.
type Option func(*Store)

// WithClock makes the Store read the time from c instead of the system
// clock, as tests with clocktest do. Give the store it wraps the same
// clock. It panics if c is nil.
func WithClock(c clock.Clock) Option {
	if nilcheck.Nil(c) {
		panic("spigot: denycache: WithClock: nil Clock")
	}
	return func(s *Store) { s.clock = c }
}

// WithMaxEntries sets the number of entries (limit names and keys) the
// Store holds at most (default DefaultMaxEntries). It panics if n is below
// 1.
func WithMaxEntries(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("spigot: denycache: WithMaxEntries: %d: want 1 or more", n))
	}
	return func(s *Store) { s.max = n }
}

// New returns a Store that answers what s is sure to deny, and sends every
// other request to s. It panics if s is nil.
func New(s spigot.Store, opts ...Option) *Store {
	if nilcheck.Nil(s) {
		panic("spigot: denycache: New: nil Store")
	}
	c := &Store{next: s, clock: clock.System(), seed: maphash.MakeSeed(), max: DefaultMaxEntries}
	for _, o := range opts {
		o(c)
	}
	n := 1 // a power of two, so that each shard holds minPerShard or more
	for n < maxShards && c.max/(2*n) >= minPerShard {
		n *= 2
	}
	c.shards = make([]shard, n)
	c.mask = uint64(n - 1)
	for i := range c.shards {
		sh := &c.shards[i]
		sh.m = make(map[ckey]entry)
		sh.cap = c.max / n
		if i < c.max%n {
			sh.cap++
		}
	}
	return c
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// now returns the Store's time, in nanoseconds since the Unix epoch.
func (s *Store) now() int64 { return s.clock.Now().UnixNano() }

// cost returns the cost a fact must cover to answer op, or 0 when op is
// not one the Store may answer: a Take or Peek of N ≥ 1, a TakeUpTo of
// N ≥ 1 (which a fact about one token answers).
func cost(op spigot.Op) int64 {
	if op.N < 1 || op.Check() != nil {
		return 0
	}
	switch op.Action {
	case spigot.Take, spigot.Peek:
		return op.N
	case spigot.TakeUpTo:
		return 1
	}
	return 0
}

// lookup returns the decision the Store answers for op at now, and
// whether it has one.
func (s *Store) lookup(op spigot.Op, now int64) (spigot.Decision, bool) {
	c := cost(op)
	if c == 0 {
		return spigot.Decision{}, false
	}
	sh := s.shard(op.Key)
	sh.mu.RLock()
	e, ok := sh.m[ckey{op.Limit.Name(), op.Key}]
	sh.mu.RUnlock()
	if !ok || e.limit != op.Limit {
		return spigot.Decision{}, false
	}
	return e.decide(op.Action, c, now)
}

// decide returns the decision e answers for a request of action and cost
// c at now, and whether it answers one.
func (e *entry) decide(a spigot.Action, c, now int64) (spigot.Decision, bool) {
	until := int64(0)
	if e.one > now {
		until = e.one
	}
	if a != spigot.TakeUpTo && e.cost > 0 && c >= e.cost && e.until > now {
		until = max(until, e.until)
	}
	if until == 0 {
		return spigot.Decision{}, false
	}
	d := spigot.Decision{RetryAfter: left(until, now)}
	switch {
	case e.one > now:
		d.RefillAfter = left(e.one, now)
	case d.RetryAfter != spigot.Never:
		d.RefillAfter = d.RetryAfter
	default:
		d.RefillAfter = max(left(e.fill, now), time.Millisecond)
	}
	d.ResetAfter = left(e.reset, now)
	if d.RetryAfter != spigot.Never {
		d.ResetAfter = max(d.ResetAfter, d.RetryAfter)
	}
	return d, true
}

// left returns the time from now until the instant at, rounded up to the
// millisecond: Never for forever, 0 when at has come.
func left(at, now int64) time.Duration {
	switch {
	case at == forever:
		return spigot.Never
	case at <= now:
		return 0
	}
	ms := int64(time.Millisecond)
	return time.Duration((at-now+ms-1)/ms) * time.Millisecond
}

// after returns the instant d after t0, forever for Never.
func after(t0 int64, d time.Duration) int64 {
	if d == spigot.Never || t0 > 0 && int64(d) > forever-t0 {
		return forever
	}
	return t0 + int64(d)
}

// Do implements spigot.Store: it answers op itself when the store is sure
// to deny it (see the package doc), and otherwise applies op in the store
// and remembers what its decision says. A Refund or Reset forgets what
// the Store knows of op's key.
func (s *Store) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	switch op.Action {
	case spigot.Refund, spigot.Reset:
		if op.Check() != nil {
			return s.next.Do(ctx, op)
		}
		s.forget(op)
		d, err := s.next.Do(ctx, op)
		s.forget(op)
		return d, err
	}
	now := s.now()
	c := cost(op)
	if c == 0 {
		return s.send(ctx, op, now)
	}
	k, sh := ckey{op.Limit.Name(), op.Key}, s.shard(op.Key)
	sh.mu.RLock()
	e, ok := sh.m[k]
	sh.mu.RUnlock()
	if !ok || e.limit != op.Limit {
		return s.send(ctx, op, now)
	}
	if d, ok := e.decide(op.Action, c, now); ok {
		return answer(ctx, d)
	}
	if !e.covers(op.Action, c) {
		return s.send(ctx, op, now)
	}
	// A denial that would have answered op ran out: one request asks the
	// store, and the others that come meanwhile wait for its answer.
	d, hit, wait, mine := sh.probe(k, op, c, now)
	switch {
	case hit:
		return answer(ctx, d)
	case mine:
		defer sh.unprobe(k, wait, s.now())
	case wait != nil:
		if waitHook != nil {
			waitHook()
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return spigot.Decision{}, ctx.Err()
		}
		now = s.now()
		if d, ok := s.lookup(op, now); ok {
			return answer(ctx, d)
		}
	}
	return s.send(ctx, op, now)
}

// answer returns d, the Store's own decision, unless ctx is done, as a
// store would.
func answer(ctx context.Context, d spigot.Decision) (spigot.Decision, error) {
	if err := ctx.Err(); err != nil {
		return spigot.Decision{}, err
	}
	return d, nil
}

// send applies op in the store, asked for at now, and remembers what its
// decision says.
func (s *Store) send(ctx context.Context, op spigot.Op, now int64) (spigot.Decision, error) {
	if op.Check() != nil {
		return s.next.Do(ctx, op)
	}
	gen := s.shard(op.Key).gen.Load()
	d, err := s.next.Do(ctx, op)
	if err == nil {
		s.learn(op, d, now, gen)
	}
	return d, err
}

// covers reports whether e has held a fact that would answer a request of
// action and cost c, whether or not it has run out.
func (e *entry) covers(a spigot.Action, c int64) bool {
	return e.one != 0 || a != spigot.TakeUpTo && e.cost > 0 && c >= e.cost
}

// probe returns, for a request op of cost c at now whose entry's facts
// ran out: its decision, if a fact about it was learned since (hit); or a
// channel that is closed once the request that asks the store in its place
// is answered, and whether this request is the one to ask (mine). It
// returns neither when the entry is gone.
func (sh *shard) probe(k ckey, op spigot.Op, c, now int64) (d spigot.Decision, hit bool, wait chan struct{}, mine bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[k]
	if !ok || e.limit != op.Limit {
		return d, false, nil, false
	}
	if d, ok := e.decide(op.Action, c, now); ok {
		return d, true, nil, false
	}
	if e.probe != nil {
		return d, false, e.probe, false
	}
	e.probe = make(chan struct{})
	sh.m[k] = e
	return d, false, e.probe, true
}

// unprobe ends the probe whose channel is wait: it wakes the requests that
// wait on it, and drops the entry if it still knows nothing at now, so
// that the requests after it go to the store at once.
func (sh *shard) unprobe(k ckey, wait chan struct{}, now int64) {
	sh.mu.Lock()
	if e, ok := sh.m[k]; ok && e.probe == wait {
		if e.live(now) {
			e.probe = nil
			sh.m[k] = e
		} else {
			delete(sh.m, k)
		}
	}
	sh.mu.Unlock()
	close(wait)
}

// forget drops what the Store knows of op's key, for every Limit of op's
// name, and makes the decisions asked for until now unable to teach it.
func (s *Store) forget(op spigot.Op) {
	sh := s.shard(op.Key)
	sh.mu.Lock()
	sh.gen.Add(1)
	delete(sh.m, ckey{op.Limit.Name(), op.Key})
	sh.mu.Unlock()
}

// learn remembers what d, the store's decision on op asked for at t0,
// says: a denial, and a Remaining of 0. It remembers nothing when a Refund
// or Reset of a key of op's shard went through the Store since gen, the
// shard's, was read.
func (s *Store) learn(op spigot.Op, d spigot.Decision, t0 int64, gen uint64) {
	if d.Degraded() || op.N < 0 || op.Check() != nil {
		return
	}
	var one, c, until int64
	switch op.Action {
	case spigot.Take, spigot.Peek:
		if !d.Allowed() && op.N >= 1 {
			if op.N == 1 {
				one = after(t0, d.RetryAfter)
			} else {
				c, until = op.N, after(t0, d.RetryAfter)
			}
		}
	case spigot.TakeUpTo:
		if !d.Allowed() && op.N >= 1 {
			one = after(t0, d.RetryAfter)
		}
	default:
		return
	}
	if d.Remaining == 0 && d.RefillAfter > 0 {
		one = max(one, after(t0, d.RefillAfter))
	}
	if one == 0 && c == 0 {
		return
	}
	k := ckey{op.Limit.Name(), op.Key}
	sh := s.shard(op.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gen.Load() != gen {
		return
	}
	e, ok := sh.m[k]
	if !ok || e.limit != op.Limit || !e.live(t0) {
		if !ok {
			if len(sh.m) >= sh.cap {
				sh.evict(t0)
			}
		}
		e = entry{limit: op.Limit, born: sh.seq, probe: e.probe}
		sh.seq++
	}
	e.one = max(e.one, one)
	// Keep the fact about the larger cost unless the old one covers it.
	if c > 0 && !(e.cost > 0 && e.cost <= c && e.until >= until) {
		e.cost, e.until = c, until
	}
	e.reset, e.fill = after(t0, d.ResetAfter), after(t0, d.RefillAfter)
	sh.m[k] = e
}

// evict makes room for a new entry in a full shard: it drops every entry
// that knows nothing any more at now, and if there was none, the oldest
// eighth of the entries (by the span of their ages), at least one.
func (sh *shard) evict(now int64) {
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for k, e := range sh.m {
		if !e.live(now) {
			delete(sh.m, k)
			continue
		}
		lo, hi = min(lo, e.born), max(hi, e.born)
	}
	if len(sh.m) < sh.cap {
		return
	}
	cut := lo + (hi-lo)/8 + 1
	for k, e := range sh.m {
		if e.born < cut {
			delete(sh.m, k)
		}
	}
}

// Len returns the number of entries the Store holds, those that ran out
// included until they are dropped.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

// DoMulti implements spigot.Store: see the package doc for what it
// answers itself. It returns store.CheckMulti's error, having applied
// nothing, for a call that must apply nothing, and the store's error
// otherwise (one matching errors.ErrUnsupported when the store cannot
// apply these ops in one call, so that spigot.DoMulti applies them
// through the Store another way).
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if err := store.CheckMulti(mode, ops, out); err != nil {
		return err
	}
	clears := false
	for _, op := range ops {
		if op.Action == spigot.Refund || op.Action == spigot.Reset {
			clears = true
			s.forget(op)
		}
	}
	if clears {
		err := s.next.DoMulti(ctx, mode, ops, out)
		for _, op := range ops {
			if op.Action == spigot.Refund || op.Action == spigot.Reset {
				s.forget(op)
			}
		}
		return err
	}
	now := s.now()
	if mode == spigot.AllOrNothing {
		return s.allOrNothing(ctx, ops, out, now)
	}
	// Independent: answer what the Store can, send the rest.
	var rest []int
	for i, op := range ops {
		if d, ok := s.lookup(op, now); ok {
			out[i] = d
			continue
		}
		rest = append(rest, i)
	}
	if len(rest) == 0 {
		return ctx.Err()
	}
	if len(rest) == len(ops) {
		gens := s.gens(ops)
		err := s.next.DoMulti(ctx, mode, ops, out)
		if err == nil {
			for i, op := range ops {
				s.learn(op, out[i], now, gens[i])
			}
		}
		return err
	}
	sub := make([]spigot.Op, len(rest))
	res := make([]spigot.Decision, len(rest))
	for j, i := range rest {
		sub[j] = ops[i]
	}
	gens := s.gens(sub)
	err := s.next.DoMulti(ctx, mode, sub, res)
	for j, i := range rest {
		out[i] = res[j]
	}
	if err == nil {
		for j, op := range sub {
			s.learn(op, res[j], now, gens[j])
		}
	}
	return err
}

// gens returns the generation of the shard of each of ops.
func (s *Store) gens(ops []spigot.Op) []uint64 {
	g := make([]uint64, len(ops))
	for i, op := range ops {
		g[i] = s.shard(op.Key).gen.Load()
	}
	return g
}

// allOrNothing is DoMulti in mode AllOrNothing, without Refund or Reset.
func (s *Store) allOrNothing(ctx context.Context, ops []spigot.Op, out []spigot.Decision, now int64) error {
	local := len(ops) > 0
	for i, op := range ops {
		d, ok := s.lookup(op, now)
		if !ok {
			local = false
			break
		}
		out[i] = d
	}
	if local {
		return ctx.Err()
	}
	gens := s.gens(ops)
	if err := s.next.DoMulti(ctx, spigot.AllOrNothing, ops, out); err != nil {
		return err
	}
	denied := false
	for i, op := range ops {
		if !out[i].Allowed() && (op.Action == spigot.Take || op.Action == spigot.TakeUpTo) {
			denied = true
		}
	}
	for i, op := range ops {
		if denied && out[i].Allowed() {
			continue
		}
		if once(ops, i) {
			s.learn(op, out[i], now, gens[i])
		}
	}
	return nil
}

// once reports whether ops[i] is the only op of ops on its limit name and
// key.
func once(ops []spigot.Op, i int) bool {
	if len(ops) > 32 { // not worth the quadratic look
		return false
	}
	for j, op := range ops {
		if j != i && op.Key == ops[i].Key && op.Limit.Name() == ops[i].Limit.Name() {
			return false
		}
	}
	return true
}
