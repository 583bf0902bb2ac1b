// Package redis is a spigot.Store on Redis (or Valkey, or any server that
// speaks its protocol and runs Lua) through go-redis v9: the limit holds
// across every replica of a service that shares the server.
//
// Each operation (take, take up to, refund, reset, peek) is one EVALSHA of
// spigot's script, which applies spigot's model to one key atomically on
// the server, with the server's clock; several operations, all or
// nothing, are one EVALSHA over their keys, and a batch is one pipeline.
// Package store describes the state it keeps. It works with any
// goredis.UniversalClient: *goredis.Client, *goredis.ClusterClient and
// *goredis.Ring. A pipeline or a transaction (goredis.Pipeliner) is not
// one, since it would only queue the request: New does not accept it. A
// request touches one key, so it runs on any cluster as it is; see the
// README for hash tags, and DoMulti for several keys.
//
// A request is sent once. After a NOSCRIPT reply (a server restarted, a
// replica promoted, a SCRIPT FLUSH) the script is sent again with EVAL,
// since the server ran nothing. After an ambiguous failure, such as a
// timeout or a connection lost after the request went out, the error is
// returned and nothing is resent, since the server may have charged the
// request: the store marks its commands so that go-redis does not resend
// them whatever MaxRetries says (a ClusterClient still follows MOVED and
// ASK, which the server sends without running the command). Set in the
// client's options:
//
//   - ContextTimeoutEnabled: true. By default go-redis bounds a command by
//     ReadTimeout (3 s) and ignores the context's deadline, so a caller's
//     deadline of 50 ms could wait seconds for a stuck server.
//   - DialerRetries, or a deadline on every call. go-redis tries a dial 5
//     times, 100 ms apart (DialerRetryTimeout), so while Redis is down a
//     call whose context has no deadline takes about 0.4 s to fail. Give
//     callers a deadline, set DialerRetries to 1 to fail at once, or put
//     the store behind store/hybrid, which bounds every call (50 ms by
//     default) and stops calling while its breaker is open.
//   - On a ClusterClient, ClusterStateReloadInterval of about the
//     cluster's cluster-node-timeout (say 1 s). A ClusterClient learns that
//     a replica took over from a dead primary from a MOVED reply, which the
//     dead primary cannot send, or when it reloads the slot map, by
//     default once a minute: until then every request for the dead
//     primary's slots fails. UniversalOptions has no such field, so build
//     the ClusterClient with NewClusterClient. Leave MaxRedirects at its
//     default: -1 also stops the client from following MOVED.
package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

var _ spigot.Store = (*Store)(nil)

