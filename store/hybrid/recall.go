package hybrid

import (
	"context"
	"errors"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/keyed"
	"github.com/spigot-go/spigot/store"
)

// DefaultMaxKeys is the number of keys a Store remembers by default: see
// WithMaxKeys.
const DefaultMaxKeys = 10_000

// recalls are the entries of a keyMemory.
var recalls = keyed.NewKind[recall]()

// A recall is what a Store remembers of a key. The first three fields are
// guarded by the Header's lock; the others are atomic, so that a local
// decision on a key the Store remembers takes no lock but the local
// store's.
type recall struct {
	keyed.Header
	limit     spigot.Limit // the remote's, when it last decided the key; the zero Limit if it never did
	at        time.Time    // when it last decided the key
	remaining int64        // what it said was left then

	seeded atomic.Bool  // the local store was seeded since the remote last decided the key
	debt   atomic.Int64 // tokens the local store took for the key since then
	used   atomic.Int64 // when the Store last used the key, in its memory's count of uses
}

// keyMemory remembers up to n keys: a new key at the cap takes the place
// of the least recently used of those an insert samples. It is safe for
// concurrent use.
type keyMemory struct {
	keys *keyed.Table
	uses atomic.Int64
}

func newKeyMemory(n int) *keyMemory {
	return &keyMemory{keys: keyed.New(keyed.Config{MaxKeys: n, KeysPerShard: 1024, Full: lru})}
}

// lru is the keys' keyed.Config.Full: a key is never full, and the least
// recently used goes first.
func lru(x *keyed.Header, _ int64) (bool, int64) { return false, recalls.Of(x).used.Load() }

// get returns what is remembered of op's key, or nil; when make, it
// remembers the key first if need be. It makes the key the most recently
// used.
func (m *keyMemory) get(op spigot.Op, make bool) *recall {
	name := op.Limit.Name()
	h := m.keys.Hash(name, op.Key)
	sh := m.keys.Shard(h)
	x := sh.Find(h, name, op.Key)
	if x == nil && make {
		sh.Lock()
		if x = sh.Find(h, name, op.Key); x == nil {
			r := recalls.New(name, op.Key)
			x = &r.Header
			sh.Insert(h, x, 0)
		}
		sh.Unlock()
	}
	if x == nil {
		return nil
	}
	r := recalls.Of(x)
	r.used.Store(m.uses.Add(1))
	return r
}

// locked returns what is remembered of op's key, locked, or nil; when
// make, it remembers the key first if need be.
func (m *keyMemory) locked(op spigot.Op, make bool) *recall {
	for {
		r := m.get(op, make)
		if r == nil || r.Lock() {
			return r
		}
		// Forgotten since: look again.
	}
}

// forget drops op's key.
func (m *keyMemory) forget(op spigot.Op) { m.keys.Delete(op.Limit.Name(), op.Key, nil) }

// heard remembers the remote's decision d on op, made about now.
func (s *Store) heard(op spigot.Op, d spigot.Decision, now time.Time) {
	m := s.mem
	switch {
	case op.Action == spigot.Reset:
		m.forget(op)
	case d.ResetAfter == 0 || d.Degraded(): // full: nothing to remember but a debt
		r := m.locked(op, false)
		if r == nil {
			return
		}
		if r.debt.Load() == 0 {
			r.Unlock()
			m.forget(op)
			return
		}
		r.limit = spigot.Limit{}
		r.seeded.Store(false)
		r.Unlock()
	default:
		r := m.locked(op, true)
		r.limit, r.at, r.remaining = op.Limit, now, d.Remaining
		r.seeded.Store(false)
		r.Unlock()
	}
}

// forgetKey drops what is remembered of op's key.
func (s *Store) forgetKey(op spigot.Op) { s.mem.forget(op) }

// localDo applies lop, the local form of op, on the local store. The
// first time the local store decides the key since the remote last did,
// it first takes from the local bucket what it holds beyond what the
// remote's bucket held when the remote last decided the key, refilled
// since and scaled to the local bucket's capacity (a key the Store does
// not remember is left as it is). What the local store takes is owed to
// the remote.
func (s *Store) localDo(ctx context.Context, op, lop spigot.Op) (spigot.Decision, error) {
	r := s.mem.get(op, true)
	if !r.seeded.Load() && r.seeded.CompareAndSwap(false, true) {
		limit, at, remaining := r.said()
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
		r := s.mem.get(op, true)
		if !r.seeded.Load() && r.seeded.CompareAndSwap(false, true) {
			limit, at, remaining := r.said()
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

// said returns what the remote last said of r's key: its limit (the zero
// Limit if it never decided the key), when, and what was left. A recall
// forgotten since says what it said then (nothing changes it any more).
func (r *recall) said() (spigot.Limit, time.Time, int64) {
	if r.Lock() {
		defer r.Unlock()
	}
	return r.limit, r.at, r.remaining
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
	r := s.mem.get(op, false)
	if r == nil || r.debt.Load() == 0 {
		return 0
	}
	return r.debt.Swap(0)
}

// payDebt adds debt back to op's key, after a remote call that was to
// charge it failed.
func (s *Store) payDebt(op spigot.Op, debt int64) {
	s.mem.get(op, true).debt.Add(debt)
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
