// Package hybrid is a spigot.Store that keeps limiting when its remote
// store (normally Redis, through store/redis, store/valkey or
// store/rueidis) fails: a remote store in front of a local one (normally
// store/memory), with a deadline on every remote call, a circuit breaker,
// and an explicit policy for what to decide while the remote is
// unavailable.
//
//	remote := redis.New(rdb)
//	limiter := spigot.New(hybrid.New(remote, memory.New()), login)
//
// # Decisions
//
// Every request first checks its input (a bad bucket, key or cost is
// returned as an error, as from any store, and never counts against the
// breaker) and, with WithGuard, a local guard bucket: a
// guard denial is final and never reaches the remote. Then, while the
// breaker is closed, the remote decides, under a deadline of
// min(the caller's deadline, the timeout: WithTimeout's, or by default
// one the Store sets from the remote's latency). When the remote fails (an
// error, or no answer before the deadline) or the breaker is open, the
// policy decides:
//
//	Local       the local store decides, with WithLocalLimit's bucket (default)
//	FailOpen    the request is admitted
//	FailClosed  the request is denied, RetryAfter until the breaker's next probe
//
// WithPolicy chooses it for the store, WithPolicyOf for each limit (a
// login limit that fails closed beside browsing limited locally, in one
// store and one all-or-nothing request). A FailOpen or FailClosed
// decision is Degraded (Remaining -1): it says nothing of the bucket, and
// headers should not report it as the bucket's.
//
// The caller's own cancellation is not a remote failure: it returns the
// caller's error and does not count against the breaker.
//
// # Which errors mean the remote is unavailable
//
// A remote error that concerns one request, not the remote, matches
// spigot.ErrRequestFailed: the server answered, but with an error about
// this key or this script run, such as WRONGTYPE (the key holds a list),
// a script that failed, or a reply that is not the script's. Such an error
// is returned to the caller as it is, and counts as an answer for the
// breaker: a key holding the wrong type never trips the breaker for every
// other key. Every other remote error means the remote is unavailable:
// the policy decides and the error counts against the breaker. For
// spigot's Redis-protocol stores that is a refused, reset or lost
// connection, a timeout (WithTimeout's deadline), a closed client, and the
// error replies of a server that cannot serve any request now: LOADING,
// BUSY, CLUSTERDOWN, TRYAGAIN, MOVED and ASK (a redirection not followed),
// MASTERDOWN, READONLY, NOREPLICAS, OOM, MISCONF, NOAUTH, WRONGPASS and
// "ERR max number of clients reached". A store of your own marks its
// per-request errors by wrapping spigot.ErrRequestFailed; its other errors
// count as the remote being unavailable.
//
// A timeout counts against the breaker only when the call was too small
// for its own size to explain the wait: a Do, or a DoMulti of up to
// WithLargeCall's number of ops (by default 100, what a Redis-protocol
// store sends in one script run; a key is at most spigot.MaxKeyLen
// bytes). A DoMulti of more ops that times out is
// decided by the policy but leaves the breaker as it was (a probe so
// answered lets the next request probe again), so that a client that
// sends large requests cannot open the breaker for everyone. Any other
// failure of a large call, such as a refused or reset connection, counts
// as for any call. Only small calls then open the breaker on a remote
// that accepts connections and never answers.
//
// # Failures are not retried
//
// A remote call that timed out may still have taken its tokens in Redis, so
// it is never retried: the policy decides instead. At worst a request is
// charged twice (once remotely, once locally), never admitted twice by the
// remote.
//
// # What the local store starts from
//
// Under the Local policy the Store remembers, for the keys it used most
// recently (WithMaxKeys's number, DefaultMaxKeys by default), what the
// remote last said was left in each key's bucket, and when. The first
// time the local store decides a key after that, its local bucket holds
// no more than the remote's did then, refilled since, scaled to the local
// bucket (remaining × local capacity / capacity, rounded down). A key the
// Store does not remember (never seen, forgotten, or reset) starts as the
// local store has it: full, for a key it never saw.
//
// The Store also counts what the local store took for each key it
// remembers, and charges it to the remote on the key's next remote call (a
// Do, or a DoMulti in Independent mode), in the same call: a TakeUpTo of
// that debt in front of the request's op. The remote's bucket then does
// not refill for the outage as well, and the request is decided after the
// charge. The charge takes what the bucket holds, up to the debt; a call
// that fails keeps the debt for the next.
//
// So a blink adds little. While the remote is unavailable for a time T,
// the local stores of P replicas admit for one key at most S + R·T, where
// S is the sum of what each replica last heard the remote say the key
// held, refilled until the outage and scaled (at most the sum of the local
// capacities), and R the sum of the local rates; on recovery the remote is
// charged with all of it. Over any window that contains the outage, the
// key is then admitted at most what its bucket would admit (capacity +
// rate × window), plus, for each replica, what the others took between
// its last remote decision on the key and the outage, scaled. With one
// replica, or steady traffic through every replica, that is at most a
// token of rounding.
// A key that a replica does not remember starts full on it, as without
// memory: at worst P local capacities + R·T.
//
// # The breaker
//
// After WithBreaker's run of consecutive remote failures the breaker opens:
// requests go straight to the policy with no network wait. A busy node is
// not an outage: a call that times out while the remote answers other
// calls does not count, and a run of timeouts opens the breaker only once
// it has lasted a timeout too (the calls of a process that the machine
// stalled time out together when it runs again, and the next are
// answered). After the
// cooldown it is half-open: one request probes the remote (the others still
// get the policy); success closes the breaker, failure opens it for another
// cooldown. Circuit reports where it is; WithObserver reports every
// transition.
package hybrid

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/memory"
)

