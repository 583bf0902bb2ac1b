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
// store.WithGroupCommit). A call that waits returns as soon as its
// context ends, whereas one in flight waits for go-redis to give up (see
// ContextTimeoutEnabled below). On a Ring, whose shard of a key the store
// cannot see, there is no group commit.
//
// New takes the options of package store, which names the keys the store
// writes. It works with any goredis.UniversalClient: *goredis.Client, *goredis.ClusterClient and
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
	"github.com/spigot-go/spigot/internal/scriptstore"
	"github.com/spigot-go/spigot/store"
)

var _ spigot.Store = (*Store)(nil)

// Store is a spigot.Store on a go-redis client. It is safe for concurrent
// use. It does not own the client: closing the client is the caller's
// business. The zero Store is not usable; call New.
type Store struct{ core *scriptstore.Store }

// New returns a store that keeps its state in the server behind client,
// configured by opts (store.WithPrefix, store.WithClock, …). It panics if
// client or an option is nil, or store.WithPrefix was given an invalid
// prefix.
func New(client goredis.UniversalClient, opts ...store.Option) *Store {
	scriptstore.CheckClient("redis", client)
	topo := scriptstore.Topology{Boxed: true}
	switch client.(type) {
	case *goredis.ClusterClient:
		topo.Cluster = true
	case *goredis.Ring:
		topo.Ring = true
	}
	return &Store{scriptstore.New("redis", adapter{client}, topo, opts)}
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
// *store.PartsError, having applied nothing: spigot.DoMulti (which
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
