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
package valkey

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

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
			return uint64(wire.Slot(store.Key(s.prefix, ops[i].Limit, ops[i].Key)))
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
		keys[i] = store.Key(s.prefix, op.Limit, op.Key)
	}
	argv := s.args.Ops(ops)
	c := s.client
	r := c.Do(ctx, c.B().Evalsha().Sha1(wire.SHA1()).Numkeys(int64(len(keys))).Key(keys...).Arg(argv...).Build())
	if e, ok := valkey.IsValkeyErr(r.Error()); ok && e.IsNoScript() {
		r = c.Do(ctx, c.B().Eval().Script(wire.Script()).Numkeys(int64(len(keys))).Key(keys...).Arg(argv...).Build())
	}
	if err := r.Error(); err != nil && !valkey.IsValkeyNil(err) {
		_, reply := valkey.IsValkeyErr(err)
		return wire.Err("valkey", err, reply)
	}
	return decode(r, out)
}

// batch applies each op as Do would: on one server in batch calls of the
// script, of up to wire.BatchSize ops each, and on a cluster, whose
// scripts see one slot only, one call per op; all in one DoMulti of the
// client (on a cluster, one per node, in parallel), and the calls that
// found no script in a second one, with EVAL.
func (s *Store) batch(ctx context.Context, ops []spigot.Op, out []spigot.Decision) error {
	c := s.client
	size := wire.BatchSize
	if c.Mode() == valkey.ClientModeCluster {
		size = 1
	}
	n := (len(ops) + size - 1) / size
	keys := make([][]string, n)
	argv := make([][]string, n)
	cmds := make(valkey.Commands, n)
	for k := range cmds {
		part := ops[k*size : min((k+1)*size, len(ops))]
		keys[k] = make([]string, len(part))
		for i, op := range part {
			keys[k][i] = store.Key(s.prefix, op.Limit, op.Key)
		}
		argv[k] = s.args.Batch(part)
		cmds[k] = c.B().Evalsha().Sha1(wire.SHA1()).Numkeys(int64(len(part))).Key(keys[k]...).Arg(argv[k]...).Build()
	}
	rs := c.DoMulti(ctx, cmds...)
	var again []int
	for k, r := range rs {
		if e, ok := valkey.IsValkeyErr(r.Error()); ok && e.IsNoScript() {
			again = append(again, k)
		}
	}
	if len(again) > 0 {
		cmds = cmds[:0]
		for _, k := range again {
			cmds = append(cmds, c.B().Eval().Script(wire.Script()).Numkeys(int64(len(keys[k]))).Key(keys[k]...).Arg(argv[k]...).Build())
		}
		for j, r := range c.DoMulti(ctx, cmds...) {
			rs[again[j]] = r
		}
	}
	errs := make([]error, len(ops))
	for k, r := range rs {
		lo, hi := k*size, min((k+1)*size, len(ops))
		err := r.Error()
		switch {
		case err != nil && !valkey.IsValkeyNil(err):
			_, reply := valkey.IsValkeyErr(err)
			err = wire.Err("valkey", err, reply)
		case hi-lo == 1:
			err = decode(r, out[lo:hi])
		default:
			err = decodeBatch(r, out[lo:hi], errs[lo:hi])
		}
		if err != nil {
			for i := lo; i < hi; i++ {
				out[i], errs[i] = wire.Failed, err
			}
		}
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

// run sends the script with EVALSHA, and with EVAL only after an explicit
// NOSCRIPT reply. It returns the reply once the server answered it; a nil
// reply is left for the decoder to reject.
func (s *Store) run(ctx context.Context, op spigot.Op) (valkey.ValkeyResult, error) {
	k := store.Key(s.prefix, op.Limit, op.Key)
	argv := s.args.Op(op)
	c := s.client
	r := c.Do(ctx, c.B().Evalsha().Sha1(wire.SHA1()).Numkeys(1).Key(k).Arg(argv[:]...).Build())
	if e, ok := valkey.IsValkeyErr(r.Error()); ok && e.IsNoScript() {
		r = c.Do(ctx, c.B().Eval().Script(wire.Script()).Numkeys(1).Key(k).Arg(argv[:]...).Build())
	}
	if err := r.Error(); err != nil && !valkey.IsValkeyNil(err) {
		_, reply := valkey.IsValkeyErr(err)
		return r, wire.Err("valkey", err, reply)
	}
	return r, nil
}
