// Package rueidis is a spigot.Store on Redis (or Valkey, or any server that
// speaks its protocol and runs Lua) through rueidis: the limit holds
// across every replica of a service that shares the server, and concurrent
// callers share the client's automatic pipelining, so many goroutines cost
// few round trips.
//
// valkey-go was forked from rueidis and keeps its API, and the two stores
// are one store on two client libraries: everything store/valkey's doc
// says holds here, with rueidis' names. In short: each operation is one
// EVALSHA of spigot's script (a Peek an EVALSHA_RO, which a client with
// SendToReplicas may send to a replica), several all or nothing are one
// EVALSHA over their keys, a batch is one DoMulti of the client, and
// operations sent while another is in flight to the same server go
// together once it returns (group commit, see store.WithGroupCommit).
// New takes the options of package store, which names the keys the store
// writes. It works with any rueidis.Client (a single server, a cluster,
// Sentinel) and keeps to its shared, automatically pipelined connections.
//
// A request is sent once: with EVAL again only after a NOSCRIPT reply,
// never after an ambiguous failure (a timeout, a lost connection), since
// the server may have charged it. The store marks no command retryable
// but a Peek's, which is read-only, so rueidis resends nothing else (and a
// Peek, which changes nothing, until its context ends: give it a deadline,
// or set DisableRetry, for it to fail at once while the server is down);
// leave
// ClientOption.ConnLifetime at zero, its default, for strict accounting,
// since a command caught in flight on a connection that expires and then
// fails can be sent twice. A call returns as soon as its context is done,
// whatever the client is doing then; the client sees the context's values
// and deadline but not its cancellation, and a request already sent goes
// on without the caller, its reply dropped.
package rueidis

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/scriptstore"
	"github.com/spigot-go/spigot/store"
)

var _ spigot.Store = (*Store)(nil)

// Store is a spigot.Store on a rueidis client. It is safe for concurrent
// use. It does not own the client: closing the client is the caller's
// business. The zero Store is not usable; call New.
type Store struct{ core *scriptstore.Store }

// New returns a store that keeps its state in the server behind client,
// configured by opts (store.WithPrefix, store.WithClock, …). It panics if
// client or an option is nil, or store.WithPrefix was given an invalid
// prefix.
func New(client rueidis.Client, opts ...store.Option) *Store {
	scriptstore.CheckClient("rueidis", client)
	return &Store{scriptstore.NewPipelined[rueidis.RedisMessage, *rueidis.RedisMessage]("rueidis", client.Do, client.DoMulti, client.B().Arbitrary,
		rueidis.IsRedisErr, rueidis.IsRedisNil, client.Mode() == rueidis.ClientModeCluster, opts)}
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
