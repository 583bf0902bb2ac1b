package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/internal/wait"
)

// A Middleware limits the requests of the handlers it wraps by its rules,
// in one store. It is safe for concurrent use, and one Middleware may wrap
// many handlers. Create one with New; the zero Middleware is not usable.
type Middleware struct {
	store    spigot.Store
	rules    []rule
	cost     func(*http.Request) (int64, error)
	headers  Headers
	epoch    bool
	clock    clock.Clock
	never    int
	deny     func(http.ResponseWriter, *http.Request, *Result)
	keyErr   func(http.ResponseWriter, *http.Request, error)
	storeErr func(http.ResponseWriter, *http.Request, error) bool
	observe  func(*http.Request, *Result)
	pool     sync.Pool // of *scratch
}

// A rule is one limit applied to requests, by one key.
type rule struct {
	limit  spigot.Limit // the zero Limit when choose is set
	choose func(*http.Request) (spigot.Limit, error)
	key    KeyFunc
	policy string // limit's RateLimit-Policy member, made once
}

// An Option configures a Middleware: a rule (By, ByFunc) or a setting.
type Option func(*Middleware)

// By adds a rule: every request takes its cost from limit, for the key
// that key returns (ClientIP() when key is nil). With several rules, a
// request takes from all of them or from none (see New).
func By(limit spigot.Limit, key KeyFunc) Option {
	return func(m *Middleware) {
		m.rules = append(m.rules, rule{limit: limit, key: key})
	}
}

// ByFunc adds a rule whose limit choose picks for each request, such as
// a plan's: free 60 a minute, paid 6000. Make the limits once, as package
// variables, and return one of them: choosing needs no allocation, and
// limits of one name share each key's tokens, so that a client who
// upgrades keeps what it has. An error from choose is a key error (see
// WithKeyErrorHandler).
func ByFunc(choose func(r *http.Request) (spigot.Limit, error), key KeyFunc) Option {
	return func(m *Middleware) {
		if choose == nil {
			panic("spigot: httplimit: ByFunc: nil func")
		}
		m.rules = append(m.rules, rule{choose: choose, key: key})
	}
}

// WithCost makes each request cost what f returns, instead of 1: the rows
// it asks for, say. A cost of 0 (health checks) passes the request
// through without touching the store, and sends no headers. An error, or
// a negative cost, is a key error (see WithKeyErrorHandler). It panics if
// f is nil.
func WithCost(f func(r *http.Request) (int64, error)) Option {
	if f == nil {
		panic("spigot: httplimit: WithCost: nil func")
	}
	return func(m *Middleware) { m.cost = f }
}

// WithHeaders chooses the sets of headers sent on every limited response
// (see Headers); 0 sends none but Retry-After. The default is IETF|Legacy.
// It panics on a set that Headers does not define.
func WithHeaders(h Headers) Option {
	if h&^(IETF|Legacy) != 0 {
		panic(fmt.Sprintf("spigot: httplimit: WithHeaders(%d): want IETF, Legacy, both or 0", h))
	}
	return func(m *Middleware) { m.headers = h }
}

// WithEpochReset makes X-RateLimit-Reset the instant the bucket is full
// again, in Unix seconds rounded up (as GitHub's API sends it), instead of
// the seconds until then (the default, which needs no synchronized clock
// on the client).
func WithEpochReset() Option {
	return func(m *Middleware) { m.epoch = true }
}

// WithClock makes the middleware read the time from c, for
// WithEpochReset, instead of the system clock. It does not change the
// store's clock. It panics if c is nil.
func WithClock(c clock.Clock) Option {
	if nilcheck.Nil(c) {
		panic("spigot: httplimit: WithClock: nil Clock")
	}
	return func(m *Middleware) { m.clock = c }
}

// WithNeverStatus sets the status of a request that no wait can admit,
// because its cost is above a limit's capacity: 429 Too Many Requests by
// default (and no Retry-After), or, say, 413 Content Too Large. It panics
// unless code is a client or server error status, 400 to 599.
func WithNeverStatus(code int) Option {
	if code < 400 || code > 599 {
		panic(fmt.Sprintf("spigot: httplimit: WithNeverStatus(%d): want an error status, 400 to 599", code))
	}
	return func(m *Middleware) { m.never = code }
}

