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
// The Store holds at most WithMaxKeys entries (DefaultMaxKeys by default),
// one per limit name and key, about 150 bytes each with a key of 32 bytes
// (the Store keeps its own copy of each key). A new entry that finds its
// part of the Store full takes the place of one whose facts have all run
// out, and, if none of the few it samples has run out, of the oldest of
// those. Entries run out by time, without a goroutine: the Store starts
// none and needs no Close, and drops the entries that ran out as it grows.
// A request the Store answers itself allocates nothing and takes no lock.
package denycache

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/keyed"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/store"
)

var _ spigot.Store = (*Store)(nil)

// DefaultMaxKeys is the number of keys a Store holds at most, unless
// WithMaxKeys says otherwise: some 10 MB with keys of 32 bytes.
const DefaultMaxKeys = 65536

// keysPerShard is the fewest keys of the cap a part of the Store holds,
// so that the cap is close to exact.
const keysPerShard = 1024

// forever is the instant of a fact that never runs out.
const forever = math.MaxInt64

// Store answers the requests its store is sure to deny, and sends the
// others to it. It is safe for concurrent use. The zero Store is not
// usable; call New.
type Store struct {
	next  spigot.Store
	clock clock.Clock
	keys  *keyed.Table
	// gens counts, for each shard of keys, the Refunds and Resets of its
	// keys that went through the Store: a decision asked for before one of
	// them is not remembered after it.
	gens []gen
	seq  atomic.Uint64 // the age of the last new entry
	max  int
}

type gen struct {
	atomic.Uint64
	_ [56]byte // a cache line each
}

// entries are the Store's entries in keys.
var entries = keyed.NewKind[entry]()

// entry is what the Store knows of one limit name and key: its facts,
// read without a lock and replaced under the Header's lock, which guards
// probe.
type entry struct {
	keyed.Header
	facts atomic.Pointer[facts]
	// probe, when not nil, is closed once the request that asks the store
	// in the place of the others, its facts having run out, is answered.
	probe chan struct{}
}

// facts are what the Store knows of one limit name and key, never changed
// once an entry holds them. Instants are in nanoseconds since the Unix
// epoch, forever for never; 0 is none.
type facts struct {
	limit spigot.Limit // the Limit the facts are about
	one   int64        // no Take of 1 or more is admitted before one
	cost  int64        // above 1, or 0 for none:
	until int64        // no Take of cost or more is admitted before until
	reset int64        // the store's last ResetAfter, as an instant
	fill  int64        // the store's last RefillAfter, as an instant
	born  int64        // the order in which entries were made
}

// live reports whether f still knows something at now.
func (f *facts) live(now int64) bool { return f.one > now || f.cost > 0 && f.until > now }

// full is the keys' keyed.Config.Full: an entry is full once its facts
// have all run out and no request asks the store in the place of others;
// of the others, the oldest is evicted first.
func full(x *keyed.Header, now int64) (bool, int64) {
	e := entries.Of(x)
	f := e.facts.Load()
	if e.probe == nil && !f.live(now) {
		return true, max(f.one, f.until)
	}
	return false, f.born
}

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

// WithMaxKeys caps the number of keys the Store holds at once at n
// (DefaultMaxKeys by default), to bound its memory under a flood of
// distinct keys, such as random source addresses. A key is a limit's name
// and a key, as stores name state. The cap is split between the Store's
// parts, so eviction can begin a little below n; see the package doc for
// which key a new one evicts. It panics if n is below 1.
func WithMaxKeys(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("spigot: denycache: WithMaxKeys: %d: want 1 or more", n))
	}
	return func(s *Store) { s.max = n }
}

// New returns a Store that answers what s is sure to deny, and sends every
// other request to s. It panics if s is nil.
func New(s spigot.Store, opts ...Option) *Store {
	if nilcheck.Nil(s) {
		panic("spigot: denycache: New: nil Store")
	}
	c := &Store{next: s, clock: clock.System(), max: DefaultMaxKeys}
	for _, o := range opts {
		o(c)
	}
	c.keys = keyed.New(keyed.Config{MaxKeys: c.max, KeysPerShard: keysPerShard, Full: full})
	c.gens = make([]gen, c.keys.Shards())
	return c
}

// find returns the hash of op's key, its shard, and its entry, or nil.
func (s *Store) find(op spigot.Op) (uint64, *keyed.Shard, *entry) {
	name := op.Limit.Name()
	h := s.keys.Hash(name, op.Key)
	sh := s.keys.Shard(h)
	if x := sh.Find(h, name, op.Key); x != nil {
		return h, sh, entries.Of(x)
	}
	return h, sh, nil
}

// facts returns what the Store knows of op's key under op's Limit, or nil.
func (s *Store) facts(op spigot.Op) *facts {
	if _, _, e := s.find(op); e != nil {
		if f := e.facts.Load(); f.limit == op.Limit {
			return f
		}
	}
	return nil
}

// gen returns the generation of the shard of hash h.
func (s *Store) gen(h uint64) *atomic.Uint64 { return &s.gens[s.keys.Index(h)].Uint64 }

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
	f := s.facts(op)
	if f == nil {
		return spigot.Decision{}, false
	}
	return f.decide(op.Action, c, now)
}