var _ spigot.Store = (*Store)(nil)

// Defaults.
const (
	// DefaultTimeout and DefaultMaxTimeout bound the timeout a Store
	// sets itself when WithTimeout does not (see WithTimeout).
	DefaultTimeout    = 50 * time.Millisecond
	DefaultMaxTimeout = time.Second
	DefaultFailures   = 5
	DefaultCooldown   = 5 * time.Second
	DefaultLargeCall  = 100 // ops: what a Redis-protocol store sends in one script run
)

// ErrUnavailable is wrapped by the error of a Reset that could not reach
// the remote store (it was unavailable, or the breaker is open).
var ErrUnavailable = errors.New("spigot: hybrid: remote store unavailable")

// A Policy decides requests while the remote store is unavailable.
type Policy int

const (
	// Local decides on the local store (the default).
	Local Policy = iota
	// FailOpen admits every request, with a Degraded Decision (Remaining
	// -1, ResetAfter and RefillAfter 0): nothing is known of the bucket.
	FailOpen
	// FailClosed denies every request, with a Degraded Decision whose
	// RetryAfter is the time until the breaker's next probe (the cooldown
	// when it is not open), or Never when the cost exceeds the capacity.
	FailClosed
)

var policyNames = [...]string{Local: "local", FailOpen: "fail-open", FailClosed: "fail-closed"}

// String returns the policy's name, as in "fail-open".
func (p Policy) String() string { return name(p, "Policy", policyNames[:]) }

// A Path is the way a request was decided.
type Path int

const (
	// PathRemote: the remote store decided.
	PathRemote Path = iota
	// PathLocal: the local store decided, under the Local policy.
	PathLocal
	// PathFailOpen: admitted under the FailOpen policy.
	PathFailOpen
	// PathFailClosed: denied under the FailClosed policy.
	PathFailClosed
	// PathGuard: denied by the guard bucket, without asking the remote.
	PathGuard
)

var pathNames = [...]string{
	PathRemote: "remote", PathLocal: "local", PathFailOpen: "fail-open", PathFailClosed: "fail-closed", PathGuard: "guard",
}

// String returns the path's name, as in "fail-open".
func (p Path) String() string { return name(p, "Path", pathNames[:]) }

