package keyed

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/spigot-go/spigot/clock/clocktest"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// An item is a compact entry: full from fullAt on, with a count that
// tests add to under its lock.
type item struct {
	Header
	fullAt int64
	n      int64
}

// A note is an entry that holds a pointer.
type note struct {
	Header
	text string
}

var (
	items = NewKind[item]()
	notes = NewKind[note]()
)

// fullAt is Config.Full for items: full from fullAt on, nearest to full
// first.
func fullAt(e *Header, t int64) (bool, int64) {
	it := items.Of(e)
	return it.fullAt <= t, it.fullAt
}

// us returns clk's time in µs since the Unix epoch.
func us(clk *clocktest.Clock) int64 { return clk.Now().UnixMicro() }

// put adds an item for key of limit "l", full at fullAt, to t at now, and
// reports whether t took it.
func put(t *Table, key string, fullAt, now int64) bool {
	h := t.Hash("l", key)
	sh := t.Shard(h)
	sh.Lock()
	defer sh.Unlock()
	if sh.Find(h, "l", key) != nil {
		panic("put: " + key + " is held already")
	}
	it := items.New("l", key)
	it.fullAt = fullAt
	return sh.Insert(h, &it.Header, now)
}

// get returns the item of key of limit "l", or nil.
func get(t *Table, key string) *item {
	h := t.Hash("l", key)
	if e := t.Shard(h).Find(h, "l", key); e != nil {
		return items.Of(e)
	}
	return nil
}

// held returns which of keys t holds.
func held(t *Table, keys ...string) []string {
	var got []string
	for _, k := range keys {
		if get(t, k) != nil {
			got = append(got, k)
		}
	}
	return got
}

func same(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFind: a key is found under its limit's name and no other, whatever
// the hashes, and its entry holds its own copy of the id.
func TestFind(t *testing.T) {
	for _, sameHash := range []uint64{0, 42} {
		tab := New(Config{})
		tab.SetSameHash(sameHash)
		line := "GET /login HTTP/1.1 from 203.0.113.7"
		keys := []string{line[len(line)-11:], "k1", "k2", ""}
		for i, k := range keys {
			put(tab, k, int64(i), 0)
		}
		for i, c := range []struct {
			name, key string
			want      int64 // fullAt of the item found, -1 for none
		}{
			{"l", keys[0], 0},
			{"l", "k1", 1},
			{"l", "k2", 2},
			{"l", "", 3},
			{"m", "k1", -1},
			{"l", "k3", -1},
			{"l:k", "1", -1},
			{"", "l:k1", -1},
		} {
			h := tab.Hash(c.name, c.key)
			got := int64(-1)
			if e := tab.Shard(h).Find(h, c.name, c.key); e != nil {
				got = items.Of(e).fullAt
				if name, key := e.Key(); name != c.name || key != c.key {
					t.Errorf("same hash %d, step %d: Find(%q, %q): the entry of %q, %q", sameHash, i, c.name, c.key, name, key)
				}
			}
			if got != c.want {
				t.Errorf("same hash %d, step %d: Find(%q, %q): got the item of %d, want %d", sameHash, i, c.name, c.key, got, c.want)
			}
		}
		if got := tab.Len(); got != len(keys) {
			t.Errorf("same hash %d: Len() = %d, want %d", sameHash, got, len(keys))
		}
		for _, e := range []*Header{&get(tab, keys[0]).Header, &notes.New("l", keys[0]).Header} {
			_, key := e.Key()
			if p, l := uintptr(unsafe.Pointer(unsafe.StringData(key))), uintptr(unsafe.Pointer(unsafe.StringData(line))); p >= l && p < l+uintptr(len(line)) {
				t.Errorf("same hash %d: the entry holds the caller's string, not a copy", sameHash)
			}
		}
	}
}

// TestKinds: an entry without pointers holds its id after it, in the same
// allocation; one with pointers holds it apart; Of tells kinds apart.
func TestKinds(t *testing.T) {
	it := items.New("l", "k")
	name, _ := it.Key()
	if got, want := uintptr(unsafe.Pointer(unsafe.StringData(name))), uintptr(unsafe.Pointer(it))+unsafe.Sizeof(item{}); got != want {
		t.Errorf("an item's id is at %#x, want %#x: right after it", got, want)
	}
	n := notes.New("l", "k")
	n.text = "a string"
	for i, c := range []struct {
		e          *Header
		item, note bool
	}{
		{&it.Header, true, false},
		{&n.Header, false, true},
	} {
		if got := items.Of(c.e) != nil; got != c.item {
			t.Errorf("step %d: items.Of: %v, want %v", i, got, c.item)
		}
		if got := notes.Of(c.e) != nil; got != c.note {
			t.Errorf("step %d: notes.Of: %v, want %v", i, got, c.note)
		}
		if name, key := c.e.Key(); !c.e.Is("l", "k") || c.e.Is("l", "j") || c.e.Is("m", "k") || name != "l" || key != "k" {
			t.Errorf("step %d: the entry holds %q, %q", i, name, key)
		}
	}
	if notes.Of(&n.Header).text != "a string" {
		t.Error("a note lost its text")
	}
	for _, f := range []func(){
		func() { NewKind[struct{ n int }]() },
		func() { NewKind[int]() },
		func() { NewKind[struct{ *Header }]() },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("NewKind of a type without a Header first: no panic")
				}
			}()
			f()
		}()
	}
}

