// Package store is the store author's kit: what a spigot.Store keeps and
// how it decides, as database/sql/driver is to database/sql. An
// application uses package spigot (limits, Limiter, Group, the Store it is
// given); a store's author, and the conformance suite that checks a
// store, use this package: State, what a store keeps for a key; Apply, the
// one exact model that every store of spigot's runs; CheckMulti, the
// checks a DoMulti makes before anything else; PartsError, for stores that
// apply ops all or nothing only within parts of them; Key, the names of
// the keys a store writes; Share, for a store that decides
// from tokens it took from another store; and Option, the options of the
// three Redis-protocol stores, which share one core. The stores themselves are its
// subpackages: memory (in process), redis (go-redis), valkey (valkey-go)
// and rueidis (which run the model on the server, in Lua), hybrid (a
// remote store in front of a local one), lease and denycache.
//
// A store keeps spigot's model when every key's State changes only by
// Apply, atomically: read the State, Apply the op, write the State. It
// may keep a State equivalent to the one Apply left instead of the same
// one: equivalent states decide every later op, at every instant not
// before this op's, alike. A denial whose State Apply only restamps may
// then write nothing, and a State that Apply leaves zero may be deleted.
// A clock that steps back sees the difference: a stamp not written
// reads, at an earlier instant, as the older one.
//
// # The model, kind by kind
//
// Every kind counts in integers: time in whole microseconds, a bucket's
// tokens in scaled units (Scaled), every quantity at most MaxExact. A
// State whose FullAt has come is the zero State, a whole limit, whatever
// the limit's config has become. A limit's name reused for another kind
// (or a window's for another window) reads the state it finds by its
// FullAt alone: the limit is not whole before then.
//
// Token bucket (bucket.go). The bucket refills for the time since
// State.Stamp (none if the clock is behind it: a clock that steps back
// never adds tokens, and the stamp never moves back). A Take of more than
// the capacity is denied with RetryAfter Never; a Take of what the bucket
// holds takes it; any other is denied and takes nothing. A TakeUpTo takes
// the whole tokens it holds, up to N; with none (and N above 0) it is
// denied with the RetryAfter of one token. A Refund adds N, up to the
// capacity; a Reset leaves the zero State; a Peek decides as a Take would
// and changes nothing. A state stored under another rate carries its
// whole tokens over, clamped to the capacity. A state of another kind
// before its FullAt is the bucket that is full again exactly then: it
// holds what refilling at the rate to be full then leaves it now, or
// nothing, with its stamp ahead of now, when that is further off than a
// refill from empty.
//
// Leaky bucket (bucket.go). A token bucket whose tokens are the free
// places of its queue, with the same rules, and one more: an admitted
// Take, Peek or TakeUpTo has the Delay until the bucket would be full
// again before it, that is until the requests admitted before it have
// left.
//
// Fixed and sliding windows (window.go). A fixed window counts the tokens
// taken in the window of now (Count, from Start); a sliding window also
// the previous window's (Prev), weighted by (window − elapsed) / window
// with elapsed in whole milliseconds since Start, and a request is
// admitted while the weighted count, plus its tokens, is at most the
// capacity (the weight of a token rounds up in Remaining). Take, TakeUpTo
// and Peek decide as for a bucket, with RetryAfter the time until the
// request fits; a Refund uncounts up to N tokens, a sliding window's from
// the current window first; a Reset leaves the zero State; a clock that
// steps back counts in the latest window seen. A state of another kind,
// or of a window of another length or offset, is the limit used up until
// its FullAt: every Take or TakeUpTo of N above 0 is denied until then, a
// Refund gives nothing back, and only a Reset forgets it.
//
// Sliding log (log.go). The instant of every token taken in the last
// window, each of which counts until it is a window old; otherwise as the
// windows, a Refund uncounting the most recent first, and new entries
// taking the latest instant seen when the clock steps back.
//
// On every kind, a Take then a Refund of the Take's N, at the same
// instant, leave the state as a Take of 0 there would, and a decision's
// RefillAfter is the RetryAfter of a Take of one after a Take of
// Remaining, both at now.
//
// The Redis-protocol stores keep each State as a string in a versioned
// format, described by their core (internal/wire).
package store
