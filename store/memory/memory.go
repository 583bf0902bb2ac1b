// Package memory is an in-process spigot.Store: the fastest store, for a
// single replica, for tests, and as the local side of store/hybrid.
//
// It runs spigot's model (store.Apply) on sharded hash tables. A
// request on a key that the store holds finds it without taking a lock,
// and holds only that key's own lock, for the arithmetic: callers on
// different keys do not wait for each other, and callers on one key wait
// only for that. A key being added also takes a lock of the key's shard.
// An operation on a key that has state, or had it in the last ten
// seconds, allocates nothing (but for a sliding log whose log outgrows
// its array).
//
// A key's state stops counting once its limit is whole again
// (State.FullAt), so idle keys hold nothing back. Its memory is kept for
// reuse for ten seconds more, so that a key that comes back (a user well
// under their limit) costs no allocation, and is given back as the store
// grows or by Sweep; WithMaxKeys caps the number of keys held at once
// against floods of distinct keys, taking the place of a full key before
// any other. It starts no goroutine and needs no Close.
//
// It does every operation (Take, TakeUpTo, Refund, Reset, Peek) on every
// kind of limit, since it runs the model itself, and applies several at
// once (DoMulti): a batch, or all-or-nothing in one atomic step.
package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/keyed"
	"github.com/spigot-go/spigot/store"
)

var _ spigot.Store = (*Store)(nil)

// keepFull is how long, in µs, a key whose limit is full again keeps its
// memory for reuse before a shard that grows gives it back.
const keepFull = int64(10 * time.Second / time.Microsecond)

// Store is an in-process store. It is safe for concurrent use. The zero
// Store is not usable; call New.
type Store struct {
	clock clock.Clock
	// system is set when clock is clock.System(): the store then reads
	// the same time from the monotonic clock alone, as base (a reading
	// of the system clock) plus the time since.
	system  bool
	base    time.Time
	baseNs  int64 // base in ns since the Unix epoch
	keys    *keyed.Table
	maxKeys int
}

// The store's entries, in a keyed.Table: the state of a token or leaky
// bucket's key in an entry of 48 bytes with its id after it, and every
// other state (a window's, a log's) in a slowEntry. A request finds its
// key's entry without a lock and changes its state under the entry's own
// lock; adding or removing a key, and whatever reads every key (Len,
// Sweep, Evictions, an all-or-nothing DoMulti), take the locks of the
// shards as well.
var (
	fast = keyed.NewKind[entry]()
	slow = keyed.NewKind[slowEntry]()
)

// An entry is the state of one key of one token or leaky bucket, compact:
// the fields of store.State that such a state uses, with its Kind in the
// sign of scale. Its Header's lock guards the fields after it.
type entry struct {
	keyed.Header
	stamp  int64
	fullAt int64 // for the zero State, the instant it became so
	tokens int64
	scale  int64 // a TokenBucket's Scale, a LeakyBucket's negated, or 0 for the zero State
}

// A slowEntry is the state of a key that an entry cannot hold. Its
// Header's lock guards the fields after it.
type slowEntry struct {
	keyed.Header
	state store.State
	since int64 // when state is the zero State, the instant it became so
}

// An Option configures a Store.
type Option func(*Store)

// WithClock makes the store read the time from c instead of the system
// clock, as tests with clocktest do.
func WithClock(c clock.Clock) Option { return func(s *Store) { s.clock = c } }

// WithMaxKeys caps the number of keys the store holds at once at n (n ≤ 0
// means no cap, the default), to bound its memory under a flood of
// distinct keys, such as random source addresses.
//
// A new key that arrives when its part of the store is at the cap (the cap
// is split between shards, so eviction can begin a little below n) takes
// the place of an existing key: among a few keys sampled from that part,
// one whose bucket is already full again if there is one, otherwise the one
// nearest to full. An evicted key's next request finds a full bucket, so
// it may be admitted up to the tokens its bucket was short of full; keys
// the store keeps are never admitted beyond their limit. Evicting the
// nearest-to-full key keeps that error small and keeps the state of the
// keys that are being limited hardest (a flooder's empty bucket is the last
// to go). The keys held count those whose memory is kept for reuse.
func WithMaxKeys(n int) Option { return func(s *Store) { s.maxKeys = n } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{clock: clock.System()}
	for _, o := range opts {
		o(s)
	}
	// Interfaces of different dynamic types compare unequal without
	// panicking, whatever the type of s.clock.
	if s.clock == clock.System() {
		s.system, s.base = true, time.Now()
		s.baseNs = s.base.UnixNano()
	}
	s.keys = keyed.New(keyed.Config{MaxKeys: s.maxKeys, Full: full, Keep: keepFull})
	return s
}

