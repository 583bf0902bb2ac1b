// Package scriptstore is the one Redis-protocol store behind store/redis,
// store/valkey and store/rueidis, each of which adapts it to a client
// library (a Client). It runs spigot's script (package wire) on the
// server: one call per request over only the request's keys (with group
// commit, one batch call over the requests queued together, see lane),
// EVALSHA and then EVAL only after a NOSCRIPT reply, never a resend of a
// command whose fate is unknown, a Peek as EVALSHA_RO. It names keys
// (store.Key), checks ops, cuts batches, classifies errors and decodes
// replies, so that what the three stores promise is written once.
package scriptstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

// config is what a store's options (store.Option) set: its methods are
// the ones an Option calls.
type config struct {
	prefix string      // of every key
	tags   bool        // keys may choose their slot (store.TaggedKey)
	clock  clock.Clock // nil: the server's TIME
	group  bool        // group commit (see lane)
}

func (c *config) SetPrefix(p string)     { c.prefix = p }
func (c *config) SetKeyHashTags(on bool) { c.tags = on }
func (c *config) SetClock(k clock.Clock) { c.clock = k }
func (c *config) SetGroupCommit(on bool) { c.group = on }

// Topology is what a client says of the servers behind it.
type Topology struct {
	// Cluster says that the client's scripts see the keys of one hash
	// slot only (a Redis Cluster).
	Cluster bool

	// Ring says that the client's scripts see the keys of one shard only,
	// which the client picks by the hash of a key's tag (a go-redis
	// Ring). The store cannot see which shard a key is on, so it does no
	// group commit, whatever the options say.
	Ring bool

	// Detach sends each call on a goroutine of its own when the caller's
	// context can end, so that the call returns as soon as the context
	// is done, whatever the client is doing then; the request, once sent,
	// goes on without the caller, its reply dropped.
	Detach bool

	// Boxed says that the client takes a command as ...any (Call.Line)
	// rather than as strings (Call.Command, Keys, Argv).
	Boxed bool
}

// Store is a spigot.Store on a Client. It is safe for concurrent use. The
// zero Store is not usable; call New.
type Store struct {
	client Client
	name   string // in errors: "redis", "valkey", "rueidis"
	prefix string
	tags   bool
	args   *wire.Args
	topo   Topology
	part   func(key string) uint64 // of a key, for a cluster or a Ring: see parts
	noRO   atomic.Bool             // the server cannot run EVALSHA_RO: send Peeks as EVALSHA
	group  *groups                 // nil without group commit
}

// New returns a store named name (as errors say it: "spigot: name: …")
// that sends its calls through client, configured by opts. It panics,
// with a message that names the store, if an option is nil or invalid (a
// prefix that store.CheckPrefix rejects).
func New(name string, client Client, topo Topology, opts []store.Option) *Store {
	cfg := config{prefix: store.DefaultPrefix, group: true}
	for i, o := range opts {
		if o == nil {
			panic("spigot: " + name + ": New: option " + strconv.Itoa(i) + " is nil")
		}
		o(&cfg)
	}
	if err := store.CheckPrefix(cfg.prefix); err != nil {
		panic("spigot: " + name + ": WithPrefix: " + strings.TrimPrefix(err.Error(), "spigot: "))
	}
	s := &Store{client: client, name: name, prefix: cfg.prefix, tags: cfg.tags, args: wire.NewArgs(cfg.clock), topo: topo}
	switch {
	case topo.Cluster:
		s.part = func(key string) uint64 { return uint64(wire.Slot(key)) }
	case topo.Ring:
		s.part = wire.TagHash
		cfg.group = false
	}
	if cfg.group {
		s.group = new(groups)
	}
	return s
}

// key returns the name of op's state.
func (s *Store) key(op spigot.Op) string {
	if s.tags {
		return store.TaggedKey(s.prefix, op.Limit, op.Key)
	}
	return store.Key(s.prefix, op.Limit, op.Key)
}

// check returns the error of the first invalid op (spigot.Op.Check).
func (s *Store) check(ops ...spigot.Op) error {
	for _, op := range ops {
		if err := op.Check(); err != nil {
			return err
		}
	}
	return nil
}

// Do implements spigot.Store: every action on every kind of limit, in one
// round trip; with group commit, in one round trip with the ops of other
// calls of Do (see lane).
func (s *Store) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := op.Check(); err != nil {
		return spigot.Decision{}, err
	}
	if s.group != nil {
		return s.doGrouped(ctx, op)
	}
	return s.do(ctx, op, "", nil)
}

