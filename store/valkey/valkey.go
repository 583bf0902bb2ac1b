// Package valkey is a spigot.Store on Valkey (or Redis, or any server that
// speaks its protocol and runs Lua) through valkey-go: the limit holds
// across every replica of a service that shares the server, and concurrent
// callers share the client's automatic pipelining, so many goroutines cost
// few round trips.
//
// Each operation (take, take up to, refund, reset, peek) is one EVALSHA of
// spigot's script, which applies spigot's model to one key atomically on
// the server, with the server's clock; several operations, all or
// nothing, are one EVALSHA over their keys, and a batch is one DoMulti of
// the client. Package store describes the state it keeps. It works with any valkey.Client: a single server, a cluster
// (a request touches one key, so it runs on any cluster as it is; the
// client finds a promoted replica by itself) or a primary found through
// Sentinel. It uses neither dedicated connections nor blocking
// commands, so its requests keep to the client's shared, automatically
// pipelined connections (unless the client sets DisableAutoPipelining).
//
// A request is sent once. After a NOSCRIPT reply (a server restarted, a
// replica promoted, a SCRIPT FLUSH) the script is sent again with EVAL, since the server ran
// nothing; after an ambiguous failure, such as a timeout or a lost
// connection, the error is returned and nothing is replayed, since the
// server may have charged the request. The store does not mark its
// commands retryable, and valkey-go retries only commands so marked (and
// read-only ones) after a network error, so it does not resend them
// either, whatever ClientOption.DisableRetry says. valkey-go does resend a
// command that a server refused without running it (a MOVED or ASK
// redirection in a cluster), which is harmless, and one whose connection
// outlived ClientOption.ConnLifetime; leave ConnLifetime at zero, its
// default, for strict accounting, since a command caught in flight on a
// connection that expires and then fails can be sent twice.
//
// A call returns as soon as its context is done, with the context's
// error, whatever the client is doing then: waiting for a reply, or
// opening a connection to a server that does not answer, where the
// client itself may wait for the context's deadline, and a second
// longer, before it gives up. A request already sent then goes on
// without the caller, until its reply, the context's deadline or the
// client's own timeouts, and its reply is dropped; as after any
// ambiguous failure, the server may have charged it. The client sees the
// context's values and deadline but not its cancellation, so that a
// cancelled call never fails a connection the client is opening for
// other calls. A call whose context is already done sends nothing.
package valkey

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

var _ spigot.Store = (*Store)(nil)

// Store is a spigot.Store on a valkey-go client. It is safe for concurrent
// use. It does not own the client: closing the client is the caller's
// business. The zero Store is not usable; call New.
type Store struct {
	client valkey.Client
	prefix string
	tags   bool
	clock  clock.Clock
	args   *wire.Args
}

// An Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every key the store writes (default
// "spigot:"). A key's state is named prefix + bucket name + ":" + key. A
// prefix is one word that ends in its only ':', without '{' or '}', such
// as "myapp:", so that two stores with different prefixes never share a
// key; New panics on any other (see store.CheckPrefix).
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// WithKeyHashTags lets a {hash tag} in a key choose its cluster slot (see
// store.TaggedKey): a key such as "{user42}" then puts every limit of that
// user in one slot, so that they are applied in one script. Use it only
// when no key comes from a client: otherwise a client could send its keys,
// or everyone's it can name, to one primary. By default a key never
// chooses its slot (see store.Key); turning it on or off moves the keys
// that hold a '{', which start again full.
func WithKeyHashTags() Option { return func(s *Store) { s.tags = true } }

// WithClock makes the store pass the time from c to the script instead of
// reading the server's TIME: for tests with clocktest, and for servers that
// do not allow TIME in scripts. It gives up the single clock that the
// server gives every replica: replicas whose clocks disagree then disagree
// on how much a bucket has refilled (a clock that runs ahead refills early;
// one that steps back refills nothing until it catches up). Keys then live
// a minute longer than ResetAfter, since their TTL runs on the server's
// clock.
func WithClock(c clock.Clock) Option { return func(s *Store) { s.clock = c } }

// New returns a store that keeps its state in the server behind client.
// It panics if client is nil or WithPrefix was given an invalid prefix.
func New(client valkey.Client, opts ...Option) *Store {
	if nilcheck.Nil(client) {
		panic("spigot: valkey: New: nil client")
	}
	s := &Store{client: client, prefix: store.DefaultPrefix}
	for _, o := range opts {
		o(s)
	}
	if err := store.CheckPrefix(s.prefix); err != nil {
		panic("spigot: valkey: WithPrefix: " + strings.TrimPrefix(err.Error(), "spigot: "))
	}
	s.args = wire.NewArgs(s.clock)
	return s
}

// key returns the name of op's state.
func (s *Store) key(op spigot.Op) string {
	if s.tags {
		return store.TaggedKey(s.prefix, op.Limit, op.Key)
	}
	return store.Key(s.prefix, op.Limit, op.Key)
}

