package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/batch"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/internal/ratefield"
	"github.com/spigot-go/spigot/internal/sides"
	"github.com/spigot-go/spigot/internal/wait"
	"github.com/spigot-go/spigot/store"
)

// A Middleware limits the requests of the handlers it wraps by its rules,
// in one store. It is safe for concurrent use, and one Middleware may wrap
// many handlers. Create one with New; the zero Middleware is not usable.
type Middleware struct {
	store         spigot.Store
	rules         []rule
	cost          func(*http.Request) (int64, error) // WithCost's, or nil: 1
	headers       Headers
	unixReset     bool // WithResetAsUnixTime's
	clock         clock.Clock
	neverAdmitted int // WithNeverAdmittedStatus's
	deny          func(http.ResponseWriter, *http.Request, *Result)
	keyErr        func(http.ResponseWriter, *http.Request, error)
	storeErr      func(http.ResponseWriter, *http.Request, error) bool
	observe       func(*http.Request, *Result)
	substitutes   bool      // the store may decide by other limits (store.Substituter)
	pool          sync.Pool // of *scratch
}

// A rule is one limit applied to the requests it matches, by one key, at
// one cost.
type rule struct {
	limit   spigot.Limit // the zero Limit when choose is set
	choose  func(*http.Request) (spigot.Limit, error)
	key     KeyFunc
	policy  string           // limit's RateLimit-Policy member, made once
	on      []*http.ServeMux // On's patterns, one mux each; nil: every request
	methods []string         // Methods'; nil: every method
	when    []func(*http.Request) bool
	cost    func(*http.Request) (int64, error) // Cost's, or nil
	weight  int64                              // Weight's, or 0
}

// An Option configures a Middleware (New) or a Transport (NewTransport),
// the two sides of this package, as one Option of otelhttp configures its
// handler and its transport. A rule (By, ByFunc) and the settings of what
// clients see (WithHeaders, WithResetAsUnixTime, WithNeverAdmittedStatus,
// WithDenyHandler, WithKeyErrorHandler, WithErrorHandler, WithObserver)
// configure a Middleware; WithTransportKey, WithoutWaiting and
// WithoutRetryAfter configure a Transport; WithCost and WithClock
// configure both. An option given to the side it does not configure would
// do nothing there: New and NewTransport panic on it, naming it.
type Option func(*config)

// config is what an Option configures: the Middleware that New makes, or the
// Transport that NewTransport makes (the other is nil).
type config = sides.Of[Middleware, Transport]

// names names this package's sides in the panics of config.
var names = &sides.Names{Package: "httplimit", Server: "Middleware", NewServer: "New", Client: "Transport", NewClient: "NewTransport"}

// A RuleOption narrows a rule to some requests (On, Methods, If) or sets
// what they cost it (Cost, Weight). A rule with several applies to the
// requests that every one of them selects.
type RuleOption func(*rule)

// By adds a rule: every request it applies to (every request, unless opts
// narrow it) takes its cost from limit, for the key that key returns
// (ClientIP() when key is nil). A request takes from every rule that
// applies to it, all or nothing (see New).
func By(limit spigot.Limit, key KeyFunc, opts ...RuleOption) Option {
	return func(c *config) {
		m := c.Server("By")
		ru := rule{limit: limit, key: key}
		for _, o := range opts {
			o(&ru)
		}
		m.rules = append(m.rules, ru)
	}
}

// ByFunc adds a rule whose limit choose picks for each request, such as
// a plan's: free 60 a minute, paid 6000. Make the limits once, as package
// variables, and return one of them: choosing needs no allocation, and
// limits of one name share each key's tokens, so that a client who
// upgrades keeps what it has. An error from choose is a key error (see
// WithKeyErrorHandler).
func ByFunc(choose func(r *http.Request) (spigot.Limit, error), key KeyFunc, opts ...RuleOption) Option {
	if choose == nil {
		panic("spigot: httplimit: ByFunc: nil func")
	}
	return func(c *config) {
		m := c.Server("ByFunc")
		ru := rule{choose: choose, key: key}
		for _, o := range opts {
			o(&ru)
		}
		m.rules = append(m.rules, ru)
	}
}

