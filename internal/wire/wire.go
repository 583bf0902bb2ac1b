// Package wire is what the Redis-protocol stores share, and hide from
// their users: the Lua script that runs spigot's model on the server
// (spigot.lua, the twin of store.Apply, laid out kind by kind as the Go
// model is), the encoding of its arguments, the decoding of its replies,
// and the classification of errors (Err).
//
// The script runs every kind of limit. It touches only the keys it is
// given, deletes a key once its state no longer matters (store.State's
// FullAt) and otherwise sets its TTL to the time until then: the
// ResetAfter of the operation (never below 1 ms). By default it reads the
// server's TIME, so every replica shares one clock.
//
// A Redis-protocol store keeps a key's state under store.Key as the
// string "<kind>/<version> <fullat> <fields>" (ParseState, FormatState):
// a store.State, in microseconds and scaled units, with a tag and a
// version for each kind of limit: a token bucket's "tb/1 <fullat> <stamp>
// <tokens> <scale>", a leaky bucket's "lb/1 …", a fixed window's "fw/1
// …", a sliding window's "sw/1 …", and a sliding log's "sl/1 <fullat>
// <stamp> <base> <width> <entries>", its instants as offsets from base in
// a fixed number of digits, so that the script reads only the entries it
// needs. These are the formats of spigot v0.1.0, which every later
// release reads. The format is versioned so that a rolling deploy can mix
// releases on one server: the script reads a state of another kind, or
// of a later version, by its FullAt alone, never as a full limit. Each
// field is a decimal integer within 2^53 (store.MaxExact), where the
// script's numbers are exact; the FullAt of a state read by a limit of
// its own kind, only compared with the time, may have up to 18 digits. A
// value it cannot read, whatever it holds, is an error for that key alone
// (spigot.ErrRequestFailed), as a key of another Redis type is: the other
// keys of a batch are applied.
package wire

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/core"
	"github.com/spigot-go/spigot/store"
)

// configOf returns a Limit's config.
var configOf = core.Of[spigot.Limit]()

//go:embed spigot.lua
var script string

// Script returns the Lua source of the model, run with EVALSHA (and EVAL
// after a NOSCRIPT reply) with one key and the arguments of Args.Op, or,
// all or nothing, with several keys (in one hash slot on a cluster) and
// the arguments of Args.Ops.
func Script() string { return script }

var sha1Hex = func() string {
	sum := sha1.Sum([]byte(script))
	return hex.EncodeToString(sum[:])
}()

// SHA1 returns the hex SHA-1 of Script, its name for EVALSHA.
func SHA1() string { return sha1Hex }

// ClockTTLSlack is what the script adds to a key's TTL when a store takes
// the time from the caller's clock (WithClock) rather than from the
// server: the TTL runs on the server's clock, which the caller's does not
// follow, and a key kept longer than ResetAfter is harmless (its state
// reads as full), while a key dropped early would refill a limit before
// its time. The script holds it as a literal, 60000 ms.
const ClockTTLSlack = time.Minute

// Args builds the script's arguments. It formats a limit's parameters
// once and keeps them for the next operation, so an operation on a known
// limit formats only its N and, with a caller's clock, the time. The zero
// Args reads the server's clock. It is safe for concurrent use.
type Args struct {
	clock  clock.Clock // nil: the server's TIME
	cached atomic.Pointer[map[spigot.Limit]*params]
	mu     sync.Mutex // serializes additions to cached
}

// Argv is the script's ARGV for one key: now in µs or "" for the server's
// TIME, the limit's kind and the action ("tb.take"), three parameters of
// the limit (a bucket's capacity, scale and refill; a window's limit,
// length in µs and offset in µs), and N. It is an array, not a slice, so
// that building one allocates nothing.
type Argv [6]string

// params are a limit's kind and parameters: its names of the actions, and
// its three parameters, as strings and as interface values for clients
// that take ...any (boxed once, here, rather than per operation).
type params struct {
	actions    *[spigot.Peek + 1]string
	actionsAny *[spigot.Peek + 1]any
	s          [3]string
	v          [3]any
}

// kindTags are the script's names of the kinds of limit.
var kindTags = [...]string{
	spigot.TokenBucket:   "tb",
	spigot.FixedWindow:   "fw",
	spigot.SlidingWindow: "sw",
	spigot.SlidingLog:    "sl",
	spigot.LeakyBucket:   "lb",
}

// actions are the script's names of each kind's actions, the kind's tag,
// a dot and the spigot.Action's name in lower case ("sw.takeupto"),
// indexed by spigot.Kind and spigot.Action, as strings and boxed once.
var (
	actions = func() (s [len(kindTags)][spigot.Peek + 1]string) {
		for k, tag := range kindTags {
			for a := range s[k] {
				s[k][a] = tag + "." + strings.ToLower(spigot.Action(a).String())
			}
		}
		return s
	}()
	actionsAny = func() (v [len(kindTags)][spigot.Peek + 1]any) {
		for k := range actions {
			for a, name := range actions[k] {
				v[k][a] = name
			}
		}
		return v
	}()
)