// WithDenyHandler replaces the response to a denied request. The
// rate-limit headers, and Retry-After, are already set when f runs;
// res.Decisions says which limit denied it and when to retry (RetryAfter
// is spigot.Never when no wait can admit it). The default answers 429 Too
// Many Requests (see WithNeverStatus) with a short body, in JSON when the
// request's Accept names a JSON type and in plain text otherwise:
//
//	{"error":"too many requests","limit":"login","retry_after":3}
//	too many requests (login): retry in 3s
//
// It panics if f is nil.
func WithDenyHandler(f func(w http.ResponseWriter, r *http.Request, res *Result)) Option {
	if f == nil {
		panic("spigot: httplimit: WithDenyHandler: nil func")
	}
	return func(m *Middleware) { m.deny = f }
}

// WithKeyErrorHandler replaces the response to a request that has no key,
// or no cost: a KeyFunc, a ByFunc's choice or WithCost's func failed. The
// request is charged nothing and not served. The default answers 400 Bad
// Request with the error's text. It panics if f is nil.
func WithKeyErrorHandler(f func(w http.ResponseWriter, r *http.Request, err error)) Option {
	if f == nil {
		panic("spigot: httplimit: WithKeyErrorHandler: nil func")
	}
	return func(m *Middleware) { m.keyErr = f }
}

// WithErrorHandler decides what a request gets when the store fails (a
// lost connection, a timeout, a key that holds another Redis type; never
// a denial, which is a decision): f returns true to serve the request
// anyway, with no rate-limit headers, or writes a response and returns
// false. The observer (see WithObserver) sees every store error first.
//
// The default fails safe: it serves nothing and answers 503 Service
// Unavailable with Retry-After: 1, and a short body ("rate limiter
// unavailable", in JSON when the request's Accept names a JSON type) that
// never shows the error. FailOpen serves the request instead, unlimited:
// use it only for limits whose job is fairness, never for login attempts
// or quota-billed work. To keep limiting while Redis is down (in each
// process), or to choose per limit, put the Redis store behind
// store/hybrid: then the store answers by its policy, within its timeout,
// and fails only for errors about one request. It panics if f is nil.
func WithErrorHandler(f func(w http.ResponseWriter, r *http.Request, err error) (serve bool)) Option {
	if f == nil {
		panic("spigot: httplimit: WithErrorHandler: nil func")
	}
	return func(m *Middleware) { m.storeErr = f }
}

// FailOpen is an error handler (see WithErrorHandler) that serves a
// request when the store fails, as if no limit applied.
func FailOpen(http.ResponseWriter, *http.Request, error) (serve bool) { return true }

// WithObserver calls f once per request that the store decided or failed
// (not for cost 0 or a key error), before the response: for metrics and
// logs. f must be quick and must not keep res, which the middleware
// reuses once f returns. With no observer the middleware does not read
// the clock. It panics if f is nil.
func WithObserver(f func(r *http.Request, res *Result)) Option {
	if f == nil {
		panic("spigot: httplimit: WithObserver: nil func")
	}
	return func(m *Middleware) { m.observe = f }
}

// A Result is what the middleware decided on one request, as its deny
// handler and observer see it. It is valid only until they return.
type Result struct {
	// Route is the pattern of http.ServeMux that routed the request
	// (Request.Pattern), or "".
	Route string
	// Limits and Keys are each rule's limit, as chosen for this request,
	// and key, in the order of the rules.
	Limits []spigot.Limit
	Keys   []string
	// Cost is the tokens the request asked of each limit.
	Cost int64
	// Decisions is the store's decision: the combined one, the index By
	// of the limit that decided, and Each limit's (see spigot.Combine).
	// With Err it is a denied, Degraded decision.
	Decisions spigot.Decisions
	// Latency is how long the store took to decide, when there is an
	// observer; otherwise 0.
	Latency time.Duration
	// Err is the store's error, or nil.
	Err error
}

// New returns a Middleware that limits requests by the rules among opts
// (By, ByFunc), in s. A request takes its cost from every rule's limit,
// for that rule's key, all or nothing: one that a limit denies is charged
// to none of them, so that a flood stopped by the per-user limit does not
// drain the per-address one. Several rules are one round trip to the store
// (see spigot.DoMulti; on a Redis Cluster, see store/redis).
//
// It panics (a programmer error) when s is nil, without a rule, or with a
// rule of the zero Limit.
func New(s spigot.Store, opts ...Option) *Middleware {
	if nilcheck.Nil(s) {
		panic("spigot: httplimit: New: nil Store")
	}
	m := &Middleware{store: s, headers: IETF | Legacy, clock: clock.System(), never: http.StatusTooManyRequests}
	for _, o := range opts {
		o(m)
	}
	if len(m.rules) == 0 {
		panic("spigot: httplimit: New: no rule; add one with By or ByFunc")
	}
	for i := range m.rules {
		ru := &m.rules[i]
		if ru.key == nil {
			ru.key = ClientIP()
		}
		if ru.choose == nil {
			if ru.limit == (spigot.Limit{}) {
				panic(fmt.Sprintf("spigot: httplimit: New: rule %d has the zero Limit", i))
			}
			ru.policy = string(policyItem(nil, ru.limit))
		}
	}
	if m.deny == nil {
		m.deny = m.defaultDeny
	}
	if m.keyErr == nil {
		m.keyErr = keyError
	}
	if m.storeErr == nil {
		m.storeErr = failSafe
	}
	n := len(m.rules)
	m.pool.New = func() any {
		s := &scratch{
			limits: make([]spigot.Limit, n),
			keys:   make([]string, n),
			ops:    make([]spigot.Op, n),
			out:    make([]spigot.Decision, n),
		}
		s.res.Limits, s.res.Keys = s.limits, s.keys
		return s
	}
	return m
}

