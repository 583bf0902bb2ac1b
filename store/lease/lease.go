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
// the Store. After that, a key whose lease was spent within WithInterval
// (plus twice the time the remote took to answer) of being taken gets one
// twice as large plus one the next time, and one spent more slowly half as
// large: a lease lasts about an interval of the key's traffic. While a key
// with no lease asks the remote, the key's other requests go to the remote
// as they are, and while it asks for a lease, they wait for it. A lease is
// never more than a sixteenth of the limit's capacity, nor more than a
// quarter of what the remote last said it held, so that a key near its
// limit is decided almost centrally. At any instant at most (replicas × the
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
// lease has the N asked and, for Remaining, what the lease still holds plus
// what the remote said the shared limit held at its last answer for the
// key; its ResetAfter and RefillAfter are the remote's last, less the time
// since. Peek, Refund and Reset go to the remote (Reset drops the key's
// lease first, without giving it back: the limit is full again), and their
// Remaining counts the lease too. A Take of 0, and every op on a kind of
// limit other than a token bucket (whose Delay or window a lease cannot
// tell), goes to the remote as it is.
//
// DoMulti applies an all-or-nothing batch from the leases when they hold
// all of it, and otherwise sends it to the remote as it is, leases
// untouched; an independent batch is applied op by op.
//
// # What it guarantees
//
// The replicas admit no more than the limit, over any interval, whatever
// happens to them or to the remote, but for Resets: a Reset makes the
// remote's limit full while other replicas may still hold leases on it.
// Remaining is exact only for the replica that asked, at the remote's last
// answer; another replica's leases are not seen. A client can be denied
// while tokens sit in another replica's lease, by at most that lease, for
// at most 2.5 × WithIdle. The conformance suite's cases of Remaining and
// ResetAfter after local decisions therefore do not hold.
package lease

import (
	"context"
	"errors"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
)

var _ spigot.Store = (*Store)(nil)

const (
	shards = 64
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
	seed     maphash.Seed
	shards   [shards]shard
	keys     atomic.Int64 // the leases held, in every shard

	stop   chan struct{} // closed by Close
	done   chan struct{} // closed when the sweeper has ended
	closed sync.Once
}

type shard struct {
	mu     sync.RWMutex
	leases map[leaseKey]*lease
}

type leaseKey struct {
	limit spigot.Limit
	key   string
}

// A lease is one key's tokens taken from the remote and not yet spent,
// and what the remote last said of the key.
type lease struct {
	mu      sync.Mutex
	tokens  int64         // unspent
	size    int64         // the next lease, beyond a request's own cost
	takenAt time.Time     // when the last lease was taken
	rtt     time.Duration // how long the remote took to answer the last fill
	usedAt  time.Time     // the last request
	filling chan struct{} // closed when the remote call in flight for this key returns; nil if none
	dead    bool          // given back and forgotten: look the key up again

	// The remote's last answer, and when it was asked.
	at                      time.Time
	remaining               int64
	resetAfter, refillAfter time.Duration
}

// An Option configures a Store.
type Option func(*Store)

// WithClock makes the Store read the time from c instead of the system
// clock, as tests with clocktest do. It decides only lease sizes and when
// leases go back; the limits run on the remote's clock.
func WithClock(c clock.Clock) Option { return func(s *Store) { s.clock = c } }

// WithInterval sets how long a lease should last on a busy key (10ms by
// default), beyond the remote's round trips: a lease spent faster than
// this doubles, one spent slower halves.
func WithInterval(d time.Duration) Option { return func(s *Store) { s.interval = d } }

// WithIdle sets how long a key goes without a request before its unspent
// tokens go back to the remote (1s by default); 0 or less keeps the default.
// A Store sweeps for such keys every WithIdle/2 on a goroutine of its own,
// which Close stops.
func WithIdle(d time.Duration) Option { return func(s *Store) { s.idle = d } }

// WithMaxKeys caps the keys that hold a lease at once at n (100 000 by
// default): a request on another key goes to the remote as it is.
func WithMaxKeys(n int) Option { return func(s *Store) { s.maxKeys = n } }

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
		maxKeys:  100_000,
		seed:     maphash.MakeSeed(),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if s.idle <= 0 {
		s.idle = time.Second
	}
	for i := range s.shards {
		s.shards[i].leases = make(map[leaseKey]*lease)
	}
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

func (s *Store) shardOf(k leaseKey) *shard {
	return &s.shards[maphash.String(s.seed, k.key)%shards]
}

