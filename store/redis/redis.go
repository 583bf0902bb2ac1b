// Package redis is a spigot.Store on Redis (or Valkey, or any server that
// speaks its protocol and runs Lua) through go-redis v9: the limit holds
// across every replica of a service that shares the server.
//
// Each operation (take, take up to, refund, reset, peek) is one EVALSHA of
// spigot's script, which applies spigot's model to one key atomically on
// the server, with the server's clock (a Peek, which changes nothing, is
// an EVALSHA_RO, which a ClusterClient with ReadOnly set may send to a
// replica); several operations, all or nothing, are one EVALSHA over
// their keys, and a batch is one pipeline. Operations that callers send
// while another is in flight to the same server wait for it, and then go
// together, each still decided as it would be alone (group commit, see
// WithGroupCommit).
//
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

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/internal/scriptstore"
	"github.com/spigot-go/spigot/internal/wire"
)

var _ spigot.Store = (*Store)(nil)

// Store is a spigot.Store on a go-redis client. It is safe for concurrent
// use. It does not own the client: closing the client is the caller's
// business. The zero Store is not usable; call New.
type Store struct {
	cfg  scriptstore.Config // what the options set
	core *scriptstore.Store
}

// An Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every key the store writes (default
// "spigot:"). A key's state is named prefix + bucket name + ":" + key. A
// prefix is one word that ends in its only ':', without '{' or '}', such
// as "myapp:", so that two stores with different prefixes never share a
// key; New panics on any other (see store.CheckPrefix).
func WithPrefix(p string) Option { return func(s *Store) { s.cfg.Prefix = p } }

// WithKeyHashTags lets a {hash tag} in a key choose its cluster slot (see
// store.TaggedKey): a key such as "{user42}" then puts every limit of that
// user in one slot, so that they are applied in one script. Use it only
// when no key comes from a client: otherwise a client could send its keys,
// or everyone's it can name, to one primary. By default a key never
// chooses its slot (see store.Key); turning it on or off moves the keys
// that hold a '{', which start again full.
func WithKeyHashTags() Option { return func(s *Store) { s.cfg.Tags = true } }

// WithClock makes the store pass the time from c to the script instead of
// reading the server's TIME: for tests with clocktest, and for servers that
// do not allow TIME in scripts. It gives up the single clock that the
// server gives every replica: replicas whose clocks disagree then disagree
// on how much a bucket has refilled (a clock that runs ahead refills early;
// one that steps back refills nothing until it catches up). Keys then live
// a minute longer than ResetAfter, since their TTL runs on the server's
// clock.
func WithClock(c clock.Clock) Option { return func(s *Store) { s.cfg.Clock = c } }

// WithGroupCommit turns group commit on or off (default on). With it on,
// a call of Do that finds another call of Do in flight to the same server
// (on a cluster, to the same hash slot) waits for that call to return, and
// then goes with every call that queued meanwhile in one round trip: one
// run of the script per 100 operations at most, each operation applied on
// its own, one after the other, and decided exactly as it would be alone.
// A lone caller waits for nothing, since there is no timer; under load a
// server runs fewer, larger scripts, and serves more requests per second.
// A call whose context ends while it waits returns the context's error and
// is never sent, so never charged; once sent, nothing is resent, and a
// failure of the round trip (a lost connection, a timeout) fails every
// call in it. Peeks go with the others (a round trip of Peeks only is
// read-only, as a Peek alone is). DoMulti is never grouped.
//
// A call that waits returns as soon as its context ends, whereas one in
// flight waits for go-redis to give up (see ContextTimeoutEnabled above).
// On a Ring, whose shard of a key the store cannot see, it does nothing.
func WithGroupCommit(on bool) Option { return func(s *Store) { s.cfg.Group = on } }

// New returns a store that keeps its state in the server behind client.
// It panics if client is nil or WithPrefix was given an invalid prefix.
func New(client goredis.UniversalClient, opts ...Option) *Store {
	if nilcheck.Nil(client) {
		panic("spigot: redis: New: nil client")
	}
	s := &Store{cfg: scriptstore.Defaults()}
	for _, o := range opts {
		o(s)
	}
	topo := scriptstore.Topology{Boxed: true}
	switch client.(type) {
	case *goredis.ClusterClient:
		topo.Part = func(key string) uint64 { return uint64(wire.Slot(key)) }
	case *goredis.Ring:
		topo.Part = wire.TagHash
		s.cfg.Group = false
	}
	s.core = scriptstore.New("redis", adapter{client}, topo, s.cfg)
	return s
}

// Do implements spigot.Store: every action on every kind of limit, in
// one round trip.
func (s *Store) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	return s.core.Do(ctx, op)
}

// DoMulti implements spigot.Store. Independent ops go in one pipeline:
// one round trip (on a ClusterClient, one per node, in parallel).
// AllOrNothing ops are one run of the script over all their keys. On a
// ClusterClient, whose scripts see one hash slot only, or a Ring, whose
// scripts see one shard, ops of several slots or shards get a
// *spigot.PartsError, having applied nothing: spigot.DoMulti (which
// Limiter, Group and httplimit call) then takes the slots one by one and
// gives them back on a denial, as it says.
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	return s.core.DoMulti(ctx, mode, ops, out)
}

// adapter is the scriptstore.Client of a go-redis client.
type adapter struct{ client goredis.UniversalClient }

// Send implements scriptstore.Client: one call with Process, several in
// one pipeline.
func (a adapter) Send(ctx context.Context, calls []scriptstore.Call) {
	if len(calls) == 1 {
		cmd := command(ctx, &calls[0])
		a.client.Process(ctx, cmd)
		setReply(&calls[0], cmd.Cmd)
		return
	}
	cmds := make([]onceCmd, len(calls))
	pipe := a.client.Pipeline()
	for k := range calls {
		cmds[k] = command(ctx, &calls[k])
		pipe.Process(ctx, cmds[k])
	}
	pipe.Exec(ctx) // each command holds its own error
	for k := range calls {
		setReply(&calls[k], cmds[k].Cmd)
	}
}

// command returns the command of c.
func command(ctx context.Context, c *scriptstore.Call) onceCmd {
	cmd := goredis.NewCmd(ctx, c.Line()...)
	cmd.SetFirstKeyPos(3)
	return onceCmd{cmd}
}

// setReply sets c's reply from cmd's.
func setReply(c *scriptstore.Call, cmd *goredis.Cmd) {
	c.Reply = scriptstore.Reply{Value: cmd.Val(), Err: cmd.Err()}
	if c.Reply.Err == goredis.Nil { // the nil reply: no error, for the decoder to name
		c.Reply.Err = nil
	} else if c.Reply.Err != nil {
		var serverErr goredis.Error // an error reply of the server
		c.Reply.ServerErr = errors.As(c.Reply.Err, &serverErr)
	}
}

// onceCmd is a command that go-redis never resends once it may have
// reached the server, whatever the client's MaxRetries or, on a
// ClusterClient, MaxRedirects (which still follows MOVED and ASK, whose
// commands the server did not run).
type onceCmd struct{ *goredis.Cmd }

func (onceCmd) NoRetry() bool { return true }
