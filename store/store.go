// Package store holds what every Redis-protocol store shares: the Lua
// script that runs spigot's model on the server, the encoding of its
// arguments, key naming and prefixes, the decoding of its replies, and the
// classification of errors (Err: an error about one request matches
// spigot.ErrRequestFailed; any other means the server is unavailable).
// The stores themselves are in its subpackages: redis (go-redis), valkey
// (valkey-go) and rueidis; memory is the in-process store.
//
// The script (spigot.lua) is the line-by-line twin of spigot.Limit.Take:
// it keeps a key's State as the string "tokens stamp scale fullat",
// touches only that key, deletes it once the state no longer matters
// (State.FullAt) and otherwise sets its TTL to the time until then: the
// ResetAfter of the request (never below 1 ms). By default it reads the
// server's TIME, so every replica shares one clock.
package store

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
)

// Script is the Lua source of the token bucket, run with EVALSHA (and
// EVAL after a NOSCRIPT reply) with one key, Key(...), and the arguments
// of Args.Acquire or Args.Reset.
//
//go:embed spigot.lua
var Script string

// SHA1 is the hex SHA-1 of Script, its name for EVALSHA.
var SHA1 = func() string {
	sum := sha1.Sum([]byte(Script))
	return hex.EncodeToString(sum[:])
}()

// DefaultPrefix starts the name of every key a store writes, unless the
// store is given another with its WithPrefix option.
const DefaultPrefix = "spigot:"

// ClockTTLSlack is added to a key's TTL when a store takes the time from
// the caller's clock (WithClock) rather than from the server: the TTL runs
// on the server's clock, which the caller's does not follow, and a key
// kept longer than ResetAfter is harmless (its state reads as full), while
// a key dropped early would refill a bucket before its time.
const ClockTTLSlack = time.Minute

// Key returns the name of the state of key in bucket b: prefix + b.Name() +
// ":" + key. A valid prefix (CheckPrefix) ends in its only ':' and bucket
// names have no ':', so the name splits back into its three parts in one
// way only: no two stores, buckets or keys share a name. On a cluster, a
// {hash tag} in the bucket's name or in the key decides the slot; see the
// README.
func Key(prefix string, b spigot.Limit, key string) string {
	return prefix + b.Name() + ":" + key
}

// CheckPrefix returns an error, starting with "spigot: ", unless p can
// start the name of every key a store writes: one non-empty word that
// ends in its only ':', without '{' or '}'. Prefixes of that shape never
// collide: with "app" (no ':'), bucket "login" and key "u" would be stored
// as "applogin:u", and with "a:" and "a:b:" bucket "b" and key "c:x" of
// the first would be bucket "c" and key "x" of the second. A brace would
// make a hash tag that sends every key of the store to one cluster slot.
func CheckPrefix(p string) error {
	word, ok := strings.CutSuffix(p, ":")
	switch {
	case !ok:
		return fmt.Errorf("spigot: prefix %q must end in ':', as %q does", p, DefaultPrefix)
	case word == "":
		return fmt.Errorf("spigot: prefix %q must have a word before its ':'", p)
	case strings.Contains(word, ":"):
		return fmt.Errorf("spigot: prefix %q must have only one ':', at its end: with two, prefixes such as \"a:\" and \"a:b:\" could name the same key", p)
	case strings.ContainsAny(word, "{}"):
		return fmt.Errorf("spigot: prefix %q must not contain '{' or '}': a hash tag would put every key of the store in one cluster slot", p)
	}
	return nil
}

// Args builds the script's arguments. It formats a bucket's parameters
// once and keeps them for the next request, so a request on a known bucket
// formats only its cost and, with a caller's clock, the time. The zero
// Args reads the server's clock. It is safe for concurrent use.
type Args struct {
	clock  clock.Clock // nil: the server's TIME
	slack  string      // ARGV[6]
	slackV any         // slack, boxed once for AcquireAny and ResetAny
	cached atomic.Pointer[map[spigot.Limit]*params]
	mu     sync.Mutex // serializes additions to cached
}

// Argv is the script's ARGV: capacity, scale, refill, cost or "reset", now
// in µs or "" for the server's TIME, and the ms added to the key's TTL. It
// is an array, not a slice, so that building one allocates nothing.
type Argv [6]string

// params are a bucket's ARGV[1..3], as strings and as interface values for
// clients that take ...any (boxed once, here, rather than per request).
type params struct {
	s [3]string
	v [3]any
}

// maxCached bounds the buckets Args remembers; past it, parameters are
// formatted on every request.
const maxCached = 256

// NewArgs returns the arguments for a store that takes the time from c, or
// from the server's TIME when c is nil.
func NewArgs(c clock.Clock) *Args {
	a := &Args{clock: c, slack: "0"}
	if c != nil {
		a.slack = strconv.FormatInt(ClockTTLSlack.Milliseconds(), 10)
	}
	a.slackV = a.slack
	return a
}

// Acquire returns ARGV for a request of cost tokens on b.
func (a *Args) Acquire(b spigot.Limit, cost int64) Argv {
	return a.argv(b, strconv.FormatInt(cost, 10))
}

// Reset returns ARGV for a reset of b.
func (a *Args) Reset(b spigot.Limit) Argv { return a.argv(b, "reset") }

func (a *Args) argv(b spigot.Limit, op string) Argv {
	p := a.params(b)
	return Argv{p.s[0], p.s[1], p.s[2], op, a.now(), a.slackMs()}
}

// AcquireAny is Acquire for clients that take arguments as ...any, such as
// go-redis: the bucket's parameters come boxed from the cache, and the cost
// is passed as an int64 for the client to format.
func (a *Args) AcquireAny(b spigot.Limit, cost int64) [6]any {
	p := a.params(b)
	return [6]any{p.v[0], p.v[1], p.v[2], cost, a.now(), a.slackAny()}
}

