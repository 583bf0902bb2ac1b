// Package lease is a spigot.Store that decides most requests on a shared
// limit in memory, from a lease, and still never lets the replicas that
// share the limit admit more than it.
//
//	s := lease.New(redis.New(rdb))
//	defer s.Close(context.Background())
//	limiter := spigot.New(s, perTenant)
//
// A lease is a number of tokens of one key's limit that the Store has taken
// from the store behind it (the remote: Redis, Valkey, a cluster, the
// hybrid store), in one TakeUpTo, and not yet spent. A Take that the lease
// holds is decided from it, in memory, with no round trip; one it does not
// hold asks the remote for its cost and a new lease, in one call. Tokens
// are taken from the shared limit before any request spends them, so
// however many replicas share it, whatever their timing, and whether they
// fail or not, together they admit no more than the limit: a replica that
// dies holding a lease only loses its tokens until the limit refills.
//
// # Lease sizes
//
// A key's first request takes no lease: it is a remote call, as without
// the Store. After that, a key whose lease was gone (spent, or dropped as
// below) within WithInterval (plus twice the time the remote took to
// answer) of being taken gets one twice as large plus one the next time,
// and one that lasted longer half as large: a lease lasts about an
// interval. While a key with no lease asks the remote, the key's other
// requests go to the remote as they are, and while it asks for a lease,
// they wait for it (near the limit, for that lease only: one it does not
// serve goes to the remote as it is while another request asks for the
// next). A lease is never more than a sixteenth of the limit's capacity,
// nor more than a quarter of what the remote last said it held, so that a
// key near its limit is decided almost centrally. At any instant at most (replicas × the
// largest lease) tokens sit unspent in leases: the most by which the
// limit's clients can be under-admitted.
//
// Unspent tokens go back to the remote (a Refund) once their key has had no
// request for WithIdle, or its lease was taken more than twice WithIdle
// ago, and all of them at Close. The Store looks for such leases every
// WithIdle/2, so a token sits unspent in a lease for at most about 2.5 ×
// WithIdle.
//
// # Decisions
//
// Denials come from the remote, with its RetryAfter. A decision made from a
// lease has the N asked; its Remaining is what the lease still holds plus
// what the remote held at its last answer for the key, refilled since at
// the limit's rate (other replicas may have taken some meanwhile), and its
// ResetAfter and RefillAfter are worked out from that answer, as if the
// lease's tokens were back in the limit. The remote rounds them to the
// millisecond, so they may be that much off: Remaining by up to a
// millisecond of refill above what a central bucket would say. Peek, Refund
// and Reset go to the remote and count the lease too: Refund gives the
// lease back with the tokens refunded, and Reset drops it without giving it
// back (the limit is full again). A Take of 0 or of more than the capacity,
// and every op on a kind of limit other than a token bucket (whose Delay or
// window a lease cannot tell), goes to the remote as it is.
//
// A lease never adds to what a central bucket would admit. Once the
// remote, refilling, lacks fewer tokens of its capacity than a lease
// holds, the two would hold more than the capacity between them, where a
// central bucket would stop at it: the lease keeps only what the remote
// lacks, and the rest, which the remote has again, is dropped. On a key
// under its limit, where the remote stays nearly full, a lease thus lasts
// about its size over the limit's rate, and sizes grow to about the rate
// times WithInterval. A key's leases are keyed by the limit's name; one
// taken under a configuration that has changed goes back.
//
// DoMulti applies an all-or-nothing batch from the leases when they hold
// all of it, and otherwise sends it to the remote as it is, leases
// untouched; an independent batch is applied op by op.
//
// # What it guarantees
//
// On one replica, every decision allows and takes what the remote alone
// would, but that a lease drops the fraction of a token it cannot keep, so
// that the limit may hold less than a token fewer than a central bucket,
// for less than a token's time (TestAgainstModel checks both on random
// operations). Together the replicas admit no more than the limit,
// whatever happens to them or to the remote: tokens are taken from it
// before they are spent, and dropped before its refill could overtake
// them. Two things loosen that, by at most the tokens the leases hold: a
// Reset makes the remote's limit full while other replicas may still hold
// leases on it, and a Refund on one replica (a client's, or a lease given
// back when idle or at Close) is not seen by the leases of another, which
// may then outlast the refill by what was refunded. Remaining counts only
// the asking replica's leases; concurrent admissions on one replica may
// report the same Remaining. A client can be denied while tokens sit in
// another replica's lease, by at most that lease, for at most 2.5 ×
// WithIdle.
//
// conformance.Run passes but for its cases concurrent (Remaining under
// concurrency), never-more-than and random-operations (fields off by the
// remote's rounding, as above).
package lease

