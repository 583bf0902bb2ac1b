// Package valkey is a spigot.Store on Valkey (or Redis, or any server that
// speaks its protocol and runs Lua) through valkey-go: the limit holds
// across every replica of a service that shares the server, and concurrent
// callers share the client's automatic pipelining, so many goroutines cost
// few round trips.
//
// Each request is one EVALSHA of the shared script (package store), which
// applies spigot's model to one key atomically on the server, with the
// server's clock. It works with any valkey.Client: a single server, a cluster
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
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/nilcheck"
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
	args   *store.Args
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
// store.ClockTTLSlack longer than ResetAfter, since their TTL runs on the
// server's clock.
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
	s.args = store.NewArgs(s.clock)
	return s
}

// Acquire implements spigot.Store.
func (s *Store) Acquire(ctx context.Context, b spigot.Limit, key string, cost int64) (spigot.Decision, error) {
	if err := b.Check(cost); err != nil {
		return spigot.Decision{}, err
	}
	r, err := s.run(ctx, b, key, s.args.Acquire(b, cost))
	if err != nil {
		return spigot.Decision{}, err
	}
	if msgs, err := r.ToArray(); err == nil {
		if n, ok := store.Ints(msgs); ok {
			return store.DecodeInts(n)
		}
	}
	// Not an array of integers: decode it as it is, for an error that
	// says what came back.
	reply, _ := r.ToAny()
	return store.DecodeAcquire(reply)
}

// Reset implements spigot.Store, in one round trip.
func (s *Store) Reset(ctx context.Context, b spigot.Limit, key string) (bool, error) {
	if err := b.Check(0); err != nil {
		return false, err
	}
	r, err := s.run(ctx, b, key, s.args.Reset(b))
	if err != nil {
		return false, err
	}
	reply, _ := r.ToAny()
	return store.DecodeReset(reply)
}

// run sends the script with EVALSHA, and with EVAL only after an explicit
// NOSCRIPT reply. It returns the reply once the server answered it; a nil
// reply is left for the decoder to reject.
func (s *Store) run(ctx context.Context, b spigot.Limit, key string, argv store.Argv) (valkey.ValkeyResult, error) {
	k := store.Key(s.prefix, b, key)
	c := s.client
	r := c.Do(ctx, c.B().Evalsha().Sha1(store.SHA1).Numkeys(1).Key(k).Arg(argv[:]...).Build())
	if e, ok := valkey.IsValkeyErr(r.Error()); ok && e.IsNoScript() {
		r = c.Do(ctx, c.B().Eval().Script(store.Script).Numkeys(1).Key(k).Arg(argv[:]...).Build())
	}
	if err := r.Error(); err != nil && !valkey.IsValkeyNil(err) {
		_, reply := valkey.IsValkeyErr(err)
		return r, store.Err("valkey", err, reply)
	}
	return r, nil
}
