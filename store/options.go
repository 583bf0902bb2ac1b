package store

import "github.com/spigot-go/spigot/clock"

// An Option configures a Redis-protocol store: pass it to the New of
// store/redis, store/valkey or store/rueidis, which take the same
// options. Options apply in order, so a later one wins.
type Option func(settings)

// settings are what Options set, as a Redis-protocol store keeps them.
type settings interface {
	SetPrefix(p string)
	SetKeyHashTags(on bool)
	SetClock(c clock.Clock)
	SetGroupCommit(on bool)
}

// WithPrefix sets the prefix of every key the store writes (default
// DefaultPrefix, "spigot:"). A key's state is named prefix + bucket name
// + ":" + key (see Key). A prefix is one word that ends in its only ':',
// without '{' or '}', such as "myapp:", so that two stores with different
// prefixes never share a key; the store's New panics on any other (see
// CheckPrefix).
func WithPrefix(p string) Option { return func(s settings) { s.SetPrefix(p) } }

// WithKeyHashTags lets a {hash tag} in a key choose its cluster slot (see
// TaggedKey): a key such as "{user42}" then puts every limit of that user
// in one slot, so that they are applied in one script. Use it only when
// no key comes from a client: otherwise a client could send its keys, or
// everyone's it can name, to one primary. By default a key never chooses
// its slot (see Key); turning it on or off moves the keys that hold a
// '{', which start again full.
func WithKeyHashTags() Option { return func(s settings) { s.SetKeyHashTags(true) } }

// WithClock makes the store pass the time from c to the script instead of
// reading the server's TIME: for tests with clocktest, and for servers that
// do not allow TIME in scripts. It gives up the single clock that the
// server gives every replica: replicas whose clocks disagree then disagree
// on how much a bucket has refilled (a clock that runs ahead refills early;
// one that steps back refills nothing until it catches up). Keys then live
// a minute longer than ResetAfter, since their TTL runs on the server's
// clock.
func WithClock(c clock.Clock) Option { return func(s settings) { s.SetClock(c) } }

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
func WithGroupCommit(on bool) Option { return func(s settings) { s.SetGroupCommit(on) } }
