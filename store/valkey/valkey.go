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
// commit, see WithGroupCommit). Package store
// describes the state it keeps. It works with any valkey.Client: a single
// server, a cluster (a request touches one key, so it runs on any cluster
// as it is; the client finds a promoted replica by itself) or a primary
// found through Sentinel. It uses neither dedicated connections nor blocking
// commands, so its requests keep to the client's shared, automatically
// pipelined connections (unless the client sets DisableAutoPipelining).
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
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/internal/scriptstore"
)

var _ spigot.Store = (*Store)(nil)

// Store is a spigot.Store on a valkey-go client. It is safe for concurrent
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
func WithGroupCommit(on bool) Option { return func(s *Store) { s.cfg.Group = on } }

// New returns a store that keeps its state in the server behind client.
// It panics if client is nil or WithPrefix was given an invalid prefix.
func New(client valkey.Client, opts ...Option) *Store {
	if nilcheck.Nil(client) {
		panic("spigot: valkey: New: nil client")
	}
	s := &Store{cfg: scriptstore.Defaults()}
	for _, o := range opts {
		o(s)
	}
	classify := func(err error) (serverErr, isNil bool) {
		_, serverErr = valkey.IsValkeyErr(err)
		return serverErr, valkey.IsValkeyNil(err)
	}
	s.core = scriptstore.NewPipelined[valkey.ValkeyMessage, *valkey.ValkeyMessage]("valkey", client.Do, client.DoMulti, client.B().Arbitrary,
		classify, client.Mode() == valkey.ClientModeCluster, s.cfg)
	return s
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
// a *spigot.PartsError, having applied nothing: spigot.DoMulti (which
// Limiter, Group and httplimit call) then takes the slots one by one and
// gives them back on a denial, as it says.
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	return s.core.DoMulti(ctx, mode, ops, out)
}