import (
	"context"
	"errors"
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
// and what the remote last said of the key.
type lease struct {
	keyed.Header
	key     leaseKey // immutable
	mu      sync.Mutex
	limit   spigot.Limit  // the limit the tokens were taken under
	tokens  int64         // unspent
	size    int64         // the next lease, beyond a request's own cost
	takenAt time.Time     // when the last lease was taken
	rtt     time.Duration // how long the remote took to answer the last fill
	usedAt  time.Time     // the last request
	filling chan struct{} // closed when the remote call in flight for this key returns; nil if none
	dead    bool          // given back and forgotten: look the key up again

	remote store.Answer // the remote's last answer, and when it was asked
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
// default), beyond the remote's round trips: a lease gone (spent, or
// dropped as the refill overtook it) sooner doubles, one that lasts
// longer halves.
func WithInterval(d time.Duration) Option { return func(s *Store) { s.interval = d } }

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
	// Hit is called for each op decided from a lease, with no remote call.
	Hit func(ctx context.Context, op spigot.Op)
	// Take is called after each remote call that asked for a lease: a
	// TakeUpTo of asked tokens (op's cost, less what the lease held, and
	// the next lease) that took got, or failed with err.
	Take func(ctx context.Context, op spigot.Op, asked, got int64, err error)
	// Return is called for each lease given back to the remote: with a
	// Refund when its key is idle or it is old, at Close, with a client's
	// Refund, or when its limit changed; and without one (err nil) for
	// the tokens a lease drops when the remote's refill overtakes it. tokens
	// is how many; err is the Refund's error, whose tokens are lost until
	// the limit refills.
	Return func(ctx context.Context, limit spigot.Limit, tokens int64, err error)
}

// WithObserver sets the observer of lease hits, takes and returns.
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
func (s *Store) find(k leaseKey, lim spigot.Limit) *lease {
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
				l.key, l.limit = leaseKey{name, key}, lim
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
	if op.Limit.Kind() != spigot.TokenBucket {
		return s.remote.Do(ctx, op)
	}
	k := leaseKey{op.Limit.Name(), op.Key}
	switch {
	case op.Action == spigot.Reset:
		dropped := s.held(ctx, k, true) // the limit is full again: nothing to give back
		d, err := s.passOn(ctx, k, op)
		d.N = max(d.N-dropped, 0) // what the limit lacked, counting the lease
		return d, err
	case op.Action == spigot.Refund:
		return s.refund(ctx, k, op)
	case op.Action == spigot.Peek, op.N == 0, op.N > op.Limit.Capacity() && op.Action == spigot.Take:
		// A Take of 0 is a Peek that moves the state on; one of more than
		// the capacity is denied for ever.
		return s.passOn(ctx, k, op)
	}
	waited := false // for a lease another request asked for
	for {
		l := s.find(k, op.Limit)
		if l == nil {
			return s.remote.Do(ctx, op)
		}
		now := s.clock.Now()
		l.usedAt = now
		s.trim(ctx, l, now)
		if l.limit == op.Limit && l.tokens >= op.N { // a TakeUpTo the lease holds only in part asks the remote for the rest
			l.tokens -= op.N
			d := l.remote.Held(l.tokens, op.N, now)
			l.mu.Unlock()
			if s.obs.Hit != nil {
				s.obs.Hit(ctx, op)
			}
			return d, nil
		}
		if w := l.filling; w != nil && (l.size == 0 || waited && l.size >= l.remote.Decision.Remaining/lowFraction) {
			// Another request on the key is asking the remote, for no
			// more than its own cost (a key new or near its limit), or
			// for a lease that what the remote holds keeps small, after
			// the one this request waited for (the key's other requests
			// took it first, and would take the next first too): this
			// one goes to the remote as it is, as without the Store.
			l.mu.Unlock()
			d, err := s.remote.Do(ctx, op)
			if err != nil {
				return d, err
			}
			if !d.Allowed() {
				// The call in flight may have taken what the remote
				// lacks, for this replica's lease: count it.
				select {
				case <-w:
				case <-ctx.Done():
				}
			}
			l.mu.Lock()
			s.trim(ctx, l, s.clock.Now())
			d = store.Credit(d, op.Limit, l.tokens)
			l.mu.Unlock()
			return d, nil
		}
		if w := l.filling; w != nil {
			// Another request on the key is asking the remote for a
			// lease, which may hold this one too.
			l.mu.Unlock()
			select {
			case <-w:
				waited = true
				continue
			case <-ctx.Done():
				return spigot.Decision{}, ctx.Err()
			}
		}
		if l.limit != op.Limit {
			// The limit's configuration changed: give back what the
			// lease took under the old one, and start again.
			back := l.tokens
			l.limit, l.tokens, l.size, l.takenAt, l.remote = op.Limit, 0, 0, time.Time{}, store.Answer{}
			l.mu.Unlock()
			if back > 0 {
				_, err := s.remote.Do(ctx, spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.Refund, N: back})
				s.returned(ctx, op.Limit, back, err)
				if err != nil {
					return spigot.Decision{}, err
				}
			}
			continue
		}
		return s.fill(ctx, l, op, now)
	}
}

