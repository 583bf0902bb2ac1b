// Package lease is a spigot.Store that decides most requests on a shared
// limit in memory, from a lease, and still never lets the replicas that
// share the limit admit more than it.
//
//	s := lease.New(redis.New(rdb))
//	defer s.Close(context.Background())
//	limiter := spigot.New(s, perTenant)
//
// A lease is tokens of one key's limit that the Store has taken from the
// store behind it (the remote: Redis, Valkey, a cluster, the hybrid
// store) and not yet spent. A request the lease holds is decided from it,
// in memory, with no round trip; one it does not hold asks the remote for
// what it lacks and a new lease, in one call. Tokens are taken from the
// remote before any request spends them, so however many replicas share
// the limit, whatever their timing, and whether they fail or not, together
// they admit no more than it: a replica that dies holding a lease only
// loses its tokens until the limit refills.
//
// # When to lease
//
// Lease a hot key whose limit is far above one replica's share: an API
// key's requests or rows per hour on many replicas, a tenant's quota. A
// lease is never more than a sixteenth of the capacity, nor more than a
// quarter of what the remote last said it held: a limit of a capacity
// below 16 never leases (a login limit of 5 a minute is decided at the
// remote, as without the Store, but for the denials below), and a key
// near its limit is decided almost centrally. A key that sees less than a
// request an interval on a replica gains little: its requests are remote
// calls.
//
// Token buckets and fixed windows are leased. A leaky bucket, a sliding
// window and a sliding log go to the remote as they are: their decisions
// depend on when each token was taken (a leaky bucket's Delay, a sliding
// window's weight, a log's entries), which a lease would move.
//
// # Decisions
//
// Each decision is the model's (store.Apply) on the key as one store
// holding the remote's tokens and the lease's would have it (store.Share),
// so a Store that is its remote's only client decides exactly what the
// remote alone would: every field, of every action, single or in a batch.
// (It knows the remote's state by applying the model to what it sent; on
// a key whose state the remote had before the Store first saw it, it
// reads the remote's decisions, whose durations are rounded up to the
// millisecond, until the key is whole again.) With several replicas,
// Remaining counts the asking replica's lease only, and concurrent
// requests on one replica may report the same Remaining.
//
// A request the key cannot admit is denied in memory when the remote told
// of the key within WithInterval; otherwise it asks the remote, or waits
// for the call another request on the key has in flight. So a Refund or a
// Reset made on another replica is seen at most an interval late. A
// Refund and a Reset go to the remote; the lease keeps its tokens but for
// what the remote then has again (none after a Reset).
//
// A request of several ops (DoMulti AllOrNothing, a spigot.Group, an
// httplimit or grpclimit policy of several rules) is decided from the
// leases for the ops on the kinds they hold and at the remote for the
// rest, in one call of the remote's DoMulti that also asks for new leases
// (and a second, without them, in the rare case that other replicas took
// what a new lease counted on since this one last heard from the remote),
// and stays all or nothing: what the leases hold is set aside
// first, spent when the remote admits the rest, and held again when it
// denies it, so a denied request is charged nowhere. An independent
// batch is applied op by op.
//
// # Lease sizes
//
// A key's first request takes no lease: it is a remote call, as without
// the Store. After that, a key whose lease was gone (spent, or dropped as
// below) within WithInterval (plus twice the time the remote took to
// answer) of being taken gets one twice as large plus one the next time,
// and one that lasted longer half as large: a lease lasts about an
// interval. While a key asks the remote for a lease, its other requests
// that the lease does not hold wait for it (near the limit, for that
// lease only: one it does not serve then asks the remote for what it
// lacks alone). At any instant at most (replicas × the largest lease)
// tokens sit unspent in leases: the most by which the limit's clients can
// be under-admitted.
//
// Unspent tokens of a bucket go back to the remote (a Refund) once their
// key has had no request for WithIdle, or its lease was taken more than
// twice WithIdle ago, and all of them at Close. The Store looks for such
// leases every WithIdle/2, so a token sits unspent in a lease for at most
// about 2.5 × WithIdle. A fixed window's are never given back (a refund
// could land in the next window): they are lost when the window ends.
//
// # What it guarantees
//
// Together the replicas admit no more than each limit, whatever happens
// to them or to the remote:
//
//   - A token bucket: at most capacity + rate × t over any interval t.
//     Once the remote, refilling, lacks fewer tokens than a lease holds,
//     the lease keeps what it lacks, rounded up to a whole token; a
//     decision that needs the lease's share of that token and the
//     remote's fraction of one spends it, and the remote then holds up to
//     that fraction of a token more than the key, until the replica next
//     takes from it. The remote's rounding to the millisecond may let a
//     lease keep up to a millisecond of refill more.
//   - A fixed window: never more than the limit in any window of the
//     remote. A lease is tokens of the window the remote told, spent from
//     memory only before its last millisecond (the remote's rounding), and
//     after that only when the remote's next answer shows the same window.
//
// Two things loosen that, by at most the tokens the leases hold: a Reset
// makes the remote's limit full while other replicas may still hold leases
// on it, and a Refund on one replica (a client's, or a lease given back
// when idle or at Close) is not seen by the leases of another. A client
// can be denied while tokens sit in another replica's lease, by at most
// that lease, for at most 2.5 × WithIdle (a fixed window: until the
// window ends).
//
// conformance.Run passes but for its concurrent case (Remaining under
// concurrency, above).
package lease

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/keyed"
	"github.com/spigot-go/spigot/store"
)