// name returns names[v], or typ(v) for a value that has no name.
func name[T ~int | ~int32](v T, typ string, names []string) string {
	if v >= 0 && int64(v) < int64(len(names)) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// Observer receives what a Store does, for metrics and logs. Each field is
// optional. The functions are called synchronously on the goroutine of the
// Do or DoMulti call that caused them, with that call's context (for its
// values, such as a trace's span: it may be done by then), so they must be
// fast and safe for concurrent use: increment a counter, observe a
// histogram.
type Observer struct {
	// Decision is called once for every operation that got a Decision,
	// but a Reset.
	Decision func(ctx context.Context, op spigot.Op, path Path, d spigot.Decision)
	// RemoteError is called for every failed remote call (including a
	// failed probe, and an error that matches spigot.ErrRequestFailed,
	// which does not count against the breaker), with the time it took.
	RemoteError func(ctx context.Context, op spigot.Op, err error, latency time.Duration)
	// RemoteCall is called after every remote call, with its error (nil
	// when the remote answered) and the time it took, before RemoteError
	// and any transition it causes: for a histogram of the remote's
	// latency. A DoMulti is one call, of its first op; a call that the
	// caller gave up on is reported too, with the error it returned.
	RemoteCall func(ctx context.Context, op spigot.Op, err error, latency time.Duration)
	// Transition is called when the breaker changes state, in order, under
	// the breaker's lock: it must not call the Store. Every transition is
	// caused by a call: ctx is the context of the call whose remote
	// outcome moved the breaker, or of the request that the half-open
	// breaker lets through as its probe.
	Transition func(ctx context.Context, from, to Circuit)
}

// Store is a remote store with a local fallback. It is safe for concurrent
// use. The zero Store is not usable; call New.
type Store struct {
	remote, local spigot.Store
	clock         clock.Clock
	timeout       time.Duration // WithTimeout's; 0: latency's
	latency       latency       // of the remote's answers, when timeout is 0
	policy        Policy
	policyOf      func(spigot.Limit) Policy // WithPolicyOf's, or nil
	localBucket   func(spigot.Limit) spigot.Limit
	guardBucket   func(spigot.Limit) spigot.Limit
	guard         *memory.Store
	detach        bool
	obs           Observer
	memoryKeys    int
	largeCall     int        // the most ops of a call whose timeout counts against the breaker
	mem           *keyMemory // nil unless the Local policy remembers keys
	breaker       breaker
}

// An Option configures a Store.
type Option func(*Store)

// WithTimeout bounds every remote call to d, or less when the caller's
// deadline comes first. A remote that has not answered by then has failed.
// It panics if d is negative.
//
// By default (and with 0) the Store sets the timeout itself from the
// latency of the remote's answers: twice the slowest of late (the slowest
// seen, halved for every 10 s since), never below DefaultTimeout (50 ms)
// nor above DefaultMaxTimeout (1 s), which is also the timeout before the
// first answer (the first calls dial, and may load a script). So a quiet
// node gives up on a silent remote within 50 ms, and a busy one, whose
// healthy answers take longer, does not take its own latency for an
// outage.
//
// The deadline reaches the remote through its context, which spigot's
// Redis-protocol stores honour however the server fails (refused, reset,
// or accepting and never answering); a go-redis client needs
// ContextTimeoutEnabled for that, as store/redis says. For a remote that
// may ignore its context, add WithDetach.
func WithTimeout(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("spigot: hybrid: WithTimeout: %v: want 0 (the default) or more", d))
	}
	return func(s *Store) { s.timeout = d }
}

// WithDetach runs every remote call on a goroutine of its own, so that the
// call returns at its deadline even when the remote ignores its context
// (the abandoned goroutine ends when the remote returns). A detached
// DoMulti works on copies of its ops and decisions, and copies the
// decisions back only when the remote answers in time: once DoMulti has
// returned, the caller may reuse both slices. It costs a hand-off between
// goroutines on every call, so use it only for such remotes.
func WithDetach() Option { return func(s *Store) { s.detach = true } }