// do sends op alone, on key (its name, or "" for do to make it); with
// group commit, as the call in flight on l, which it hands on (next) when
// it returns.
func (s *Store) do(ctx context.Context, op spigot.Op, key string, l *lane) (spigot.Decision, error) {
	x := s.exchange(1)
	x.lane = l
	if key == "" {
		key = s.key(op)
	}
	c := &x.calls[0]
	x.key[0] = key
	if s.topo.Boxed {
		x.argvAny = s.args.OpAny(op)
		c.argvAny = x.argvAny[:]
	} else {
		x.argv = s.args.Op(op)
		c.Argv = x.argv[:]
	}
	c.Keys, c.ReadOnly = x.key[:], op.Action == spigot.Peek && !s.noRO.Load()
	var out [1]spigot.Decision
	ops := [1]spigot.Op{op}
	if l != nil && hooks.Load() != nil {
		s.sent(x.calls, []spigot.Op{op})
	}
	err := s.run(ctx, x, ops[:], out[:])
	return out[0], err
}

// DoMulti implements spigot.Store. Independent ops go in one pipeline:
// one round trip (on a cluster, one per node, in parallel). AllOrNothing
// ops are one call of the script over all their keys. On a client whose
// scripts see one part of the keys only (a cluster's hash slot), ops of
// several parts get a *store.PartsError, having applied nothing, for
// spigot.DoMulti to apply them part by part.
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if err := store.CheckMulti(mode, ops, out); err != nil {
		return err
	}
	if err := s.check(ops...); err != nil {
		return err
	}
	switch {
	case len(ops) == 0:
		return nil
	case mode == spigot.Independent:
		return s.batch(ctx, ops, out)
	}
	x := s.exchange(1)
	s.set(&x.calls[0], ops, false)
	if err := s.parts(x.calls[0].Keys); err != nil {
		x.release()
		return err
	}
	return s.run(ctx, x, ops, out)
}

// parts returns a *store.PartsError for keys that a client whose scripts
// see one part of the keys only cannot take in one call, and nil for keys
// of one part.
func (s *Store) parts(keys []string) error {
	if s.part == nil {
		return nil
	}
	parts := make([]uint64, len(keys))
	for i, k := range keys {
		parts[i] = s.part(k)
	}
	if slices.ContainsFunc(parts, func(p uint64) bool { return p != parts[0] }) {
		return &store.PartsError{Parts: parts}
	}
	return nil
}

// run sends x, one call of the script on ops applied together (one op, or
// several all or nothing), and sets out from its reply.
func (s *Store) run(ctx context.Context, x *exchange, ops []spigot.Op, out []spigot.Decision) error {
	if err := x.await(ctx); err != nil {
		return s.err(err, false)
	}
	defer x.release()
	if r := &x.calls[0].Reply; r.Err != nil {
		return s.err(r.Err, r.ServerErr)
	}
	return decode(x.calls[0].Reply, ops, out, nil)
}

// set makes c the call of the script on ops: all or nothing, or, for a
// batch, each on its own. A call of Peeks only is read-only.
func (s *Store) set(c *Call, ops []spigot.Op, batch bool) {
	c.Keys = make([]string, len(ops))
	for i, op := range ops {
		c.Keys[i] = s.key(op)
	}
	switch {
	case s.topo.Boxed && batch:
		c.argvAny = s.args.BatchAny(ops)
	case s.topo.Boxed:
		c.argvAny = s.args.OpsAny(ops)
	case batch:
		c.Argv = s.args.Batch(ops)
	default:
		c.Argv = s.args.Ops(ops)
	}
	c.ReadOnly = !s.noRO.Load() && !slices.ContainsFunc(ops, func(op spigot.Op) bool { return op.Action != spigot.Peek })
}

// batch applies each op as Do would: on one server in batch calls of the
// script, of up to wire.BatchSize ops each, and on a client whose scripts
// see one part of the keys, one call per op; all in one pipeline.
func (s *Store) batch(ctx context.Context, ops []spigot.Op, out []spigot.Decision) error {
	size := wire.BatchSize
	if s.part != nil {
		size = 1
	}
	n := (len(ops) + size - 1) / size
	x := s.exchange(n)
	for k := range n {
		part := ops[k*size : min((k+1)*size, len(ops))]
		s.set(&x.calls[k], part, true)
	}
	failed := x.await(ctx)
	errs := make([]error, len(ops))
	for k := range n {
		lo, hi := k*size, min((k+1)*size, len(ops))
		var err error
		switch {
		case failed != nil: // x is no longer the caller's
			err = s.err(failed, false)
		case x.calls[k].Reply.Err != nil:
			err = s.err(x.calls[k].Reply.Err, x.calls[k].Reply.ServerErr)
		default:
			err = decode(x.calls[k].Reply, ops[lo:hi], out[lo:hi], errs[lo:hi])
		}
		if err != nil {
			for i := lo; i < hi; i++ {
				out[i], errs[i] = spigot.Undecided(), err
			}
		}
	}
	if failed == nil {
		x.release()
	}
	return wire.BatchErr(slices.DeleteFunc(errs, func(err error) bool { return err == nil }), len(ops))
}

// decode sets out from the reply to a call of the script on ops, and, for
// a batch call (errs not nil), errs[i] and a failed decision for each key
// that failed alone.
func decode(r Reply, ops []spigot.Op, out []spigot.Decision, errs []error) error {
	switch {
	case r.Ints != nil && errs != nil:
		return wire.DecodeBatchInts(r.Ints, ops, out, errs)
	case r.Ints != nil:
		return wire.DecodeAllInts(r.Ints, ops, out)
	case errs != nil && len(out) > 1:
		return wire.DecodeBatch(r.Value, ops, out, errs)
	}
	return wire.DecodeAll(r.Value, ops, out)
}

