package clocktest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot/clock/clocktest"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestNowAdvanceSet(t *testing.T) {
	c := clocktest.New(time.Now()) // a monotonic reading is stripped
	c.Set(t0)
	steps := []struct {
		do   func()
		want time.Time
	}{
		{func() {}, t0},
		{func() { c.Advance(time.Second) }, t0.Add(time.Second)},
		{func() { c.Advance(-2 * time.Second) }, t0.Add(-time.Second)},
		{func() { c.Set(t0.Add(time.Hour)) }, t0.Add(time.Hour)},
	}
	for i, st := range steps {
		st.do()
		if got := c.Now(); !got.Equal(st.want) {
			t.Errorf("step %d: Now() = %v, want %v", i, got, st.want)
		}
	}
}

func TestAfter(t *testing.T) {
	c := clocktest.New(t0)
	a := c.After(2 * time.Second)
	b := c.After(time.Second)
	now := c.After(0)
	select {
	case got := <-now:
		if !got.Equal(t0) {
			t.Errorf("After(0) sent %v, want %v", got, t0)
		}
	default:
		t.Fatal("After(0) is not ready at once")
	}
	if n := c.Waiters(); n != 2 {
		t.Fatalf("Waiters() = %d, want 2", n)
	}
	c.Advance(999 * time.Millisecond)
	assertNotReady(t, a, "a")
	assertNotReady(t, b, "b")
	c.Advance(time.Millisecond)
	if got := <-b; !got.Equal(t0.Add(time.Second)) {
		t.Errorf("b sent %v, want t0+1s", got)
	}
	assertNotReady(t, a, "a")
	c.Set(t0.Add(time.Hour)) // Set fires too
	if got := <-a; !got.Equal(t0.Add(time.Hour)) {
		t.Errorf("a sent %v, want t0+1h", got)
	}
	if n := c.Waiters(); n != 0 {
		t.Errorf("Waiters() = %d after all fired, want 0", n)
	}
}

func assertNotReady(t *testing.T, ch <-chan time.Time, name string) {
	t.Helper()
	select {
	case got := <-ch:
		t.Errorf("%s fired early with %v", name, got)
	default:
	}
}

func TestBlockUntilConcurrent(t *testing.T) {
	c := clocktest.New(t0)
	var wg sync.WaitGroup
	for i := 1; i <= 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-c.After(time.Duration(i) * time.Second)
		}()
	}
	c.BlockUntil(8)
	c.Advance(8 * time.Second)
	wg.Wait()
	if n := c.Waiters(); n != 0 {
		t.Errorf("Waiters() = %d, want 0", n)
	}
}