// On narrows a rule to the requests that one of patterns matches, as
// http.ServeMux matches them (Go 1.22 patterns: "POST /login",
// "/export/", "GET api.example.com/{tenant}/"), wherever the middleware
// sits: around a whole mux, or around one handler. A request that the
// mux would redirect (to clean its path, or to add a trailing slash) is
// not matched: the request that follows the redirect is. It panics on a
// pattern that http.ServeMux rejects.
func On(patterns ...string) RuleOption {
	muxes := make([]*http.ServeMux, len(patterns))
	for i, p := range patterns {
		muxes[i] = patternMux(p)
	}
	return func(ru *rule) { ru.on = append(ru.on, muxes...) }
}

// patternMux returns a mux that routes p to matched, and every other
// request to a catch-all: a mux that finds no pattern for a request
// allocates to say why.
func patternMux(p string) *http.ServeMux {
	mux := http.NewServeMux()
	func() {
		defer func() {
			if e := recover(); e != nil {
				panic(fmt.Sprintf("spigot: httplimit: On(%q): %v", p, e))
			}
		}()
		mux.Handle(p, matched)
	}()
	func() {
		defer func() { _ = recover() }() // p matches every request already
		mux.Handle("/", http.NotFoundHandler())
	}()
	return mux
}

// matched is the handler of On's muxes: a mux that returns it matched.
var matched = &matchedHandler{}

type matchedHandler struct{}