var _ spigot.Store = (*Store)(nil)

// DefaultMaxKeys is the number of keys that hold a lease at once at most,
// unless WithMaxKeys says otherwise.
const DefaultMaxKeys = 100_000

const (
	// maxFraction is the largest lease as a fraction of the capacity: 1/16.
	maxFraction = 16
	// lowFraction caps a lease at a quarter of what the remote holds.
	lowFraction = 4
)

// Store decides from leases taken from its remote store. It is safe for
// concurrent use. The zero Store is not usable; call New.
type Store struct {
	remote   spigot.Store
	clock    clock.Clock
	interval time.Duration
	idle     time.Duration
	maxKeys  int
	obs      Observer
	keys     *keyed.Table // the leases held

	stop   chan struct{} // closed by Close
	done   chan struct{} // closed when the sweeper has ended
	closed sync.Once
}

// leases are the Store's entries in keys.
var leases = keyed.NewKind[lease]()

// A leaseKey names a key's limit by name, as stores do, so that a limit
// whose configuration changes keeps one lease.
type leaseKey struct {
	name, key string
}

// A lease is one key's tokens taken from the remote and not yet spent,
// with what the remote last said of the key.
type lease struct {
	keyed.Header
	// What a request the lease holds reads and writes, together.
	mu        sync.Mutex
	usedAt    int64         // the last request, in µs since the epoch on the Store's clock
	share     store.Share   // the remote's state as told, the tokens held, the key's own state
	key       leaseKey      // immutable
	remaining int64         // the remote's Remaining at its last answer
	size      int64         // the next lease, beyond a request's own cost
	takenAt   time.Time     // when the last lease was taken
	rtt       time.Duration // how long the remote took to answer the last fill
	filling   chan struct{} // closed when the remote call in flight for this key returns; nil if none
	dead      bool          // given back and forgotten: look the key up again
}

// An Option configures a Store.
type Option func(*Store)

// WithClock makes the Store read the time from c instead of the system
// clock, as tests with clocktest do. It decides only lease sizes and when
// leases go back; the limits run on the remote's clock. The sweeper still
// wakes on the real clock, every WithIdle/2: a test on a fake clock that
// must not see it sweep sets a WithIdle longer than it runs, and calls
// Sweep itself.
func WithClock(c clock.Clock) Option { return func(s *Store) { s.clock = c } }

// WithInterval sets how long a lease should last on a busy key (10ms by
// default; 0 or less keeps the default), beyond the remote's round trips:
// a lease gone (spent, or dropped as the refill overtook it) sooner
// doubles, one that lasts longer halves.
func WithInterval(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.interval = d
		}
	}
}

// WithIdle sets how long a key goes without a request before its unspent
// tokens go back to the remote (1s by default); 0 or less keeps the default.
// A Store sweeps for such keys every WithIdle/2 on a goroutine of its own,
// which Close stops.
func WithIdle(d time.Duration) Option { return func(s *Store) { s.idle = d } }

// WithMaxKeys caps the number of keys the Store holds at once at n
// (DefaultMaxKeys by default; 0 or less holds none), to bound its memory
// under a flood of distinct keys, such as random source addresses. A key
// is a limit's name and a key, as stores name state; the Store holds the
// keys that have a lease. When a new key's part of the Store is at the
// cap (the cap is split between parts, so this can begin a little below
// n), a request on it goes to the remote as it is.
func WithMaxKeys(n int) Option { return func(s *Store) { s.maxKeys = n } }

// Observer receives what a Store does with leases, for metrics. Each field
// is optional. The functions are called synchronously, on the goroutine of
// the call that caused them (the sweeper's, for leases given back when
// idle), with its context, so they must be fast and safe for concurrent
// use: increment a counter.
type Observer struct {
	// Hit is called for each op admitted from a lease, with no remote
	// call.
	Hit func(ctx context.Context, op spigot.Op)
	// Deny is called for each op denied on what the remote last told of
	// its key, with no remote call.
	Deny func(ctx context.Context, op spigot.Op)
	// Take is called after each remote call that took tokens for the
	// Store's decisions: asked tokens (op's cost, less what the lease
	// held, and the next lease, if the call asked for one) of which the
	// call took got, or failed with err.
	Take func(ctx context.Context, op spigot.Op, asked, got int64, err error)
	// Return is called for each lease given back to the remote: with a
	// Refund when its key is idle or it is old, at Close, or when its
	// limit changed; and without one (err nil) for the tokens a lease
	// drops when the remote has them again (a bucket's refill overtook
	// them, a Reset, a window that ended). tokens is how many; err is the
	// Refund's error, whose tokens are lost until the limit refills.
	Return func(ctx context.Context, limit spigot.Limit, tokens int64, err error)
}

// WithObserver sets the observer of lease hits, denials, takes and
// returns.
func WithObserver(o Observer) Option { return func(s *Store) { s.obs = o } }

