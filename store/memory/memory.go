// Package memory is an in-process spigot.Store: the fastest store, for a
// single replica, for tests, and as the local side of store/hybrid.
//
// It runs spigot's model (store.Apply) on sharded hash tables. A
// request on a token or leaky bucket's key that the store holds finds it
// without taking a lock, and holds only that key's own lock, for the
// arithmetic: callers on different keys do not wait for each other, and
// callers on one key wait only for that. The other kinds of limit, and a
// key being added, also take a lock of the key's shard. An operation on a
// key that has state, or had it in the last ten seconds, allocates nothing
// (but for a sliding log whose log outgrows its array).
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
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/store"
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
	// stripes is how many locks a shard has for the arithmetic of the keys
	// it holds apart (slow): a key's is chosen by its hash.
	stripes = 4
	// minSlots is the size of a shard's smallest table.
	minSlots = 8
	// keepFull is how long, in µs, a key whose limit is full again keeps
	// its memory for reuse before a shard that grows gives it back.
	keepFull = int64(10 * time.Second / time.Microsecond)
)

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
	seed    maphash.Seed
	mask    uint64
	shards  []shard
	maxKeys int
	// sameHash, when not 0, is the hash of every key: for tests of keys
	// whose hashes collide, which real hashes make too rare to meet.
	sameHash uint64
}

// A shard holds the keys whose hash selects it.
//
// Its table tab holds the state of a token or leaky bucket's key in an
// entry of 48 bytes, found by the hash of the bucket's name and the key,
// which the store computes anyway to choose the shard. slow holds, by
// bucket and key, every other state (a window's, a log's), and the rare
// key whose hash an entry of tab has already.
//
// A request finds its key's entry in tab without a lock (a table is never
// changed but by mu's holder, slot by slot, with atomic stores; one that
// grows or shrinks is replaced whole) and changes its state under the
// entry's own lock. An entry removed from tab is marked dead under that
// lock, so that a request that found it before looks again. mu guards
// what changes tab, and slow and what it holds: a request finds a slow
// key under mu read-locked and changes its state under one of locks,
// chosen by the hash, as well. Adding or removing a key, and whatever
// reads every key (Len, Sweep, Evictions, an all-or-nothing DoMulti),
// take mu locked, which excludes the others, and lock each entry they
// read or change.
type shard struct {
	// What a request reads, alone on its cache line, which only a table
	// that is replaced writes.
	tab atomic.Pointer[table]
	_   [56]byte

	mu        sync.RWMutex
	locks     [stripes]sync.Mutex
	slow      map[string]map[string]*slowEntry // by bucket, then key; nil when empty
	n         int                              // entries held, in tab and slow
	used      int                              // tab's slots not empty: its entries and the removed
	sweepAt   int                              // a new key that makes the shard this big sweeps it first
	perShard  int                              // this shard's cap, 0 when unbounded
	evictions int
	_         [24]byte // whole cache lines a shard, so that shards share none
}

// A table is an open-addressed hash table of entries, probed linearly from
// the slot that the hash's bits above the shard's choose. A slot is empty
// (a nil entry, which ends a probe), holds an entry and its hash, or held
// one that was removed (the entry removed, which a probe passes).
type table struct {
	slots []slot // a power of two of them, never more than 7/8 used
}

type slot struct {
	h atomic.Uint64
	e atomic.Pointer[entry]
}

// removed marks a slot whose entry was removed.
var removed = new(entry)

// find returns the entry of t with hash h, or nil.
func (t *table) find(h uint64) *entry {
	mask := uint64(len(t.slots) - 1)
	for i := h >> 8 & mask; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		e := sl.e.Load()
		if e == nil {
			return nil
		}
		if e != removed && sl.h.Load() == h {
			return e
		}
	}
}

// An entry is the state of one key of one token or leaky bucket, compact:
// the fields of store.State that such a state uses, with its Kind in the
// sign of scale. Its id, the bucket's name, ':' and the key, follows it in
// the same allocation (see newEntry). mu guards the fields after it.
type entry struct {
	mu     sync.Mutex
	idn    uint32 // the id's length, which never changes
	dead   bool   // removed from its table
	stamp  int64
	fullAt int64 // for the zero State, the instant it became so
	tokens int64
	scale  int64 // a TokenBucket's Scale, a LeakyBucket's negated, or 0 for the zero State
}

