package hybrid

import (
	"context"
	"errors"
	"math/bits"
	"sync"
	"time"

	"github.com/spigot-go/spigot"
)

// DefaultMemory is the number of keys a Store remembers by default: see
// WithMemory.
const DefaultMemory = 10_000

// A recallKey names a key of a limit, as the remote stores it.
type recallKey struct{ limit, key string }

// A recall is what a Store remembers of a key.
type recall struct {
	limit     spigot.Limit // the remote's, when it last decided the key; the zero Limit if it never did
	at        time.Time    // when it last decided the key
	remaining int64        // what it said was left then
	seeded    bool         // the local store has been seeded since the remote last decided the key
	debt      int64        // tokens the local store took for the key since then
}

// keyMemory remembers up to about n keys, in two generations: keys go into
// the current one, which becomes the previous one (and the previous one
// is dropped) when it holds half of n; a key found in the previous
// generation moves to the current one. It is safe for concurrent use.
type keyMemory struct {
	mu        sync.Mutex
	half      int
	cur, prev map[recallKey]recall
}

func newKeyMemory(n int) *keyMemory {
	half := max(1, (n+1)/2)
	return &keyMemory{half: half, cur: make(map[recallKey]recall), prev: make(map[recallKey]recall)}
}

// get returns what is remembered of k. The caller holds m.mu.
func (m *keyMemory) get(k recallKey) (recall, bool) {
	if r, ok := m.cur[k]; ok {
		return r, true
	}
	r, ok := m.prev[k]
	return r, ok
}

// put remembers r for k. The caller holds m.mu.
func (m *keyMemory) put(k recallKey, r recall) {
	if _, ok := m.cur[k]; !ok {
		delete(m.prev, k)
		if len(m.cur) >= m.half {
			m.prev, m.cur = m.cur, make(map[recallKey]recall, m.half)
		}
	}
	m.cur[k] = r
}

// forget drops k. The caller holds m.mu.
func (m *keyMemory) forget(k recallKey) {
	delete(m.cur, k)
	delete(m.prev, k)
}

func keyOf(op spigot.Op) recallKey { return recallKey{op.Limit.Name(), op.Key} }

// heard remembers the remote's decision d on op, made about now.
func (s *Store) heard(op spigot.Op, d spigot.Decision, now time.Time) {
	m := s.mem
	k := keyOf(op)
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.get(k)
	switch {
	case op.Action == spigot.Reset:
		m.forget(k)
		return
	case d.ResetAfter == 0 || d.Degraded(): // full: nothing to remember
		if ok && r.debt > 0 {
			r.limit = spigot.Limit{}
			r.seeded = false
			m.put(k, r)
		} else if ok {
			m.forget(k)
		}
		return
	}
	r.limit, r.at, r.remaining, r.seeded = op.Limit, now, d.Remaining, false
	m.put(k, r)
}

// forgetKey drops what is remembered of op's key.
func (s *Store) forgetKey(op spigot.Op) {
	s.mem.mu.Lock()
	s.mem.forget(keyOf(op))
	s.mem.mu.Unlock()
}

// seed prepares the local store for op (whose local form is lop), the
// first time the local store decides its key since the remote last did:
// it takes from the local bucket what it holds beyond what the remote's
// bucket held when the remote last decided the key, refilled since and
// scaled to the local bucket's capacity. A key the Store does not
// remember is left as it is.
func (s *Store) seed(ctx context.Context, op, lop spigot.Op) {
	m := s.mem
	k := keyOf(op)
	m.mu.Lock()
	r, ok := m.get(k)
	if ok && r.seeded {
		m.mu.Unlock()
		return
	}
	r.seeded = true
	m.put(k, r)
	m.mu.Unlock()
	if !ok || r.limit == (spigot.Limit{}) {
		return
	}
	remoteCap, localCap := r.limit.Capacity(), lop.Limit.Capacity()
	if remoteCap <= 0 || localCap <= 0 {
		return
	}
	// The remote's bucket as it said it was, refilled since.
	var st spigot.State
	p := spigot.Op{Limit: r.limit, Action: spigot.Take, N: max(0, remoteCap-min(r.remaining, remoteCap))}
	p.Apply(&st, r.at)
	p.Action, p.N = spigot.Peek, 0
	d, err := p.Apply(&st, s.clock.Now())
	if err != nil {
		return
	}
	hi, lo := bits.Mul64(uint64(min(d.Remaining, remoteCap)), uint64(localCap))
	scaled, _ := bits.Div64(hi, lo, uint64(remoteCap)) // hi < remoteCap: no overflow
	if scaled >= uint64(localCap) {
		return
	}
	// Take what the local bucket holds beyond that (a valid op on the local
	// store: no error to report).
	ctx = context.WithoutCancel(ctx)
	lop.Action, lop.N = spigot.Peek, 0
	if l, err := s.local.Do(ctx, lop); err == nil && l.Remaining > int64(scaled) {
		lop.Action, lop.N = spigot.TakeUpTo, l.Remaining-int64(scaled)
		s.local.Do(ctx, lop)
	}
}

// owe remembers that the local store decided d on op: what it took is owed
// to the remote.
func (s *Store) owe(op spigot.Op, d spigot.Decision) {
	var delta int64
	switch op.Action {
	case spigot.Take, spigot.TakeUpTo:
		delta = d.N
	case spigot.Refund:
		delta = -d.N
	}
	if delta == 0 {
		return
	}
	m := s.mem
	k := keyOf(op)
	m.mu.Lock()
	defer m.mu.Unlock()
	r, _ := m.get(k)
	r.seeded = true
	r.debt = max(0, r.debt+delta)
	if r.debt == 0 && r.limit == (spigot.Limit{}) {
		m.forget(k)
		return
	}
	m.put(k, r)
}

// takeDebt returns what the local store took for op's key since the
// remote last decided it, and clears it: the caller charges the remote,
// and gives it back with payDebt if that fails.
func (s *Store) takeDebt(op spigot.Op) int64 {
	m := s.mem
	k := keyOf(op)
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.get(k)
	if !ok || r.debt == 0 {
		return 0
	}
	debt := r.debt
	r.debt = 0
	m.put(k, r)
	return debt
}

// payDebt adds debt back to op's key, after a remote call that was to
// charge it failed.
func (s *Store) payDebt(op spigot.Op, debt int64) {
	m := s.mem
	k := keyOf(op)
	m.mu.Lock()
	defer m.mu.Unlock()
	r, _ := m.get(k)
	r.debt += debt
	m.put(k, r)
}

// withDebt applies op on the remote after a TakeUpTo of debt on its key,
// in one DoMulti call (in Independent mode), or, for a remote that does
// not apply several ops in one call, in two calls.
func (s *Store) withDebt(ctx context.Context, op spigot.Op, debt int64) (spigot.Decision, error) {
	charge := spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.TakeUpTo, N: debt}
	ops := [2]spigot.Op{charge, op}
	var out [2]spigot.Decision
	err := s.remote.DoMulti(ctx, spigot.Independent, ops[:], out[:])
	if errors.Is(err, errors.ErrUnsupported) { // changed nothing: one op at a time
		if _, err := s.remote.Do(ctx, charge); err != nil && !answered(err) {
			return spigot.Decision{}, err
		}
		return s.remote.Do(ctx, op)
	}
	return out[1], err
}