// New returns a Store that takes its leases from remote, and starts the
// goroutine that gives idle leases back; Close stops it.
func New(remote spigot.Store, opts ...Option) *Store {
	if remote == nil {
		panic("spigot: lease: New: remote is nil")
	}
	s := &Store{
		remote:   remote,
		clock:    clock.System(),
		interval: 10 * time.Millisecond,
		idle:     time.Second,
		maxKeys:  DefaultMaxKeys,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if s.idle <= 0 {
		s.idle = time.Second
	}
	s.keys = keyed.New(keyed.Config{MaxKeys: s.maxKeys, KeysPerShard: 1024})
	go s.sweeper()
	return s
}

func (s *Store) sweeper() {
	defer close(s.done)
	t := time.NewTicker(s.idle / 2)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.idle)
			s.Sweep(ctx) // a refund that fails loses its tokens until the limit refills: nothing to retry
			cancel()
		}
	}
}

// find returns k's lease, made if need be, locked; or nil when the Store
// is closed or holds WithMaxKeys leases already.
func (s *Store) find(k leaseKey) *lease {
	h := s.keys.Hash(k.name, k.key)
	sh := s.keys.Shard(h)
	for {
		x := sh.First(h) // inlined: k's lease, but for a rare collision
		if x != nil && !x.Is(k.name, k.key) {
			x = sh.Find(h, k.name, k.key)
		}
		if x == nil {
			sh.Lock()
			if x = sh.Find(h, k.name, k.key); x == nil {
				if s.isClosed() || s.maxKeys <= 0 {
					sh.Unlock()
					return nil
				}
				l := leases.New(k.name, k.key)
				name, key := l.Key() // a copy, not the larger string the key may be cut from
				l.key = leaseKey{name, key}
				if !sh.Insert(h, &l.Header, 0) {
					sh.Unlock()
					return nil
				}
				x = &l.Header
			}
			sh.Unlock()
		}
		l := leases.Of(x)
		l.mu.Lock()
		if !l.dead {
			return l
		}
		l.mu.Unlock()
	}
}

// forget removes k's lease l, which is dead, if it is still there.
func (s *Store) forget(k leaseKey, l *lease) {
	s.keys.Delete(k.name, k.key, func(x *keyed.Header) bool { return x == &l.Header })
}

// lookup returns k's lease, or nil; it may be dead.
func (s *Store) lookup(k leaseKey) *lease {
	h := s.keys.Hash(k.name, k.key)
	if x := s.keys.Shard(h).Find(h, k.name, k.key); x != nil {
		return leases.Of(x)
	}
	return nil
}

func (s *Store) isClosed() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// Do implements spigot.Store.
func (s *Store) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if err := op.Check(); err != nil {
		return spigot.Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return spigot.Decision{}, err
	}
	if !store.Shareable(op.Limit) {
		return s.remote.Do(ctx, op)
	}
	k := leaseKey{op.Limit.Name(), op.Key}
	switch {
	case op.Action == spigot.Refund, op.Action == spigot.Reset:
		return s.change(ctx, k, op)
	case op.Action == spigot.Peek, op.N == 0, op.N > op.Limit.Capacity() && op.Action == spigot.Take:
		// A Take of 0 is a Peek that moves the state on; one of more than
		// the capacity is denied for ever.
		return s.peek(ctx, k, op)
	}
	waited := false // for a lease another request asked for
	for {
		now := s.clock.Now() // before the lock: the lock is the busy key's bottleneck
		l := s.find(k)
		if l == nil {
			return s.remote.Do(ctx, op)
		}
		l.usedAt = now.UnixMicro()
		if l.share.Known() && l.share.Limit() != op.Limit {
			if err := s.restart(ctx, l, op.Limit, now); err != nil {
				return spigot.Decision{}, err
			}
			continue
		}
		d, ok := l.share.Decide(op, now)
		if ok || !d.Allowed() && d.RetryAfter > 0 && now.Sub(l.share.ToldAt()) <= s.interval {
			// Held, or denied on what the remote told within an interval:
			// a denial the remote would make, but for what other replicas
			// gave back since (the key holds no more than the remote
			// told, refilled).
			dropped := l.share.Dropped()
			l.mu.Unlock()
			if dropped > 0 {
				s.returned(ctx, op.Limit, dropped, nil)
			}
			switch {
			case !ok:
				if s.obs.Deny != nil {
					s.obs.Deny(ctx, op)
				}
			case s.obs.Hit != nil:
				s.obs.Hit(ctx, op)
			}
			return d, nil
		}
		w := l.filling
		if w == nil {
			return s.fill(ctx, l, op, now, true)
		}
		if denied := l.share.Known() && !d.Allowed(); !denied && (l.size == 0 || waited && l.size >= l.remaining/lowFraction) {
			// Another request on the key is asking the remote, for no
			// more than its own cost (a key new or near its limit), or
			// for a lease that what the remote holds keeps small, after
			// the one this request waited for (the key's other requests
			// took it first, and would take the next first too): this
			// one asks the remote for what it lacks, and no lease.
			return s.fill(ctx, l, op, now, false)
		}
		// Another request on the key is asking the remote for a lease,
		// which may hold this one too, or for what this one would be
		// denied: its answer tells again.
		l.mu.Unlock()
		select {
		case <-w:
			waited = true
		case <-ctx.Done():
			return spigot.Decision{}, ctx.Err()
		}
	}
}