// WithPolicyOf sets what decides each limit's ops while the remote is
// unavailable: f's Policy for the op's limit, such as FailClosed for a
// login limit and Local for browsing, in one store (WithPolicy's for a
// limit f is not given, when f is nil). A batch of several limits stays
// all or nothing: when a FailClosed limit denies, the Local ones are not
// charged, and when the local store denies, nothing is. f must be fast and
// safe for concurrent use; a Policy it returns that is not Local, FailOpen
// or FailClosed is Local.
func WithPolicyOf(f func(spigot.Limit) Policy) Option {
	return func(s *Store) { s.policyOf = f }
}

// WithPolicy sets what decides while the remote is unavailable (default
// Local), for every limit but those WithPolicyOf decides. It panics if p
// is not Local, FailOpen or FailClosed.
func WithPolicy(p Policy) Option {
	if p < Local || p > FailClosed {
		panic(fmt.Sprintf("spigot: hybrid: WithPolicy: %v: want Local, FailOpen or FailClosed", p))
	}
	return func(s *Store) { s.policy = p }
}

// WithLocalLimit sets the bucket the local store enforces, under the
// Local policy, in place of a request's bucket: for example the limit
// divided by the number of replicas, so that the replicas together admit
// about what the remote would. The default is the same bucket, so N
// replicas admit up to N times the limit while the remote is down (less
// for the keys they remember: see WithMaxKeys). Give
// the local bucket the same name as the remote one unless the local store
// is shared with other limiters. httplimit and grpclimit then describe
// the local limit in their headers (its q, w, r and t) for the decisions
// it makes (see store.Substituter). It panics if f is nil.
func WithLocalLimit(f func(spigot.Limit) spigot.Limit) Option {
	if f == nil {
		panic("spigot: hybrid: WithLocalLimit: nil func")
	}
	return func(s *Store) { s.localBucket = f }
}

// WithGuard adds a guard: a local bucket, f(bucket), consulted before the
// remote, usually looser than the remote's (say, twice the limit per
// replica), so that a flood from one key is denied locally without a round
// trip. A guard denial never calls the remote. The guard keeps its state
// in a memory store of its own, on the Store's clock. It panics if f is
// nil.
func WithGuard(f func(spigot.Limit) spigot.Limit) Option {
	if f == nil {
		panic("spigot: hybrid: WithGuard: nil func")
	}
	return func(s *Store) { s.guardBucket = f }
}

// WithBreaker sets the breaker: it opens after failures consecutive remote
// failures (default 5) and lets one probe through after cooldown (default
// 5 s). It panics if failures is below 1 or cooldown is not above 0: there
// is always a breaker.
func WithBreaker(failures int, cooldown time.Duration) Option {
	switch {
	case failures < 1:
		panic(fmt.Sprintf("spigot: hybrid: WithBreaker: failures %d: want 1 or more", failures))
	case failures > math.MaxInt32:
		panic(fmt.Sprintf("spigot: hybrid: WithBreaker: failures %d: want %d at most", failures, math.MaxInt32))
	case cooldown <= 0:
		panic(fmt.Sprintf("spigot: hybrid: WithBreaker: cooldown %v: want more than 0", cooldown))
	}
	return func(s *Store) { s.breaker.failures, s.breaker.cooldown = int32(failures), cooldown }
}

// WithMaxKeys caps the number of keys the Store holds at once at n
// (DefaultMaxKeys by default, 10 000; 0 holds none), to bound its memory
// under a flood of distinct keys, such as random source addresses. A key
// is a limit's name and a key, as stores name state; the Store holds it
// for the Local policy (the local store's own keys are its own): what the
// remote last said was left in the key's bucket, and what the local store
// took for it since. A new key that arrives when its part of the Store is
// at the cap (the cap is split between parts, so eviction can begin a
// little below n) takes the place of the least recently used of a few
// keys sampled from that part: the local buckets of keys the Store does
// not hold start full, and nothing is charged to the remote for them.
// See the package doc. It panics if n is negative.
func WithMaxKeys(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("spigot: hybrid: WithMaxKeys: %d keys: want 0 or more", n))
	}
	return func(s *Store) { s.memoryKeys = n }
}