func (*matchedHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// Methods narrows a rule to the requests of the given methods ("POST",
// "DELETE"), compared exactly, as net/http reads them.
func Methods(methods ...string) RuleOption {
	ms := slices.Clone(methods)
	return func(ru *rule) { ru.methods = append(ru.methods, ms...) }
}

// If narrows a rule to the requests for which match returns true: those
// with an API key, say. match must be quick, must not read the body, and
// must be safe for concurrent use. It panics if match is nil.
func If(match func(r *http.Request) bool) RuleOption {
	if match == nil {
		panic("spigot: httplimit: If: nil func")
	}
	return func(ru *rule) { ru.when = append(ru.when, match) }
}

// Cost makes each request cost the rule what f returns, instead of what
// WithCost says (1 by default): the rows an export asks for, say. A cost
// of 0 leaves the rule out for that request. An error, or a negative
// cost, is a key error (see WithKeyErrorHandler). It panics if f is nil.
func Cost(f func(r *http.Request) (int64, error)) RuleOption {
	if f == nil {
		panic("spigot: httplimit: Cost: nil func")
	}
	return func(ru *rule) { ru.cost, ru.weight = f, 0 }
}

// Weight makes each request cost the rule n tokens, instead of what
// WithCost says (1 by default): for a route that is n times as expensive
// as the others. It panics unless n ≥ 1.
func Weight(n int64) RuleOption {
	if n < 1 {
		panic(fmt.Sprintf("spigot: httplimit: Weight(%d): want 1 or more", n))
	}
	return func(ru *rule) { ru.cost, ru.weight = nil, n }
}

// applies reports whether the rule applies to r.
func (ru *rule) applies(r *http.Request) bool {
	if ru.methods != nil && !slices.Contains(ru.methods, r.Method) {
		return false
	}
	if ru.on != nil {
		hit := false
		for _, mux := range ru.on {
			if h, _ := mux.Handler(r); h == http.Handler(matched) {
				hit = true
				break
			}
		}
		if !hit {
			return false
		}
	}
	for _, f := range ru.when {
		if !f(r) {
			return false
		}
	}
	return true
}

// WithCost makes f the cost of a request in tokens, instead of 1, for a
// Middleware and for a Transport.
//
// In a Middleware, a request costs every rule what f returns, unless the
// rule has its own Cost or Weight. A request that costs 0 to every rule
// that applies to it (a health check, say) passes through without
// touching the store, and gets no rate-limit headers. An error, or a
// negative cost, is a key error (see WithKeyErrorHandler). f is called at
// most once per request.
//
// In a Transport, an outgoing request costs what f returns, such as the
// number of items of a batch call. A request that costs 0 is sent without
// asking the store (it still obeys a Retry-After hold); a negative cost is
// an error that matches spigot.ErrInvalidCost. When f fails, RoundTrip
// sends nothing and returns its error, wrapped.
//
// It panics if f is nil.
func WithCost(f func(r *http.Request) (int64, error)) Option {
	if f == nil {
		panic("spigot: httplimit: WithCost: nil func")
	}
	return func(c *config) {
		if c.S != nil {
			c.S.cost = f
		} else {
			c.C.cost = f
		}
	}
}

// WithHeaders chooses the sets of headers sent on every limited response
// (see Headers); 0 sends none but Retry-After. The default is IETF|Legacy.
// It panics on a set that Headers does not define, and on IETF|IETFDraft10.
func WithHeaders(h Headers) Option {
	if !h.valid() {
		panic(fmt.Sprintf("spigot: httplimit: WithHeaders(%d): want IETF or IETFDraft10, and or not Legacy, or 0", h))
	}
	return func(c *config) { c.Server("WithHeaders").headers = h }
}

// WithResetAsUnixTime sends X-RateLimit-Reset (see Legacy) as a Unix
// time: the instant the limit is whole again, in Unix seconds rounded up
// (as GitHub's API sends it), instead of the seconds until then (the
// default, which needs no synchronized clock on the client).
func WithResetAsUnixTime() Option {
	return func(c *config) { c.Server("WithResetAsUnixTime").unixReset = true }
}

// WithClock makes a Middleware or a Transport read the time from c
// instead of the system clock, and wait on it: a Middleware for
// WithResetAsUnixTime and a leaky bucket's Delay, a Transport to date a
// Retry-After, to wait for its end, and to compare that end with the
// request's deadline. When c also has a method After(time.Duration)
// <-chan time.Time, as clocktest.Clock does, they wait on it, so tests
// need no real sleeps. It does not change the clock of the store, or of a
// Transport's Limiter (spigot.WithClock): give them the same clock. It
// panics if c is nil.
func WithClock(clk clock.Clock) Option {
	if nilcheck.Nil(clk) {
		panic("spigot: httplimit: WithClock: nil Clock")
	}
	return func(c *config) {
		if c.S != nil {
			c.S.clock = clk
		} else {
			c.C.gate.Clock = clk
		}
	}
}

// WithNeverAdmittedStatus sets the status of a request that is never
// admitted, whatever the wait, because its cost is above a limit's
// capacity (its decision's RetryAfter is spigot.Never, as
// spigot.ErrNeverAdmitted says of WaitN): 429 Too Many Requests by default
// (and no Retry-After), or, say, 413 Content Too Large. It panics unless
// code is a client or server error status, 400 to 599.
func WithNeverAdmittedStatus(code int) Option {
	if code < 400 || code > 599 {
		panic(fmt.Sprintf("spigot: httplimit: WithNeverAdmittedStatus(%d): want an error status, 400 to 599", code))
	}
	return func(c *config) { c.Server("WithNeverAdmittedStatus").neverAdmitted = code }
}

// WithDenyHandler replaces the response to a denied request. The
// rate-limit headers, and Retry-After, are already set when f runs;
// res.Decision says which limit denied it and when to retry (RetryAfter
// is spigot.Never when no wait can admit it). The default answers 429 Too
// Many Requests (see WithNeverAdmittedStatus) with problem details (RFC 9457) of
// the RateLimit draft's type quota-exceeded, naming the limits that
// denied the request, in JSON when the request's Accept prefers it and in
// plain text otherwise (see Failures in the package doc):
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"too many requests (login): retry in 3s","violated-policies":["login"],"retry_after":3}
//	too many requests (login): retry in 3s
//
// It panics if f is nil.
func WithDenyHandler(f func(w http.ResponseWriter, r *http.Request, res *Result)) Option {
	if f == nil {
		panic("spigot: httplimit: WithDenyHandler: nil func")
	}
	return func(c *config) { c.Server("WithDenyHandler").deny = f }
}