// restart gives back what l (locked, which restart unlocks) holds under
// a limit whose configuration has changed to lim, and starts it again.
func (s *Store) restart(ctx context.Context, l *lease, lim spigot.Limit, now time.Time) error {
	old := l.share.Limit()
	back := l.share.GiveBack(now)
	l.share, l.size, l.takenAt, l.remaining = store.Share{}, 0, time.Time{}, 0
	l.mu.Unlock()
	if back > 0 {
		_, err := s.remote.Do(ctx, spigot.Op{Limit: old, Key: l.key.key, Action: spigot.Refund, N: back})
		s.returned(ctx, old, back, err)
		if err != nil {
			return err
		}
	}
	return nil
}

// grow returns l's next lease size, for a fill asked at now: twice as
// large plus one when the last lease went within an interval, half as
// large when it lasted longer, and never more than a sixteenth of the
// capacity nor a quarter of what the remote held at its last answer.
func (s *Store) grow(l *lease, lim spigot.Limit, now time.Time) int64 {
	switch {
	case l.takenAt.IsZero():
	case now.Sub(l.takenAt) <= s.interval+2*l.rtt:
		l.size = 2*l.size + 1
	default:
		l.size /= 2
	}
	limit := lim.Capacity() / maxFraction
	if l.share.Known() {
		limit = min(limit, l.remaining/lowFraction)
	}
	l.size = max(min(l.size, limit), 0)
	return l.size
}

// fill decides op, a Take or a TakeUpTo that l (locked, which fill
// unlocks) does not hold whole, at the remote: it sets aside what l holds
// and asks the remote for the rest, with a new lease if lease (then other
// requests on the key wait for it), in one call: a TakeUpTo of the rest
// and the lease, or op's own action for the rest alone.
func (s *Store) fill(ctx context.Context, l *lease, op spigot.Op, now time.Time, lease bool) (spigot.Decision, error) {
	unit := l.share.Unit()
	n := min(op.N, op.Limit.Capacity()) // a TakeUpTo takes the capacity at most
	var reserved, rest int64            // units set aside; whole tokens asked for the request
	if unit == 0 {
		rest = n // a key new to the Store: the op as it is
	} else {
		reserved = l.share.Reserve(now, n*unit)
		rest = n - reserved/unit
	}
	var size int64
	var w chan struct{}
	if lease {
		size = s.grow(l, op.Limit, now)
		w = make(chan struct{})
		l.filling = w
	}
	l.mu.Unlock()

	ask := spigot.Op{Limit: op.Limit, Key: op.Key, Action: op.Action, N: rest}
	if rest == n {
		ask.N = op.N // nothing held: the op as it is
	}
	if size > 0 {
		ask.Action, ask.N = spigot.TakeUpTo, rest+size
	}
	d, err := s.remote.Do(ctx, ask) // of 0 when what is held covers op but the key, as last told, denies it: the remote tells again
	if s.obs.Take != nil {
		s.obs.Take(ctx, op, ask.N, d.N, err)
	}

	l.mu.Lock()
	if lease {
		l.rtt = s.clock.Now().Sub(now)
	}
	l.share.Release(now, reserved)
	if err == nil {
		d = s.settle(l, op, ask, now, d)
		if lease {
			l.takenAt = now
		}
	}
	// A Store closed meanwhile gives back what this call brought.
	var back int64
	closed := s.isClosed()
	if closed {
		back, l.dead = l.share.GiveBack(now), true
	}
	if w != nil {
		l.filling = nil
		close(w)
	}
	dropped := l.share.Dropped()
	l.mu.Unlock()
	if dropped > 0 {
		s.returned(ctx, op.Limit, dropped, nil)
	}
	if closed {
		s.forget(l.key, l)
	}
	if back > 0 {
		_, err := s.remote.Do(ctx, spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.Refund, N: back}) // as Close's refunds: lost on failure
		s.returned(ctx, op.Limit, back, err)
	}
	// On an error, nothing was taken, or it was and is lost until the
	// limit refills: a failed request is charged at most, never admitted.
	return d, err
}

// settle returns the decision of op on l (locked), once the remote
// answered d to ask, asked at now: what the remote took is held, and op
// is decided on the key with it back in it.
func (s *Store) settle(l *lease, op, ask spigot.Op, now time.Time, d spigot.Decision) spigot.Decision {
	if !l.share.Told([]spigot.Op{ask}, []spigot.Decision{d}, now, true) {
		// The remote decided by a policy (it could not reach the key's
		// state): its decision stands, and nothing is held.
		return d
	}
	l.remaining = d.Remaining
	got, ok := l.share.Decide(op, now)
	if !ok && got.Allowed() && op.Action == spigot.TakeUpTo {
		// What is held, if not all the key would give (below).
		if n := l.share.Held(now) / l.share.Unit(); n > 0 {
			got, ok = l.share.Decide(spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.TakeUpTo, N: n}, now)
		}
	}
	if !ok && got.Allowed() {
		// The key holds the cost, but only with the fraction of a token
		// that the lease holds and the one that the remote holds, which
		// neither can take alone: denied until the remote's next token.
		got = l.share.ApplyCentral(spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.Peek, N: op.Limit.Capacity()}, now)
		got.N, got.RetryAfter = 0, max(got.RefillAfter, time.Millisecond)
	}
	return got
}

