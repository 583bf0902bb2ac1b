package spigot

import (
	"runtime"
	"testing"
	"time"

	"github.com/spigot-go/spigot/internal/core"
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

	gone := core.Config{Name: "intern-gone", Kind: uint8(TokenBucket), Capacity: 7, Tokens: 1, Period: time.Second, Scale: 1_000_000, Refill: 1, Max: 7_000_000}
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

// TestScaled: a bucket counts in scaled units, with g = gcd(Rate.Tokens,
// period in µs): a token is period/g units, and the bucket gains
// Rate.Tokens/g units a µs. A window has neither.
func TestScaled(t *testing.T) {
	for i, c := range []struct {
		l             Limit
		scale, refill int64
	}{
		{MustBucket("login", 20, Per(1, 3*time.Second)), 3_000_000, 1}, // gcd 1
		{MustBucket("api", 5, Per(1000, time.Millisecond)), 1, 1},      // gcd 1000
		{Must(NewLeakyBucket("lb", 3, PerSecond(100))), 10_000, 1},
		{Must(NewFixedWindow("fw", PerDay(10_000), 5*time.Hour)), 0, 0},
		{Must(NewSlidingLog("sl", PerDay(5))), 0, 0},
	} {
		if got := c.l.config(); got.Scale != c.scale || got.Refill != c.refill || got.Max != c.l.Capacity()*c.scale {
			t.Errorf("step %d: %v: scale %d, refill %d, max %d; want %d, %d, %d", i, c.l, got.Scale, got.Refill, got.Max, c.scale, c.refill, c.l.Capacity()*c.scale)
		}
	}
}
