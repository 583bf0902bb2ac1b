// Package memory is an in-process spigot.Store: the fastest store, for a
// single replica, for tests, and as the local side of store/hybrid.
//
// It runs spigot's model (spigot.Op.Apply) on a sharded map, so parallel callers
// on different keys rarely contend on a lock, and an operation on a key that
// already has state allocates nothing (but for a sliding log whose log
// outgrows its array). A key's state is forgotten once its limit is whole
// again (State.FullAt), so idle keys cost nothing; WithMaxKeys caps the
// number of keys held at once against floods of distinct keys. It starts no
// goroutine and needs no Close.
//
// It does every operation (Take, TakeUpTo, Refund, Reset, Peek) on every
// kind of limit, since it runs the model itself, and applies several at
// once (DoMulti): a batch, or all-or-nothing in one atomic step.
package memory

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
)

var _ spigot.Store = (*Store)(nil)

const (
	maxShards = 256
	// minKeysPerShard keeps small WithMaxKeys caps exact: a cap is split
	// between shards, and shards with few keys each would fill unevenly.
	minKeysPerShard = 64
	// sample is how many keys an insert at the cap looks at to choose one
	// to evict.
	sample = 8
	// firstSweep is the size at which a shard first sweeps expired state.
	firstSweep = 64
)

// Store is an in-process store. It is safe for concurrent use. The zero
// Store is not usable; call New.
type Store struct {
	clock   clock.Clock
	seed    maphash.Seed
	mask    uint64
	shards  []shard
	maxKeys int
}

// A shard holds the keys whose hash selects it, under one lock. Its map is
// indexed by the key's hash, which the store computes anyway to choose the
// shard, so a request hashes its key once and the map hashes only an
// integer; the entries of one hash (the same key in several buckets, or a
// collision) are chained.
type shard struct {
	mu        sync.Mutex
	m         map[uint64]*entry
	n         int // entries held
	peak      int // the most entries held since m was made
	sweepAt   int // a new key that makes the shard this big sweeps it first
	perShard  int // this shard's cap, 0 when unbounded
	evictions int
	_         [64]byte // keep shards' locks on separate cache lines
}

type entry struct {
	bucket, key string
	state       spigot.State // forgotten from state.FullAt on
	next        *entry       // the next entry with the same hash
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
// to go).
func WithMaxKeys(n int) Option { return func(s *Store) { s.maxKeys = n } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{clock: clock.System(), seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(s)
	}
	n := maxShards
	if s.maxKeys > 0 {
		for n > 1 && s.maxKeys/n < minKeysPerShard {
			n /= 2
		}
	}
	s.shards = make([]shard, n)
	s.mask = uint64(n - 1)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = make(map[uint64]*entry)
		sh.sweepAt = firstSweep
		if s.maxKeys > 0 {
			// Split the cap exactly: the first maxKeys%n shards hold one more.
			sh.perShard = s.maxKeys / n
			if i < s.maxKeys%n {
				sh.perShard++
			}
		}
	}
	return s
}

// hash returns key's hash: its low bits choose the shard, and the shard's
// map is indexed by all of it.
func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

// Do implements spigot.Store: it applies op with spigot.Op.Apply, in place,
// under the lock of op's key.
func (s *Store) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := ctx.Err(); err != nil {
		return spigot.Decision{}, err
	}
	now := s.clock.Now()
	t := now.UnixMicro()
	h := s.hash(op.Key)
	sh := &s.shards[h&s.mask]
	name := op.Limit.Name()

	sh.mu.Lock()
	if e := sh.find(h, name, op.Key); e != nil {
		d, err := op.Apply(&e.state, now) // in place; full from its FullAt on
		if e.state.IsZero() {             // full: nothing worth keeping
			sh.remove(h, e)
		}
		sh.mu.Unlock()
		return d, err // err: an invalid op, which changed nothing
	}
	var state spigot.State // never seen
	d, err := op.Apply(&state, now)
	if !state.IsZero() {
		// The key is copied, so that holding it cannot pin a larger string
		// it was cut from (a request line, a header).
		sh.insert(h, &entry{bucket: name, key: strings.Clone(op.Key), state: state}, t)
	}
	sh.mu.Unlock()
	return d, err
}

// DoMulti implements spigot.Store. With Independent it applies each op as
// Do does, in order. With AllOrNothing it applies them in one atomic step:
// it locks the shards of every key, in one global order (so that calls
// naming the same keys in any order never deadlock), decides each op on
// the state the ops before it left (two Takes on one key are charged
// together), and keeps the result only if no Take or TakeUpTo was
// denied. When one was, nothing changes: out holds what each op would have
// decided in the batch, with N 0.
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if err := spigot.CheckMulti(mode, ops, out); err != nil || len(ops) == 0 {
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
	state spigot.State
}