// WithLargeCall sets the most ops of a remote call whose timeout counts
// against the breaker (default DefaultLargeCall, 100, what spigot's
// Redis-protocol stores send in one script run): a DoMulti of more ops
// that times out is decided by the policy and leaves the breaker as it
// was, since its own size may have made it slow (see the package doc).
// For a remote of another kind, give the most ops it applies in one round
// trip. It panics if n is below 1.
func WithLargeCall(n int) Option {
	if n < 1 {
		panic(fmt.Sprintf("spigot: hybrid: WithLargeCall: %d ops: want 1 or more", n))
	}
	return func(s *Store) { s.largeCall = n }
}

// WithObserver sets the observer of decisions, remote calls and errors,
// and breaker transitions.
func WithObserver(o Observer) Option { return func(s *Store) { s.obs = o } }

// WithClock sets the clock of the breaker's cooldown and of the guard
// (default: the system clock). Deadlines and the latencies the observer
// sees are real time. It panics if c is nil.
func WithClock(c clock.Clock) Option {
	if nilcheck.Nil(c) {
		panic("spigot: hybrid: WithClock: nil Clock")
	}
	return func(s *Store) { s.clock = c }
}

// New returns a store that asks remote and falls back on local. It
// panics if remote, local or an option is nil: local is needed whenever
// the remote fails, which is too late to find out.
func New(remote, local spigot.Store, opts ...Option) *Store {
	switch {
	case nilcheck.Nil(remote):
		panic("spigot: hybrid: New: nil remote store")
	case nilcheck.Nil(local):
		panic("spigot: hybrid: New: nil local store (the fallback while the remote is unavailable)")
	}
	s := &Store{
		remote:     remote,
		local:      local,
		clock:      clock.System(),
		memoryKeys: DefaultMaxKeys,
		largeCall:  DefaultLargeCall,
	}
	s.breaker.failures, s.breaker.cooldown = DefaultFailures, DefaultCooldown
	for i, o := range opts {
		if o == nil {
			panic(fmt.Sprintf("spigot: hybrid: New: option %d is nil", i))
		}
		o(s)
	}
	s.breaker.clock, s.breaker.observe = s.clock, s.obs.Transition
	if s.guardBucket != nil {
		s.guard = memory.New(memory.WithClock(s.clock))
	}
	if (s.policy == Local || s.policyOf != nil) && s.memoryKeys > 0 {
		s.mem = newKeyMemory(s.memoryKeys)
	}
	return s
}

// Do implements spigot.Store. A Take or TakeUpTo first asks the guard,
// then the remote, and falls back by the policy; a Refund or Peek goes
// where a Take would; a Reset resets the guard, the local store and the
// remote, and returns an error wrapping ErrUnavailable when the remote
// could not be reached.
func (s *Store) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := op.Check(); err != nil {
		return spigot.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return spigot.Decision{}, err
	}
	if op.Action == spigot.Reset {
		return s.reset(ctx, op)
	}
	guarded := int64(-1) // tokens the guard took, if it was asked
	if s.guard != nil && op.Action != spigot.Peek {
		g, err := s.guard.Do(ctx, s.guardOp(op))
		if err != nil {
			return spigot.Decision{}, err
		}
		if !g.Allowed() {
			s.decided(ctx, op, PathGuard, g)
			return g, nil
		}
		if op.Action == spigot.TakeUpTo {
			op.N, guarded = g.N, g.N // no more than the guard allowed
		}
	}
	d, err := s.decide(ctx, op)
	if guarded > d.N { // the remote took less than the guard did: give it back
		back := s.guardOp(op)
		back.Action, back.N = spigot.Refund, guarded-d.N
		s.guard.Do(context.WithoutCancel(ctx), back) // a valid op on a memory store: no error
	}
	return d, err
}