// find returns k's lease, made if need be, locked; or nil when the Store
// is closed or holds WithMaxKeys leases already.
func (s *Store) find(k leaseKey) *lease {
	sh := s.shardOf(k)
	for {
		sh.mu.RLock()
		l := sh.leases[k]
		sh.mu.RUnlock()
		if l == nil {
			sh.mu.Lock()
			if l = sh.leases[k]; l == nil {
				if s.isClosed() || s.keys.Load() >= int64(s.maxKeys) {
					sh.mu.Unlock()
					return nil
				}
				k.key = strings.Clone(k.key) // not the larger string it may be cut from
				l = &lease{}
				sh.leases[k] = l
				s.keys.Add(1)
			}
			sh.mu.Unlock()
		}
		l.mu.Lock()
		if !l.dead {
			return l
		}
		l.mu.Unlock()
	}
}

// lookup returns k's lease, or nil.
func (s *Store) lookup(k leaseKey) *lease {
	sh := s.shardOf(k)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.leases[k]
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
	if op.Limit.Kind() != spigot.TokenBucket || op.Action == spigot.Take && op.N == 0 {
		return s.remote.Do(ctx, op)
	}
	k := leaseKey{op.Limit, op.Key}
	switch op.Action {
	case spigot.Reset:
		if l := s.lookup(k); l != nil {
			l.mu.Lock()
			l.tokens = 0 // the limit is full again: nothing to give back
			l.mu.Unlock()
		}
		d, err := s.remote.Do(ctx, op)
		if err == nil {
			d.Remaining += s.held(k)
		}
		return d, err
	case spigot.Peek, spigot.Refund:
		return s.passOn(ctx, k, op)
	}
	for {
		l := s.find(k)
		if l == nil {
			return s.remote.Do(ctx, op)
		}
		now := s.clock.Now()
		l.usedAt = now
		if l.tokens >= op.N { // a TakeUpTo the lease holds only in part asks the remote for the rest
			l.tokens -= op.N
			d := l.local(op.N, now)
			l.mu.Unlock()
			return d, nil
		}
		if w := l.filling; w != nil && l.size == 0 {
			// Another request on the key is asking the remote, for no
			// more than its own cost (a key new or near its limit): this
			// one goes to the remote as it is, as without the Store.
			held := l.tokens
			l.mu.Unlock()
			d, err := s.remote.Do(ctx, op)
			if err == nil {
				d.Remaining += held
			}
			return d, err
		}
		if w := l.filling; w != nil {
			// Another request on the key is asking the remote for a
			// lease, which may hold this one too.
			l.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return spigot.Decision{}, ctx.Err()
			}
		}
		return s.fill(ctx, l, op, now)
	}
}

// local returns the decision of n tokens taken from l, locked, at now.
func (l *lease) local(n int64, now time.Time) spigot.Decision {
	since := now.Sub(l.at)
	return spigot.Decision{
		N:           n,
		Remaining:   l.tokens + l.remaining,
		ResetAfter:  aged(l.resetAfter, since),
		RefillAfter: aged(l.refillAfter, since),
	}
}

// aged returns d less since, rounded up to the millisecond, at least 0;
// spigot.Never stays Never.
func aged(d, since time.Duration) time.Duration {
	if d == spigot.Never || since <= 0 {
		return d
	}
	if d <= since {
		return 0
	}
	return (d - since + time.Millisecond - 1).Truncate(time.Millisecond)
}

// fill asks the remote, for op on l (locked, which fill unlocks), for what
// l lacks of op's cost and a new lease, in one TakeUpTo.
func (s *Store) fill(ctx context.Context, l *lease, op spigot.Op, now time.Time) (spigot.Decision, error) {
	held := l.tokens
	// The lease grows when the last one went within an interval.
	switch {
	case l.takenAt.IsZero():
	case now.Sub(l.takenAt) <= s.interval+2*l.rtt:
		l.size = 2*l.size + 1
	default:
		l.size /= 2
	}
	limit := op.Limit.Capacity() / maxFraction
	if !l.at.IsZero() {
		limit = min(limit, l.remaining/lowFraction)
	}
	l.size = max(min(l.size, limit), 0)
	want := op.N - held + l.size
	w := make(chan struct{})
	l.filling = w
	l.mu.Unlock()

	d, err := s.remote.Do(ctx, spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.TakeUpTo, N: want})

	l.mu.Lock()
	l.rtt = s.clock.Now().Sub(now)
	if err == nil {
		d, err = s.filled(ctx, l, op, now, d)
	}
	// A Store closed meanwhile gives back what this call brought.
	var back int64
	if s.isClosed() {
		back, l.tokens = l.tokens, 0
	}
	l.filling = nil
	close(w)
	l.mu.Unlock()
	if back > 0 {
		s.remote.Do(ctx, spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.Refund, N: back}) // as Close's refunds: lost on failure
	}
	// On an error, nothing was taken, or it was and is lost until the
	// limit refills: a failed request is charged at most, never admitted.
	return d, err
}