// TestLayout: a shard takes whole cache lines, the first holding what a
// lookup reads (its table) alone, so that no two shards share a line and
// adding a key does not write that line; a Header is 16 bytes.
func TestLayout(t *testing.T) {
	var sh Shard
	if size := unsafe.Sizeof(sh); size%64 != 0 {
		t.Errorf("a shard is %d bytes, want a multiple of 64", size)
	}
	if off := unsafe.Offsetof(sh.mu); off != 64 {
		t.Errorf("a shard's lock is at byte %d, want 64", off)
	}
	if size := unsafe.Sizeof(Header{}); size != 16 {
		t.Errorf("a Header is %d bytes, want 16", size)
	}
}

// TestShardsForCap: a cap is split exactly between shards that hold at
// least KeysPerShard keys each (64 by default), up to 256 shards.
func TestShardsForCap(t *testing.T) {
	for _, c := range []struct{ max, per, shards int }{
		{0, 0, 256}, {-1, 0, 256}, {1, 0, 1}, {127, 0, 1}, {128, 0, 2}, {1000, 0, 8}, {16_384, 0, 256}, {1 << 40, 0, 256},
		{1000, 1024, 1}, {65536, 1024, 64}, {100_000, 1024, 64}, {0, 1024, 256}, {1000, -1, 8},
	} {
		tab := New(Config{MaxKeys: c.max, KeysPerShard: c.per})
		total := 0
		for i := range tab.Shards() {
			total += tab.ShardAt(i).Cap()
		}
		if tab.Shards() != c.shards || total != max(c.max, 0) {
			t.Errorf("MaxKeys %d, KeysPerShard %d: %d shards holding %d keys, want %d holding %d", c.max, c.per, tab.Shards(), total, c.shards, max(c.max, 0))
		}
	}
}

// TestSharding: keys spread over the shards, and two tables hash apart.
func TestSharding(t *testing.T) {
	tab := New(Config{})
	const n = 10_000
	for i := range n {
		put(tab, fmt.Sprint(i), 0, 0)
	}
	mean := n / tab.Shards()
	lo, hi := n, 0
	for i := range tab.Shards() {
		sh := tab.ShardAt(i)
		sh.Lock()
		lo, hi = min(lo, sh.Len()), max(hi, sh.Len())
		sh.Unlock()
	}
	// About 39 keys a shard, with a standard deviation of about 6.
	if lo < mean/3 || hi > 3*mean {
		t.Errorf("%d keys over %d shards: from %d to %d a shard, want between %d and %d", n, tab.Shards(), lo, hi, mean/3, 3*mean)
	}
	// A flooder who finds keys that crowd one shard of one table has not
	// found them for another.
	if a, b := New(Config{}), New(Config{}); a.Hash("l", "k") == b.Hash("l", "k") {
		t.Error("two tables hash a key alike")
	}
	// Names that differ only in the middle mix alike: their keys are told
	// apart by their ids.
	x, y := "tenant-1234-x-requests", "tenant-1234-y-requests"
	if tab.Hash(x, "k") != tab.Hash(y, "k") {
		t.Fatal("the names hash apart: the test needs them alike")
	}
	h := tab.Hash(x, "k")
	sh := tab.Shard(h)
	sh.Lock()
	a, b := items.New(x, "k"), items.New(y, "k")
	sh.Insert(h, &a.Header, 0)
	sh.Insert(h, &b.Header, 0)
	sh.Unlock()
	if sh.Find(h, x, "k") != &a.Header || sh.Find(h, y, "k") != &b.Header {
		t.Error("keys of names that mix alike share an entry")
	}
}