// decide asks the remote, and the policy when the remote fails.
func (s *Store) decide(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	call, probe := s.breaker.allow(ctx)
	if !call {
		return s.fallback(ctx, op)
	}
	var debt int64 // what the local store took for the key, to charge first
	if s.mem != nil {
		debt = s.takeDebt(op)
	}
	d, err := remoteCall(s, ctx, op, 1, probe, func(ctx context.Context) (spigot.Decision, error) {
		if debt > 0 {
			return s.withDebt(ctx, op, debt)
		}
		return s.remote.Do(ctx, op)
	})
	if s.mem != nil {
		if err == nil {
			s.heard(op, d, s.clock.Now())
		} else if debt > 0 {
			s.payDebt(op, debt)
		}
	}
	switch {
	case err == nil:
		s.decided(ctx, op, PathRemote, d)
		return d, nil
	case ctx.Err() != nil: // the caller gave up: not the remote's failure
		return spigot.Decision{}, ctx.Err()
	case answered(err): // this op's error
		return spigot.Decision{}, err
	}
	return s.fallback(ctx, op)
}

// DoMulti implements spigot.Store. One op is decided as by Do. Several go
// to the remote's DoMulti, and, while the remote is unavailable, to the
// local store's (under the Local policy) or to the policy, op by op; the
// guard is not asked. Several ops with a Reset among them need the remote,
// as Do's Reset does. An error matching errors.ErrUnsupported from the
// remote is returned as it is, and counts as an answer.
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if err := store.CheckMulti(mode, ops, out); err != nil || len(ops) == 0 {
		return err
	}
	if len(ops) == 1 {
		d, err := s.Do(ctx, ops[0])
		out[0] = d
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if call, probe := s.breaker.allow(ctx); call {
		var debts []spigot.Op // TakeUpTo ops that charge the remote what the local store took
		if s.mem != nil && mode == spigot.Independent {
			for _, op := range ops {
				if op.Action == spigot.Reset {
					continue
				}
				if debt := s.takeDebt(op); debt > 0 {
					debts = append(debts, spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.TakeUpTo, N: debt})
				}
			}
		}
		rops, rout := ops, out
		if s.detach || len(debts) > 0 {
			// The call may outlive DoMulti, which must then leave the
			// caller's slices alone: it gets slices of its own, and only
			// an answer in time is copied back.
			rops, rout = append(debts, ops...), make([]spigot.Decision, len(debts)+len(out))
		}
		got, err := remoteCall(s, ctx, ops[0], len(ops), probe, func(ctx context.Context) ([]spigot.Decision, error) {
			return rout, s.remote.DoMulti(ctx, mode, rops, rout)
		})
		if len(rops) > len(ops) || s.detach {
			copy(out, got[min(len(debts), len(got)):]) // got is nil when the call did not return in time
		}
		if s.mem != nil {
			if err == nil {
				now := s.clock.Now()
				for i, op := range ops {
					s.heard(op, out[i], now)
				}
			} else {
				for _, d := range debts {
					s.payDebt(d, d.N)
				}
			}
		}
		switch {
		case err == nil:
			for i, op := range ops {
				s.decided(ctx, op, PathRemote, out[i])
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case answered(err):
			return err
		}
	}
	for _, op := range ops {
		if op.Action == spigot.Reset {
			return fmt.Errorf("%w: a Reset among %d ops", ErrUnavailable, len(ops))
		}
	}
	// The ops of Local limits go to the local store, in one call; the
	// others are decided by their policy, which reads no state.
	var lops, local []spigot.Op
	var at []int // local[j] is ops[at[j]]
	denied := false
	paths := make([]Path, len(ops))
	for i, op := range ops {
		if s.policyFor(op.Limit) == Local {
			lops, local, at = append(lops, op), append(local, s.localOp(op)), append(at, i)
			paths[i] = PathLocal
			continue
		}
		out[i], paths[i] = s.policyDecision(op)
		denied = denied || !out[i].Allowed() && op.Action != spigot.Peek
	}
	if len(local) > 0 {
		lout := make([]spigot.Decision, len(local))
		lmode := mode
		if denied && mode == spigot.AllOrNothing {
			// A policy denied the batch: the local ops are told, not
			// charged.
			lmode = spigot.Independent
			for j := range local {
				local[j].Action, lops[j].Action = spigot.Peek, spigot.Peek
			}
		}
		var err error
		if s.mem != nil {
			err = s.localDoMulti(ctx, lmode, lops, local, lout)
		} else {
			err = s.local.DoMulti(ctx, lmode, local, lout)
		}
		if err != nil {
			return err
		}
		for j, i := range at {
			out[i] = lout[j]
			denied = denied || !lout[j].Allowed() && ops[i].Action != spigot.Peek
			if s.localBucket != nil {
				store.Substituted(ctx, lops[j].Limit, local[j].Limit)
			}
		}
	}
	for i, op := range ops {
		if denied && mode == spigot.AllOrNothing {
			out[i].N = 0 // none is charged
		}
		s.decided(ctx, op, paths[i], out[i])
	}
	return nil
}

