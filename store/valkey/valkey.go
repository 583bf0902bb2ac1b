// Package valkey is a spigot.Store on Valkey (or Redis, or any server that
// speaks its protocol and runs Lua) through valkey-go: the limit holds
// across every replica of a service that shares the server, and concurrent
// callers share the client's automatic pipelining, so many goroutines cost
// few round trips.
//
// Each operation (take, take up to, refund, reset, peek) is one EVALSHA of
// spigot's script, which applies spigot's model to one key atomically on
// the server, with the server's clock (a Peek, which changes nothing, is
// an EVALSHA_RO, which a client with SendToReplicas may send to a
// replica); several operations, all or nothing, are one EVALSHA over
// their keys, and a batch is one DoMulti of the client. Operations that
// callers send while another is in flight to the same server wait for it,
// and then go together, each still decided as it would be alone (group
// commit, see store.WithGroupCommit).
//
// New takes the options of package store, which names the keys the store
// writes. It works with any valkey.Client: a single server, a cluster (a
// request touches one key, so it runs on any cluster as it is; the client
// finds a promoted replica by itself) or a primary found through
// Sentinel. It uses neither dedicated connections nor blocking commands,
// so its requests keep to the client's shared, automatically pipelined
// connections (unless the client sets DisableAutoPipelining).
//
// A request is sent once. After a NOSCRIPT reply (a server restarted, a
// replica promoted, a SCRIPT FLUSH) the script is sent again with EVAL,
// since the server ran nothing; after an ambiguous failure, such as a
// timeout or a lost connection, the error is returned and nothing is
// replayed, since the server may have charged the request. The store
// marks no command retryable but a Peek's, which is read-only, and
// valkey-go retries only commands so marked after a network error, so it
// does not resend them either, whatever ClientOption.DisableRetry says. It
// may resend a Peek, which changes nothing, until the call's context ends:
// give a Peek a deadline, or set DisableRetry, for it to fail at once
// while the server is down. valkey-go does resend a
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

	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/scriptstore"
	"github.com/spigot-go/spigot/store"
)

var _ spigot.Store = (*Store)(nil)

// Store is a spigot.Store on a valkey-go client. It is safe for concurrent
// use. It does not own the client: closing the client is the caller's
// business. The zero Store is not usable; call New.
type Store struct{ core *scriptstore.Store }

// New returns a store that keeps its state in the server behind client,
// configured by opts (store.WithPrefix, store.WithClock, …). It panics if
// client or an option is nil, or store.WithPrefix was given an invalid
// prefix.
func New(client valkey.Client, opts ...store.Option) *Store {
	scriptstore.CheckClient("valkey", client)
	return &Store{scriptstore.NewPipelined[valkey.ValkeyMessage, *valkey.ValkeyMessage]("valkey", client.Do, client.DoMulti, client.B().Arbitrary,
		valkey.IsValkeyErr, valkey.IsValkeyNil, client.Mode() == valkey.ClientModeCluster, opts)}
}

// Do implements spigot.Store: every action on every kind of limit, in
// one round trip.
func (s *Store) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	return s.core.Do(ctx, op)
}

// DoMulti implements spigot.Store. Independent ops go in one DoMulti of
// the client: one round trip (on a cluster, one per node, in parallel).
// AllOrNothing ops are one run of the script over all their keys. On a
// cluster, whose scripts see one hash slot only, ops of several slots get
// a *store.PartsError, having applied nothing: spigot.DoMulti (which
// Limiter, Group and httplimit call) then takes the slots one by one and
// gives them back on a denial, as it says.
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	return s.core.DoMulti(ctx, mode, ops, out)
}