// WithKeyErrorHandler replaces the response to a request that has no key,
// no cost or no limit: a KeyFunc, WithCost's func or a ByFunc's choice
// failed, and err is a *RequestError. The request is charged nothing and
// not served. The default answers 400 Bad Request with problem details
// (RFC 9457) that say what the request lacks and for which limit, in JSON
// when the request's Accept prefers it and in plain text otherwise, and
// never err's text (see Failures in the package doc):
//
//	{"type":"about:blank","title":"Bad Request","status":400,"detail":"the request has no key for the limit \"login-user\""}
//	the request has no key for the limit "login-user"
//
// It panics if f is nil.
func WithKeyErrorHandler(f func(w http.ResponseWriter, r *http.Request, err error)) Option {
	if f == nil {
		panic("spigot: httplimit: WithKeyErrorHandler: nil func")
	}
	return func(c *config) { c.Server("WithKeyErrorHandler").keyErr = f }
}

// WithErrorHandler decides what a request gets when the store fails (a
// lost connection, a timeout, a key that holds another Redis type; never
// a denial, which is a decision): f returns true to serve the request
// anyway, with no rate-limit headers, or writes a response and returns
// false. The observer (see WithObserver) sees every store error first.
//
// The default fails safe: it serves nothing and answers 503 Service
// Unavailable with Retry-After: 1 and a body that never shows the error,
// problem details (RFC 9457) in JSON when the request's Accept prefers it
// and plain text otherwise:
//
//	{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"rate limiter unavailable: retry in 1s","retry_after":1}
//	rate limiter unavailable: retry in 1s
//
// FailOpen serves the request instead, unlimited:
// use it only for limits whose job is fairness, never for login attempts
// or quota-billed work. To keep limiting while Redis is down (in each
// process), or to choose per limit, put the Redis store behind
// store/hybrid: then the store answers by its policy, within its timeout,
// and fails only for errors about one request. It panics if f is nil.
func WithErrorHandler(f func(w http.ResponseWriter, r *http.Request, err error) (serve bool)) Option {
	if f == nil {
		panic("spigot: httplimit: WithErrorHandler: nil func")
	}
	return func(c *config) { c.Server("WithErrorHandler").storeErr = f }
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
	return func(c *config) { c.Server("WithObserver").observe = f }
}

// A Result is what the middleware decided on one request, as its deny
// handler and observer see it. It is valid only until they return.
type Result struct {
	// Route is the pattern of http.ServeMux that routed the request
	// (Request.Pattern), or "".
	Route string
	// Limits, Keys and Costs are, for each rule that applied to the
	// request (in the order of the rules), its limit as chosen for this
	// request, its key, and the tokens the request asked of it.
	Limits []spigot.Limit
	Keys   []string
	Costs  []int64
	// Decision is the store's decision: the combined one, the index By
	// (into Limits) of the limit that decided, and Each limit's (see
	// spigot.Combine). With Err it is a denied, Degraded decision.
	Decision spigot.GroupDecision
	// Latency is how long the store took to decide, when there is an
	// observer; otherwise 0.
	Latency time.Duration
	// Err is the store's error, or nil.
	Err error
}