// maxCached bounds the limits Args remembers; past it, parameters are
// formatted on every operation.
const maxCached = 256

// NewArgs returns the arguments for a store that takes the time from c, or
// from the server's TIME when c is nil.
func NewArgs(c clock.Clock) *Args { return &Args{clock: c} }

// Op returns ARGV for op, which must have passed op.Check. An N above
// store.MaxExact, which a Lua number would round, goes as 2^54: above
// every capacity, every action decides it as it decides N.
func (a *Args) Op(op spigot.Op) Argv {
	p := a.params(op.Limit)
	return Argv{a.now(), p.actions[op.Action], p.s[0], p.s[1], p.s[2], strconv.FormatInt(exactN(op.N), 10)}
}

// exactN returns n, or 2^54 for an n above store.MaxExact: a number that
// doubles hold exactly and that is above every capacity and limit (at
// most MaxExact), so that the script decides it as it would n (a Take or
// Peek of more than the capacity is Never, a TakeUpTo takes what the
// limit holds, a Refund gives back all it can).
func exactN(n int64) int64 {
	if n > store.MaxExact {
		return 2 * store.MaxExact
	}
	return n
}

// OpAny is Op for clients that take arguments as ...any, such as
// go-redis: the limit's parameters and the action come boxed from the
// cache, and N (as Op sends it) is passed as an int64 for the client to
// format.
func (a *Args) OpAny(op spigot.Op) [6]any {
	p := a.params(op.Limit)
	return [6]any{a.now(), p.actionsAny[op.Action], p.v[0], p.v[1], p.v[2], exactN(op.N)}
}

// Ops returns ARGV for several ops in one call of the script, which
// applies them all or nothing: the time once, then the five arguments of
// Op for each op, in order. The ops must have passed op.Check.
func (a *Args) Ops(ops []spigot.Op) []string { return a.ops(ops, "") }

// Batch is Ops for a batch: one call of the script that applies each op
// on its own (see BatchSize). For one op it is Ops.
func (a *Args) Batch(ops []spigot.Op) []string { return a.ops(ops, "b") }

func (a *Args) ops(ops []spigot.Op, mode string) []string {
	argv := make([]string, 1, 1+5*len(ops))
	argv[0] = a.now()
	if len(ops) > 1 {
		argv[0] = mode + argv[0]
	}
	for _, op := range ops {
		p := a.params(op.Limit)
		argv = append(argv, p.actions[op.Action], p.s[0], p.s[1], p.s[2], strconv.FormatInt(exactN(op.N), 10))
	}
	return argv
}

// OpsAny is Ops for clients that take arguments as ...any, as OpAny is.
func (a *Args) OpsAny(ops []spigot.Op) []any { return a.opsAny(ops, "") }

// BatchAny is Batch for clients that take arguments as ...any.
func (a *Args) BatchAny(ops []spigot.Op) []any { return a.opsAny(ops, "b") }

// BatchSize is the most ops a store puts in one batch call of the script:
// the server runs a call whole, so a batch of more is cut into calls of
// BatchSize, sent together, lest one call hold the server for long (a
// call of 100 keys runs in about half a millisecond).
const BatchSize = 100

func (a *Args) opsAny(ops []spigot.Op, mode string) []any {
	argv := make([]any, 1, 1+5*len(ops))
	if len(ops) > 1 {
		argv[0] = mode + a.now()
	} else {
		argv[0] = a.now()
	}
	for _, op := range ops {
		p := a.params(op.Limit)
		argv = append(argv, p.actionsAny[op.Action], p.v[0], p.v[1], p.v[2], exactN(op.N))
	}
	return argv
}

func (a *Args) now() string {
	if a.clock == nil {
		return ""
	}
	return strconv.FormatInt(a.clock.Now().UnixMicro(), 10)
}

func (a *Args) params(l spigot.Limit) *params {
	if m := a.cached.Load(); m != nil {
		if p, ok := (*m)[l]; ok {
			return p
		}
	}
	k := l.Kind()
	if int(k) >= len(kindTags) || kindTags[k] == "" {
		k = spigot.TokenBucket // the zero Limit, which Check rejects first
	}
	p := &params{actions: &actions[k], actionsAny: &actionsAny[k], s: [3]string{
		strconv.FormatInt(l.Capacity(), 10),
		strconv.FormatInt(configOf(l).Scale, 10),
		strconv.FormatInt(configOf(l).Refill, 10),
	}}
	if l.Window() > 0 {
		p.s[1] = strconv.FormatInt(l.Window().Microseconds(), 10)
		p.s[2] = strconv.FormatInt(l.Offset().Microseconds(), 10)
	}
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
	m[l] = p
	a.cached.Store(&m)
	return p
}

