// Package redis is a spigot.Store on Redis (or Valkey, or any server that
// speaks its protocol and runs Lua) through go-redis v9: the limit holds
// across every replica of a service that shares the server.
//
// Each request is one EVALSHA of the shared script (package store), which
// applies spigot's model to one key atomically on the server, with the
// server's clock. It works with any goredis.Scripter: *goredis.Client,
// *goredis.ClusterClient (put a {hash tag} in keys to choose their slot),
// *goredis.Ring and goredis.UniversalClient.
//
// A request is sent once. After a NOSCRIPT reply (a server restarted, or a
// SCRIPT FLUSH) the script is sent again with EVAL, since the server ran
// nothing; after an ambiguous failure, such as a timeout, the error is
// returned and nothing is replayed, since the server may have charged the
// request. Two go-redis defaults matter for exact accounting, so set both
// in the client's Options:
//
//   - MaxRetries: -1. By default go-redis resends a command after some
//     network errors, such as a connection lost after the request went
//     out, so one request could be charged up to 1+MaxRetries times.
//   - ContextTimeoutEnabled: true. By default go-redis bounds a command by
//     ReadTimeout (3 s) and ignores the context's deadline, so a caller's
//     deadline of 50 ms could wait seconds for a stuck server.
package redis

import (
	"context"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/store"
)

var _ spigot.Store = (*Store)(nil)

// Store is a spigot.Store on a go-redis client. It is safe for concurrent
// use. It does not own the client: closing the client is the caller's
// business. The zero Store is not usable; call New.
type Store struct {
	client goredis.Scripter
	prefix string
	clock  clock.Clock
	args   *store.Args
}

// An Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every key the store writes (default
// "spigot:"). A key's state is named prefix + bucket name + ":" + key.
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
func New(client goredis.Scripter, opts ...Option) *Store {
	s := &Store{client: client, prefix: store.DefaultPrefix}
	for _, o := range opts {
		o(s)
	}
	s.args = store.NewArgs(s.clock)
	return s
}

// Acquire implements spigot.Store.
func (s *Store) Acquire(ctx context.Context, b spigot.Bucket, key string, cost int64) (spigot.Admission, error) {
	if err := b.Check(cost); err != nil {
		return spigot.Admission{}, err
	}
	reply, err := s.run(ctx, b, key, s.args.AcquireAny(b, cost))
	if err != nil {
		return spigot.Admission{}, err
	}
	return store.DecodeAcquire(reply)
}

// Reset implements spigot.Store, in one round trip.
func (s *Store) Reset(ctx context.Context, b spigot.Bucket, key string) (bool, error) {
	if err := b.Check(0); err != nil {
		return false, err
	}
	reply, err := s.run(ctx, b, key, s.args.ResetAny(b))
	if err != nil {
		return false, err
	}
	return store.DecodeReset(reply)
}

// call is what one request hands go-redis, in one allocation: its keys and
// args slices point into it.
type call struct {
	keys [1]string
	args [6]any
}

// run sends the script with EVALSHA, and with EVAL only after an explicit
// NOSCRIPT reply.
func (s *Store) run(ctx context.Context, b spigot.Bucket, key string, argv [6]any) (any, error) {
	c := &call{keys: [1]string{store.Key(s.prefix, b, key)}, args: argv}
	reply, err := s.client.EvalSha(ctx, store.SHA1, c.keys[:], c.args[:]...).Result()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		reply, err = s.client.Eval(ctx, store.Script, c.keys[:], c.args[:]...).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("spigot: redis: %w", err)
	}
	return reply, nil
}