// New returns a Middleware that limits requests by the rules among opts
// (By, ByFunc), in s: one policy for a whole service, or for one route.
// A request takes its cost from every rule that applies to it, for that
// rule's key, all or nothing: one that a limit denies is charged to none
// of them, so that a flood stopped by the per-user limit does not drain
// the per-address one. The rules that apply to a request are one round
// trip to the store, together (see spigot.DoMulti; on a Redis Cluster,
// see store/redis). A request that no rule applies to passes through
// untouched.
//
// It panics (a programmer error) when s is nil, without a rule, with a
// rule of the zero Limit, and on an option that configures only a
// Transport (WithoutWaiting, say), naming it.
func New(s spigot.Store, opts ...Option) *Middleware {
	if nilcheck.Nil(s) {
		panic("spigot: httplimit: New: nil Store")
	}
	m := &Middleware{store: s, headers: IETF | Legacy, clock: clock.System(), neverAdmitted: http.StatusTooManyRequests, substitutes: store.Substitutes(s)}
	c := config{S: m, Names: names}
	for _, o := range opts {
		o(&c)
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
			ru.policy = string(ratefield.AppendPolicy(nil, ru.limit))
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
	m.pool.New = func() any { return &scratch{Batch: batch.Make(n)} }
	return m
}

// scratch is what one request needs, kept in a pool: the rules that
// apply to it, and its Result.
type scratch struct {
	batch.Batch
	res Result
}

// Wrap returns a handler that limits the requests to next: it serves the
// ones the rules admit, with the rate-limit headers, and answers the
// others with the deny handler. A request that a leaky bucket admits with
// a Delay is held for that long, on the middleware's clock, and then
// served; one whose client goes away first is refunded and not served. It
// panics if next is nil. It is the middleware signature of most routers:
// with chi or gorilla/mux, router.Use(mw.Wrap).
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
	if len(m.rules) == 1 && m.observe == nil && !m.substitutes {
		// The common case, kept on the stack: one rule, no observer.
		ru := &m.rules[0]
		if !ru.applies(r) {
			return true
		}
		var c requestCost
		cost, err := m.costOf(r, ru, 0, &c)
		if err != nil {
			m.keyErr(w, r, err)
			return false
		}
		if cost == 0 {
			return true
		}
		l, k, err := ru.resolve(r, 0)
		if err != nil {
			m.keyErr(w, r, err)
			return false
		}
		d, err := m.store.Do(r.Context(), spigot.Op{Limit: l, Key: k, Action: spigot.Take, N: cost})
		if err == nil && d.Allowed() {
			rules, limits, out := [1]int{0}, [1]spigot.Limit{l}, [1]spigot.Decision{d}
			m.setHeaders(w.Header(), rules[:], limits[:], out[:], 0, d)
			return d.Delay == 0 || m.delay(r, d.Delay)
		}
		s := m.pool.Get().(*scratch)
		defer m.pool.Put(s)
		s.N = 0
		s.Add(0, l, k, cost)
		s.Out[0] = d
		return m.finish(w, r, s, s.Decided(err), 0, err)
	}
	s := m.pool.Get().(*scratch)
	defer m.pool.Put(s)
	if err := m.resolve(r, &s.Batch); err != nil {
		m.keyErr(w, r, err)
		return false
	}
	if s.N == 0 {
		return true
	}
	var start time.Time
	if m.observe != nil {
		start = time.Now()
	}
	ctx := r.Context()
	var substituted *store.Limits
	if m.substitutes {
		ctx, substituted = store.RecordLimits(ctx)
	}
	ds, err := s.Decide(ctx, m.store)
	if substituted != nil {
		// The fields describe the limit that decided: a fallback's, while
		// the store's remote is down.
		for i := range s.N {
			s.Limits[i] = substituted.Of(s.Limits[i])
		}
	}
	var latency time.Duration
	if m.observe != nil {
		latency = time.Since(start)
	}
	return m.finish(w, r, s, ds, latency, err)
}

