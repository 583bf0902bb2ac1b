package scriptstore

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/wire"
)

// Group commit (store.WithGroupCommit): the calls of Do to one server (on a
// cluster, to one hash slot) go one at a time. A Do that finds none in
// flight sends its op alone, at once, as it would without group commit;
// one that finds a call in flight queues, and when that call returns, the
// ops queued meanwhile go together in one round trip, in batch calls of
// the script (each op applied on its own, one after the other, as Do would
// apply it alone) of up to wire.BatchSize ops each. No timer: a lone
// caller waits for nothing, and under load the batches grow by
// themselves, up to the number of callers.

// A lane is the queue of the calls of Do to one server, or to one part of
// the keys (Topology.Cluster). Its fields are guarded by mu.
type lane struct {
	mu    sync.Mutex
	busy  bool      // a call is in flight
	queue []*waiter // the ops that wait for it to return, in order
}

// The states of a waiter, guarded by its lane's mu.
const (
	queued  = iota // in its lane's queue
	taken          // taken from the queue into a call: sent, or about to be
	dropped        // left out of a call, its context done: never sent
)

// A waiter is an op of Do queued in a lane, and then its result.
type waiter struct {
	ctx   context.Context
	op    spigot.Op
	state int // guarded by the lane's mu

	// Set by the call that took the waiter, before it sends on ready.
	d     spigot.Decision
	err   error
	ready chan struct{}
}

var waiters = sync.Pool{New: func() any { return &waiter{ready: make(chan struct{}, 1)} }}

// groups are a store's lanes: one for a client of one server, or one per
// part of the keys, which must be few: a cluster's hash slots, not the
// hashes of a Ring (whose store turns group commit off).
type groups struct {
	one   lane
	mu    sync.RWMutex
	parts map[uint64]*lane // for a client of a cluster; guarded by mu
}

// lane returns the lane of a call on key.
func (s *Store) lane(key string) *lane {
	g := s.group
	if s.part == nil {
		return &g.one
	}
	p := s.part(key)
	g.mu.RLock()
	l := g.parts[p]
	g.mu.RUnlock()
	if l != nil {
		return l
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if l = g.parts[p]; l == nil {
		if g.parts == nil {
			g.parts = map[uint64]*lane{}
		}
		l = new(lane)
		g.parts[p] = l
	}
	return l
}

// doGrouped is Do with group commit: op alone when its lane has no call in
// flight, and otherwise queued for the next call.
func (s *Store) doGrouped(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	var key string
	if s.part != nil {
		key = s.key(op)
	}
	l := s.lane(key)
	l.mu.Lock()
	if !l.busy {
		l.busy = true
		l.mu.Unlock()
		return s.do(ctx, op, key, l)
	}
	if err := ctx.Err(); err != nil {
		l.mu.Unlock()
		return spigot.Decision{}, s.err(err, false)
	}
	w := waiters.Get().(*waiter)
	w.ctx, w.op, w.state = ctx, op, queued
	l.queue = append(l.queue, w)
	l.mu.Unlock()
	s.queued(op)

	select {
	case <-w.ready:
	case <-ctx.Done():
		if !l.leave(w) {
			return spigot.Decision{}, s.err(ctx.Err(), false)
		}
	}
	d, err := w.d, w.err
	*w = waiter{ready: w.ready}
	waiters.Put(w)
	return d, err
}

// leave takes w, whose caller's context is done, out of l, and reports
// whether its result is in after all. A waiter never sent is given back
// to the pool; one that was sent, or is about to be, stays with the call,
// which goes on without its caller.
func (l *lane) leave(w *waiter) (replied bool) {
	l.mu.Lock()
	state := w.state
	if state == queued {
		i := slices.Index(l.queue, w)
		l.queue = slices.Delete(l.queue, i, i+1)
	}
	l.mu.Unlock()
	if state != taken {
		*w = waiter{ready: w.ready}
		waiters.Put(w)
		return false
	}
	select {
	case <-w.ready: // the reply came in time
		return true
	default:
		return false
	}
}

// next is called when the call in flight on l, if l is not nil, has
// returned: it sends the ops queued meanwhile, if any, on a goroutine of
// its own.
func (s *Store) next(l *lane) {
	if l == nil {
		return
	}
	if ws := l.take(); len(ws) > 0 {
		go s.flush(l, ws)
	}
}

// take returns the waiters queued on l, and leaves l with none in flight
// if there are none; a waiter whose context is done is left out, never
// sent.
func (l *lane) take() []*waiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ws []*waiter
	for _, w := range l.queue {
		if w.ctx.Err() != nil {
			w.state = dropped
			continue
		}
		w.state = taken
		ws = append(ws, w)
	}
	clear(l.queue)
	l.queue = l.queue[:0]
	if len(ws) == 0 {
		l.busy = false
	}
	return ws
}