// decide returns the decision f answers for a request of action and cost
// c at now, and whether it answers one.
func (f *facts) decide(a spigot.Action, c, now int64) (spigot.Decision, bool) {
	until := int64(0)
	if f.one > now {
		until = f.one
	}
	if a != spigot.TakeUpTo && f.cost > 0 && c >= f.cost && f.until > now {
		until = max(until, f.until)
	}
	if until == 0 {
		return spigot.Decision{}, false
	}
	d := spigot.Decision{RetryAfter: left(until, now)}
	switch {
	case f.one > now:
		d.RefillAfter = left(f.one, now)
	case d.RetryAfter != spigot.Never:
		d.RefillAfter = d.RetryAfter
	default:
		d.RefillAfter = max(left(f.fill, now), time.Millisecond)
	}
	d.ResetAfter = left(f.reset, now)
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
	f := s.facts(op)
	if f == nil {
		return s.send(ctx, op, now)
	}
	if d, ok := f.decide(op.Action, c, now); ok {
		return answer(ctx, d)
	}
	if !f.covers(op.Action, c) {
		return s.send(ctx, op, now)
	}
	// A denial that would have answered op ran out: one request asks the
	// store, and the others that come meanwhile wait for its answer.
	d, hit, wait, mine := s.probe(op, c, now)
	switch {
	case hit:
		return answer(ctx, d)
	case mine:
		defer s.unprobe(op, wait, s.now())
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
	gen := s.genOf(op)
	d, err := s.next.Do(ctx, op)
	if err == nil {
		s.learn(op, d, now, gen)
	}
	return d, err
}

// covers reports whether f has held a fact that would answer a request of
// action and cost c, whether or not it has run out.
func (f *facts) covers(a spigot.Action, c int64) bool {
	return f.one != 0 || a != spigot.TakeUpTo && f.cost > 0 && c >= f.cost
}

// probe returns, for a request op of cost c at now whose entry's facts
// ran out: its decision, if a fact about it was learned since (hit); or a
// channel that is closed once the request that asks the store in its place
// is answered, and whether this request is the one to ask (mine). It
// returns neither when the entry is gone.
func (s *Store) probe(op spigot.Op, c, now int64) (d spigot.Decision, hit bool, wait chan struct{}, mine bool) {
	_, _, e := s.find(op)
	if e == nil || !e.Lock() {
		return d, false, nil, false
	}
	defer e.Unlock()
	f := e.facts.Load()
	if f.limit != op.Limit {
		return d, false, nil, false
	}
	if d, ok := f.decide(op.Action, c, now); ok {
		return d, true, nil, false
	}
	if e.probe != nil {
		return d, false, e.probe, false
	}
	e.probe = make(chan struct{})
	return d, false, e.probe, true
}

// unprobe ends the probe of op's key whose channel is wait: it wakes the
// requests that wait on it, and drops the entry if it still knows nothing
// at now, so that the requests after it go to the store at once.
func (s *Store) unprobe(op spigot.Op, wait chan struct{}, now int64) {
	s.keys.Delete(op.Limit.Name(), op.Key, func(x *keyed.Header) bool {
		e := entries.Of(x)
		if e.probe != wait || e.facts.Load().live(now) {
			if e.probe == wait {
				e.probe = nil
			}
			return false
		}
		return true
	})
	close(wait)
}

// forget drops what the Store knows of op's key, for every Limit of op's
// name, and makes the decisions asked for until now unable to teach it.
func (s *Store) forget(op spigot.Op) {
	// The generation first: a decision that learn checks against it
	// after, under the shard's lock or the entry's, is not remembered,
	// and one checked before is removed here.
	s.gen(s.keys.Hash(op.Limit.Name(), op.Key)).Add(1)
	s.keys.Delete(op.Limit.Name(), op.Key, nil)
}

// genOf returns the generation of the shard of op's key.
func (s *Store) genOf(op spigot.Op) uint64 {
	return s.gen(s.keys.Hash(op.Limit.Name(), op.Key)).Load()
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
	// What e knows at t0 (none if it is nil), with what d says.
	next := func(e *facts) *facts {
		if e == nil || e.limit != op.Limit || !e.live(t0) {
			e = &facts{limit: op.Limit, born: int64(s.seq.Add(1))}
		} else {
			f := *e
			e = &f
		}
		e.one = max(e.one, one)
		// Keep the fact about the larger cost unless the old one covers it.
		if c > 0 && !(e.cost > 0 && e.cost <= c && e.until >= until) {
			e.cost, e.until = c, until
		}
		e.reset, e.fill = after(t0, d.ResetAfter), after(t0, d.RefillAfter)
		return e
	}
	for {
		h, sh, e := s.find(op)
		if e == nil {
			sh.Lock()
			if s.gen(h).Load() == gen && sh.Find(h, op.Limit.Name(), op.Key) == nil {
				e := entries.New(op.Limit.Name(), op.Key)
				e.facts.Store(next(nil))
				sh.Insert(h, &e.Header, t0)
			}
			sh.Unlock()
			return
		}
		if !e.Lock() {
			continue // removed meanwhile: look again
		}
		if s.gen(h).Load() == gen {
			e.facts.Store(next(e.facts.Load()))
		}
		e.Unlock()
		return
	}
}

// Len returns the number of entries the Store holds, those that ran out
// included until they are dropped.
func (s *Store) Len() int { return s.keys.Len() }

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
		gens := s.genList(ops)
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
	gens := s.genList(sub)
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
func (s *Store) genList(ops []spigot.Op) []uint64 {
	g := make([]uint64, len(ops))
	for i, op := range ops {
		g[i] = s.genOf(op)
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
	gens := s.genList(ops)
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