// entrySize is the size of an entry, and where its id starts.
const entrySize = unsafe.Sizeof(entry{})

// lock locks e and reports true, or reports false if e is dead.
func (e *entry) lock() bool {
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return false
	}
	return true
}

func (e *entry) unlock() { e.mu.Unlock() }

// kill marks e, locked, dead, and unlocks it.
func (e *entry) kill() {
	e.dead = true
	e.mu.Unlock()
}

// A slowEntry is the state of a key that no entry holds.
type slowEntry struct {
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
	s := &Store{clock: clock.System(), seed: maphash.MakeSeed()}
	for _, o := range opts {
		o(s)
	}
	// Interfaces of different dynamic types compare unequal without
	// panicking, whatever the type of s.clock.
	if s.clock == clock.System() {
		s.system, s.base = true, time.Now()
		s.baseNs = s.base.UnixNano()
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
		sh.tab.Store(&table{slots: make([]slot, minSlots)})
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

// now returns the store's time, and the same in µs since the Unix epoch.
func (s *Store) now() (time.Time, int64) {
	if s.system {
		t := (s.baseNs + int64(time.Since(s.base))) / 1e3
		return time.UnixMicro(t), t
	}
	now := s.clock.Now()
	return now, now.UnixMicro()
}

// hash returns the hash of key in bucket: its low bits choose the shard,
// and the shard's map is indexed by all of it. It is the seeded hash of
// the key, which a client cannot aim, mixed with a hash of the bucket's
// name (its length and first and last 8 bytes), so that one key's buckets
// spread out. Two buckets whose names mix alike, which only long names
// that differ in the middle can, share a hash for every key: the second
// of them a key uses is held apart, as a collision is.
func (s *Store) hash(name, key string) uint64 {
	if s.sameHash != 0 {
		return s.sameHash
	}
	return maphash.String(s.seed, key) ^ mix(name)
}

// mix hashes name's length and first and last 8 bytes (for a name
// shorter than 8, its first and last 4, or its first, middle and last).
func mix(name string) uint64 {
	var head, tail uint64
	switch n := len(name); {
	case n >= 8:
		head, tail = le64(name), le64(name[n-8:])
	case n >= 4:
		head, tail = le32(name), le32(name[n-4:])
	case n > 0:
		head = uint64(name[0]) | uint64(name[n/2])<<8 | uint64(name[n-1])<<16
	}
	x := (head ^ uint64(len(name))<<56) * 0x9e3779b97f4a7c15
	x ^= tail * 0xc2b2ae3d27d4eb4f
	return x ^ x>>29
}

// le32 reads the first 4 bytes of s, little-endian.
func le32(s string) uint64 {
	_ = s[3]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24
}

// le64 reads the first 8 bytes of s, little-endian.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// id returns e's id: the bucket's name, ':' and the key.
func (e *entry) id() string {
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(e), entrySize)), e.idn)
}