// now returns the store's time, and the same in µs since the Unix epoch.
func (s *Store) now() (time.Time, int64) {
	if s.system {
		t := (s.baseNs + int64(time.Since(s.base))) / 1e3
		return time.UnixMicro(t), t
	}
	now := s.clock.Now()
	return now, now.UnixMicro()
}

// state returns e's state.
func (e *entry) state() store.State {
	switch {
	case e.scale > 0:
		return store.State{Kind: spigot.TokenBucket, Stamp: e.stamp, FullAt: e.fullAt, Tokens: e.tokens, Scale: e.scale}
	case e.scale < 0:
		return store.State{Kind: spigot.LeakyBucket, Stamp: e.stamp, FullAt: e.fullAt, Tokens: e.tokens, Scale: -e.scale}
	}
	return store.State{}
}

// load sets *st, the zero State, to e's state, field by field: no State
// is built to be copied.
func (e *entry) load(st *store.State) {
	switch {
	case e.scale > 0:
		st.Kind, st.Scale = spigot.TokenBucket, e.scale
	case e.scale < 0:
		st.Kind, st.Scale = spigot.LeakyBucket, -e.scale
	default:
		return
	}
	st.Stamp, st.FullAt, st.Tokens = e.stamp, e.fullAt, e.tokens
}

// compact returns the scale of st as an entry holds it (a LeakyBucket's
// negated, 0 for the zero State), and whether an entry can hold st.
func compact(st *store.State) (int64, bool) {
	if st.Start|st.Window|st.Count|st.Prev != 0 || st.Log != nil {
		return 0, false
	}
	switch {
	case st.Kind == spigot.TokenBucket && st.Scale > 0:
		return st.Scale, true
	case st.Kind == spigot.LeakyBucket && st.Scale > 0:
		return -st.Scale, true
	case st.IsZero():
		return 0, true
	}
	return 0, false
}

// set makes st e's state, if e can hold it, at t µs, and reports whether
// it could.
func (e *entry) set(st *store.State, t int64) bool {
	scale, ok := compact(st)
	switch {
	case !ok:
		return false
	case scale == 0:
		e.stamp, e.fullAt, e.tokens, e.scale = 0, t, 0, 0
	default:
		e.stamp, e.fullAt, e.tokens, e.scale = st.Stamp, st.FullAt, st.Tokens, scale
	}
	return true
}

// apply applies op to e's state at now (t µs).
func (e *slowEntry) apply(op *spigot.Op, now time.Time, t int64) (spigot.Decision, error) {
	d, err := store.Apply(*op, &e.state, now)
	if e.state.IsZero() {
		e.since = t
	}
	return d, err
}

// full is the table's keyed.Config.Full: whether x's limit is full at t
// (its state no longer counts), and since when: from then on, it is memory
// kept for reuse. Of the keys not full, the nearest to full is evicted
// first.
func full(x *keyed.Header, t int64) (bool, int64) {
	if e := fast.Of(x); e != nil {
		return e.scale == 0 || e.fullAt <= t, e.fullAt
	}
	e := slow.Of(x)
	if e.state.IsZero() {
		return true, e.since
	}
	return e.state.FullAt <= t, e.state.FullAt
}

// newSlow returns a slowEntry holding st for key in bucket name.
func newSlow(name, key string, st *store.State, t int64) *keyed.Header {
	e := slow.New(name, key)
	e.state, e.since = *st, t
	return &e.Header
}