// peek sends op (a Peek, a Take of 0, or a Take of more than the
// capacity, none of which takes anything) to the remote, and decides it on
// the key with what k's lease holds back in it.
func (s *Store) peek(ctx context.Context, k leaseKey, op spigot.Op) (spigot.Decision, error) {
	now := s.clock.Now()
	d, err := s.remote.Do(ctx, op)
	if err != nil {
		return d, err
	}
	l := s.lookup(k)
	if l == nil {
		return d, nil
	}
	l.mu.Lock()
	if l.dead || !l.share.Known() || l.share.Limit() != op.Limit || !l.share.Told([]spigot.Op{op}, []spigot.Decision{d}, now, true) {
		l.mu.Unlock()
		return d, nil
	}
	l.remaining = d.Remaining
	if op.Action == spigot.Peek {
		d = l.share.Central(op, now)
	} else {
		d = l.share.ApplyCentral(op, now) // a Take moves the key's state on, even denied
	}
	dropped := l.share.Dropped()
	l.mu.Unlock()
	if dropped > 0 {
		s.returned(ctx, op.Limit, dropped, nil)
	}
	return d, nil
}

// change sends op, a Refund or a Reset, to the remote, and decides it on
// the key with what k's lease holds back in it. The lease keeps its
// tokens, but for what the remote then has again: none after a Reset.
func (s *Store) change(ctx context.Context, k leaseKey, op spigot.Op) (spigot.Decision, error) {
	l := s.lookup(k)
	if l == nil {
		return s.remote.Do(ctx, op)
	}
	now := s.clock.Now()
	d, err := s.remote.Do(ctx, op)
	if err != nil {
		return d, err
	}
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return d, nil
	}
	central, ok := l.share.Moved(op, d, now)
	if ok {
		l.remaining = d.Remaining
		d = central
	}
	dropped := l.share.Dropped()
	l.mu.Unlock()
	if dropped > 0 {
		s.returned(ctx, op.Limit, dropped, nil)
	}
	return d, nil
}

// DoMulti implements spigot.Store. An all-or-nothing batch is decided
// from the leases for the Takes they hold and at the remote for the rest,
// in one call of the remote's DoMulti that also asks for new leases: what
// the leases hold is set aside first, spent when the remote admits the
// rest, and held again when it denies it. An independent batch is applied
// op by op, with Do.
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if err := store.CheckMulti(mode, ops, out); err != nil {
		return err
	}
	if mode == spigot.Independent {
		var errs []error
		for i, op := range ops {
			d, err := s.Do(ctx, op)
			if err != nil {
				d = spigot.Undecided()
				errs = append(errs, err)
			}
			out[i] = d
		}
		return errors.Join(errs...)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	b := s.batch(ops)
	if len(b.keys) == 0 {
		return s.remote.DoMulti(ctx, mode, ops, out)
	}
	if s.fromLeases(ctx, b, ops, out) {
		return nil
	}
	return s.atRemote(ctx, b, ops, out)
}

// A batch is an all-or-nothing DoMulti's ops by key: those of the keys a
// lease may hold, and the ops that go to the remote as they are.
type batch struct {
	keys []*batchKey
	of   []int // ops[i]'s key is keys[of[i]], or -1: the op goes as it is
}

// A batchKey is one key of a batch that a lease may hold.
type batchKey struct {
	key      leaseKey
	limit    spigot.Limit
	l        *lease
	ops      []int // the key's ops, in order
	need     int64 // the tokens the key's ops take, as the key decides them
	denied   bool  // the key denies one of them
	reserved int64 // units set aside from the lease
	rest     int64 // whole tokens asked of the remote
	size     int64 // the lease asked for, beyond them
	take     int   // the index, in the remote's ops, of the Take of rest; -1 if none
	refill   int   // of the TakeUpTo of size; -1 if none
	fill     chan struct{}
}

// batch sorts ops by key. The ops on a token bucket or a fixed window may
// come from a lease, but on a key with a Refund or a Reset in the batch,
// or named by two configurations of its limit: those go as they are.
func (s *Store) batch(ops []spigot.Op) batch {
	b := batch{of: make([]int, len(ops))}
	plain := make([]bool, 0, 4)
	for i, op := range ops {
		b.of[i] = -1
		if !store.Shareable(op.Limit) {
			continue
		}
		k := leaseKey{op.Limit.Name(), op.Key}
		j := slices.IndexFunc(b.keys, func(bk *batchKey) bool { return bk.key == k })
		if j < 0 {
			j = len(b.keys)
			b.keys = append(b.keys, &batchKey{key: k, limit: op.Limit, take: -1, refill: -1})
			plain = append(plain, false)
		}
		bk := b.keys[j]
		bk.ops = append(bk.ops, i)
		if bk.limit != op.Limit || op.Action == spigot.Refund || op.Action == spigot.Reset {
			plain[j] = true
		}
		b.of[i] = j
	}
	b.keep(func(j int, _ *batchKey) bool { return !plain[j] })
	return b
}

// keep keeps the keys of b for which f is true; the ops of the others go
// as they are.
func (b *batch) keep(f func(j int, bk *batchKey) bool) {
	index, keep := make([]int, len(b.keys)), b.keys[:0]
	for j, bk := range b.keys {
		index[j] = -1
		if f(j, bk) {
			index[j] = len(keep)
			keep = append(keep, bk)
		}
	}
	for i, j := range b.of {
		if j >= 0 {
			b.of[i] = index[j]
		}
	}
	b.keys = keep
}