// scratch is what one request needs, kept in a pool.
type scratch struct {
	limits []spigot.Limit
	keys   []string
	ops    []spigot.Op
	out    []spigot.Decision
	res    Result
}

// Wrap returns a handler that limits the requests to next: it serves the
// ones the rules admit, with the rate-limit headers, and answers the
// others with the deny handler. A request that a leaky bucket admits with
// a Delay is held for that long, on the middleware's clock, and then
// served; one whose client goes away first is refunded and not served. It panics if next is nil. It is the
// middleware signature of most routers: with chi or gorilla/mux,
// router.Use(mw.Wrap).
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	if nilcheck.Nil(next) {
		panic("spigot: httplimit: Wrap: nil Handler")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m.limit(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// limit decides r and answers it unless it is to be served.
func (m *Middleware) limit(w http.ResponseWriter, r *http.Request) (serve bool) {
	cost, err := m.costOf(r)
	if err != nil {
		m.keyErr(w, r, err)
		return false
	}
	if cost == 0 {
		return true
	}
	if len(m.rules) == 1 && m.observe == nil {
		// The common case, kept on the stack: one limit, no observer.
		l, k, err := m.rules[0].resolve(r, 0)
		if err != nil {
			m.keyErr(w, r, err)
			return false
		}
		d, err := m.store.Do(r.Context(), spigot.Op{Limit: l, Key: k, Action: spigot.Take, N: cost})
		if err == nil && d.Allowed() {
			limits, out := [1]spigot.Limit{l}, [1]spigot.Decision{d}
			m.setHeaders(w.Header(), limits[:], out[:], 0, d)
			return d.Delay == 0 || m.delay(r, d.Delay)
		}
		s := m.pool.Get().(*scratch)
		defer m.pool.Put(s)
		s.limits[0], s.keys[0], s.out[0] = l, k, d
		return m.finish(w, r, s, cost, 0, err)
	}
	s := m.pool.Get().(*scratch)
	defer m.pool.Put(s)
	if err := m.resolve(r, s, spigot.Take, cost); err != nil {
		m.keyErr(w, r, err)
		return false
	}
	var start time.Time
	if m.observe != nil {
		start = time.Now()
	}
	if len(s.ops) == 1 {
		s.out[0], err = m.store.Do(r.Context(), s.ops[0])
	} else {
		err = spigot.DoMulti(r.Context(), m.store, spigot.AllOrNothing, s.ops, s.out)
	}
	var latency time.Duration
	if m.observe != nil {
		latency = time.Since(start)
	}
	return m.finish(w, r, s, cost, latency, err)
}

// finish answers r, whose decisions (or store error) s holds, unless it
// is to be served.
func (m *Middleware) finish(w http.ResponseWriter, r *http.Request, s *scratch, cost int64, latency time.Duration, err error) (serve bool) {
	res := &s.res
	*res = Result{Route: r.Pattern, Limits: s.limits, Keys: s.keys, Cost: cost, Latency: latency, Err: err}
	if err != nil {
		for i := range s.out {
			s.out[i] = spigot.Failed()
		}
		res.Decisions = spigot.Decisions{Decision: s.out[0], By: -1, Each: s.out}
		if m.observe != nil {
			m.observe(r, res)
		}
		return m.storeErr(w, r, err)
	}
	d, by := spigot.Combine(s.out)
	res.Decisions = spigot.Decisions{Decision: d, By: by, Each: s.out}
	if m.observe != nil {
		m.observe(r, res)
	}
	m.setHeaders(w.Header(), s.limits, s.out, by, d)
	if !d.Allowed() {
		m.deny(w, r, res)
		return false
	}
	return d.Delay == 0 || m.delay(r, d.Delay)
}

// delay holds an admitted request for its turn in a leaky bucket's queue,
// and reports whether to serve it: if the client goes away first, its
// cost is refunded and it is not served.
func (m *Middleware) delay(r *http.Request, d time.Duration) (serve bool) {
	if wait.Sleep(r.Context(), m.clock, d) == nil {
		return true
	}
	_ = m.Refund(r) // best effort: the client is gone either way
	return false
}

// costOf returns r's cost.
func (m *Middleware) costOf(r *http.Request) (int64, error) {
	if m.cost == nil {
		return 1, nil
	}
	cost, err := m.cost(r)
	switch {
	case err != nil:
		return 0, fmt.Errorf("spigot: httplimit: the request's cost: %w", err)
	case cost < 0:
		return 0, fmt.Errorf("spigot: httplimit: the request's cost: %w %d: a cost must be 0 or more", spigot.ErrInvalidCost, cost)
	}
	return cost, nil
}

// resolve sets s's limits, keys and ops for r: action of n on each rule.
func (m *Middleware) resolve(r *http.Request, s *scratch, action spigot.Action, n int64) error {
	for i := range m.rules {
		l, k, err := m.rules[i].resolve(r, i)
		if err != nil {
			return err
		}
		s.limits[i], s.keys[i] = l, k
		s.ops[i] = spigot.Op{Limit: l, Key: k, Action: action, N: n}
	}
	return nil
}

// resolve returns the limit and the key of rule i for r.
func (ru *rule) resolve(r *http.Request, i int) (spigot.Limit, string, error) {
	l, err := ru.limitFor(r, i)
	if err != nil {
		return l, "", err
	}
	k, err := ru.key(r)
	if err == nil && len(k) > spigot.MaxKeyLen {
		return l, "", fmt.Errorf("spigot: httplimit: the key of rule %d is %d bytes long, more than %d: %w", i, len(k), spigot.MaxKeyLen, spigot.ErrInvalidKey)
	}
	return l, k, err
}

// limitFor returns the limit of rule i for r: its own, or the one its
// func chooses.
func (ru *rule) limitFor(r *http.Request, i int) (spigot.Limit, error) {
	if ru.choose == nil {
		return ru.limit, nil
	}
	l, err := ru.choose(r)
	if err != nil {
		return l, fmt.Errorf("spigot: httplimit: choosing the limit of rule %d: %w", i, err)
	}
	if l == (spigot.Limit{}) {
		return l, fmt.Errorf("spigot: httplimit: rule %d chose the zero Limit: %w", i, spigot.ErrInvalidLimit)
	}
	return l, nil
}

// Reset fills again, for r's key, the limit l of the rule that applies it:
// after a successful login, the per-user limit, so that the user's earlier
// failures are forgiven. (Resetting the per-address limit too would let an
// attacker with one account of its own reset its address's budget between
// guesses at others.) It runs even when r's context is cancelled. It
// returns an error when no rule applies l to r, and a key error as the
// middleware would.
func (m *Middleware) Reset(r *http.Request, l spigot.Limit) (spigot.Decision, error) {
	for i := range m.rules {
		ru := &m.rules[i]
		chosen, err := ru.limitFor(r, i)
		if err != nil {
			return spigot.Decision{}, err
		}
		if chosen != l {
			continue
		}
		k, err := ru.key(r)
		if err != nil {
			return spigot.Decision{}, fmt.Errorf("spigot: httplimit: Reset: %w", err)
		}
		return m.store.Do(context.WithoutCancel(r.Context()), spigot.Op{Limit: l, Key: k, Action: spigot.Reset})
	}
	return spigot.Decision{}, fmt.Errorf("spigot: httplimit: Reset: no rule applies %v to the request", l)
}

// Refund gives r's cost back to every rule's limit, for r's keys: for a
// request that was admitted but then not served (the handler failed
// before doing the work). It runs even when r's context is cancelled.
func (m *Middleware) Refund(r *http.Request) error {
	cost, err := m.costOf(r)
	if err != nil || cost == 0 {
		return err
	}
	s := m.pool.Get().(*scratch)
	defer m.pool.Put(s)
	if err := m.resolve(r, s, spigot.Refund, cost); err != nil {
		return fmt.Errorf("spigot: httplimit: Refund: %w", err)
	}
	ctx := context.WithoutCancel(r.Context())
	if len(s.ops) == 1 {
		_, err = m.store.Do(ctx, s.ops[0])
	} else {
		err = spigot.DoMulti(ctx, m.store, spigot.Independent, s.ops, s.out)
	}
	if err != nil {
		return fmt.Errorf("spigot: httplimit: Refund: %w", err)
	}
	return nil
}