// Do implements spigot.Store: it applies op with store.Apply, in place,
// under the lock of op's key.
func (s *Store) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := ctx.Err(); err != nil {
		return spigot.Decision{}, err
	}
	// The common case, a token or leaky bucket's key with an entry, is
	// here, so that its frame stays small; doSlow does the rest.
	now, t := s.now()
	name := op.Limit.Name()
	h := s.keys.Hash(name, op.Key)
	sh := s.keys.Shard(h)
	for {
		x := sh.First(h) // inlined: the key's entry, but for a rare collision
		if x != nil && !x.Is(name, op.Key) {
			x = sh.Find(h, name, op.Key)
		}
		if x == nil {
			break
		}
		if !x.Lock() {
			continue // removed since: look again
		}
		e := fast.Of(x)
		if e == nil {
			d, err := slow.Of(x).apply(&op, now, t)
			x.Unlock()
			return d, err
		}
		var st store.State
		e.load(&st)
		d, err := store.Apply(op, &st, now) // err: an invalid op, which changed nothing
		if e.set(&st, t) {
			x.Unlock()
			return d, err
		}
		// A state that e cannot hold (a bucket's name reused for a window):
		// doSlow applies the op again to move it, under sh locked.
		x.Unlock()
		return s.doSlow(sh, h, name, &op, now, t, true)
	}
	return s.doSlow(sh, h, name, &op, now, t, false)
}

// doSlow is Do for a key without an entry, or whose entry cannot hold its
// new state (moving).
func (s *Store) doSlow(sh *keyed.Shard, h uint64, name string, op *spigot.Op, now time.Time, t int64, moving bool) (spigot.Decision, error) {
	if !moving {
		// A key without state: there is nothing to add unless Apply leaves
		// some, as a Peek, a Refund or a Reset never do.
		var st store.State
		d, err := store.Apply(*op, &st, now)
		if st.IsZero() {
			return d, err
		}
	}
	sh.Lock()
	defer sh.Unlock()
	// Under sh's lock, an entry found is not dead, and none is added or
	// removed.
	if x := sh.Find(h, name, op.Key); x != nil {
		x.Lock()
		e := fast.Of(x)
		if e == nil {
			d, err := slow.Of(x).apply(op, now, t)
			x.Unlock()
			return d, err
		}
		var st store.State
		e.load(&st)
		d, err := store.Apply(*op, &st, now)
		if e.set(&st, t) {
			x.Unlock()
		} else {
			sh.Replace(h, x, newSlow(name, op.Key, &st, t))
		}
		return d, err
	}
	var st store.State // never seen, or forgotten
	d, err := store.Apply(*op, &st, now)
	if !st.IsZero() {
		insert(sh, h, name, op.Key, &st, t)
	}
	return d, err
}

// insert adds st, not the zero State, for key in bucket name under hash h
// to sh, locked, which holds no entry for it, in an entry if one can hold
// it.
func insert(sh *keyed.Shard, h uint64, name, key string, st *store.State, t int64) {
	if _, ok := compact(st); !ok {
		sh.Insert(h, newSlow(name, key, st, t), t)
		return
	}
	e := fast.New(name, key)
	e.set(st, t)
	sh.Insert(h, &e.Header, t)
}

// DoMulti implements spigot.Store. With Independent it applies each op as
// Do does, in order. With AllOrNothing it applies them in one atomic step:
// it locks the shards of every key, in one global order (so that calls
// naming the same keys in any order never deadlock), decides each op on
// the state the ops before it left (two Takes on one key are charged
// together), and keeps the result only if no Take or TakeUpTo was
// denied. When one was, nothing changes and every N is 0: a denied op's
// decision is its own in the batch, and every other op's a Peek on its key
// as the batch found it (store.PeekOf).
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if err := store.CheckMulti(mode, ops, out); err != nil || len(ops) == 0 {
		return err
	}
	if mode == spigot.Independent || len(ops) == 1 {
		for i, op := range ops {
			d, err := s.Do(ctx, op)
			if err != nil {
				return fmt.Errorf("spigot: memory: DoMulti: op %d (%v): %w", i, op, err)
			}
			out[i] = d
		}
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.allOrNothing(ops, out)
}

// pending is the state one key will have if an all-or-nothing batch
// commits.
type pending struct {
	h     uint64
	name  string
	key   string
	x     *keyed.Header // the key's entry, locked, or nil
	state store.State
}

