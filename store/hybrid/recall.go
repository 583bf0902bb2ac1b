package hybrid

import (
	"context"
	"errors"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// DefaultMemory is the number of keys a Store remembers by default: see
// WithMemory.
const DefaultMemory = 10_000

// A recallKey names a key of a limit, as the remote stores it.
type recallKey struct{ limit, key string }

// A recall is what a Store remembers of a key. The first three fields are
// guarded by the keyMemory's mutex; the others are atomic, so that a local
// decision on a key the Store remembers locks the memory once.
type recall struct {
	limit     spigot.Limit // the remote's, when it last decided the key; the zero Limit if it never did
	at        time.Time    // when it last decided the key
	remaining int64        // what it said was left then

	seeded atomic.Bool  // the local store was seeded since the remote last decided the key
	debt   atomic.Int64 // tokens the local store took for the key since then
}

// keyMemory remembers up to about n keys, in two generations: keys go into
// the current one, which becomes the previous one (and the previous one
// is dropped) when it holds half of n; a key found in the previous
// generation moves to the current one. It is safe for concurrent use.
type keyMemory struct {
	mu        sync.Mutex
	half      int
	cur, prev map[recallKey]*recall
}

func newKeyMemory(n int) *keyMemory {
	half := max(1, (n+1)/2)
	return &keyMemory{half: half, cur: make(map[recallKey]*recall), prev: make(map[recallKey]*recall)}
}

// get returns what is remembered of k, or nil, and makes it the most
// recently used. The caller holds m.mu.
func (m *keyMemory) get(k recallKey) *recall {
	if r := m.cur[k]; r != nil {
		return r
	}
	r := m.prev[k]
	if r != nil {
		delete(m.prev, k)
		m.add(k, r)
	}
	return r
}

// add remembers r for k, which the current generation does not hold. The
// caller holds m.mu.
func (m *keyMemory) add(k recallKey, r *recall) {
	if len(m.cur) >= m.half {
		m.prev, m.cur = m.cur, make(map[recallKey]*recall, m.half)
	}
	m.cur[k] = r
}

// entry returns what is remembered of k, remembering it first if need be.
func (m *keyMemory) entry(k recallKey) *recall {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.get(k)
	if r == nil {
		r = new(recall)
		m.add(k, r)
	}
	return r
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
	r := m.get(k)
	switch {
	case op.Action == spigot.Reset:
		m.forget(k)
		return
	case d.ResetAfter == 0 || d.Degraded(): // full: nothing to remember but a debt
		if r == nil {
			return
		}
		if r.debt.Load() == 0 {
			m.forget(k)
			return
		}
		r.limit = spigot.Limit{}
	default:
		if r == nil {
			r = new(recall)
			m.add(k, r)
		}
		r.limit, r.at, r.remaining = op.Limit, now, d.Remaining
	}
	r.seeded.Store(false)
}

// forgetKey drops what is remembered of op's key.
func (s *Store) forgetKey(op spigot.Op) {
	s.mem.mu.Lock()
	s.mem.forget(keyOf(op))
	s.mem.mu.Unlock()
}

// localDo applies lop, the local form of op, on the local store. The
// first time the local store decides the key since the remote last did,
// it first takes from the local bucket what it holds beyond what the
// remote's bucket held when the remote last decided the key, refilled
// since and scaled to the local bucket's capacity (a key the Store does
// not remember is left as it is). What the local store takes is owed to
// the remote.
func (s *Store) localDo(ctx context.Context, op, lop spigot.Op) (spigot.Decision, error) {
	r := s.mem.entry(keyOf(op))
	if !r.seeded.Load() && r.seeded.CompareAndSwap(false, true) {
		s.mem.mu.Lock()
		limit, at, remaining := r.limit, r.at, r.remaining
		s.mem.mu.Unlock()
		s.seed(ctx, lop, limit, at, remaining)
	}
	d, err := s.local.Do(ctx, lop)
	if err == nil {
		owe(r, op.Action, d.N)
	}
	return d, err
}

// localDoMulti is localDo for several ops.
func (s *Store) localDoMulti(ctx context.Context, mode spigot.Mode, ops, lops []spigot.Op, out []spigot.Decision) error {
	rs := make([]*recall, len(ops))
	for i, op := range ops {
		r := s.mem.entry(keyOf(op))
		if !r.seeded.Load() && r.seeded.CompareAndSwap(false, true) {
			s.mem.mu.Lock()
			limit, at, remaining := r.limit, r.at, r.remaining
			s.mem.mu.Unlock()
			s.seed(ctx, lops[i], limit, at, remaining)
		}
		rs[i] = r
	}
	if err := s.local.DoMulti(ctx, mode, lops, out); err != nil {
		return err
	}
	for i, op := range ops {
		owe(rs[i], op.Action, out[i].N)
	}
	return nil
}

// seed takes from the local bucket of lop what it holds beyond what the
// remote's bucket (limit) held at, remaining then, refilled since and
// scaled to the local bucket's capacity. A zero limit (the remote never
// said) leaves the local bucket as it is.
func (s *Store) seed(ctx context.Context, lop spigot.Op, limit spigot.Limit, at time.Time, remaining int64) {
	if limit == (spigot.Limit{}) {
		return
	}
	remoteCap, localCap := limit.Capacity(), lop.Limit.Capacity()
	if remoteCap <= 0 || localCap <= 0 {
		return
	}
	// The remote's bucket as it said it was, refilled since.
	var st store.State
	p := spigot.Op{Limit: limit, Action: spigot.Take, N: max(0, remoteCap-min(remaining, remoteCap))}
	store.Apply(p, &st, at)
	p.Action, p.N = spigot.Peek, 0
	d, err := store.Apply(p, &st, s.clock.Now())
	if err != nil {
		return
	}
	hi, lo := bits.Mul64(uint64(min(d.Remaining, remoteCap)), uint64(localCap))
	scaled, _ := bits.Div64(hi, lo, uint64(remoteCap)) // hi < remoteCap: no overflow
	if scaled >= uint64(localCap) {
		return
	}
	// Take what the local bucket holds beyond that (valid ops on the local
	// store: no error to report).
	ctx = context.WithoutCancel(ctx)
	lop.Action, lop.N = spigot.Peek, 0
	if l, err := s.local.Do(ctx, lop); err == nil && l.Remaining > int64(scaled) {
		lop.Action, lop.N = spigot.TakeUpTo, l.Remaining-int64(scaled)
		s.local.Do(ctx, lop)
	}
}

// owe adds to r's debt what an op of the action moved on the local store:
// tokens taken, less tokens given back.
func owe(r *recall, action spigot.Action, n int64) {
	switch {
	case n == 0:
	case action == spigot.Take || action == spigot.TakeUpTo:
		r.debt.Add(n)
	case action == spigot.Refund:
		for {
			old := r.debt.Load()
			if r.debt.CompareAndSwap(old, max(0, old-n)) {
				return
			}
		}
	}
}

// takeDebt returns what the local store took for op's key since the
// remote last decided it, and clears it: the caller charges the remote,
// and gives it back with payDebt if that fails.
func (s *Store) takeDebt(op spigot.Op) int64 {
	m := s.mem
	m.mu.Lock()
	r := m.cur[keyOf(op)]
	if r == nil {
		r = m.prev[keyOf(op)]
	}
	m.mu.Unlock()
	if r == nil || r.debt.Load() == 0 {
		return 0
	}
	return r.debt.Swap(0)
}

// payDebt adds debt back to op's key, after a remote call that was to
// charge it failed.
func (s *Store) payDebt(op spigot.Op, debt int64) {
	s.mem.entry(keyOf(op)).debt.Add(debt)
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