// Store is a spigot.Store on a go-redis client. It is safe for concurrent
// use. It does not own the client: closing the client is the caller's
// business. The zero Store is not usable; call New.
type Store struct {
	client goredis.UniversalClient
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
func New(client goredis.UniversalClient, opts ...Option) *Store {
	if nilcheck.Nil(client) {
		panic("spigot: redis: New: nil client")
	}
	s := &Store{client: client, prefix: store.DefaultPrefix}
	for _, o := range opts {
		o(s)
	}
	if err := store.CheckPrefix(s.prefix); err != nil {
		panic("spigot: redis: WithPrefix: " + strings.TrimPrefix(err.Error(), "spigot: "))
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
		return spigot.Decision{}, fmt.Errorf("spigot: redis: limit kind %v: %w", k, errors.ErrUnsupported)
	}
	reply, err := s.run(ctx, op)
	if err != nil {
		return spigot.Decision{}, err
	}
	return wire.Decode(reply)
}

// DoMulti implements spigot.Store. Independent ops go in one pipeline:
// one round trip (on a ClusterClient, one per node, in parallel).
// AllOrNothing ops are one run of the script over all their keys; on a
// ClusterClient, whose scripts see one hash slot only, the keys of each
// slot go in one run, and the slots are taken one by one, in order, and
// given back on a denial (spigot.DoInParts says what a concurrent request
// may see), as on a Ring with the keys of each shard.
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if err := wire.CheckMulti("redis", mode, ops, out); err != nil {
		return err
	}
	switch {
	case len(ops) == 0:
		return nil
	case mode == spigot.Independent:
		return s.batch(ctx, ops, out)
	}
	switch s.client.(type) {
	case *goredis.ClusterClient:
		return spigot.DoInParts(ctx, s.doPart, ops, out, func(i int) uint64 {
			return uint64(wire.Slot(s.key(ops[i])))
		})
	case *goredis.Ring:
		return spigot.DoInParts(ctx, s.doPart, ops, out, func(i int) uint64 {
			return wire.TagHash(s.key(ops[i]))
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
	reply, err := s.process(ctx, s.line(ops, s.args.OpsAny(ops)))
	if err != nil {
		return err
	}
	return wire.DecodeAll(reply, out)
}

// line returns the command line of the script on ops with ARGV argv:
// "EVALSHA sha numkeys keys… args…".
func (s *Store) line(ops []spigot.Op, argv []any) []any {
	line := make([]any, 3, 3+len(ops)+len(argv))
	line[0], line[1], line[2] = "evalsha", sha1Arg, len(ops)
	for _, op := range ops {
		line = append(line, s.key(op))
	}
	return append(line, argv...)
}

// batch applies each op as Do would: on one server in batch calls of the
// script, of up to wire.BatchSize ops each, and on a ClusterClient or a
// Ring, whose scripts see one slot or shard only, one call per op; all in
// one pipeline (on a ClusterClient, one per node, in parallel), and the
// calls that found no script in a second one, with EVAL.
func (s *Store) batch(ctx context.Context, ops []spigot.Op, out []spigot.Decision) error {
	size := wire.BatchSize
	switch s.client.(type) {
	case *goredis.ClusterClient, *goredis.Ring:
		size = 1
	}
	n := (len(ops) + size - 1) / size
	cmds := make([]*goredis.Cmd, n)
	lines := make([][]any, n)
	pipe := s.client.Pipeline()
	for c := range cmds {
		part := ops[c*size : min((c+1)*size, len(ops))]
		lines[c] = s.line(part, s.args.BatchAny(part))
		cmds[c] = goredis.NewCmd(ctx, lines[c]...)
		cmds[c].SetFirstKeyPos(3)
		pipe.Process(ctx, onceCmd{cmds[c]})
	}
	pipe.Exec(ctx) // each command holds its own error
	var again []int
	for c, cmd := range cmds {
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		pipe = s.client.Pipeline()
		for _, c := range again {
			lines[c][0], lines[c][1] = "eval", scriptArg
			cmds[c] = goredis.NewCmd(ctx, lines[c]...)
			cmds[c].SetFirstKeyPos(3)
			pipe.Process(ctx, onceCmd{cmds[c]})
		}
		pipe.Exec(ctx)
	}
	errs := make([]error, len(ops))
	for c, cmd := range cmds {
		lo, hi := c*size, min((c+1)*size, len(ops))
		reply, err := cmd.Val(), cmd.Err()
		switch {
		case err != nil:
			var replyErr goredis.Error
			err = wire.Err("redis", err, errors.As(err, &replyErr))
		case hi-lo == 1:
			out[lo], err = wire.Decode(reply)
		default:
			err = wire.DecodeBatch(reply, out[lo:hi], errs[lo:hi])
		}
		if err != nil {
			for i := lo; i < hi; i++ {
				out[i], errs[i] = wire.Failed, err
			}
		}
	}
	return wire.BatchErr(slices.DeleteFunc(errs, func(err error) bool { return err == nil }), len(ops))
}

// onceCmd is a command that go-redis never resends once it may have
// reached the server, whatever the client's MaxRetries or, on a
// ClusterClient, MaxRedirects (which still follows MOVED and ASK, whose
// commands the server did not run).
type onceCmd struct{ *goredis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// sha1Arg and scriptArg are boxed once, not on every request.
var sha1Arg, scriptArg any = wire.SHA1(), wire.Script()

// call is what one request hands go-redis, in one allocation: the command
// line "EVALSHA sha 1 key args…".
type call struct {
	line [4 + len(wire.Argv{})]any
}

// run sends the script for op with EVALSHA, and with EVAL only after an
// explicit NOSCRIPT reply, through Process, marked never to be resent.
func (s *Store) run(ctx context.Context, op spigot.Op) (any, error) {
	c := &call{}
	c.line[0], c.line[1], c.line[2], c.line[3] = "evalsha", sha1Arg, 1, s.key(op)
	argv := s.args.OpAny(op)
	copy(c.line[4:], argv[:])
	return s.process(ctx, c.line[:])
}

// process sends line, "EVALSHA sha numkeys keys… args…", and after a
// NOSCRIPT reply the same with EVAL, marked never to be resent; it sets
// line's first two values to the command it sent last.
func (s *Store) process(ctx context.Context, line []any) (any, error) {
	cmd := goredis.NewCmd(ctx, line...)
	cmd.SetFirstKeyPos(3)
	err := s.client.Process(ctx, onceCmd{cmd})
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		line[0], line[1] = "eval", scriptArg
		cmd = goredis.NewCmd(ctx, line...)
		cmd.SetFirstKeyPos(3)
		err = s.client.Process(ctx, onceCmd{cmd})
	}
	reply := cmd.Val()
	if err != nil {
		var replyErr goredis.Error // an error reply of the server
		return nil, wire.Err("redis", err, errors.As(err, &replyErr))
	}
	return reply, nil
}