// answered reports whether a remote error is an answer about the op, not
// a sign that the remote is unavailable.
func answered(err error) bool {
	return errors.Is(err, spigot.ErrRequestFailed) || errors.Is(err, errors.ErrUnsupported)
}

// reset resets the guard and the local store, then the remote.
func (s *Store) reset(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if s.mem != nil {
		s.forgetKey(op)
	}
	if s.guard != nil {
		if _, err := s.guard.Do(ctx, s.guardOp(op)); err != nil {
			return spigot.Decision{}, err
		}
	}
	if _, err := s.local.Do(ctx, s.localOp(op)); err != nil {
		return spigot.Decision{}, err
	}
	call, probe := s.breaker.allow(ctx)
	if !call {
		return spigot.Decision{}, fmt.Errorf("%w: the circuit is open", ErrUnavailable)
	}
	d, err := remoteCall(s, ctx, op, 1, probe, func(ctx context.Context) (spigot.Decision, error) {
		return s.remote.Do(ctx, op)
	})
	switch {
	case err == nil:
		return d, nil
	case ctx.Err() != nil:
		return spigot.Decision{}, ctx.Err()
	case answered(err):
		return spigot.Decision{}, err
	}
	return spigot.Decision{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// guardOp is op as the guard applies it: on WithGuard's limit.
func (s *Store) guardOp(op spigot.Op) spigot.Op {
	op.Limit = s.guardBucket(op.Limit)
	return op
}

// remoteCall runs f, a call of n ops, on the remote under the deadline and
// records the outcome with the breaker: probe says whether this call is
// the half-open breaker's probe.
func remoteCall[T any](s *Store, ctx context.Context, op spigot.Op, n int, probe bool, f func(context.Context) (T, error)) (T, error) {
	start := time.Now()
	timeout := s.timeout
	if timeout == 0 {
		timeout = s.latency.timeout()
	}
	answers := s.breaker.answers.Load()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var v T
	var err error
	if s.detach {
		v, err = detached(rctx, f)
	} else {
		v, err = f(rctx)
	}
	if s.obs.RemoteCall != nil {
		s.obs.RemoteCall(ctx, op, err, time.Since(start))
	}
	switch {
	case err == nil:
		if s.timeout == 0 {
			s.latency.add(time.Since(start))
		}
		s.breaker.succeeded(ctx, probe)
	case ctx.Err() != nil: // the caller gave up: nothing learnt
		if probe {
			s.breaker.transition(ctx, CircuitHalfOpen, CircuitOpen, 0)
		}
	default:
		if s.obs.RemoteError != nil {
			s.obs.RemoteError(ctx, op, err, time.Since(start))
		}
		switch {
		case answered(err):
			s.breaker.succeeded(ctx, probe) // the remote answered: it is up
		case n > s.largeCall && timedOut(err),
			!probe && rctx.Err() != nil && s.breaker.answers.Load() != answers:
			// Its own size may have made it slow, or the remote answered
			// other calls while it waited (the remote is slow, not down):
			// nothing learnt.
			if probe {
				s.breaker.transition(ctx, CircuitHalfOpen, CircuitOpen, 0)
			}
		case rctx.Err() != nil: // the timeout's deadline passed
			s.breaker.failed(ctx, probe, timeout)
		default:
			s.breaker.failed(ctx, probe, 0)
		}
	}
	return v, err
}

// timedOut reports whether err says that a call ran out of time: a
// context's deadline, or a connection's.
func timedOut(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

type result[T any] struct {
	v   T
	err error
}

// detached runs f on a goroutine of its own and returns at ctx's deadline
// if f has not returned by then; the goroutine ends when f does.
func detached[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	done := make(chan result[T], 1)
	go func() {
		v, err := f(ctx)
		done <- result[T]{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("spigot: hybrid: no answer from the remote store: %w", ctx.Err())
	}
}

// SubstitutesLimits implements store.Substituter: with WithLocalLimit, a
// decision by the local store is by the local limit, and the Store
// records it (store.Substituted) for the front doors' headers.
func (s *Store) SubstitutesLimits() bool { return s.localBucket != nil }

// localOp is op as the local store applies it: on WithLocalLimit's limit.
func (s *Store) localOp(op spigot.Op) spigot.Op {
	if s.localBucket != nil {
		op.Limit = s.localBucket(op.Limit)
	}
	return op
}

// policyFor returns the policy of limit l.
func (s *Store) policyFor(l spigot.Limit) Policy {
	if s.policyOf == nil {
		return s.policy
	}
	if p := s.policyOf(l); p >= Local && p <= FailClosed {
		return p
	}
	return Local
}

// fallback decides by the policy.
func (s *Store) fallback(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if s.policyFor(op.Limit) == Local {
		var d spigot.Decision
		var err error
		lop := s.localOp(op)
		if s.mem != nil {
			d, err = s.localDo(ctx, op, lop)
		} else {
			d, err = s.local.Do(ctx, lop)
		}
		if err != nil {
			return spigot.Decision{}, err
		}
		if s.localBucket != nil {
			store.Substituted(ctx, op.Limit, lop.Limit)
		}
		s.decided(ctx, op, PathLocal, d)
		return d, nil
	}
	d, p := s.policyDecision(op)
	s.decided(ctx, op, p, d)
	return d, nil
}

// policyDecision is the FailOpen or FailClosed decision on op, made
// without the limit's state: Degraded, with Remaining -1.
func (s *Store) policyDecision(op spigot.Op) (spigot.Decision, Path) {
	policy := s.policyFor(op.Limit)
	path := PathFailOpen
	if policy == FailClosed {
		path = PathFailClosed
	}
	d := spigot.Decision{Remaining: -1} // allowed, and Degraded
	capacity := op.Limit.Capacity()
	switch {
	case op.Action == spigot.Refund: // nothing was taken: nothing to give back
	case op.N == 0: // asks for nothing: always allowed
	case op.Action != spigot.TakeUpTo && op.N > capacity, capacity == 0:
		// the model's answer, whatever the state
		d.RetryAfter = spigot.Never
	case policy == FailClosed:
		d.RetryAfter = s.breaker.untilProbe()
	case op.Action == spigot.Take:
		d.N = op.N
	case op.Action == spigot.TakeUpTo:
		d.N = min(op.N, capacity)
	}
	return d, path
}

func (s *Store) decided(ctx context.Context, op spigot.Op, p Path, d spigot.Decision) {
	if s.obs.Decision != nil && op.Action != spigot.Reset {
		s.obs.Decision(ctx, op, p, d)
	}
}
