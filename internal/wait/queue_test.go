package wait

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func poked(w *Waiter[int]) bool {
	select {
	case <-w.C:
		return true
	default:
		return false
	}
}

// TestQueue: waiters join in order, the next one becomes the head when the
// head leaves, a waiter behind leaves without disturbing the others, one
// whose deadline falls before the head's wake is turned away, and the
// queue goes away with its last waiter.
func TestQueue(t *testing.T) {
	var qs Queues[int]
	if qs.Busy("k") {
		t.Fatal("the zero Queues is busy")
	}
	a, head, _, _ := qs.Join("k", time.Time{}, t0)
	if !head {
		t.Fatal("step 0: the first waiter is not the head")
	}
	b, head, _, _ := qs.Join("k", t0.Add(3*time.Second), t0)
	if head || qs.Behind("k") != 1 {
		t.Fatalf("step 1: head %v, %d behind; want false, 1", head, qs.Behind("k"))
	}
	c, _, _, _ := qs.Join("k", time.Time{}, t0)
	d, _, _, _ := qs.Join("k", t0.Add(time.Second), t0)
	other, head, _, _ := qs.Join("other", time.Time{}, t0)
	if !head || qs.Len() != 2 {
		t.Fatalf("step 2: another key: head %v, %d queues; want true, 2", head, qs.Len())
	}
	// a sleeps until t0+2s: d's deadline falls before, b's does not.
	qs.Sleeping(a, t0.Add(2*time.Second), t0, 42)
	if !poked(d) || poked(b) || poked(c) {
		t.Fatal("step 3: want d alone poked")
	}
	if head, late, wake, note := qs.Turn(d); head || !late || !wake.Equal(t0.Add(2*time.Second)) || note != 42 {
		t.Errorf("step 3: d's turn = %v, %v, %v, %d; want turned away until t0+2s, 42", head, late, wake, note)
	}
	if qs.Behind("k") != 2 {
		t.Errorf("step 3: %d behind, want 2", qs.Behind("k"))
	}
	// A newcomer whose deadline falls before t0+2s joins nothing.
	if w, _, wake, note := qs.Join("k", t0.Add(time.Second), t0); w != nil || !wake.Equal(t0.Add(2*time.Second)) || note != 42 {
		t.Errorf("step 4: Join = %v, %v, %d; want nil, t0+2s, 42", w, wake, note)
	}
	qs.Leave(b) // behind: nobody is poked
	if poked(c) || qs.Behind("k") != 1 {
		t.Fatalf("step 5: c poked or %d behind; want not, 1", qs.Behind("k"))
	}
	qs.Leave(a) // the head: c is next
	if head, late, _, _ := qs.Turn(c); !poked(c) || !head || late {
		t.Fatalf("step 6: c is not the head")
	}
	if w, _, _, _ := qs.Join("k", t0.Add(time.Second), t0); w == nil {
		t.Fatal("step 7: a newcomer is turned away while the new head has not slept")
	} else {
		qs.Leave(w)
	}
	qs.Leave(c)
	qs.Leave(c) // twice: nothing
	qs.Leave(d) // turned away already: nothing
	qs.Leave(other)
	if qs.Len() != 0 || qs.Busy("k") {
		t.Errorf("step 8: %d queues left, want 0", qs.Len())
	}
}