// allOrNothing is DoMulti's AllOrNothing for valid ops.
func (s *Store) allOrNothing(ops []spigot.Op, out []spigot.Decision) error {
	now := s.clock.Now()
	t := now.UnixMicro()
	// Up to small ops, the bookkeeping lives on the stack: no allocation.
	const small = 8
	var keysBuf [small]pending
	var atBuf [small]int
	var shardsBuf [small]uint64
	keys, at, shards := keysBuf[:0], atBuf[:0], shardsBuf[:0]
	if len(ops) > small {
		keys, at, shards = make([]pending, 0, len(ops)), make([]int, 0, len(ops)), make([]uint64, 0, len(ops))
	}
	for _, op := range ops {
		h, name := s.hash(op.Key), op.Limit.Name()
		j := 0
		for j < len(keys) && (keys[j].h != h || keys[j].name != name || keys[j].key != op.Key) {
			j++
		}
		if j == len(keys) {
			keys = append(keys, pending{h: h, name: name, key: op.Key})
			shards = append(shards, h&s.mask)
		}
		at = append(at, j) // ops[i]'s key is keys[at[i]]
	}
	slices.Sort(shards)
	shards = slices.Compact(shards)
	for _, i := range shards {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range slices.Backward(shards) {
			s.shards[i].mu.Unlock()
		}
	}()
	for j := range keys {
		p := &keys[j]
		if e := s.shards[p.h&s.mask].find(p.h, p.name, p.key); e != nil {
			p.state = e.state
			// Apply reuses a log's array, and a batch denied keeps the
			// entry's state: its own copy.
			p.state.Log = slices.Clone(e.state.Log)
		}
	}
	denied := false
	for i, op := range ops {
		d, _ := op.Apply(&keys[at[i]].state, now) // valid: checked
		out[i] = d
		if !d.Allowed() && (op.Action == spigot.Take || op.Action == spigot.TakeUpTo) {
			denied = true
		}
	}
	if denied {
		for i := range out {
			out[i].N = 0
		}
		return nil
	}
	for _, p := range keys {
		sh := &s.shards[p.h&s.mask]
		e := sh.find(p.h, p.name, p.key)
		switch {
		case e != nil && p.state.IsZero():
			sh.remove(p.h, e)
		case e != nil:
			e.state = p.state
		case !p.state.IsZero():
			sh.insert(p.h, &entry{bucket: p.name, key: strings.Clone(p.key), state: p.state}, t)
		}
	}
	return nil
}

// find returns the entry of key in bucket, or nil.
func (sh *shard) find(h uint64, bucket, key string) *entry {
	for e := sh.m[h]; e != nil; e = e.next {
		if e.key == key && e.bucket == bucket {
			return e
		}
	}
	return nil
}

// remove unlinks e, held under hash h.
func (sh *shard) remove(h uint64, e *entry) {
	sh.n--
	head := sh.m[h]
	switch {
	case head != e:
		p := head
		for p.next != e {
			p = p.next
		}
		p.next = e.next
	case e.next != nil:
		sh.m[h] = e.next
	default:
		delete(sh.m, h)
	}
}

// insert adds a new entry under hash h, making room first when the shard is
// at its cap, and sweeping expired state whenever the shard has doubled
// since its last sweep (amortized O(1) per insert).
func (sh *shard) insert(h uint64, e *entry, t int64) {
	switch {
	case sh.perShard > 0 && sh.n >= sh.perShard:
		sh.evict(t)
	case sh.n+1 >= sh.sweepAt:
		sh.sweep(t)
	}
	e.next = sh.m[h]
	sh.m[h] = e
	sh.n++
	sh.peak = max(sh.peak, sh.n)
}

// evict removes one entry, sampled as WithMaxKeys says. Map iteration
// starts at a random place, so the sample is spread over the shard.
func (sh *shard) evict(t int64) {
	var victim *entry
	var vh uint64
	i := 0
scan:
	for h, head := range sh.m {
		for e := head; e != nil; e = e.next {
			if victim == nil || e.state.FullAt < victim.state.FullAt {
				victim, vh = e, h
			}
			if i++; e.state.FullAt <= t || i == sample {
				break scan
			}
		}
	}
	if victim != nil {
		sh.remove(vh, victim)
		if victim.state.FullAt > t {
			sh.evictions++
		}
	}
}

// sweep forgets every entry whose bucket is full again at t, and gives the
// map's memory back when it holds under a quarter of its peak (Go maps
// never shrink).
func (sh *shard) sweep(t int64) {
	for h, head := range sh.m {
		kept := head
		for p := &kept; *p != nil; {
			if e := *p; e.state.FullAt <= t {
				*p = e.next
				sh.n--
			} else {
				p = &e.next
			}
		}
		switch {
		case kept == nil:
			delete(sh.m, h)
		case kept != head:
			sh.m[h] = kept
		}
	}
	if sh.n < sh.peak/4 {
		m := make(map[uint64]*entry, sh.n)
		for h, e := range sh.m {
			m[h] = e
		}
		sh.m, sh.peak = m, sh.n
	}
	sh.sweepAt = max(2*sh.n, firstSweep)
}

// live returns how many entries hold a bucket that is not full at t.
func (sh *shard) live(t int64) int {
	n := 0
	for _, head := range sh.m {
		for e := head; e != nil; e = e.next {
			if e.state.FullAt > t {
				n++
			}
		}
	}
	return n
}

// Len reports how many keys hold state at the store's clock: those whose
// bucket is not yet full again. It changes nothing (a key whose bucket is
// full again is no longer counted, though its memory is given back only
// as the store grows, or by Sweep). It takes each shard's lock in turn and
// costs time proportional to the number of keys held.
func (s *Store) Len() int {
	t := s.clock.Now().UnixMicro()
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.live(t)
		sh.mu.Unlock()
	}
	return n
}

// Sweep forgets every key whose bucket is full again and frees its memory.
// State is forgotten as it expires whatever happens (an expired key is a
// full bucket), but its memory is reclaimed only as the store grows; a
// process that may sit idle after a flood of distinct keys can call Sweep
// from a time.Ticker to give that memory back. It takes each shard's lock
// in turn and costs time proportional to the number of keys held.
func (s *Store) Sweep() {
	t := s.clock.Now().UnixMicro()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweep(t)
		sh.mu.Unlock()
	}
}

// Evictions reports how many keys WithMaxKeys has evicted before their
// bucket was full again: each is a key whose limit the store may have
// relaxed.
func (s *Store) Evictions() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.evictions
		sh.mu.Unlock()
	}
	return n
}