// finish answers r, whose rules s holds, with their decisions ds (or the
// store's error err), unless it is to be served.
func (m *Middleware) finish(w http.ResponseWriter, r *http.Request, s *scratch, ds spigot.GroupDecision, latency time.Duration, err error) (serve bool) {
	n := s.N
	limits, out := s.Limits[:n], ds.Each
	res := &s.res
	*res = Result{Route: r.Pattern, Limits: limits, Keys: s.Keys[:n], Costs: s.Costs[:n], Decision: ds, Latency: latency, Err: err}
	if m.observe != nil {
		m.observe(r, res)
	}
	if err != nil {
		return m.storeErr(w, r, err)
	}
	d, by := ds.Decision, ds.By
	m.setHeaders(w.Header(), s.Rules[:n], limits, out, by, d)
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

// requestCost is WithCost's cost of one request, read at most once.
type requestCost struct {
	read bool
	n    int64
	err  error
}

// costOf returns what r costs rule i, ru: its Weight, its Cost, or
// WithCost's, read once into c.
func (m *Middleware) costOf(r *http.Request, ru *rule, i int, c *requestCost) (int64, error) {
	var (
		cost int64
		err  error
	)
	switch {
	case ru.weight > 0:
		return ru.weight, nil
	case ru.cost != nil:
		cost, err = ru.cost(r)
	case m.cost == nil:
		return 1, nil
	default:
		if !c.read {
			c.read = true
			c.n, c.err = m.cost(r)
		}
		cost, err = c.n, c.err
	}
	switch {
	case err != nil:
	case cost < 0:
		err = fmt.Errorf("%w %d: a cost must be 0 or more", spigot.ErrInvalidCost, cost)
	default:
		return cost, nil
	}
	return 0, &RequestError{Rule: i, Limit: ru.limit.Name(), Part: "cost", Err: err}
}

// resolve sets in b the rules that apply to r, with their limits, keys
// and costs; a rule that r costs 0 is left out.
func (m *Middleware) resolve(r *http.Request, b *batch.Batch) error {
	var c requestCost
	b.N = 0
	for i := range m.rules {
		ru := &m.rules[i]
		if !ru.applies(r) {
			continue
		}
		cost, err := m.costOf(r, ru, i, &c)
		if err != nil {
			return err
		}
		if cost == 0 {
			continue
		}
		l, k, err := ru.resolve(r, i)
		if err != nil {
			return err
		}
		b.Add(i, l, k, cost)
	}
	return nil
}

// resolve returns the limit and the key of rule i for r.
func (ru *rule) resolve(r *http.Request, i int) (spigot.Limit, string, error) {
	l, err := ru.limitFor(r, i)
	if err != nil {
		return l, "", err
	}
	k, err := ru.keyFor(r, i, l)
	return l, k, err
}

// keyFor returns the key of rule i, of limit l, for r.
func (ru *rule) keyFor(r *http.Request, i int, l spigot.Limit) (string, error) {
	k, err := ru.key(r)
	switch {
	case err != nil:
	case len(k) > spigot.MaxKeyLen:
		err = fmt.Errorf("the key is %d bytes long, more than %d: %w", len(k), spigot.MaxKeyLen, spigot.ErrInvalidKey)
	default:
		return k, nil
	}
	return "", &RequestError{Rule: i, Limit: l.Name(), Part: "key", Err: err}
}

// limitFor returns the limit of rule i for r: its own, or the one its
// func chooses.
func (ru *rule) limitFor(r *http.Request, i int) (spigot.Limit, error) {
	if ru.choose == nil {
		return ru.limit, nil
	}
	l, err := ru.choose(r)
	if err == nil && l == (spigot.Limit{}) {
		err = fmt.Errorf("the zero Limit: %w", spigot.ErrInvalidLimit)
	}
	if err != nil {
		return spigot.Limit{}, &RequestError{Rule: i, Part: "limit", Err: err}
	}
	return l, nil
}

// Reset fills again, for r's key, the limit l of a rule that applies to
// r: after a successful login, the per-user limit, so that the user's
// earlier failures are forgiven. (Resetting the per-address limit too
// would let an attacker with one account of its own reset its address's
// budget between guesses at others.) It runs even when r's context is
// cancelled. It returns an error when no rule that applies to r has the
// limit l, and a key error as the middleware would.
func (m *Middleware) Reset(r *http.Request, l spigot.Limit) (spigot.Decision, error) {
	for i := range m.rules {
		ru := &m.rules[i]
		if !ru.applies(r) {
			continue
		}
		chosen, err := ru.limitFor(r, i)
		if err != nil {
			return spigot.Decision{}, fmt.Errorf("spigot: httplimit: Reset: %w", err)
		}
		if chosen != l {
			continue
		}
		k, err := ru.keyFor(r, i, l)
		if err != nil {
			return spigot.Decision{}, fmt.Errorf("spigot: httplimit: Reset: %w", err)
		}
		return m.store.Do(context.WithoutCancel(r.Context()), spigot.Op{Limit: l, Key: k, Action: spigot.Reset})
	}
	return spigot.Decision{}, fmt.Errorf("spigot: httplimit: Reset: no rule applies %v to the request", l)
}

// Refund gives back to every rule that applies to r what r cost it, for
// r's keys: for a request that was admitted but then not served (the
// handler failed before doing the work). It runs even when r's context
// is cancelled.
func (m *Middleware) Refund(r *http.Request) error {
	s := m.pool.Get().(*scratch)
	defer m.pool.Put(s)
	if err := m.resolve(r, &s.Batch); err != nil {
		return fmt.Errorf("spigot: httplimit: Refund: %w", err)
	}
	if err := s.Refund(r.Context(), m.store); err != nil {
		return fmt.Errorf("spigot: httplimit: Refund: %w", err)
	}
	return nil
}
