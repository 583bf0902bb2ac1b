package spigot

import (
	"runtime"
	"testing"
)

// TestIntern: equal configs make equal Limits, and a config no Limit holds
// is forgotten.
func TestIntern(t *testing.T) {
	a := MustBucket("intern", 3, PerSecond(1))
	if b := MustBucket("intern", 3, PerSecond(1)); a != b || a.c != b.c {
		t.Errorf("two NewBucket calls with the same arguments gave different Limits")
	}
	if b := MustBucket("intern", 4, PerSecond(1)); a == b {
		t.Errorf("Limits of different capacities are equal")
	}
	if s1, s2 := a.Split(2), a.Split(2); s1 != s2 {
		t.Errorf("Split(2) twice gave different Limits: %v and %v", s1, s2)
	}
	m := map[Limit]int{a: 1}
	if m[MustBucket("intern", 3, PerSecond(1))] != 1 {
		t.Errorf("a Limit is not found as a map key by an equal one")
	}

	gone := limit{name: "intern-gone", kind: TokenBucket, capacity: 7, rate: PerSecond(1), scale: 1_000_000, refill: 1, max: 7_000_000}
	held := func() bool {
		interned.Lock()
		defer interned.Unlock()
		_, ok := interned.m[gone]
		return ok
	}
	func() {
		l := MustBucket("intern-gone", 7, PerSecond(1))
		if *l.c != gone || !held() {
			t.Fatalf("NewBucket did not intern %+v", gone)
		}
	}()
	// Wait on the state: cleanups run after a collection, on their own
	// goroutine.
	for i := 0; held(); i++ {
		if i == 1000 {
			t.Fatalf("a config no Limit holds is still interned after %d collections", i)
		}
		runtime.GC()
		runtime.Gosched()
	}
}