// Fields is how many integers the script returns for one key of every
// kind of limit but a leaky bucket, whose reply has one more, its Delay
// (MaxFields).
const Fields = 5

// MaxFields is the most integers the script returns for one key: a leaky
// bucket's.
const MaxFields = 6

// FieldsOf returns how many integers the script returns for one key of a
// limit of kind k.
func FieldsOf(k spigot.Kind) int {
	if k == spigot.LeakyBucket {
		return MaxFields
	}
	return Fields
}

// width returns how many integers the script returns for ops.
func width(ops []spigot.Op) int {
	n := 0
	for _, op := range ops {
		n += FieldsOf(op.Limit.Kind())
	}
	return n
}

// Decode turns the script's reply to one operation on a token bucket (or
// any limit but a leaky bucket) into a Decision. The reply is what a
// client decodes from RESP: a slice of Fields integers, as []any of int64
// (go-redis, and ToAny of valkey-go and rueidis) or []int64. Anything
// else, or values the model cannot produce, is an error that names the
// problem and matches spigot.ErrRequestFailed.
func Decode(reply any) (spigot.Decision, error) {
	var out [1]spigot.Decision
	ops := [1]spigot.Op{{Limit: tokenBucket}}
	err := DecodeAll(reply, ops[:], out[:])
	return out[0], err
}

// tokenBucket is a limit of the kind Decode decodes.
var tokenBucket = spigot.MustBucket("decode", 1, spigot.PerSecond(1))

// DecodeAll is Decode for the reply to one call of the script on ops,
// one key each: FieldsOf each op's kind integers a key, in one flat
// array. It sets out[i] (out is as long as ops) to the decision on ops[i].
func DecodeAll(reply any, ops []spigot.Op, out []spigot.Decision) error {
	var buf [MaxFields]int64 // room for one key's
	ints, err := toInts(reply, width(ops), len(ops), buf[:0])
	if err != nil {
		return err
	}
	return decodeAll(ints, ops, out, nil)
}

// DecodeAllInts is DecodeAll for a reply already read as integers.
func DecodeAllInts(ints []int64, ops []spigot.Op, out []spigot.Decision) error {
	if want := width(ops); len(ints) != want {
		return checkLen(ints, len(ints), want, len(ops))
	}
	return decodeAll(ints, ops, out, nil)
}

// decodeAll is DecodeAll, or with errs DecodeBatch, for a reply of the
// right length.
func decodeAll(ints []int64, ops []spigot.Op, out []spigot.Decision, errs []error) error {
	at := 0
	for i, op := range ops {
		n := FieldsOf(op.Limit.Kind())
		d, err := decodeKey(ints[at : at+n])
		at += n
		switch {
		case err != nil && errs == nil:
			return err
		case err != nil:
			d = spigot.Undecided()
		}
		out[i] = d
		if errs != nil {
			errs[i] = err
		}
	}
	return nil
}

// toInts returns the integers of reply, which should hold want integers
// for keys keys, appended to buf, or an error that says what came back
// instead.
func toInts(reply any, want, keys int, buf []int64) ([]int64, error) {
	switch vals := reply.(type) {
	case []int64:
		return vals, checkLen(reply, len(vals), want, keys)
	case []any:
		if err := checkLen(reply, len(vals), want, keys); err != nil {
			return nil, err
		}
		ints := buf
		for i, v := range vals {
			x, ok := v.(int64)
			if !ok {
				return nil, malformed(reply, "value %d is %T, want an integer", i+1, v)
			}
			ints = append(ints, x)
		}
		return ints, nil
	}
	return nil, malformed(reply, "want an array of %d integers, got %T", want, reply)
}

// checkLen returns an error unless a reply of n values holds the want
// integers of keys keys.
func checkLen(reply any, n, want, keys int) error {
	switch {
	case n == want:
		return nil
	case keys == 1:
		return malformed(reply, "want %d integers, got %d values", want, n)
	default:
		return malformed(reply, "want %d integers for %d keys, got %d values", want, keys, n)
	}
}

// IntMessage is a client's decoded RESP value that may be an integer, such
// as *rueidis.RedisMessage and *valkey.ValkeyMessage.
type IntMessage interface {
	IsInt64() bool
	AsInt64() (int64, error)
}