// is reports whether e holds key in bucket.
func (e *entry) is(name, key string) bool {
	if int(e.idn) != len(name)+1+len(key) {
		return false
	}
	id := e.id()
	return id[len(name)+1:] == key && id[:len(name)] == name
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

// set makes st e's state, if e can hold it, at t µs, and reports whether
// it could.
func (e *entry) set(st *store.State, t int64) bool {
	if st.Start|st.Window|st.Count|st.Prev != 0 || st.Log != nil {
		return false
	}
	scale := st.Scale
	switch {
	case st.Kind == spigot.TokenBucket && scale > 0:
	case st.Kind == spigot.LeakyBucket && scale > 0:
		scale = -scale
	case st.IsZero():
		e.stamp, e.fullAt, e.tokens, e.scale = 0, t, 0, 0
		return true
	default:
		return false
	}
	e.stamp, e.fullAt, e.tokens, e.scale = st.Stamp, st.FullAt, st.Tokens, scale
	return true
}

// full reports whether e's limit is full at t (its state no longer
// counts), and since when: from then on, it is memory kept for reuse.
func (e *entry) full(t int64) (bool, int64) { return e.scale == 0 || e.fullAt <= t, e.fullAt }

func (e *slowEntry) full(t int64) (bool, int64) {
	if e.state.IsZero() {
		return true, e.since
	}
	return e.state.FullAt <= t, e.state.FullAt
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
	h := s.hash(name, op.Key)
	sh := &s.shards[h&s.mask]
	for {
		e := sh.tab.Load().find(h)
		if e == nil || !e.is(name, op.Key) {
			break
		}
		if !e.lock() {
			continue // removed since: look again
		}
		var st store.State
		e.load(&st)
		d, err := store.Apply(op, &st, now) // err: an invalid op, which changed nothing
		if e.set(&st, t) {
			e.unlock()
			return d, err
		}
		// A state that e cannot hold (a bucket's name reused for a window):
		// doSlow applies the op again to move it, under sh.mu locked.
		e.unlock()
		return s.doSlow(sh, h, name, &op, now, t, true)
	}
	return s.doSlow(sh, h, name, &op, now, t, false)
}

// doSlow is Do for a key without an entry of its own, or whose entry
// cannot hold its new state (moving).
func (s *Store) doSlow(sh *shard, h uint64, name string, op *spigot.Op, now time.Time, t int64, moving bool) (spigot.Decision, error) {
	if !moving {
		sh.mu.RLock()
		if e := sh.findSlow(name, op.Key); e != nil {
			mu := &sh.locks[(h>>32)%stripes]
			mu.Lock()
			d, err := store.Apply(*op, &e.state, now)
			if e.state.IsZero() {
				e.since = t
			}
			mu.Unlock()
			sh.mu.RUnlock()
			return d, err
		}
		sh.mu.RUnlock()
		// A key without state: there is nothing to add unless Apply leaves
		// some, as a Peek, a Refund or a Reset never do.
		var st store.State
		d, err := store.Apply(*op, &st, now)
		if st.IsZero() {
			return d, err
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Under mu, an entry of tab is not dead, and none is added or removed.
	if e := sh.tab.Load().find(h); e != nil && e.is(name, op.Key) {
		e.lock()
		var st store.State
		e.load(&st)
		d, err := store.Apply(*op, &st, now)
		if e.set(&st, t) {
			e.unlock()
		} else {
			sh.remove(h, e)
			sh.addSlow(name, op.Key, &st, t)
		}
		return d, err
	}
	if e := sh.findSlow(name, op.Key); e != nil {
		d, err := store.Apply(*op, &e.state, now)
		if e.state.IsZero() {
			e.since = t
		}
		return d, err
	}
	var st store.State // never seen, or forgotten
	d, err := store.Apply(*op, &st, now)
	if !st.IsZero() {
		sh.insert(h, name, op.Key, &st, t)
	}
	return d, err
}

// findSlow returns the slowEntry of key in bucket, or nil.
func (sh *shard) findSlow(name, key string) *slowEntry {
	if sh.slow == nil {
		return nil
	}
	return sh.slow[name][key]
}

// addSlow adds a slowEntry holding st for key in bucket, counted as the
// entry it replaces in m or as a new one by the caller.
func (sh *shard) addSlow(name, key string, st *store.State, t int64) {
	if sh.slow == nil {
		sh.slow = make(map[string]map[string]*slowEntry)
	}
	keys := sh.slow[name]
	if keys == nil {
		keys = make(map[string]*slowEntry)
		sh.slow[name] = keys
	}
	// The key is copied, so that holding it cannot pin a larger string it
	// was cut from (a request line, a header).
	keys[strings.Clone(key)] = &slowEntry{state: *st, since: t}
}

// removeSlow removes the slowEntry of key in bucket.
func (sh *shard) removeSlow(name, key string) {
	keys := sh.slow[name]
	delete(keys, key)
	if len(keys) == 0 {
		delete(sh.slow, name)
		if len(sh.slow) == 0 {
			sh.slow = nil
		}
	}
}

// insert adds st, not the zero State, for key in bucket under hash h,
// making room first when the shard is at its cap, and sweeping whenever
// the shard has doubled since its last sweep (amortized O(1) per insert).
func (sh *shard) insert(h uint64, name, key string, st *store.State, t int64) {
	switch {
	case sh.perShard > 0 && sh.n >= sh.perShard:
		sh.evict(t)
	case sh.n+1 >= sh.sweepAt:
		sh.sweep(t, t-keepFull)
	}
	sh.n++
	if sh.tab.Load().find(h) == nil && uint64(len(name))+1+uint64(len(key)) <= math.MaxUint32 {
		e := newEntry(name, key)
		if e.set(st, t) {
			sh.add(h, e)
			return
		}
	}
	sh.addSlow(name, key, st, t)
}

// add puts e, which no request can see yet, in tab under hash h, which no
// entry of tab has, in a new table if tab would be more than 7/8 used.
func (sh *shard) add(h uint64, e *entry) {
	tab := sh.tab.Load()
	if 8*(sh.used+1) > 7*len(tab.slots) {
		tab = sh.resize(tab)
	}
	mask := uint64(len(tab.slots) - 1)
	i := h >> 8 & mask
	for {
		if x := tab.slots[i].e.Load(); x == nil || x == removed {
			break
		}
		i = (i + 1) & mask
	}
	sl := &tab.slots[i]
	if sl.e.Load() == nil {
		sh.used++
	}
	// The hash first: a request that loads the entry then reads its hash.
	sl.h.Store(h)
	sl.e.Store(e)
}

// remove takes e, locked, out of tab, where it is under hash h, and marks
// it dead for the requests that found it already.
func (sh *shard) remove(h uint64, e *entry) {
	tab := sh.tab.Load()
	mask := uint64(len(tab.slots) - 1)
	for i := h >> 8 & mask; ; i = (i + 1) & mask {
		if sl := &tab.slots[i]; sl.e.Load() == e {
			sl.e.Store(removed)
			break
		}
	}
	e.kill()
}

// resize replaces tab, the shard's table, with one that holds its entries
// at most half used (and at least minSlots), and returns it. Requests that
// loaded the old one find the same entries in it.
func (sh *shard) resize(tab *table) *table {
	live := 0
	for i := range tab.slots {
		if e := tab.slots[i].e.Load(); e != nil && e != removed {
			live++
		}
	}
	size := minSlots
	for size < 2*(live+1) {
		size *= 2
	}
	nt := &table{slots: make([]slot, size)}
	mask := uint64(size - 1)
	for i := range tab.slots {
		sl := &tab.slots[i]
		e := sl.e.Load()
		if e == nil || e == removed {
			continue
		}
		h := sl.h.Load()
		j := h >> 8 & mask
		for nt.slots[j].e.Load() != nil {
			j = (j + 1) & mask
		}
		nt.slots[j].h.Store(h)
		nt.slots[j].e.Store(e)
	}
	sh.tab.Store(nt)
	sh.used = live
	return nt
}

// newEntry returns an entry for key in bucket name, with its id: the
// name, ':' and a copy of the key (so that holding it cannot pin a larger
// string the key was cut from, such as a request line). An entry holds no
// pointer, so the entry and its id are one allocation of words, which the
// garbage collector does not scan, and one cache line to read for a
// lookup when the id is short.
func newEntry(name, key string) *entry {
	n := len(name) + 1 + len(key)
	words := make([]uint64, (int(entrySize)+n+7)/8)
	e := (*entry)(unsafe.Pointer(&words[0]))
	id := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(e), entrySize)), n)
	copy(id, name)
	id[len(name)] = ':'
	copy(id[len(name)+1:], key)
	e.idn = uint32(n) // never written again
	return e
}