// err returns err as the store returns it (see wire.Err).
func (s *Store) err(err error, serverErr bool) error { return wire.Err(s.name, err, serverErr) }

// An exchange is what one call of the store sends and the replies it
// gets. It is the store's, never the caller's, so that a reply that comes
// after the call returned changes nothing the caller sees.
type exchange struct {
	s     *Store
	calls []Call
	lane  *lane      // the lane whose call in flight x is, if any: see await
	done  chan error // receives once the replies are in, or the caller's error if nothing was sent

	// Room for the call of Do: its call, key and arguments.
	call1   [1]Call
	key     [1]string
	argv    wire.Argv
	argvAny [len(wire.Argv{})]any
}

var exchanges = sync.Pool{New: func() any { return &exchange{done: make(chan error, 1)} }}

// exchange returns an exchange of n calls, from a pool.
func (s *Store) exchange(n int) *exchange {
	x := exchanges.Get().(*exchange)
	x.s, x.calls = s, x.call1[:]
	if n > 1 {
		x.calls = make([]Call, n)
	}
	return x
}

// release gives back an exchange that await returned without error.
func (x *exchange) release() {
	x.s, x.calls, x.lane = nil, nil, nil
	x.call1, x.key, x.argv, x.argvAny = [1]Call{}, [1]string{}, wire.Argv{}, [len(wire.Argv{})]any{}
	exchanges.Put(x)
}

// await sends x and returns once the replies are in. When the client
// detaches calls and ctx can end, x is sent on a goroutine of its own and
// await returns with ctx's error as soon as ctx is done, whichever comes
// first; that goroutine then keeps x, and the caller must leave x alone.
// Once the replies are in (or nothing was sent), x's lane, if any, is
// handed on.
func (x *exchange) await(ctx context.Context) error {
	done := ctx.Done()
	if !x.s.topo.Detach || done == nil {
		x.send(ctx, ctx)
		x.s.next(x.lane)
		return nil
	}
	if err := ctx.Err(); err != nil {
		x.s.next(x.lane)
		return err
	}
	go x.detached(ctx)
	select {
	case err := <-x.done:
		return err
	case <-done:
		select {
		case err := <-x.done: // replies that came in time
			return err
		default:
			return ctx.Err()
		}
	}
}

// detached sends x with the caller's values and deadline, not its
// cancellation, unless the caller no longer waits, and says when the
// replies are in.
func (x *exchange) detached(caller context.Context) {
	s, l := x.s, x.lane // x is the caller's again once done has a value
	if err := caller.Err(); err != nil {
		x.done <- err
		s.next(l)
		return
	}
	ctx := context.WithoutCancel(caller)
	if d, ok := caller.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	}
	x.send(ctx, caller)
	x.done <- nil
	s.next(l)
}

// send sends x's calls with EVALSHA (EVALSHA_RO for a call of Peeks
// only); then, while the caller still waits, again the calls the server
// refused without running them: with EVAL after a NOSCRIPT reply, and
// with EVALSHA a read-only call that the server could not run so. Those
// that the caller no longer waits for get its context's error.
func (x *exchange) send(ctx, caller context.Context) {
	x.s.client.Send(ctx, x.calls)
	for range 2 { // at most: unknown EVALSHA_RO, then NOSCRIPT
		var again []int
		for k := range x.calls {
			c := &x.calls[k]
			switch r := c.Reply; {
			case !r.ServerErr:
			case strings.HasPrefix(r.Err.Error(), "NOSCRIPT") && !c.Source:
				c.Source = true
				again = append(again, k)
			case c.ReadOnly && noReadOnly(r.Err.Error()):
				x.s.noRO.Store(true)
				c.ReadOnly = false
				again = append(again, k)
			}
		}
		if len(again) == 0 {
			return
		}
		if err := caller.Err(); err != nil { // the server ran none of them
			for _, k := range again {
				x.calls[k].Reply = Reply{Err: err}
			}
			return
		}
		if len(again) == len(x.calls) {
			x.s.client.Send(ctx, x.calls)
			continue
		}
		calls := make([]Call, len(again))
		for j, k := range again {
			calls[j] = x.calls[k]
		}
		x.s.client.Send(ctx, calls)
		for j, k := range again {
			x.calls[k] = calls[j]
		}
	}
}

// noReadOnly reports whether an error reply to a read-only call says
// that the server cannot run it so: it does not know EVALSHA_RO (before
// Redis 7), or refuses a command of the script in a read-only script
// (miniredis refuses TIME). A read-only call changes nothing, so sending it
// again as EVALSHA charges nothing twice.
func noReadOnly(msg string) bool {
	return strings.Contains(msg, "unknown command") || strings.Contains(msg, "read-only script")
}