// TestEviction: an insert at the cap takes the place of a full entry if it
// samples one, and otherwise of the one that Config.Full ranks least (here
// the nearest to full); only the eviction of an entry that was not full
// counts in Evictions.
func TestEviction(t *testing.T) {
	for _, c := range []struct {
		name      string
		fullAt    []int64 // of a, b, c, inserted at t0
		at        time.Duration
		evicted   string
		evictions int
	}{
		{"nearest-to-full", []int64{30, 10, 50}, 0, "b", 1},
		{"nearest-to-full-last", []int64{50, 40, 20}, 0, "c", 1},
		{"full", []int64{50, 20, 40}, 30, "b", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			tab := New(Config{MaxKeys: 3, Full: fullAt})
			base := us(clk)
			for i, k := range []string{"a", "b", "c"} {
				if !put(tab, k, base+c.fullAt[i], us(clk)) {
					t.Fatalf("the table refused %q below its cap", k)
				}
			}
			clk.Advance(c.at * time.Microsecond)
			put(tab, "new", math.MaxInt64, us(clk))
			var want []string
			for _, k := range []string{"a", "b", "c", "new"} {
				if k != c.evicted {
					want = append(want, k)
				}
			}
			if got := held(tab, "a", "b", "c", "new"); !same(got, want) {
				t.Errorf("held %v, want %v", got, want)
			}
			if got := tab.Evictions(); got != c.evictions {
				t.Errorf("Evictions() = %d, want %d", got, c.evictions)
			}
			if got := tab.Len(); got != 3 {
				t.Errorf("Len() = %d, want 3", got)
			}
		})
	}
}

// TestBounded: a flood of keys never makes a table hold more than its cap,
// which it reaches exactly when it has one shard; without Config.Full, a
// table at its cap refuses new keys and keeps the ones it holds.
func TestBounded(t *testing.T) {
	for _, c := range []struct {
		max, flood int
		evict      bool
	}{
		{1, 50, true}, {3, 50, true}, {127, 1000, true}, {1000, 5000, true}, {20_000, 60_000, true},
		{1, 50, false}, {127, 1000, false}, {1000, 5000, false},
	} {
		cfg := Config{MaxKeys: c.max}
		if c.evict {
			cfg.Full = fullAt
		}
		tab := New(cfg)
		took := 0
		for i := range c.flood {
			if put(tab, fmt.Sprint(i), math.MaxInt64, 0) {
				took++
			}
		}
		got := tab.Len()
		switch {
		case got > c.max || tab.Shards() == 1 && got != c.max || got < c.max/2:
			t.Errorf("max %d, evict %v: %d keys held after %d, want %d (exactly with one shard)", c.max, c.evict, got, c.flood, c.max)
		case c.evict && (took != c.flood || tab.Evictions() != c.flood-got):
			t.Errorf("max %d: %d keys taken, %d evicted; want %d, %d", c.max, took, tab.Evictions(), c.flood, c.flood-got)
		case !c.evict && (took != got || tab.Evictions() != 0):
			t.Errorf("max %d, refusing: %d keys taken, %d held, %d evicted; want as many taken as held, none evicted", c.max, took, got, tab.Evictions())
		}
		if !c.evict && get(tab, "0") == nil {
			t.Errorf("max %d, refusing: the first key was dropped", c.max)
		}
	}
}

// TestSweep: at fixed instants, a shard that grows sweeps the entries full
// for Config.Keep or longer and keeps the others; Sweep removes every full
// entry and gives the tables' memory back; Live counts those not full.
func TestSweep(t *testing.T) {
	clk := clocktest.New(t0)
	const keep = 10_000_000 // 10 s in µs
	tab := New(Config{Full: fullAt, Keep: keep})
	tab.SetSameHash(1) // one shard grows: its sweeps are at 64, 128, 256…
	base := us(clk)
	least := tab.Shard(1).Slots()
	for i := range 60 {
		put(tab, "old"+fmt.Sprint(i), base+1_000_000, us(clk)) // full at t0+1s
	}
	for i, st := range []struct {
		at         time.Duration
		add        int   // new keys, full in an hour
		len, live  int   // afterwards
		oldestHeld []int // of the old keys, those still held
	}{
		// Full for 9 s at the sweep that the 64th key makes: kept.
		{10 * time.Second, 10, 70, 10, []int{0, 59}},
		// Full for 10 s at the sweep of the 128th: swept.
		{11 * time.Second, 60, 70, 70, nil},
	} {
		clk.Set(t0.Add(st.at))
		for k := range st.add {
			put(tab, "new"+fmt.Sprint(i)+"-"+fmt.Sprint(k), us(clk)+3_600_000_000, us(clk))
		}
		if got, live := tab.Len(), tab.Live(us(clk)); got != st.len || live != st.live {
			t.Errorf("step %d: at t0+%v: Len %d, Live %d; want %d, %d", i, st.at, got, live, st.len, st.live)
		}
		for _, k := range st.oldestHeld {
			if get(tab, "old"+fmt.Sprint(k)) == nil {
				t.Errorf("step %d: old%d was swept", i, k)
			}
		}
		if st.oldestHeld == nil && get(tab, "old0") != nil {
			t.Errorf("step %d: old0 is held, want it swept", i)
		}
	}
	grown := tab.Shard(1).Slots()
	clk.Set(t0.Add(2 * time.Hour))
	tab.Sweep(us(clk))
	if got, slots := tab.Len(), tab.Shard(1).Slots(); got != 0 || slots != least || grown == least {
		t.Errorf("after Sweep: %d entries in %d slots (grown to %d); want none in %d", got, slots, grown, least)
	}
}