// entries calls f with each entry of tab and its hash, until f returns
// false, starting at slot from.
func (t *table) entries(from uint64, f func(h uint64, e *entry) bool) {
	mask := uint64(len(t.slots) - 1)
	for k := range uint64(len(t.slots)) {
		sl := &t.slots[(from+k)&mask]
		if e := sl.e.Load(); e != nil && e != removed && !f(sl.h.Load(), e) {
			return
		}
	}
}

// fullAt is e.full under e's lock.
func (e *entry) fullLocked(t int64) (bool, int64) {
	e.lock()
	full, at := e.full(t)
	e.unlock()
	return full, at
}

// evict removes one entry, sampled as WithMaxKeys says, from a random
// place in the shard.
func (sh *shard) evict(t int64) {
	var (
		victim  *entry
		vh      uint64
		svictim *slowEntry
		sname   string
		skey    string
		vfull   bool
		vat     int64
		i       int
	)
	better := func(full bool, at int64) bool {
		return i == 0 || full && !vfull || full == vfull && at < vat
	}
	sh.tab.Load().entries(rand.Uint64(), func(h uint64, e *entry) bool {
		e.lock()
		full, at := e.full(t)
		if full {
			// None is better: removed at once, still full.
			sh.remove(h, e)
			victim, vfull = nil, true
			return false
		}
		e.unlock()
		if better(full, at) {
			victim, vh, vat = e, h, at
		}
		i++
		return i < sample
	})
	if vfull {
		sh.n--
		return
	}
	if i < sample {
	slow:
		for name, keys := range sh.slow {
			for key, e := range keys {
				if full, at := e.full(t); better(full, at) {
					victim, svictim, sname, skey, vfull, vat = nil, e, name, key, full, at
				}
				if i++; vfull || i == sample {
					break slow
				}
			}
		}
	}
	switch {
	case victim != nil:
		// Requests may have changed it since it was sampled: it counts as
		// evicted if it is not full now.
		victim.lock()
		vfull, _ = victim.full(t)
		sh.remove(vh, victim)
	case svictim != nil:
		sh.removeSlow(sname, skey)
	default:
		return
	}
	sh.n--
	if !vfull {
		sh.evictions++
	}
}