// Ints returns the integers of a reply to one operation on a token bucket
// (or any limit but a leaky bucket) that is exactly an array of Fields
// RESP integers, without allocating, and false for any other reply (which
// the caller then hands to Decode for an error that says what came back).
func Ints[M any, P interface {
	*M
	IntMessage
}](msgs []M) (n [Fields]int64, ok bool) {
	if len(msgs) != Fields {
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

// DecodeInts is Decode for a reply already read as integers: the tokens
// moved, remaining, retry-after ms (0 when allowed, -1 for Never),
// reset-after ms, refill-after ms (-1 for Never). It rejects values the
// model cannot produce.
func DecodeInts(n [Fields]int64) (spigot.Decision, error) { return decodeKey(n[:]) }

// maxDelayPast is the most µs past 2^53 that a Delay (a Duration) holds.
const maxDelayPast = int64(spigot.Never/time.Microsecond) - store.MaxExact

// decodeKey is DecodeInts for the Fields integers of one key, or the
// MaxFields of a leaky bucket's, whose sixth is the Delay: the µs up to
// 2^53, -1 for Never, and -2 - (µs − 2^53) past 2^53.
func decodeKey(n []int64) (spigot.Decision, error) {
	moved, remaining, retry, reset, refill := n[0], n[1], n[2], n[3], n[4]
	var delay int64
	if len(n) == MaxFields {
		delay = n[5]
	}
	const maxMs = int64(spigot.Never / time.Millisecond)
	switch {
	case moved == -1 && (remaining == failedWrongType || remaining == failedUnreadable) && retry == 0 && reset == 0 && refill == 0 && delay == 0:
		return spigot.Decision{}, failedOp[remaining] // an op of a batch that failed alone
	case moved < 0:
		return spigot.Decision{}, malformed(clone(n), "moved %d tokens, want 0 or more", moved)
	case remaining < 0:
		return spigot.Decision{}, malformed(clone(n), "remaining is %d, want 0 or more", remaining)
	case retry < -1 || retry > maxMs:
		return spigot.Decision{}, malformed(clone(n), "retry-after is %d ms, want -1 (never) to %d", retry, maxMs)
	case reset < -1 || reset > maxMs:
		return spigot.Decision{}, malformed(clone(n), "reset-after is %d ms, want -1 (never) to %d", reset, maxMs)
	case refill < -1 || refill > maxMs:
		return spigot.Decision{}, malformed(clone(n), "refill-after is %d ms, want -1 (never) to %d", refill, maxMs)
	case retry != 0 && moved != 0:
		return spigot.Decision{}, malformed(clone(n), "denied, yet moved %d tokens", moved)
	case delay > store.MaxExact || delay == -2 || delay < -2-maxDelayPast:
		return spigot.Decision{}, malformed(clone(n), "delay is %d, want -1 (never), 0 to 2^53 µs, or -2 less the µs past 2^53", delay)
	case delay != 0 && retry != 0:
		return spigot.Decision{}, malformed(clone(n), "denied, yet delayed")
	}
	d := spigot.Decision{
		N:           moved,
		Remaining:   remaining,
		RetryAfter:  msDuration(retry),
		ResetAfter:  msDuration(reset),
		RefillAfter: msDuration(refill),
	}
	switch {
	case delay == -1:
		d.Delay = spigot.Never
	case delay < 0:
		d.Delay = time.Duration(store.MaxExact+(-2-delay)) * time.Microsecond
	default:
		d.Delay = time.Duration(delay) * time.Microsecond
	}
	return d, nil
}

// The codes of the ops of a batch that failed alone: the script replies
// {-1, code, 0, 0, 0}, and a sixth 0 for a leaky bucket.
const (
	failedWrongType  = 1
	failedUnreadable = 2
)

// failedOp are the errors of the ops of a batch that failed alone, as the
// script's error replies say them in a call of one key.
var failedOp = map[int64]error{
	failedWrongType:  requestError{errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")},
	failedUnreadable: requestError{errors.New("ERR spigot: unreadable state at the key")},
}

// clone returns a copy of n, for an error to show without n's array
// leaving the stack.
func clone(n []int64) []int64 { return append([]int64(nil), n...) }

// DecodeBatch is DecodeAll for the reply to a batch call of the script
// (Args.Batch): it sets out[i] to the decision on ops[i], or, for a key
// that failed alone, to spigot.Undecided() and errs[i] to its error (errs is
// as long as out; the others are left nil). For a reply that is not the
// script's, it returns an error and sets nothing.
func DecodeBatch(reply any, ops []spigot.Op, out []spigot.Decision, errs []error) error {
	ints, err := toInts(reply, width(ops), len(ops), nil)
	if err != nil {
		return err
	}
	return decodeAll(ints, ops, out, errs)
}

// DecodeBatchInts is DecodeBatch for a reply already read as integers.
func DecodeBatchInts(ints []int64, ops []spigot.Op, out []spigot.Decision, errs []error) error {
	if want := width(ops); len(ints) != want {
		return checkLen(ints, len(ints), want, len(ops))
	}
	return decodeAll(ints, ops, out, errs)
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
