package wait

import (
	"sync"
	"sync/atomic"
	"time"
)

// Queues holds one first-in, first-out queue of waiters per key, for
// spigot.Limiter.WaitN: the waiter at the head of a key's queue is the one
// that asks the store, and the others wait their turn. A key's queue exists
// only while someone waits on it. The zero value is ready to use; Queues is
// safe for concurrent use. T is what the head last learnt (its last
// denial), handed to the waiters that give up because of it.
type Queues[T any] struct {
	// queues counts the keys waited on, so that Busy needs no lock when
	// there are none.
	queues atomic.Int64
	// Keys are spread over shards, so that waiters on different keys
	// seldom share a lock.
	shards [shards]shard[T]
}

const shards = 16

type shard[T any] struct {
	mu sync.Mutex
	m  map[string]*queue[T]
}

// shard returns the shard of key (FNV-1a).
func (qs *Queues[T]) shard(key string) *shard[T] {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return &qs.shards[h%shards]
}

type queue[T any] struct {
	head, tail *Waiter[T]
	// wake is when the head asks the store next: no waiter behind it can
	// be admitted before. It is the zero Time until the head sleeps.
	wake time.Time
	note T // what the head last learnt, with wake
	// minDeadline is at most the earliest deadline of the waiters behind
	// the head (zero: none has one), to skip looking for waiters to turn
	// away when none can be.
	minDeadline time.Time
}

// A Waiter is one place in a key's queue. Its methods are called by the
// goroutine that joined, except that the queue pokes it.
type Waiter[T any] struct {
	key        string
	shard      *shard[T]
	q          *queue[T] // nil once it has left
	prev, next *Waiter[T]
	deadline   time.Time // zero: none
	head       bool
	late       bool // turned away: its deadline falls before the head's wake
	wake       time.Time
	note       T
	// C receives when the waiter should look at its place again (Turn):
	// it has become the head, or has been turned away. Its buffer of one
	// coalesces pokes.
	C chan struct{}
}

// Busy reports whether someone waits on key.
func (qs *Queues[T]) Busy(key string) bool {
	if qs.queues.Load() == 0 {
		return false
	}
	sh := qs.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[key] != nil
}

// Join puts a waiter with the given deadline (zero: none) at the tail of
// key's queue, creating the queue if nobody waits on key, and returns it
// and whether it is at the head. When the deadline falls
// before the instant the head asks the store next, it joins nothing and
// returns nil, with that instant and what the head last learnt: the
// waiter cannot be admitted before its deadline.
func (qs *Queues[T]) Join(key string, deadline, now time.Time) (w *Waiter[T], head bool, wake time.Time, note T) {
	sh := qs.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	q := sh.m[key]
	if q == nil {
		if sh.m == nil {
			sh.m = make(map[string]*queue[T])
		}
		q = &queue[T]{}
		sh.m[key] = q
		qs.queues.Add(1)
	} else if late(deadline, q.wake, now) {
		return nil, false, q.wake, q.note
	}
	w = &Waiter[T]{key: key, shard: sh, q: q, deadline: deadline, C: make(chan struct{}, 1)}
	if q.tail == nil {
		q.head, q.tail = w, w
		w.head = true
		return w, true, time.Time{}, note
	}
	w.prev = q.tail
	q.tail.next = w
	q.tail = w
	if !deadline.IsZero() && (q.minDeadline.IsZero() || deadline.Before(q.minDeadline)) {
		q.minDeadline = deadline
	}
	return w, false, time.Time{}, note
}

// late reports whether a deadline falls before wake, still to come at now.
func late(deadline, wake, now time.Time) bool {
	return !deadline.IsZero() && wake.After(now) && deadline.Before(wake)
}

// Turn is what a waiter finds when it looks at its place after a poke on
// C: head reports that it is at the head; late, that it was turned away
// (and has left the queue) because its deadline falls before wake, when
// the head asks the store next, with what the head learnt then. When
// neither, it goes on waiting.
func (qs *Queues[T]) Turn(w *Waiter[T]) (head, late bool, wake time.Time, note T) {
	w.shard.mu.Lock()
	defer w.shard.mu.Unlock()
	return w.head, w.late, w.wake, w.note
}

// Sleeping records, for the head w, that it asks the store next at wake,
// having learnt note, and turns away every waiter behind it whose deadline
// falls before wake.
func (qs *Queues[T]) Sleeping(w *Waiter[T], wake, now time.Time, note T) {
	w.shard.mu.Lock()
	defer w.shard.mu.Unlock()
	q := w.q
	if q == nil || !w.head {
		return
	}
	q.wake, q.note = wake, note
	if !late(q.minDeadline, wake, now) {
		return
	}
	var min time.Time
	for v := w.next; v != nil; {
		next := v.next
		if late(v.deadline, wake, now) {
			qs.remove(v)
			v.late, v.wake, v.note = true, wake, note
			poke(v)
		} else if !v.deadline.IsZero() && (min.IsZero() || v.deadline.Before(min)) {
			min = v.deadline
		}
		v = next
	}
	q.minDeadline = min
}

// Leave takes w out of its queue, if it is still in one: the waiter behind
// it becomes the head when w was, and the queue goes away when it is
// empty.
func (qs *Queues[T]) Leave(w *Waiter[T]) {
	w.shard.mu.Lock()
	defer w.shard.mu.Unlock()
	if w.q == nil {
		return
	}
	wasHead := w.head
	next := w.next
	q := w.q
	qs.remove(w)
	if wasHead && next != nil {
		var zero T
		q.wake, q.note = time.Time{}, zero
		next.head = true
		poke(next)
	}
}

// remove unlinks w from its queue, and drops the queue when it is empty.
// w's shard is locked.
func (qs *Queues[T]) remove(w *Waiter[T]) {
	q := w.q
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next, w.q, w.head = nil, nil, nil, false
	if q.head == nil {
		delete(w.shard.m, w.key)
		qs.queues.Add(-1)
	}
}

// Len reports how many keys have a queue, for tests.
func (qs *Queues[T]) Len() int {
	return int(qs.queues.Load())
}

func poke[T any](w *Waiter[T]) {
	select {
	case w.C <- struct{}{}:
	default:
	}
}

// Behind reports how many waiters wait behind the head of key's queue,
// for tests.
func (qs *Queues[T]) Behind(key string) int {
	sh := qs.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	if q := sh.m[key]; q != nil {
		for w := q.head.next; w != nil; w = w.next {
			n++
		}
	}
	return n
}
