// Package keyed is the table of state by limit name and key that the
// stores which keep state per key share (store/memory, store/denycache,
// store/hybrid, store/lease): sharded, with lookups that take no lock,
// bounded by a cap on keys, evicting at the cap or refusing, and swept of
// the entries whose state no longer counts.
//
// An entry is a struct of the store's whose first field is a Header, made
// by a Kind: one allocation with its id (the limit's name, ':' and the
// key) after it when the struct holds no pointer, which the garbage
// collector then does not scan, and otherwise the struct with the name
// and a copy of the key. A Table holds entries of any kinds; a store tells them apart
// with Kind.Of.
//
// A lookup (Shard.Find, or Shard.First for a caller that inlines it)
// takes no lock: a shard's table is changed only by
// the holder of the shard's lock, slot by slot with atomic stores, and one
// that grows or shrinks is replaced whole. Each entry has its own lock,
// which guards what the store keeps in it; an entry removed from its
// table is marked dead under that lock, so that a request that found it
// before looks again. Adding or removing an entry takes the shard's lock
// and then the entry's: a store that holds an entry's lock never takes a
// shard's.
package keyed

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

const (
	maxShards = 256
	// keysPerShard is Config.KeysPerShard's default.
	keysPerShard = 64
	// sample is how many entries an insert at the cap looks at to choose
	// one to evict.
	sample = 8
	// firstSweep is the size at which a shard first sweeps its full
	// entries.
	firstSweep = 64
	// minSlots is the size of a shard's smallest table.
	minSlots = 8
	// boxed marks, in Header.idoff, an id held as a string.
	boxed = 1 << 15
)

// A Header is the first field of every entry: its lock, its id, and
// whether it was removed from its table.
type Header struct {
	mu    sync.Mutex
	idn   uint32 // the id's length
	idoff uint16 // where the id is from the Header, with boxed set for a string
	kind  uint8  // the Kind that made the entry
	dead  bool   // removed from its table; guarded by mu
}

// removed marks a slot whose entry was removed.
var removed = new(Header)

// Lock locks e and reports true, or reports false if e was removed from
// its table (then nothing is locked, and the caller looks its key up
// again).
func (e *Header) Lock() bool {
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return false
	}
	return true
}

// Unlock unlocks e.
func (e *Header) Unlock() { e.mu.Unlock() }

// kill marks e, locked, dead, and unlocks it.
func (e *Header) kill() {
	e.dead = true
	e.mu.Unlock()
}

// Key returns the limit name and the key that e holds.
func (e *Header) Key() (name, key string) {
	p := unsafe.Add(unsafe.Pointer(e), e.idoff&^boxed)
	if e.idoff&boxed != 0 {
		b := (*boxID)(p)
		return b.name, b.key
	}
	id := unsafe.String((*byte)(p), e.idn)
	i := strings.IndexByte(id, ':') // a name has none
	return id[:i], id[i+1:]
}

// Is reports whether e holds key of the limit named name.
func (e *Header) Is(name, key string) bool {
	if int(e.idn) != len(name)+1+len(key) {
		return false
	}
	p := unsafe.Add(unsafe.Pointer(e), e.idoff&^boxed)
	if e.idoff&boxed != 0 {
		b := (*boxID)(p)
		return b.key == key && b.name == name
	}
	id := unsafe.String((*byte)(p), e.idn)
	return id[len(name)+1:] == key && id[:len(name)] == name
}

// A Kind makes and recognizes the entries of one type E, whose first
// field is a Header. Make one with NewKind, once, in a package variable.
type Kind[E any] struct {
	tag     uint8
	compact bool
	off     uint16 // where the id is, in a compact entry or in a box
}

// box is an entry of a type that holds pointers, with its id.
type box[E any] struct {
	e  E
	id boxID
}

// boxID is a boxed entry's id: the limit's name, which is the Limit's own
// (its program holds it), and a copy of the key.
type boxID struct{ name, key string }

var kinds atomic.Uint32