// flush sends the ops of ws, the call in flight on l, in one round trip,
// in calls of up to wire.BatchSize ops; once the replies are in, it hands
// l on (next), so that the server gets the next round trip while flush
// gives each waiter of ws its result. The calls have the values of the
// first waiter's context, and the latest deadline of the waiters'
// contexts, or none if one has none.
func (s *Store) flush(l *lane, ws []*waiter) {
	ops := make([]spigot.Op, len(ws))
	for i, w := range ws {
		ops[i] = w.op
	}
	n := (len(ops) + wire.BatchSize - 1) / wire.BatchSize
	x := s.exchange(n)
	for k := range n {
		s.set(&x.calls[k], ops[k*wire.BatchSize:min((k+1)*wire.BatchSize, len(ops))], true)
	}
	ctx, cancel := groupContext(ws)
	s.sent(x.calls, ops)
	x.send(ctx, ctx)
	cancel()
	s.next(l)

	out := make([]spigot.Decision, len(ops))
	errs := make([]error, len(ops))
	for k := range n {
		lo, hi := k*wire.BatchSize, min((k+1)*wire.BatchSize, len(ops))
		r := x.calls[k].Reply
		var err error
		if r.Err != nil {
			err = s.err(r.Err, r.ServerErr)
		} else if err = decode(r, ops[lo:hi], out[lo:hi], errs[lo:hi]); err == nil {
			for i := lo; i < hi; i++ {
				if errs[i] != nil { // a key that failed alone
					errs[i] = s.err(errs[i], true)
				}
			}
			continue
		}
		for i := lo; i < hi; i++ {
			errs[i] = err
		}
	}
	x.release()
	for i, w := range ws {
		if errs[i] != nil {
			w.d, w.err = spigot.Decision{}, errs[i]
		} else {
			w.d = out[i]
		}
		w.ready <- struct{}{}
	}
}

// groupContext returns the context of a call of ws: see send.
func groupContext(ws []*waiter) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(ws[0].ctx)
	var latest time.Time
	for _, w := range ws {
		d, ok := w.ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}

// Hooks are calls into tests (SetHooks): each gets the prefix of the
// store with group commit that calls it.
type Hooks struct {
	// Queued is called when an op of Do has queued, behind a call in
	// flight.
	Queued func(prefix string, op spigot.Op)

	// Sent is called with the ops of each round trip of Do, a slice per
	// call of the script, right before it is sent, on the goroutine that
	// sends it: it may hold the round trip in flight by not returning. A
	// lane's round trips go one at a time, so Sent sees them in the order
	// the server applies them.
	Sent func(prefix string, calls [][]spigot.Op)
}

var hooks atomic.Pointer[Hooks]

// SetHooks sets the hooks of every store until restore is called. For
// tests only.
func SetHooks(h Hooks) (restore func()) {
	hooks.Store(&h)
	return func() { hooks.Store(nil) }
}

// queued calls the hook Queued, if set, on op.
func (s *Store) queued(op spigot.Op) {
	if h := hooks.Load(); h != nil && h.Queued != nil {
		h.Queued(s.prefix, op)
	}
}

// sent calls the hook Sent, if set, on calls, of ops.
func (s *Store) sent(calls []Call, ops []spigot.Op) {
	h := hooks.Load()
	if h == nil || h.Sent == nil {
		return
	}
	split := make([][]spigot.Op, len(calls))
	for k := range calls {
		split[k] = ops[:len(calls[k].Keys)]
		ops = ops[len(calls[k].Keys):]
	}
	h.Sent(s.prefix, split)
}