// local decides op from share, a copy of a lease's, and reports whether
// the lease holds what it takes: a Peek or a Take of 0 always.
func local(share *store.Share, op spigot.Op, now time.Time) (spigot.Decision, bool) {
	switch {
	case !share.Known() || share.Limit() != op.Limit:
		return spigot.Decision{}, false
	case op.Action == spigot.Peek:
		return share.Central(op, now), true
	case op.N == 0 && op.Action == spigot.Take:
		return share.ApplyCentral(op, now), true // it moves the key's state on
	}
	return share.Decide(op, now)
}

// fromLeases decides a batch whose every op is on a key that a lease
// holds enough of, all or nothing, and reports whether it did. It looks
// every lease up before it locks any, and only tries their locks, going to
// the remote if one is busy: it never waits while holding a lock.
func (s *Store) fromLeases(ctx context.Context, b batch, ops []spigot.Op, out []spigot.Decision) bool {
	for _, j := range b.of {
		if j < 0 {
			return false
		}
	}
	for _, bk := range b.keys {
		if bk.l = s.lookup(bk.key); bk.l == nil {
			return false
		}
	}
	var locked []*lease
	defer func() {
		for _, l := range locked {
			l.mu.Unlock()
		}
	}()
	now := s.clock.Now()
	shares := make([]store.Share, len(b.keys))
	for j, bk := range b.keys {
		l := bk.l
		if !l.mu.TryLock() {
			return false
		}
		locked = append(locked, l)
		if l.dead || l.filling != nil || !l.share.Known() || l.share.Limit() != bk.limit {
			return false
		}
		shares[j] = l.share
	}
	for i, op := range ops {
		if _, ok := local(&shares[b.of[i]], op, now); !ok {
			return false
		}
	}
	for i, op := range ops { // again, on the leases themselves: the same decisions
		out[i], _ = local(&b.keys[b.of[i]].l.share, op, now)
	}
	for _, bk := range b.keys {
		bk.l.usedAt = now.UnixMicro()
	}
	if s.obs.Hit != nil {
		for _, op := range ops {
			s.obs.Hit(ctx, op)
		}
	}
	return true
}

// atRemote decides a batch at the remote, in one all-or-nothing call of
// its DoMulti: the ops that go as they are, and for each key a lease may
// hold, a Take of what the lease lacks of what the key's ops take, after
// setting aside what it holds (or a Take the remote denies, when the key
// denies them), and a TakeUpTo of a new lease when it lacked some.
func (s *Store) atRemote(ctx context.Context, b batch, ops []spigot.Op, out []spigot.Decision) error {
	now := s.clock.Now()
	plain := make([]bool, len(b.keys))
	for j, bk := range b.keys {
		plain[j] = !s.reserve(bk, ops, now)
	}
	b.keep(func(j int, _ *batchKey) bool { return !plain[j] })
	var rops []spigot.Op
	var at []int // ops[i] as it is is rops[at[i]], or -1
	build := func(refills bool) {
		rops, at = rops[:0], at[:0]
		for i, op := range ops {
			at = append(at, -1)
			if b.of[i] < 0 {
				at[i] = len(rops)
				rops = append(rops, op)
			}
		}
		for _, bk := range b.keys {
			bk.take, bk.refill = -1, -1
			if bk.rest > 0 {
				bk.take = len(rops)
				rops = append(rops, spigot.Op{Limit: bk.limit, Key: bk.key.key, N: bk.rest})
			}
			if refills && bk.size > 0 {
				bk.refill = len(rops)
				rops = append(rops, spigot.Op{Limit: bk.limit, Key: bk.key.key, Action: spigot.TakeUpTo, N: bk.size})
			}
		}
	}
	build(true)
	rout := make([]spigot.Decision, len(rops))
	var err error
	if len(rops) > 0 {
		err = s.remote.DoMulti(ctx, spigot.AllOrNothing, rops, rout)
		if err == nil && !allowed(rops, rout) && refillsAlone(b, rops, rout) {
			// Only a new lease was denied (other replicas took what this
			// one saw the remote hold): the batch without them.
			build(false)
			rout = rout[:len(rops)]
			err = s.remote.DoMulti(ctx, spigot.AllOrNothing, rops, rout)
		}
	}
	admitted := err == nil && allowed(rops, rout) && !slices.ContainsFunc(b.keys, func(bk *batchKey) bool { return bk.denied && bk.take < 0 })
	for _, bk := range b.keys {
		if s.obs.Take == nil || bk.take < 0 && bk.refill < 0 {
			continue
		}
		var got int64
		if admitted {
			if bk.take >= 0 {
				got += rout[bk.take].N
			}
			if bk.refill >= 0 {
				got += rout[bk.refill].N
			}
		}
		asked := bk.rest
		if bk.refill >= 0 {
			asked += bk.size
		}
		s.obs.Take(ctx, ops[bk.ops[0]], asked, got, err)
	}
	if err != nil {
		for _, bk := range b.keys {
			s.unreserve(bk, now)
		}
		var parts interface{ OpParts() []uint64 }
		if errors.As(err, &parts) && len(parts.OpParts()) == len(rops) {
			return &store.PartsError{Parts: opParts(b, at, parts.OpParts())}
		}
		return err
	}
	for _, bk := range b.keys {
		if dropped := s.settleKey(bk, ops, rops, out, rout, now, admitted); dropped > 0 {
			s.returned(ctx, bk.limit, dropped, nil)
		}
	}
	for i := range ops {
		if at[i] >= 0 {
			out[i] = rout[at[i]]
		}
		if !admitted {
			out[i].N = 0
		}
	}
	if admitted && s.obs.Hit != nil {
		for _, bk := range b.keys {
			if bk.take < 0 {
				for _, i := range bk.ops {
					s.obs.Hit(ctx, ops[i])
				}
			}
		}
	}
	return nil
}