// NewKind returns the Kind of entries of type E. It panics if E's first
// field is not a Header, or if a program makes more than 255 Kinds.
func NewKind[E any]() *Kind[E] {
	t := reflect.TypeFor[E]()
	if t.Kind() != reflect.Struct || t.NumField() == 0 || t.Field(0).Type != reflect.TypeFor[Header]() {
		panic(fmt.Sprintf("spigot: keyed: NewKind: %v: want a struct whose first field is a keyed.Header", t))
	}
	tag := kinds.Add(1)
	if tag > math.MaxUint8 {
		panic("spigot: keyed: NewKind: more than 255 kinds")
	}
	k := &Kind[E]{tag: uint8(tag), compact: !pointers(t)}
	off := unsafe.Offsetof(box[E]{}.id)
	if k.compact {
		off = unsafe.Sizeof(*new(E))
	}
	if off >= boxed {
		panic(fmt.Sprintf("spigot: keyed: NewKind: %v: %d bytes, want fewer than %d", t, off, boxed))
	}
	k.off = uint16(off)
	return k
}

// pointers reports whether a value of type t holds pointers.
func pointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Array:
		return t.Len() > 0 && pointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if pointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	case reflect.Pointer, reflect.UnsafePointer, reflect.Map, reflect.Slice, reflect.String,
		reflect.Interface, reflect.Chan, reflect.Func:
		return true
	}
	return false
}

// New returns a new entry of k for key of the limit named name, with its
// own copy of the key, so that holding it cannot pin a larger string the
// key was cut from (a request line, a header). An entry of a type without
// pointers holds its id (the name, ':' and the key) after it, in one
// allocation of words, which the garbage collector does not scan, and one
// cache line to read for a lookup when the id is short; an entry of
// another type holds the name itself, so that a lookup under the Limit's
// own name compares the name's bytes once.
func (k *Kind[E]) New(name, key string) *E {
	n := len(name) + 1 + len(key)
	if uint64(n) > math.MaxUint32 {
		panic(fmt.Sprintf("spigot: keyed: an id of %d bytes", n))
	}
	var e *E
	if k.compact {
		words := make([]uint64, (int(k.off)+n+7)/8)
		e = (*E)(unsafe.Pointer(&words[0]))
		id := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(e), k.off)), n)
		copy(id, name)
		id[len(name)] = ':'
		copy(id[len(name)+1:], key)
		header(e).idoff = k.off
	} else {
		b := &box[E]{id: boxID{name, strings.Clone(key)}}
		e = &b.e
		header(e).idoff = k.off | boxed
	}
	h := header(e)
	h.idn, h.kind = uint32(n), k.tag // never written again
	return e
}

// Of returns e as an entry of k, or nil if k did not make it.
func (k *Kind[E]) Of(e *Header) *E {
	if e.kind != k.tag {
		return nil
	}
	return (*E)(unsafe.Pointer(e))
}

func header[E any](e *E) *Header { return (*Header)(unsafe.Pointer(e)) }

// A Config says what a Table holds.
type Config struct {
	// MaxKeys is the most entries the Table holds at once, split between
	// its shards; 0 or less is no cap.
	MaxKeys int
	// KeysPerShard is the fewest of MaxKeys a shard holds (64 when 0 or
	// less): a cap is split between as many shards as keep that, up to
	// 256, for inserts that wait less for one another, and fewer for a
	// cap closer to exact, since shards that hold few entries each fill
	// unevenly.
	KeysPerShard int
	// Full reports whether entry e, locked, holds nothing that counts any
	// more at t, and since when. For an entry that counts, at ranks it for
	// eviction: of the entries that an insert at the cap samples, one that
	// is full goes at once, and otherwise the one with the least at. With
	// Full nil the Table never evicts or sweeps an entry itself, and an
	// insert at the cap fails.
	Full func(e *Header, t int64) (full bool, at int64)
	// Keep is how long, in the unit of t, a full entry is kept for reuse
	// before a shard that grows sweeps it.
	Keep int64
}

// A Table holds entries by limit name and key, in shards that a key's hash
// chooses. It is safe for concurrent use as its methods say. The zero
// Table is not usable; call New.
type Table struct {
	seed     maphash.Seed
	mask     uint64
	shards   []Shard
	full     func(*Header, int64) (bool, int64)
	keep     int64
	sameHash uint64
}