// filled returns the decision of op on l (locked) once the remote's
// TakeUpTo, asked at now, answered d.
func (s *Store) filled(ctx context.Context, l *lease, op spigot.Op, now time.Time, d spigot.Decision) (spigot.Decision, error) {
	l.at, l.remaining, l.resetAfter, l.refillAfter = now, d.Remaining, d.ResetAfter, d.RefillAfter
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
		d.Remaining = have
		return d, nil
	default:
		// The remote had some of the cost or none: keep what it gave, and
		// tell when the rest comes.
		return s.peekLacking(ctx, l, op, have)
	}
	d.RetryAfter = 0
	d.Remaining = l.tokens + l.remaining
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
	d.N, d.Remaining = 0, have
	return d, nil
}

// held returns the unspent tokens of k's lease.
func (s *Store) held(k leaseKey) int64 {
	l := s.lookup(k)
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tokens
}

// passOn sends op (a Peek or a Refund) to the remote, and counts k's lease
// in its Remaining.
func (s *Store) passOn(ctx context.Context, k leaseKey, op spigot.Op) (spigot.Decision, error) {
	held := s.held(k)
	if op.Action == spigot.Peek {
		op.N -= min(held, op.N) // what the lease holds is not the remote's to tell
	}
	d, err := s.remote.Do(ctx, op)
	if err != nil {
		return d, err
	}
	d.Remaining += held
	return d, nil
}

// DoMulti implements spigot.Store. An all-or-nothing batch that the leases
// hold whole is applied from them; any other goes to the remote as it is.
// An independent batch is applied op by op, with Do.
func (s *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if err := spigot.CheckMulti(mode, ops, out); err != nil {
		return err
	}
	if mode == spigot.Independent {
		var errs []error
		for i, op := range ops {
			d, err := s.Do(ctx, op)
			if err != nil {
				d = spigot.Failed()
				errs = append(errs, err)
			}
			out[i] = d
		}
		return errors.Join(errs...)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.allFromLeases(ops, out) {
		return nil
	}
	return s.remote.DoMulti(ctx, mode, ops, out)
}

// allFromLeases applies ops, all or nothing, from the leases if they hold
// every op's cost (summed by key), and reports whether it did. It looks
// every lease up before it locks any, and only tries their locks, going to
// the remote if one is busy: it never waits while holding a lock.
func (s *Store) allFromLeases(ops []spigot.Op, out []spigot.Decision) bool {
	ls := make([]*lease, len(ops))
	for i, op := range ops {
		if op.Limit.Kind() != spigot.TokenBucket || op.Action != spigot.Take || op.N == 0 {
			return false
		}
		if ls[i] = s.lookup(leaseKey{op.Limit, op.Key}); ls[i] == nil {
			return false
		}
	}
	var locked []*lease
	defer func() {
		for _, l := range locked {
			l.mu.Unlock()
		}
	}()
	need := make(map[*lease]int64, len(ops))
	for i, op := range ops {
		l := ls[i]
		if _, ok := need[l]; !ok {
			if !l.mu.TryLock() {
				return false
			}
			locked = append(locked, l)
			if l.dead || l.filling != nil {
				return false
			}
		}
		need[l] += op.N
		if need[l] > l.tokens {
			return false
		}
	}
	now := s.clock.Now()
	for i, op := range ops {
		l := ls[i]
		l.tokens -= op.N
		l.usedAt = now
		out[i] = l.local(op.N, now)
	}
	return true
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
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, l := range sh.leases {
			l.mu.Lock()
			switch {
			case l.filling != nil:
			case !l.usedAt.After(idle):
				if l.tokens > 0 {
					refunds = append(refunds, refund{k.limit, k.key, l.tokens})
				}
				l.tokens, l.dead = 0, true
				delete(sh.leases, k)
				s.keys.Add(-1)
			case l.tokens > 0 && !l.takenAt.After(old):
				refunds = append(refunds, refund{k.limit, k.key, l.tokens})
				l.tokens = 0
			}
			l.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	var errs []error
	for _, r := range refunds {
		if _, err := s.remote.Do(ctx, spigot.Op{Limit: r.limit, Key: r.key, Action: spigot.Refund, N: r.tokens}); err != nil {
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