// reserve works out, for bk, what its key's ops take as the key decides
// them, sets aside what its lease holds of that, and what to ask the
// remote for; it reports false when the key's ops must go as they are (a
// key new to the Store, with ops other than Takes).
func (s *Store) reserve(bk *batchKey, ops []spigot.Op, now time.Time) bool {
	for {
		l := s.find(bk.key)
		if l == nil {
			return false
		}
		bk.l = l
		if l.share.Known() && l.share.Limit() != bk.limit {
			s.restart(context.Background(), l, bk.limit, now) // a refund that fails loses its tokens until the limit refills
			continue
		}
		l.usedAt = now.UnixMicro()
		defer l.mu.Unlock()
		if !l.share.Known() {
			// A key new to the Store: its Takes as they are.
			for _, i := range bk.ops {
				op := ops[i]
				if op.Action != spigot.Take || op.N == 0 || op.N > bk.limit.Capacity() {
					return false
				}
				bk.need += op.N
			}
			bk.rest = bk.need
			return true
		}
		// What the key's ops take, in order, on a copy of the lease.
		cp := l.share
		var deny int64 // what the key cannot give, for a Take the remote denies
		for _, i := range bk.ops {
			op := ops[i]
			if op.Action == spigot.Peek || op.N == 0 {
				continue
			}
			d := cp.ApplyCentral(op, now)
			if !d.Allowed() && !bk.denied {
				bk.denied, deny = true, bk.need+min(op.N, bk.limit.Capacity()+1)
			}
			bk.need += d.N
		}
		unit := l.share.Unit()
		if bk.denied {
			bk.rest = l.share.Rest(deny, 0, now)
			return true
		}
		bk.reserved = l.share.Reserve(now, bk.need*unit)
		bk.rest = l.share.Rest(bk.need, bk.reserved, now)
		if bk.rest > 0 && l.filling == nil {
			// A new lease, when the remote, as last told, would still
			// hold more than it after the rest.
			if size := s.grow(l, bk.limit, now); size > 0 && l.remaining-bk.rest > size {
				bk.size = size
				bk.fill = make(chan struct{})
				l.filling = bk.fill
			}
		}
		return true
	}
}

// settleKey decides bk's ops, into out, once the remote answered rout to
// the batch, asked at now: admitted or denied whole.
func (s *Store) settleKey(bk *batchKey, ops, rops []spigot.Op, out, rout []spigot.Decision, now time.Time, admitted bool) (dropped int64) {
	l := bk.l
	l.mu.Lock()
	defer func() {
		dropped = l.share.Dropped()
		l.mu.Unlock()
	}()
	l.share.Release(now, bk.reserved)
	if bk.fill != nil {
		l.filling = nil
		close(bk.fill)
	}
	if (bk.take >= 0 || bk.refill >= 0) && !s.tell(bk, rops, rout, now, admitted) {
		// The remote decided by a policy: its decision stands.
		for _, i := range bk.ops {
			out[i] = rout[bk.take]
		}
		return 0
	}
	if !admitted {
		// Each op denied on what the ops before it left says so; every
		// other is a Peek on the key as the batch found it.
		cp := l.share
		denies := false
		for _, i := range bk.ops {
			op := ops[i]
			if d := cp.ApplyCentral(op, now); store.Denies(op, d) {
				out[i], denies = d, true
			} else {
				out[i] = l.share.Central(store.PeekOf(op), now)
			}
			out[i].N = 0
		}
		if r := bk.take; r >= 0 && !rout[r].Allowed() && !denies {
			// The key holds what its ops take, but only with the fraction
			// of a token that the lease holds and the one that the remote
			// holds, which neither can take alone (as in settle): its first
			// op that takes is denied until the remote holds the rest.
			for _, i := range bk.ops {
				if op := ops[i]; op.Action != spigot.Peek && op.N > 0 {
					out[i].RetryAfter = max(rout[r].RetryAfter, time.Millisecond) // on its Peek, above
					break
				}
			}
		}
		return 0
	}
	for _, i := range bk.ops {
		if op := ops[i]; op.Action == spigot.Peek {
			out[i] = l.share.Central(op, now)
		} else {
			out[i] = l.share.Spend(op, now)
		}
	}
	l.usedAt = now.UnixMicro()
	if bk.take >= 0 || bk.refill >= 0 {
		l.takenAt = now
	}
	return 0
}

// unreserve puts back what reserve set aside for bk, after a call that
// failed.
func (s *Store) unreserve(bk *batchKey, now time.Time) {
	l := bk.l
	l.mu.Lock()
	l.share.Release(now, bk.reserved)
	if bk.fill != nil {
		l.filling = nil
		close(bk.fill)
	}
	l.mu.Unlock()
}