// A Shard holds the entries whose hash selects it.
type Shard struct {
	// What a lookup reads, alone on its cache line, which only a table
	// that is replaced writes.
	tab atomic.Pointer[table]
	_   [56]byte

	mu        sync.Mutex
	n         int // entries held
	used      int // tab's slots not empty: its entries and the removed
	sweepAt   int // a new entry that makes the shard this big sweeps it first
	max       int // this shard's cap, 0 when unbounded
	evictions int
	t         *Table
	_         [8]byte // whole cache lines a shard, so that shards share none
}

// A table is an open-addressed hash table of entries, probed linearly from
// the slot that the hash's bits above the shard's choose. A slot is empty
// (a nil entry, which ends a probe), holds an entry and its hash, or held
// one that was removed (the entry removed, which a probe passes). Entries
// may share a hash: a lookup probes on past those of other ids.
type table struct {
	slots []slot // a power of two of them, never more than 7/8 used
}

type slot struct {
	h atomic.Uint64
	e atomic.Pointer[Header]
}

// New returns an empty Table.
func New(c Config) *Table {
	t := &Table{seed: maphash.MakeSeed(), full: c.Full, keep: c.Keep}
	n, per := maxShards, c.KeysPerShard
	if per <= 0 {
		per = keysPerShard
	}
	if c.MaxKeys > 0 {
		for n > 1 && c.MaxKeys/n < per {
			n /= 2
		}
	}
	t.shards = make([]Shard, n)
	t.mask = uint64(n - 1)
	for i := range t.shards {
		sh := &t.shards[i]
		sh.t = t
		sh.tab.Store(&table{slots: make([]slot, minSlots)})
		sh.sweepAt = firstSweep
		if c.MaxKeys > 0 {
			// Split the cap exactly: the first MaxKeys%n shards hold one more.
			sh.max = c.MaxKeys / n
			if i < c.MaxKeys%n {
				sh.max++
			}
		}
	}
	return t
}

// SetSameHash makes h, when not 0, the hash of every key: for tests of
// keys whose hashes collide, which real hashes make too rare to meet. Call
// it before the Table holds anything.
func (t *Table) SetSameHash(h uint64) { t.sameHash = h }