// allOrNothing is DoMulti's AllOrNothing for valid ops.
func (s *Store) allOrNothing(ops []spigot.Op, out []spigot.Decision) error {
	now, t := s.now()
	// Up to small ops, the bookkeeping lives on the stack: no allocation.
	const small = 8
	var keysBuf [small]pending
	var atBuf, shardsBuf [small]int
	keys, at, shards := keysBuf[:0], atBuf[:0], shardsBuf[:0]
	if len(ops) > small {
		keys, at, shards = make([]pending, 0, len(ops)), make([]int, 0, len(ops)), make([]int, 0, len(ops))
	}
	for _, op := range ops {
		name := op.Limit.Name()
		j := 0
		for j < len(keys) && (keys[j].name != name || keys[j].key != op.Key) {
			j++
		}
		if j == len(keys) {
			h := s.keys.Hash(name, op.Key)
			keys = append(keys, pending{h: h, name: name, key: op.Key})
			shards = append(shards, s.keys.Index(h))
		}
		at = append(at, j) // ops[i]'s key is keys[at[i]]
	}
	slices.Sort(shards)
	shards = slices.Compact(shards)
	for _, i := range shards {
		s.keys.ShardAt(i).Lock()
	}
	defer func() {
		for _, i := range slices.Backward(shards) {
			s.keys.ShardAt(i).Unlock()
		}
	}()
	// With the shards locked, no entry is added or removed: a key's entry
	// is locked for the batch, as requests change it under its lock alone.
	for j := range keys {
		p := &keys[j]
		sh := s.keys.Shard(p.h)
		x := sh.First(p.h) // inlined, as in Do
		if x != nil && !x.Is(p.name, p.key) {
			x = sh.Find(p.h, p.name, p.key)
		}
		if x == nil {
			continue
		}
		x.Lock()
		p.x = x
		if e := fast.Of(x); e != nil {
			p.state = e.state()
		} else {
			e := slow.Of(x)
			p.state = e.state
			// Apply reuses a log's array, and a batch denied keeps the
			// entry's state: its own copy.
			p.state.Log = slices.Clone(e.state.Log)
		}
	}
	denied := false
	for i, op := range ops {
		d, _ := store.Apply(op, &keys[at[i]].state, now) // valid: checked
		out[i] = d
		if store.Denies(op, d) {
			denied = true
		}
	}
	if denied {
		// Nothing changes: each op that did not deny is a Peek on its key
		// as the batch found it, which its entry, still locked, holds.
		for i, op := range ops {
			if store.Denies(op, out[i]) {
				out[i].N = 0
				continue
			}
			var st store.State // a key with no entry is whole
			if x := keys[at[i]].x; x != nil {
				if e := fast.Of(x); e != nil {
					st = e.state()
				} else {
					st = slow.Of(x).state
					st.Log = slices.Clone(st.Log) // a Peek's Apply may reuse it
				}
			}
			out[i], _ = store.Apply(store.PeekOf(op), &st, now)
		}
		for j := range keys {
			if x := keys[j].x; x != nil {
				x.Unlock()
			}
		}
		return nil
	}
	// The entries first, so that none is locked when an insert below
	// samples entries to evict or sweeps.
	for j := range keys {
		p := &keys[j]
		if p.x == nil {
			continue
		}
		if e := fast.Of(p.x); e == nil {
			e := slow.Of(p.x)
			e.state = p.state
			if e.state.IsZero() {
				e.since = t
			}
			p.x.Unlock()
		} else if e.set(&p.state, t) {
			p.x.Unlock()
		} else {
			s.keys.Shard(p.h).Replace(p.h, p.x, newSlow(p.name, p.key, &p.state, t))
		}
	}
	for j := range keys {
		if p := &keys[j]; p.x == nil && !p.state.IsZero() {
			insert(s.keys.Shard(p.h), p.h, p.name, p.key, &p.state, t)
		}
	}
	return nil
}

// Len reports how many keys hold state at the store's clock: those whose
// bucket is not yet full again. It changes nothing (a key whose bucket is
// full again is no longer counted, though its memory is given back only
// as the store grows, or by Sweep). It takes each shard's lock in turn and
// costs time proportional to the number of keys held.
func (s *Store) Len() int {
	_, t := s.now()
	return s.keys.Live(t)
}

// Sweep forgets every key whose bucket is full again and frees its memory,
// including the memory kept for keys that may come back. State is
// forgotten as it expires whatever happens (an expired key is a full
// bucket), but its memory is reclaimed only as the store grows, and then
// ten seconds after; a process that may sit idle after a flood of
// distinct keys can call Sweep from a time.Ticker to give that memory
// back. It takes each shard's lock in turn and costs time proportional to
// the number of keys held.
func (s *Store) Sweep() {
	_, t := s.now()
	s.keys.Sweep(t)
}

// Evictions reports how many keys WithMaxKeys has evicted before their
// bucket was full again: each is a key whose limit the store may have
// relaxed.
func (s *Store) Evictions() int { return s.keys.Evictions() }