// tell tells bk's lease (locked) what the remote answered for its key, in
// rout, and reports false if the remote decided by a policy.
func (s *Store) tell(bk *batchKey, rops []spigot.Op, rout []spigot.Decision, now time.Time, admitted bool) bool {
	var ops []spigot.Op
	var out []spigot.Decision
	for _, i := range []int{bk.take, bk.refill} {
		if i >= 0 {
			ops, out = append(ops, rops[i]), append(out, rout[i])
		}
	}
	l := bk.l
	if !l.share.Told(ops, out, now, admitted) {
		return false
	}
	l.remaining = l.share.Central(spigot.Op{Limit: bk.limit, Action: spigot.Peek}, now).Remaining - l.share.Held(now)/l.share.Unit()
	return true
}

// allowed reports whether a batch of ops decided out was admitted: no
// Take or TakeUpTo in it was denied.
func allowed(ops []spigot.Op, out []spigot.Decision) bool {
	for i, d := range out {
		if !d.Allowed() && ops[i].Action != spigot.Peek {
			return false
		}
	}
	return true
}

// refillsAlone reports whether, in a denied batch, only the TakeUpTos of
// new leases were denied.
func refillsAlone(b batch, ops []spigot.Op, rout []spigot.Decision) bool {
	refill := make([]bool, len(rout))
	any := false
	for _, bk := range b.keys {
		if bk.refill >= 0 {
			refill[bk.refill], any = true, true
		}
	}
	if !any {
		return false
	}
	for i, d := range rout {
		if !d.Allowed() && !refill[i] && ops[i].Action != spigot.Peek {
			return false
		}
	}
	return true
}

// opParts returns the part of each of a batch's ops, given the parts of
// the remote's ops: a Take's is that of its key's remote op, and a key
// with none (the lease held it all) is a part of its own, after every
// other.
func opParts(b batch, at []int, rparts []uint64) []uint64 {
	parts := make([]uint64, len(at))
	for i := range at {
		switch j := b.of[i]; {
		case at[i] >= 0:
			parts[i] = rparts[at[i]]
		case b.keys[j].take >= 0:
			parts[i] = rparts[b.keys[j].take]
		case b.keys[j].refill >= 0:
			parts[i] = rparts[b.keys[j].refill]
		default:
			parts[i] = 1<<63 | uint64(j)
		}
	}
	return parts
}

// returned tells the observer that tokens of a lease on limit went back.
func (s *Store) returned(ctx context.Context, limit spigot.Limit, tokens int64, err error) {
	if s.obs.Return != nil {
		s.obs.Return(ctx, limit, tokens, err)
	}
}

// Sweep gives back to the remote the unspent tokens of every key that has
// had no request for WithIdle, and forgets those keys, and those of every
// lease taken more than twice WithIdle ago. The Store's own
// goroutine calls it every WithIdle/2; it is for tests on a fake clock, and
// for callers that want it sooner.
func (s *Store) Sweep(ctx context.Context) error {
	now := s.clock.Now()
	return s.giveBack(ctx, now.Add(-s.idle), now.Add(-2*s.idle))
}

// giveBack forgets the keys whose last request came at idle or before,
// and refunds their unspent tokens and those of the leases taken at old or
// before.
func (s *Store) giveBack(ctx context.Context, idle, old time.Time) error {
	type refund struct {
		limit  spigot.Limit
		key    string
		tokens int64
	}
	var refunds, dropped []refund
	now := s.clock.Now()
	s.keys.RemoveIf(func(x *keyed.Header) bool {
		l := leases.Of(x)
		l.mu.Lock()
		defer l.mu.Unlock()
		window := l.share.Known() && l.share.Limit().Kind() == spigot.FixedWindow
		defer func() {
			if n := l.share.Dropped(); n > 0 {
				dropped = append(dropped, refund{l.share.Limit(), l.key.key, n})
			}
		}()
		switch {
		case l.filling != nil:
		case l.usedAt <= idle.UnixMicro():
			if window {
				// Not given back, as a refund could reach the next
				// window: the remote has them again when this one ends.
				if n := l.share.Held(now) / l.share.Unit(); n > 0 {
					dropped = append(dropped, refund{l.share.Limit(), l.key.key, n})
				}
			}
			if n := l.share.GiveBack(now); n > 0 {
				refunds = append(refunds, refund{l.share.Limit(), l.key.key, n})
			}
			l.dead = true
			return true
		case !window && !l.takenAt.After(old) && l.share.Held(now) > 0:
			if n := l.share.GiveBack(now); n > 0 {
				refunds = append(refunds, refund{l.share.Limit(), l.key.key, n})
			}
		}
		return false
	})
	for _, r := range dropped {
		s.returned(ctx, r.limit, r.tokens, nil)
	}
	var errs []error
	for _, r := range refunds {
		_, err := s.remote.Do(ctx, spigot.Op{Limit: r.limit, Key: r.key, Action: spigot.Refund, N: r.tokens})
		s.returned(ctx, r.limit, r.tokens, err)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close stops the Store's goroutine and gives every unspent token back to
// the remote; requests after it go to the remote as they are. It returns
// the errors of refunds that failed, whose tokens are lost until their
// limits refill. Close does not close the remote.
func (s *Store) Close(ctx context.Context) error {
	s.closed.Do(func() { close(s.stop) })
	<-s.done
	end := time.UnixMicro(math.MaxInt64)
	return s.giveBack(ctx, end, end)
}