// Hash returns the hash of key of the limit named name: its low bits
// choose the shard, and the shard's table is probed from its bits above.
// It is the seeded hash of the key, which a client cannot aim, mixed with
// a hash of the name (its length and first and last 8 bytes), so that one
// key's limits spread out. Two names that mix alike, which only long names
// that differ in the middle can, share a hash for every key, as keys whose
// hashes collide do.
func (t *Table) Hash(name, key string) uint64 {
	if t.sameHash != 0 {
		return t.sameHash
	}
	return maphash.String(t.seed, key) ^ mix(name)
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

// Shard returns the shard of hash h.
func (t *Table) Shard(h uint64) *Shard { return &t.shards[h&t.mask] }

// Index returns the index of the shard of hash h, for ShardAt: callers
// that lock several shards lock them in the order of their indices.
func (t *Table) Index(h uint64) int { return int(h & t.mask) }

// Shards returns the number of shards.
func (t *Table) Shards() int { return len(t.shards) }

// ShardAt returns the shard of index i.
func (t *Table) ShardAt(i int) *Shard { return &t.shards[i] }

// Lock locks sh, for Insert, Replace and Remove, and for a Find that must
// not miss an entry being added.
func (sh *Shard) Lock() { sh.mu.Lock() }

// Unlock unlocks sh.
func (sh *Shard) Unlock() { sh.mu.Unlock() }

// Find returns the entry of sh with hash h for key of the limit named name,
// or nil. It takes no lock; the entry it returns may be dead by the time
// the caller locks it (see Header.Lock), but for a caller that holds sh's
// lock.
func (sh *Shard) Find(h uint64, name, key string) *Header {
	if e := sh.First(h); e == nil || e.Is(name, key) {
		return e
	}
	return sh.find(h, name, key)
}

// First returns the first entry of sh with hash h, or nil, as Find does
// but for the key: it is Find for a caller that checks the entry's key
// (Header.Is) itself, and calls Find only when it is another's, small
// enough to be inlined in the caller.
func (sh *Shard) First(h uint64) *Header {
	slots := sh.tab.Load().slots
	mask := uint64(len(slots) - 1)
	for i := h >> 8 & mask; ; i = (i + 1) & mask {
		e := slots[i].e.Load()
		if e == nil || e != removed && slots[i].h.Load() == h {
			return e
		}
	}
}

// find is Find past the first entry of hash h.
func (sh *Shard) find(h uint64, name, key string) *Header {
	t := sh.tab.Load()
	mask := uint64(len(t.slots) - 1)
	for i := h >> 8 & mask; ; i = (i + 1) & mask {
		sl := &t.slots[i]
		e := sl.e.Load()
		if e == nil {
			return nil
		}
		if e != removed && sl.h.Load() == h && e.Is(name, key) {
			return e
		}
	}
}

// Insert adds e, which no other goroutine can see yet, under hash h, to sh,
// locked, whose Find has not found e's key. When sh is at its cap, it
// makes room first, evicting an entry sampled as Config.Full says, and
// otherwise it sweeps whenever the shard has doubled since its last sweep
// (amortized O(1) per insert): it removes the entries full at now since
// Config.Keep or longer. Without Config.Full, it adds nothing to a shard
// at its cap and reports false.
func (sh *Shard) Insert(h uint64, e *Header, now int64) bool {
	switch {
	case sh.max > 0 && sh.n >= sh.max:
		if sh.t.full == nil {
			return false
		}
		sh.evict(now)
	case sh.n+1 >= sh.sweepAt && sh.t.full != nil:
		sh.sweep(now, now-sh.t.keep)
	}
	sh.n++
	sh.add(h, e)
	return true
}

// add puts e, which no request can see yet, in tab under hash h, in a new
// table if tab would be more than 7/8 used.
func (sh *Shard) add(h uint64, e *Header) {
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

// slotOf returns the slot of tab that holds e, under hash h.
func (t *table) slotOf(h uint64, e *Header) *slot {
	mask := uint64(len(t.slots) - 1)
	for i := h >> 8 & mask; ; i = (i + 1) & mask {
		if sl := &t.slots[i]; sl.e.Load() == e {
			return sl
		}
	}
}

// Remove takes e, locked, out of sh, locked, where it is under hash h, and
// marks it dead for the requests that found it already (which unlocks it).
func (sh *Shard) Remove(h uint64, e *Header) {
	sh.tab.Load().slotOf(h, e).e.Store(removed)
	sh.n--
	e.kill()
}

// Delete removes the entry of key of the limit named name, if the Table
// holds one and if only, when not nil, called with the entry locked,
// reports true. It takes the lock of the key's shard, and then the
// entry's.
func (t *Table) Delete(name, key string, only func(e *Header) bool) {
	h := t.Hash(name, key)
	sh := t.Shard(h)
	sh.mu.Lock()
	if e := sh.Find(h, name, key); e != nil {
		e.mu.Lock()
		if only == nil || only(e) {
			sh.Remove(h, e)
		} else {
			e.mu.Unlock()
		}
	}
	sh.mu.Unlock()
}

// Replace puts e, which no other goroutine can see yet, in the place of
// old, locked, in sh, locked, where old is under hash h, and marks old
// dead (which unlocks it): e's key is old's.
func (sh *Shard) Replace(h uint64, old, e *Header) {
	sh.tab.Load().slotOf(h, old).e.Store(e)
	old.kill()
}

// resize replaces tab, the shard's table, with one that holds its entries
// at most half used (and at least minSlots), and returns it. Requests that
// loaded the old one find the same entries in it.
func (sh *Shard) resize(tab *table) *table {
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

// entries calls f with each entry of t and its hash, until f returns
// false, starting at slot from.
func (t *table) entries(from uint64, f func(h uint64, e *Header) bool) {
	mask := uint64(len(t.slots) - 1)
	for k := range uint64(len(t.slots)) {
		sl := &t.slots[(from+k)&mask]
		if e := sl.e.Load(); e != nil && e != removed && !f(sl.h.Load(), e) {
			return
		}
	}
}

// evict removes one entry, sampled as Config.Full says, from a random
// place in the shard, and counts it in Evictions if it was not full.
func (sh *Shard) evict(now int64) {
	var (
		victim *Header
		vh     uint64
		vat    int64
		i      int
		gone   bool
	)
	sh.tab.Load().entries(rand.Uint64(), func(h uint64, e *Header) bool {
		e.mu.Lock()
		full, at := sh.t.full(e, now)
		if full {
			// None is better: removed at once, still full.
			sh.Remove(h, e)
			gone = true
			return false
		}
		e.mu.Unlock()
		if i == 0 || at < vat {
			victim, vh, vat = e, h, at
		}
		i++
		return i < sample
	})
	if gone || victim == nil {
		return
	}
	// Requests may have changed it since it was sampled: it counts as
	// evicted if it is not full now.
	victim.mu.Lock()
	full, _ := sh.t.full(victim, now)
	sh.Remove(vh, victim)
	if !full {
		sh.evictions++
	}
}

// sweep removes every entry full at now since cutoff or before.
func (sh *Shard) sweep(now, cutoff int64) {
	sh.removeIf(func(e *Header) bool {
		full, at := sh.t.full(e, now)
		return full && at <= cutoff
	})
}

// removeIf removes every entry for which f, called with the entry locked,
// reports true, and gives the table's memory back when it is under an
// eighth used.
func (sh *Shard) removeIf(f func(e *Header) bool) {
	tab := sh.tab.Load()
	live := 0
	tab.entries(0, func(h uint64, e *Header) bool {
		e.mu.Lock()
		if f(e) {
			sh.Remove(h, e)
		} else {
			e.mu.Unlock()
			live++
		}
		return true
	})
	if 8*live < len(tab.slots) && len(tab.slots) > minSlots {
		sh.resize(tab)
	}
	sh.sweepAt = max(2*sh.n, firstSweep)
}

// Sweep removes every entry full at now (Config.Full) and gives the
// memory of tables that emptied back. It takes each shard's lock in turn
// and costs time proportional to the number of entries held.
func (t *Table) Sweep(now int64) {
	if t.full == nil {
		return
	}
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.sweep(now, math.MaxInt64)
		sh.mu.Unlock()
	}
}

// RemoveIf removes every entry for which f, called with the entry locked
// (and its shard), reports true, as Sweep does.
func (t *Table) RemoveIf(f func(e *Header) bool) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		sh.removeIf(f)
		sh.mu.Unlock()
	}
}