// trim drops the tokens of l (locked) that the remote's refill has
// overtaken by now, and tells the observer they went back. Once the
// remote, refilling from its last answer, lacks fewer whole tokens of full
// than the lease holds, the lease and the remote would hold more than the
// limit's capacity between them, which a central bucket never does: the
// lease keeps what the remote lacks, and the rest is in the remote again.
// On a key under its limit, a lease so lasts about its size over the
// limit's rate. (The remote's ResetAfter is rounded up to the millisecond:
// a lease may keep a millisecond of refill too many; and it drops the
// fraction of a token the remote lacks, which a central bucket would have
// back within a token's time.)
func (s *Store) trim(ctx context.Context, l *lease, now time.Time) {
	if lacks := l.remote.Lacks(now); l.tokens > lacks {
		n := l.tokens - lacks
		l.tokens = lacks
		s.returned(ctx, l.limit, n, nil)
	}
}

// fill asks the remote, for op on l (locked, which fill unlocks), for what
// l lacks of op's cost and a new lease, in one TakeUpTo.
func (s *Store) fill(ctx context.Context, l *lease, op spigot.Op, now time.Time) (spigot.Decision, error) {
	held := l.tokens // trimmed at now by Do
	// The lease grows when the last one went within an interval.
	switch {
	case l.takenAt.IsZero():
	case now.Sub(l.takenAt) <= s.interval+2*l.rtt:
		l.size = 2*l.size + 1
	default:
		l.size /= 2
	}
	limit := op.Limit.Capacity() / maxFraction
	if !l.remote.At.IsZero() {
		limit = min(limit, l.remote.Decision.Remaining/lowFraction)
	}
	l.size = max(min(l.size, limit), 0)
	want := op.N - held + l.size
	w := make(chan struct{})
	l.filling = w
	l.mu.Unlock()

	take := spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.TakeUpTo, N: want}
	d, err := s.remote.Do(ctx, take)
	if s.obs.Take != nil {
		s.obs.Take(ctx, op, want, d.N, err)
	}

	l.mu.Lock()
	l.rtt = s.clock.Now().Sub(now)
	if err == nil {
		d, err = s.filled(ctx, l, op, now, d)
	}
	// A Store closed meanwhile gives back what this call brought.
	var back int64
	closed := s.isClosed()
	if closed {
		back, l.tokens, l.dead = l.tokens, 0, true
	}
	l.filling = nil
	close(w)
	l.mu.Unlock()
	if closed {
		s.forget(leaseKey{op.Limit.Name(), op.Key}, l)
	}
	if back > 0 {
		_, err := s.remote.Do(ctx, spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.Refund, N: back}) // as Close's refunds: lost on failure
		s.returned(ctx, op.Limit, back, err)
	}
	// On an error, nothing was taken, or it was and is lost until the
	// limit refills: a failed request is charged at most, never admitted.
	return d, err
}

// filled returns the decision of op on l (locked) once the remote's
// TakeUpTo, asked at now, answered d.
func (s *Store) filled(ctx context.Context, l *lease, op spigot.Op, now time.Time, d spigot.Decision) (spigot.Decision, error) {
	// The answer is the remote's at some instant after now: read as now's,
	// what the remote lacks as it refills is never overestimated, so a
	// lease is never trimmed late.
	l.remote = store.Answer{Limit: op.Limit, At: now, Decision: d}
	l.takenAt = now
	l.tokens += d.N
	have := l.tokens
	switch {
	case have >= op.N:
		l.tokens -= op.N
		d.N = op.N
	case op.Action == spigot.TakeUpTo && have > 0:
		l.tokens = 0
		d.N = have
	case d.N == 0 && (op.Action == spigot.TakeUpTo || op.N-have == 1):
		// Denied by the remote, whose RetryAfter is for one token: what
		// the request lacks.
		d = store.Credit(d, op.Limit, have)
		return d, nil
	default:
		// The remote had some of the cost or none: keep what it gave, and
		// tell when the rest comes.
		return s.peekLacking(ctx, l, op, have)
	}
	d.RetryAfter = 0
	d = store.Credit(d, op.Limit, l.tokens)
	return d, nil
}