// ResetAny is Reset for clients that take arguments as ...any.
func (a *Args) ResetAny(b spigot.Limit) [6]any {
	p := a.params(b)
	return [6]any{p.v[0], p.v[1], p.v[2], "reset", a.now(), a.slackAny()}
}

func (a *Args) now() string {
	if a.clock == nil {
		return ""
	}
	return strconv.FormatInt(a.clock.Now().UnixMicro(), 10)
}

// slackAny is slackMs boxed, without allocating.
func (a *Args) slackAny() any {
	if a.slackV == nil { // the zero Args
		return "0"
	}
	return a.slackV
}

func (a *Args) slackMs() string {
	if a.slack == "" { // the zero Args
		return "0"
	}
	return a.slack
}

func (a *Args) params(b spigot.Limit) *params {
	if m := a.cached.Load(); m != nil {
		if p, ok := (*m)[b]; ok {
			return p
		}
	}
	p := &params{s: [3]string{
		strconv.FormatInt(b.Capacity(), 10),
		strconv.FormatInt(b.Scale(), 10),
		strconv.FormatInt(b.Refill(), 10),
	}}
	for i, s := range p.s {
		p.v[i] = s
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.cached.Load()
	if old != nil && len(*old) >= maxCached {
		return p
	}
	m := make(map[spigot.Limit]*params, 1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[b] = p
	a.cached.Store(&m)
	return p
}

// DecodeAcquire turns the script's reply to a request into an Decision.
// The reply is what a client decodes from RESP: a slice of four integers,
// as []any of int64 (go-redis, and ToAny of valkey-go and rueidis) or
// []int64. Anything else, or values the model cannot produce, is an error
// that names the problem and matches spigot.ErrRequestFailed.
func DecodeAcquire(reply any) (spigot.Decision, error) {
	var n [4]int64
	switch vals := reply.(type) {
	case []int64:
		if len(vals) != 4 {
			return spigot.Decision{}, malformed(reply, "want 4 integers, got %d values", len(vals))
		}
		copy(n[:], vals)
	case []any:
		if len(vals) != 4 {
			return spigot.Decision{}, malformed(reply, "want 4 integers, got %d values", len(vals))
		}
		for i, v := range vals {
			x, ok := v.(int64)
			if !ok {
				return spigot.Decision{}, malformed(reply, "value %d is %T, want an integer", i+1, v)
			}
			n[i] = x
		}
	default:
		return spigot.Decision{}, malformed(reply, "want an array of 4 integers, got %T", reply)
	}
	return DecodeInts(n)
}

// IntMessage is a client's decoded RESP value that may be an integer, such
// as *rueidis.RedisMessage and *valkey.ValkeyMessage.
type IntMessage interface {
	IsInt64() bool
	AsInt64() (int64, error)
}

// Ints returns the four integers of a reply that is exactly an array of
// four RESP integers, without allocating, and false for any other reply
// (which the caller then hands to DecodeAcquire for an error that says what
// came back).
func Ints[M any, P interface {
	*M
	IntMessage
}](msgs []M) (n [4]int64, ok bool) {
	if len(msgs) != 4 {
		return n, false
	}
	for i := range msgs {
		m := P(&msgs[i])
		if !m.IsInt64() {
			return n, false
		}
		n[i], _ = m.AsInt64()
	}
	return n, true
}

// DecodeInts is DecodeAcquire for a reply already read as four integers:
// allowed, remaining, retry-after ms (-1 for Never), reset-after ms. It
// rejects values the model cannot produce.
func DecodeInts(n [4]int64) (spigot.Decision, error) {
	allowed, remaining, retry, reset := n[0], n[1], n[2], n[3]
	const maxMs = int64(spigot.Never / time.Millisecond)
	switch {
	case allowed != 0 && allowed != 1:
		return spigot.Decision{}, malformed(n, "allowed is %d, want 0 or 1", allowed)
	case remaining < 0:
		return spigot.Decision{}, malformed(n, "remaining is %d, want 0 or more", remaining)
	case retry < -1 || retry > maxMs:
		return spigot.Decision{}, malformed(n, "retry-after is %d ms, want -1 (never) to %d", retry, maxMs)
	case reset < -1 || reset > maxMs:
		return spigot.Decision{}, malformed(n, "reset-after is %d ms, want -1 (never) to %d", reset, maxMs)
	case allowed == 1 && retry != 0:
		return spigot.Decision{}, malformed(n, "allowed with a retry-after of %d ms", retry)
	case allowed == 0 && retry == 0:
		return spigot.Decision{}, malformed(n, "denied with no retry-after")
	}
	return spigot.Decision{
		Allowed:    allowed == 1,
		Remaining:  remaining,
		RetryAfter: msDuration(retry),
		ResetAfter: msDuration(reset),
	}, nil
}

// DecodeReset turns the script's reply to a reset into whether the bucket
// was not full: the integer 1 or 0.
func DecodeReset(reply any) (bool, error) {
	switch reply {
	case int64(1):
		return true, nil
	case int64(0):
		return false, nil
	}
	return false, malformed(reply, "want the integer 0 or 1")
}

func msDuration(ms int64) time.Duration {
	if ms < 0 {
		return spigot.Never
	}
	return time.Duration(ms) * time.Millisecond
}

// malformed describes a bad reply, showing at most its first 100 bytes.
func malformed(reply any, format string, args ...any) error {
	shown := fmt.Sprint(reply)
	if len(shown) > 100 {
		shown = shown[:100] + "…"
	}
	return requestError{fmt.Errorf("spigot: malformed reply from the script: %s: %s", fmt.Sprintf(format, args...), shown)}
}