// Range calls f with every entry, locked (and its shard), until f returns
// false.
func (t *Table) Range(f func(e *Header) bool) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		more := true
		sh.tab.Load().entries(0, func(_ uint64, e *Header) bool {
			e.mu.Lock()
			more = f(e)
			e.mu.Unlock()
			return more
		})
		sh.mu.Unlock()
		if !more {
			return
		}
	}
}

// Live returns how many entries are not full at now (Config.Full; every
// entry, without it). It changes nothing. It takes each shard's lock in
// turn and costs time proportional to the number of entries held.
func (t *Table) Live(now int64) int {
	if t.full == nil {
		return t.Len()
	}
	n := 0
	t.Range(func(e *Header) bool {
		if full, _ := t.full(e, now); !full {
			n++
		}
		return true
	})
	return n
}

// Len returns how many entries the Table holds, full or not.
func (t *Table) Len() int { return t.sum(func(sh *Shard) int { return sh.n }) }

// Evictions returns how many entries inserts at the cap have evicted that
// were not full.
func (t *Table) Evictions() int { return t.sum(func(sh *Shard) int { return sh.evictions }) }

// sum returns the sum of f over the shards, each locked in turn.
func (t *Table) sum(f func(sh *Shard) int) int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += f(sh)
		sh.mu.Unlock()
	}
	return n
}

// Len returns how many entries sh holds. The caller holds sh's lock.
func (sh *Shard) Len() int { return sh.n }

// Cap returns sh's share of the cap, 0 when the Table has none.
func (sh *Shard) Cap() int { return sh.max }

// Slots returns how many slots sh's table has: its memory. The caller
// holds sh's lock.
func (sh *Shard) Slots() int { return len(sh.tab.Load().slots) }