// Do implements spigot.Store: every action, on a token bucket, in one
// round trip.
func (s *Store) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := op.Check(); err != nil {
		return spigot.Decision{}, err
	}
	if k := op.Limit.Kind(); k != spigot.TokenBucket {
		return spigot.Decision{}, fmt.Errorf("spigot: valkey: limit kind %v: %w", k, errors.ErrUnsupported)
	}
	r, err := s.run(ctx, op)
	if err != nil {
		return spigot.Decision{}, err
	}
	if msgs, err := r.ToArray(); err == nil {
		if n, ok := wire.Ints(msgs); ok {
			return wire.DecodeInts(n)
		}
	}
	// Not an array of integers: decode it as it is, for an error that
	// says what came back.
	reply, _ := r.ToAny()
	return wire.Decode(reply)
}

// DoMulti implements spigot.Store. Independent ops go in one DoMulti of
// the client: one round trip (on a cluster, one per node, in parallel).
// AllOrNothing ops are one run of the script over all their keys; on a
// cluster, whose scripts see one hash slot only, the keys of each slot go
// in one run, and the slots are taken one by one, in order, and given back
// on a denial (spigot.DoInParts says what a concurrent request may see).
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if err := wire.CheckMulti("valkey", mode, ops, out); err != nil {
		return err
	}
	switch {
	case len(ops) == 0:
		return nil
	case mode == spigot.Independent:
		return s.batch(ctx, ops, out)
	case s.client.Mode() == valkey.ClientModeCluster:
		return spigot.DoInParts(ctx, s.doPart, ops, out, func(i int) uint64 {
			return uint64(wire.Slot(s.key(ops[i])))
		})
	}
	return s.all(ctx, ops, out)
}

// doPart applies ops, whose keys share a slot, as DoMulti does.
func (s *Store) doPart(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if mode == spigot.Independent {
		return s.batch(ctx, ops, out)
	}
	return s.all(ctx, ops, out)
}

// all applies ops all or nothing in one run of the script.
func (s *Store) all(ctx context.Context, ops []spigot.Op, out []spigot.Decision) error {
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = s.key(op)
	}
	x := s.newExchange()
	x.keys[0], x.argv[0] = keys, s.args.Ops(ops)
	if err := x.await(ctx); err != nil {
		return wire.Err("valkey", err, false)
	}
	defer x.release()
	if err := x.r.Error(); err != nil && !valkey.IsValkeyNil(err) {
		_, reply := valkey.IsValkeyErr(err)
		return wire.Err("valkey", err, reply)
	}
	return decode(x.r, out)
}

// batch applies each op as Do would: on one server in batch calls of the
// script, of up to wire.BatchSize ops each, and on a cluster, whose
// scripts see one slot only, one call per op; all in one DoMulti of the
// client (on a cluster, one per node, in parallel), and the calls that
// found no script in a second one, with EVAL.
func (s *Store) batch(ctx context.Context, ops []spigot.Op, out []spigot.Decision) error {
	size := wire.BatchSize
	if s.client.Mode() == valkey.ClientModeCluster {
		size = 1
	}
	n := (len(ops) + size - 1) / size
	x := s.newExchange()
	x.batch, x.keys, x.argv = true, make([][]string, n), make([][]string, n)
	for k := range n {
		part := ops[k*size : min((k+1)*size, len(ops))]
		x.keys[k] = make([]string, len(part))
		for i, op := range part {
			x.keys[k][i] = s.key(op)
		}
		x.argv[k] = s.args.Batch(part)
	}
	failed := x.await(ctx)
	errs := make([]error, len(ops))
	for k := range n {
		lo, hi := k*size, min((k+1)*size, len(ops))
		err := failed
		if err == nil {
			err = x.rs[k].Error()
		}
		switch {
		case err != nil && !valkey.IsValkeyNil(err):
			_, reply := valkey.IsValkeyErr(err)
			err = wire.Err("valkey", err, reply)
		case hi-lo == 1:
			err = decode(x.rs[k], out[lo:hi])
		default:
			err = decodeBatch(x.rs[k], out[lo:hi], errs[lo:hi])
		}
		if err != nil {
			for i := lo; i < hi; i++ {
				out[i], errs[i] = wire.Failed, err
			}
		}
	}
	if failed == nil {
		x.release()
	}
	return wire.BatchErr(slices.DeleteFunc(errs, func(err error) bool { return err == nil }), len(ops))
}

// decodeBatch sets out, and errs for the keys that failed alone, from the
// reply r to a batch call of the script.
func decodeBatch(r valkey.ValkeyResult, out []spigot.Decision, errs []error) error {
	if msgs, err := r.ToArray(); err == nil && wire.DecodeBatchMsgs(msgs, out, errs) {
		return nil
	}
	reply, _ := r.ToAny()
	return wire.DecodeBatch(reply, out, errs)
}