// sweep removes every entry whose limit is full at t and has been since
// cutoff µs or before, and gives the table's memory back when it is under
// an eighth used.
func (sh *shard) sweep(t, cutoff int64) {
	tab := sh.tab.Load()
	live := 0
	tab.entries(0, func(h uint64, e *entry) bool {
		e.lock()
		if full, at := e.full(t); full && at <= cutoff {
			sh.remove(h, e)
			sh.n--
		} else {
			e.unlock()
			live++
		}
		return true
	})
	for name, keys := range sh.slow {
		for key, e := range keys {
			if full, at := e.full(t); full && at <= cutoff {
				delete(keys, key)
				sh.n--
			}
		}
		if len(keys) == 0 {
			delete(sh.slow, name)
		}
	}
	if len(sh.slow) == 0 {
		sh.slow = nil
	}
	if 8*live < len(tab.slots) && len(tab.slots) > minSlots {
		sh.resize(tab)
	}
	sh.sweepAt = max(2*sh.n, firstSweep)
}

// live returns how many keys hold a state that counts at t: not the zero
// State, and not full again.
func (sh *shard) live(t int64) int {
	n := 0
	sh.tab.Load().entries(0, func(_ uint64, e *entry) bool {
		if full, _ := e.fullLocked(t); !full {
			n++
		}
		return true
	})
	for _, keys := range sh.slow {
		for _, e := range keys {
			if full, _ := e.full(t); !full {
				n++
			}
		}
	}
	return n
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
	e     *entry // the key's entry, locked, or nil
	state store.State
}

// allOrNothing is DoMulti's AllOrNothing for valid ops.
func (s *Store) allOrNothing(ops []spigot.Op, out []spigot.Decision) error {
	now, t := s.now()
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
		name := op.Limit.Name()
		j := 0
		for j < len(keys) && (keys[j].name != name || keys[j].key != op.Key) {
			j++
		}
		if j == len(keys) {
			h := s.hash(name, op.Key)
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
	// With the shards locked, no entry is added or removed: a key's entry
	// is locked for the batch, as requests change it under its lock alone.
	for j := range keys {
		p := &keys[j]
		sh := &s.shards[p.h&s.mask]
		if e := sh.tab.Load().find(p.h); e != nil && e.is(p.name, p.key) {
			e.lock()
			p.e, p.state = e, e.state()
		} else if e := sh.findSlow(p.name, p.key); e != nil {
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
		if !d.Allowed() && (op.Action == spigot.Take || op.Action == spigot.TakeUpTo) {
			denied = true
		}
	}
	if denied {
		for j := range keys {
			if e := keys[j].e; e != nil {
				e.unlock()
			}
		}
		for i := range out {
			out[i].N = 0
		}
		return nil
	}
	// The entries first, so that none is locked when an insert below
	// samples entries to evict or sweeps.
	for j := range keys {
		p := &keys[j]
		if p.e == nil {
			continue
		}
		if p.e.set(&p.state, t) {
			p.e.unlock()
		} else {
			sh := &s.shards[p.h&s.mask]
			sh.remove(p.h, p.e)
			sh.addSlow(p.name, p.key, &p.state, t)
		}
	}
	for j := range keys {
		p := &keys[j]
		if p.e != nil {
			continue
		}
		sh := &s.shards[p.h&s.mask]
		if e := sh.findSlow(p.name, p.key); e != nil {
			e.state = p.state
			if e.state.IsZero() {
				e.since = t
			}
		} else if !p.state.IsZero() {
			sh.insert(p.h, p.name, p.key, &p.state, t)
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
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.live(t)
		sh.mu.Unlock()
	}
	return n
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
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweep(t, math.MaxInt64)
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