// TestRemoveReplace: a removed entry is dead for those who found it; a
// replacement takes its place under the same key.
func TestRemoveReplace(t *testing.T) {
	tab := New(Config{Full: fullAt})
	put(tab, "a", 1, 0)
	put(tab, "b", 2, 0)
	a, b := get(tab, "a"), get(tab, "b")
	h := tab.Hash("l", "a")
	sh := tab.Shard(h)
	sh.Lock()
	a.Lock()
	sh.Remove(h, &a.Header)
	sh.Unlock()
	if a.Lock() {
		t.Error("a removed entry locks")
	}
	h = tab.Hash("l", "b")
	sh = tab.Shard(h)
	sh.Lock()
	b.Lock()
	n := notes.New("l", "b")
	sh.Replace(h, &b.Header, &n.Header)
	sh.Unlock()
	if b.Lock() {
		t.Error("a replaced entry locks")
	}
	if got := tab.Len(); got != 1 || get(tab, "a") != nil || tab.Shard(h).Find(h, "l", "b") != &n.Header {
		t.Errorf("after Remove and Replace: %d entries, a held %v, b's entry the new one %v", got, get(tab, "a") != nil, tab.Shard(h).Find(h, "l", "b") == &n.Header)
	}
	tab.Delete("l", "b", func(e *Header) bool { return e != &n.Header })
	tab.Delete("l", "a", nil)
	if got := tab.Len(); got != 1 {
		t.Errorf("after Deletes of a key not held and of another entry than b's: %d entries, want 1", got)
	}
	put(tab, "c", 3, 0)
	tab.Delete("l", "c", nil)
	if get(tab, "c") != nil {
		t.Error("c is held after its Delete")
	}
	removed := 0
	tab.RemoveIf(func(e *Header) bool { removed++; return true })
	if removed != 1 || tab.Len() != 0 || n.Lock() {
		t.Errorf("RemoveIf of everything: %d seen, %d left, the note alive", removed, tab.Len())
	}
}

// TestConcurrent: goroutines add to the counts of a few keys, each under
// its entry's lock, while others flood the table past its cap, sweep it,
// range over it and remove keys: every addition lands once, on an entry
// the table holds.
func TestConcurrent(t *testing.T) {
	const (
		kept    = 4
		adders  = 4
		adds    = 500
		maxKeys = 64
	)
	clk := clocktest.New(t0)
	tab := New(Config{MaxKeys: maxKeys, Full: fullAt})
	for k := range kept {
		put(tab, "kept"+fmt.Sprint(k), math.MaxInt64, 0)
	}
	var added [kept]atomic.Int64
	var work, bg sync.WaitGroup
	for g := range adders {
		work.Go(func() {
			for i := range adds {
				k := (g + i) % kept
				key := "kept" + fmt.Sprint(k)
				h := tab.Hash("l", key)
				for {
					e := tab.Shard(h).Find(h, "l", key)
					if e == nil {
						t.Errorf("%s is not held", key)
						return
					}
					if e.Lock() {
						items.Of(e).n++
						e.Unlock()
						added[k].Add(1)
						break
					}
				}
			}
		})
	}
	var done atomic.Bool
	for g := range 2 {
		bg.Go(func() {
			for i := 0; !done.Load(); i++ {
				// Full at once: evicted before the kept keys, never full.
				put(tab, "flood"+fmt.Sprint(g)+"-"+fmt.Sprint(i), us(clk), us(clk))
				if i%100 == 0 {
					clk.Advance(time.Millisecond)
				}
			}
		})
	}
	bg.Go(func() {
		for !done.Load() {
			tab.Sweep(us(clk))
			tab.Live(us(clk))
			tab.Range(func(e *Header) bool { return true })
			tab.RemoveIf(func(e *Header) bool { return items.Of(e).fullAt < us(clk)-1000 })
		}
	})
	work.Wait()
	done.Store(true)
	bg.Wait()
	for k := range kept {
		if it := get(tab, "kept"+fmt.Sprint(k)); it == nil || it.n != added[k].Load() || it.n != adds*adders/kept {
			t.Errorf("kept%d: %+v; want %d added", k, it, adds*adders/kept)
		}
	}
	if n := tab.Len(); n > maxKeys {
		t.Errorf("Len() = %d, want at most %d", n, maxKeys)
	}
	if n := tab.Evictions(); n != 0 {
		t.Errorf("%d entries evicted before they were full", n)
	}
}