// decode sets out from the script's reply r for len(out) keys.
func decode(r valkey.ValkeyResult, out []spigot.Decision) error {
	if msgs, err := r.ToArray(); err == nil {
		if ok, err := wire.DecodeMsgs(msgs, out); ok {
			return err
		}
	}
	// Not an array of integers: decode it as it is, for an error that
	// says what came back.
	reply, _ := r.ToAny()
	return wire.DecodeAll(reply, out)
}

// run sends the script for op, as exchange.send does. It returns the
// reply once the server answered it; a nil reply is left for the decoder
// to reject.
func (s *Store) run(ctx context.Context, op spigot.Op) (valkey.ValkeyResult, error) {
	x := s.newExchange()
	x.key[0], x.op = s.key(op), s.args.Op(op)
	x.keys[0], x.argv[0] = x.key[:], x.op[:]
	err := x.await(ctx)
	if err != nil {
		return valkey.ValkeyResult{}, wire.Err("valkey", err, false)
	}
	r := x.r
	x.release()
	if err := r.Error(); err != nil && !valkey.IsValkeyNil(err) {
		_, reply := valkey.IsValkeyErr(err)
		return r, wire.Err("valkey", err, reply)
	}
	return r, nil
}

// An exchange is what one call of the store sends the server and the
// replies it gets: a run of the script over keys[0] with argv[0], or, in
// a batch, a run over each keys[k] with argv[k] in one DoMulti of the
// client. It is the store's, never the caller's, so that a reply that
// comes after the call returned changes nothing the caller sees.
type exchange struct {
	s          *Store
	batch      bool
	keys, argv [][]string
	r          valkey.ValkeyResult   // the reply to a run
	rs         []valkey.ValkeyResult // those of a batch
	done       chan error            // receives once the replies are in, or the caller's error if nothing was sent

	// Room for the key and arguments of Do, and for keys and argv of one
	// run, which keys and argv point into.
	key        [1]string
	op         wire.Argv
	key1, arg1 [1][]string
}

var exchanges = sync.Pool{New: func() any { return &exchange{done: make(chan error, 1)} }}

// newExchange returns an exchange for one run of the script, from a pool.
func (s *Store) newExchange() *exchange {
	x := exchanges.Get().(*exchange)
	x.s, x.keys, x.argv = s, x.key1[:], x.arg1[:]
	return x
}

// release gives back an exchange that await returned without error.
func (x *exchange) release() {
	x.r, x.rs = valkey.ValkeyResult{}, nil
	x.key, x.op, x.key1, x.arg1 = [1]string{}, wire.Argv{}, [1][]string{}, [1][]string{}
	x.s, x.batch, x.keys, x.argv = nil, false, nil, nil
	exchanges.Put(x)
}

// await sends x and returns once the replies are in, or with ctx's error
// as soon as ctx is done, whichever comes first (see the package doc).
// When ctx can end, x is sent on a goroutine of its own, which keeps x if
// await returns first: the caller must then leave x alone.
func (x *exchange) await(ctx context.Context) error {
	done := ctx.Done()
	if done == nil {
		x.send(ctx, ctx)
		return nil
	}
	if err := ctx.Err(); err != nil {
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
	if err := caller.Err(); err != nil {
		x.done <- err
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
}

// send sends the script with EVALSHA, and with EVAL only after an explicit
// NOSCRIPT reply and while the caller still waits.
func (x *exchange) send(ctx, caller context.Context) {
	c := x.s.client
	if !x.batch {
		keys, argv := x.keys[0], x.argv[0]
		x.r = c.Do(ctx, c.B().Evalsha().Sha1(wire.SHA1()).Numkeys(int64(len(keys))).Key(keys...).Arg(argv...).Build())
		if e, ok := valkey.IsValkeyErr(x.r.Error()); ok && e.IsNoScript() && caller.Err() == nil {
			x.r = c.Do(ctx, c.B().Eval().Script(wire.Script()).Numkeys(int64(len(keys))).Key(keys...).Arg(argv...).Build())
		}
		return
	}
	cmds := make(valkey.Commands, len(x.keys))
	for k := range cmds {
		cmds[k] = c.B().Evalsha().Sha1(wire.SHA1()).Numkeys(int64(len(x.keys[k]))).Key(x.keys[k]...).Arg(x.argv[k]...).Build()
	}
	x.rs = c.DoMulti(ctx, cmds...)
	var again []int
	for k, r := range x.rs {
		if e, ok := valkey.IsValkeyErr(r.Error()); ok && e.IsNoScript() {
			again = append(again, k)
		}
	}
	if len(again) > 0 && caller.Err() == nil {
		cmds = cmds[:0]
		for _, k := range again {
			cmds = append(cmds, c.B().Eval().Script(wire.Script()).Numkeys(int64(len(x.keys[k]))).Key(x.keys[k]...).Arg(x.argv[k]...).Build())
		}
		for j, r := range c.DoMulti(ctx, cmds...) {
			x.rs[again[j]] = r
		}
	}
}