// peekLacking returns the denial of op, whose lease l (locked) holds have
// of its cost: the remote's answer to a Peek of what it lacks.
func (s *Store) peekLacking(ctx context.Context, l *lease, op spigot.Op, have int64) (spigot.Decision, error) {
	l.mu.Unlock()
	d, err := s.remote.Do(ctx, spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.Peek, N: op.N - have})
	l.mu.Lock()
	if err != nil {
		return spigot.Decision{}, err
	}
	if d.RetryAfter == 0 {
		// It came meanwhile: retry soon rather than claim what a Peek
		// cannot take.
		d.RetryAfter = time.Millisecond
	}
	d.N = 0
	d = store.Credit(d, op.Limit, have)
	return d, nil
}

// held returns what k's lease holds, trimmed to what the remote lacks,
// and empties the lease if take.
func (s *Store) held(ctx context.Context, k leaseKey, take bool) int64 {
	l := s.lookup(k)
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s.trim(ctx, l, s.clock.Now())
	n := l.tokens
	if take {
		l.tokens = 0
	}
	return n
}

// passOn sends op (a Peek, a Reset, or a Take the lease cannot serve) to
// the remote, and counts k's lease in its decision.
func (s *Store) passOn(ctx context.Context, k leaseKey, op spigot.Op) (spigot.Decision, error) {
	held := s.held(ctx, k, false)
	if op.Action == spigot.Peek && op.N <= op.Limit.Capacity() {
		op.N -= min(held, op.N) // what the lease holds is not the remote's to tell
	}
	d, err := s.remote.Do(ctx, op)
	if err != nil {
		return d, err
	}
	d = store.Credit(d, op.Limit, held)
	return d, nil
}

// refund gives op.N tokens back to the remote together with what k's
// lease holds, so that the limit, counting the lease, is not filled past
// its capacity; the lease starts again empty.
func (s *Store) refund(ctx context.Context, k leaseKey, op spigot.Op) (spigot.Decision, error) {
	held := s.held(ctx, k, true)
	capacity := op.Limit.Capacity()
	n := op.N
	if n >= capacity-held {
		n = capacity // fills the limit, as any refund of more would
	} else {
		n += held
	}
	d, err := s.remote.Do(ctx, spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.Refund, N: n})
	if held > 0 {
		s.returned(ctx, op.Limit, held, err)
	}
	if err != nil {
		return d, err // the lease's tokens are lost until the limit refills
	}
	d.N = max(d.N-held, 0)
	return d, nil
}

// DoMulti implements spigot.Store. An all-or-nothing batch that the leases
// hold whole is applied from them; any other goes to the remote as it is.
// An independent batch is applied op by op, with Do.
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
	if s.allFromLeases(ctx, ops, out) {
		return nil
	}
	return s.remote.DoMulti(ctx, mode, ops, out)
}

// allFromLeases applies ops, all or nothing, from the leases if they hold
// every op's cost (summed by key), and reports whether it did. It looks
// every lease up before it locks any, and only tries their locks, going to
// the remote if one is busy: it never waits while holding a lock.
func (s *Store) allFromLeases(ctx context.Context, ops []spigot.Op, out []spigot.Decision) bool {
	ls := make([]*lease, len(ops))
	for i, op := range ops {
		if op.Limit.Kind() != spigot.TokenBucket || op.Action != spigot.Take || op.N == 0 {
			return false
		}
		if ls[i] = s.lookup(leaseKey{op.Limit.Name(), op.Key}); ls[i] == nil {
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
	need := make(map[*lease]int64, len(ops))
	for i, op := range ops {
		l := ls[i]
		if _, ok := need[l]; !ok {
			if !l.mu.TryLock() {
				return false
			}
			locked = append(locked, l)
			if l.dead || l.filling != nil || l.limit != op.Limit {
				return false
			}
			s.trim(ctx, l, now)
		}
		need[l] += op.N
		if need[l] > l.tokens {
			return false
		}
	}
	for i, op := range ops {
		l := ls[i]
		l.tokens -= op.N
		l.usedAt = now
		out[i] = l.remote.Held(l.tokens, op.N, now)
	}
	if s.obs.Hit != nil {
		for _, op := range ops {
			s.obs.Hit(ctx, op)
		}
	}
	return true
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
	var refunds []refund
	now := s.clock.Now()
	s.keys.RemoveIf(func(x *keyed.Header) bool {
		l := leases.Of(x)
		l.mu.Lock()
		defer l.mu.Unlock()
		s.trim(ctx, l, now)
		switch {
		case l.filling != nil:
		case !l.usedAt.After(idle):
			if l.tokens > 0 {
				refunds = append(refunds, refund{l.limit, l.key.key, l.tokens})
			}
			l.tokens, l.dead = 0, true
			return true
		case l.tokens > 0 && !l.takenAt.After(old):
			refunds = append(refunds, refund{l.limit, l.key.key, l.tokens})
			l.tokens = 0
		}
		return false
	})
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
	end := time.Unix(1<<62, 0)
	return s.giveBack(ctx, end, end)
}
