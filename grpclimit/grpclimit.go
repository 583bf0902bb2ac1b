package grpclimit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/batch"
	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/internal/ratefield"
	"github.com/spigot-go/spigot/internal/sides"
	"github.com/spigot-go/spigot/internal/wait"
	"github.com/spigot-go/spigot/store"
)

// A Server limits the calls that gRPC servers receive, by its rules, in
// one store: its interceptors (UnaryServerInterceptor,
// StreamServerInterceptor) go on a grpc.Server, as a Client's go on a
// connection. It is safe for concurrent use, and one Server may serve both
// interceptors of many servers. Create one with New; the zero Server is
// not usable.
type Server struct {
	store    spigot.Store
	rules    []rule
	clock    clock.Clock
	keyErr   func(ctx context.Context, fullMethod string, err error) error
	storeErr func(ctx context.Context, fullMethod string, err error) error
	observe  func(ctx context.Context, res *Result)
	pool     sync.Pool // of *scratch
	// the store may decide by other limits (store.Substituter)
	substitutes bool
}

// A rule is one limit applied to the calls it matches, by one key, at one
// cost.
type rule struct {
	limit   spigot.Limit
	key     KeyFunc
	policy  string   // limit's ratelimit-policy member, made once
	methods []string // Methods'; nil: every method
	cost    func(ctx context.Context, fullMethod string, req any) (int64, error)
	weight  int64 // Weight's, or 0
	message bool  // PerMessage
}

// An Option configures a Server (New) or a Client (NewClient), the two
// sides of this package, as one Option of otelgrpc configures its server
// and its client handlers. A rule (By), WithKeyErrorHandler,
// WithErrorHandler and WithObserver configure a Server; WithClientKey,
// WithClientCost, WithoutWaiting and WithoutRetryInfo configure a Client;
// WithClock configures both. An option given to the side it does not
// configure would do nothing there: New and NewClient panic on it, naming
// it.
type Option func(*config)

// config is what an Option configures: the Server that New makes, or the
// Client that NewClient makes (the other is nil).
type config = sides.Of[Server, Client]

// names names this package's sides in the panics of config.
var names = &sides.Names{Package: "grpclimit", Server: "Server", NewServer: "New", Client: "Client", NewClient: "NewClient"}

// A RuleOption narrows a rule to some methods (Methods) or sets what
// their calls cost it (Cost, Weight). A rule with several Methods applies
// to the calls that any of them names.
type RuleOption func(*rule)

// By adds a rule: every call it applies to (every call, unless opts
// narrow it) takes its cost (1 by default) from limit, for the key that
// key returns (PeerIP() when key is nil). A call takes from every rule
// that applies to it, all or nothing (see New).
func By(limit spigot.Limit, key KeyFunc, opts ...RuleOption) Option {
	return func(c *config) {
		s := c.Server("By")
		ru := rule{limit: limit, key: key}
		for _, o := range opts {
			o(&ru)
		}
		s.rules = append(s.rules, ru)
	}
}

// Methods narrows a rule to the calls of the given methods: full method
// names, as gRPC writes them ("/pkg.Service/Method"), compared exactly,
// or a service's prefix ending in a slash ("/pkg.Service/") for every
// method of that service. It panics on a name that does not start with a
// slash, or that is neither a full method name nor a service's prefix.
func Methods(names ...string) RuleOption {
	ms := make([]string, len(names))
	for i, n := range names {
		svc, method, ok := strings.Cut(strings.TrimPrefix(n, "/"), "/")
		if !strings.HasPrefix(n, "/") || !ok || svc == "" || strings.Contains(method, "/") {
			panic(fmt.Sprintf("spigot: grpclimit: Methods(%q): want a full method name, /pkg.Service/Method, or a service's prefix, /pkg.Service/", n))
		}
		ms[i] = n
	}
	return func(ru *rule) { ru.methods = append(ru.methods, ms...) }
}

// Cost makes each call cost the rule what f returns, instead of 1: the
// rows a query asks for, say. req is the request message of a unary call,
// nil for a stream's opening, and the message of a stream for a
// PerMessage rule. A cost of 0 leaves
// the rule out for that call. An error, or a negative cost, is a key
// error (see WithKeyErrorHandler). f must be safe for concurrent use. It
// panics if f is nil.
func Cost(f func(ctx context.Context, fullMethod string, req any) (int64, error)) RuleOption {
	if f == nil {
		panic("spigot: grpclimit: Cost: nil func")
	}
	return func(ru *rule) { ru.cost, ru.weight = f, 0 }
}

// Weight makes each call cost the rule n tokens, instead of 1: for a
// method that is n times as expensive as the others. It panics unless
// n ≥ 1.
func Weight(n int64) RuleOption {
	if n < 1 {
		panic(fmt.Sprintf("spigot: grpclimit: Weight(%d): want 1 or more", n))
	}
	return func(ru *rule) { ru.cost, ru.weight = nil, n }
}

// PerMessage makes a rule limit each message that a client sends on a
// stream, at the rule's cost, instead of the stream's opening: for a
// stream of uploads, or of queries. req, for the rule's KeyFunc and Cost,
// is the message. A message that the rules deny is not handed to the
// handler: its RecvMsg returns the denial's status error instead
// (ResourceExhausted, with RetryInfo and QuotaFailure, as for a call),
// which the handler returns to end the stream, and a later RecvMsg may
// receive the next message. A unary call's request is one message, so a
// PerMessage rule limits unary calls as any rule does. Only a stream's
// opening sends the rate-limit metadata, in its header; its messages'
// decisions are not sent.
func PerMessage() RuleOption {
	return func(ru *rule) { ru.message = true }
}

// The moments a Server decides.
type phase int

const (
	unaryCall     phase = iota // a unary call: every rule
	streamOpen                 // a stream's opening: the rules without PerMessage
	streamMessage              // a stream's message: the PerMessage rules
)

// applies reports whether the rule applies, at phase p, to a call of
// fullMethod.
func (ru *rule) applies(fullMethod string, p phase) bool {
	if p == streamOpen && ru.message || p == streamMessage && !ru.message {
		return false
	}
	if ru.methods == nil {
		return true
	}
	for _, m := range ru.methods {
		if m == fullMethod || m[len(m)-1] == '/' && strings.HasPrefix(fullMethod, m) {
			return true
		}
	}
	return false
}

// WithKeyErrorHandler replaces the error returned for a call that has no
// key or no cost: a KeyFunc or a Cost's func failed, and err is a
// *RequestError. The call is charged nothing and not served; f returns
// the error the client gets, which should be a status error (see
// google.golang.org/grpc/status), and must not be nil. The default is
// codes.InvalidArgument with a message that says what the call lacks and
// for which limit, never err's text:
//
//	the call has no key for the limit "per-tenant"
//
// It panics if f is nil.
func WithKeyErrorHandler(f func(ctx context.Context, fullMethod string, err error) error) Option {
	if f == nil {
		panic("spigot: grpclimit: WithKeyErrorHandler: nil func")
	}
	return func(c *config) { c.Server("WithKeyErrorHandler").keyErr = f }
}

// WithErrorHandler decides what a call gets when the store fails (a lost
// connection, a timeout, a key that holds another Redis type; never a
// denial, which is a decision): f returns nil to serve the call anyway,
// with no rate-limit metadata, or the error the client gets, which should
// be a status error. The observer (see WithObserver) sees every store
// error first.
//
// The default fails safe: it serves nothing and returns
// codes.Unavailable, with a RetryInfo of one second and the message
// "rate limiter unavailable: retry in 1s", which never shows the error.
// FailOpen serves the call instead, unlimited: use it only for limits
// whose job is fairness, never for login attempts or quota-billed work.
// To keep limiting while Redis is down (in each process), or to choose
// per limit, put the Redis store behind store/hybrid. It panics if f is
// nil.
func WithErrorHandler(f func(ctx context.Context, fullMethod string, err error) error) Option {
	if f == nil {
		panic("spigot: grpclimit: WithErrorHandler: nil func")
	}
	return func(c *config) { c.Server("WithErrorHandler").storeErr = f }
}

// FailOpen is an error handler (see WithErrorHandler) that serves a call
// when the store fails, as if no limit applied.
func FailOpen(context.Context, string, error) error { return nil }

// WithObserver calls f once per call that the store decided or failed
// (not for cost 0 or a key error), before the call is served or refused:
// for metrics and logs. f must be quick and must not keep res, which the
// Server reuses once f returns. With no observer the Server does not
// read the clock. It panics if f is nil.
func WithObserver(f func(ctx context.Context, res *Result)) Option {
	if f == nil {
		panic("spigot: grpclimit: WithObserver: nil func")
	}
	return func(c *config) { c.Server("WithObserver").observe = f }
}

// WithClock makes a Server or a Client read the time from c instead of
// the system clock, and wait on it: a Server for a leaky bucket's Delay, a
// Client to date a RetryInfo, to wait for its end, and to compare that end
// with the call's deadline. When c also has a method After(time.Duration)
// <-chan time.Time, as clocktest.Clock does, they wait on it. It does not
// change the clock of the store, or of a Client's Limiter
// (spigot.WithClock): give them the same clock. It panics if c is nil.
func WithClock(clk clock.Clock) Option {
	if nilcheck.Nil(clk) {
		panic("spigot: grpclimit: WithClock: nil Clock")
	}
	return func(c *config) {
		if c.S != nil {
			c.S.clock = clk
		} else {
			c.C.gate.Clock = clk
		}
	}
}

// A Result is what the Server decided on one call, as its observer sees
// it. It is valid only until the observer returns.
type Result struct {
	// FullMethod is the call's method, "/pkg.Service/Method".
	FullMethod string
	// Limits, Keys and Costs are, for each rule that applied to the call
	// (in the order of the rules), its limit, its key, and the tokens the
	// call asked of it.
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

// New returns a Server that limits calls by the rules among opts (By),
// in s. A call takes its cost from every rule that applies to it, for
// that rule's key, all or nothing: one that a limit denies is charged to
// none of them, so that a flood stopped by the per-tenant limit does not
// drain the per-address one. The rules that apply to a call are one round
// trip to the store, together (see spigot.DoMulti). A call that no rule
// applies to passes through untouched.
//
// It panics (a programmer error) when s is nil, without a rule, with a
// rule of the zero Limit, and on an option that configures only a Client
// (WithoutWaiting, say), naming it.
func New(s spigot.Store, opts ...Option) *Server {
	if nilcheck.Nil(s) {
		panic("spigot: grpclimit: New: nil Store")
	}
	srv := &Server{store: s, clock: clock.System(), keyErr: keyError, storeErr: failSafe, substitutes: store.Substitutes(s)}
	c := config{S: srv, Names: names}
	for _, o := range opts {
		o(&c)
	}
	if len(srv.rules) == 0 {
		panic("spigot: grpclimit: New: no rule; add one with By")
	}
	for i := range srv.rules {
		ru := &srv.rules[i]
		if ru.key == nil {
			ru.key = PeerIP()
		}
		if ru.limit == (spigot.Limit{}) {
			panic(fmt.Sprintf("spigot: grpclimit: New: rule %d has the zero Limit", i))
		}
		ru.policy = string(ratefield.AppendPolicy(nil, ru.limit))
	}
	n := len(srv.rules)
	srv.pool.New = func() any { return &scratch{Batch: batch.Make(n)} }
	return srv
}

// scratch is what one call needs, kept in a pool: the rules that apply
// to it, and its Result.
type scratch struct {
	batch.Batch
	res Result
}

// UnaryServerInterceptor returns an interceptor that limits unary calls:
// it calls the handler for those the rules admit, with the rate-limit
// metadata in the response header, and returns a status error for the
// others (see the package doc). A call that a leaky bucket admits with a
// Delay is held for that long, on the Server's clock; one whose context
// ends first is refunded and not served. Install it with
// grpc.ChainUnaryInterceptor (or grpc.UnaryInterceptor).
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := s.limit(ctx, info.FullMethod, req, grpc.SetHeader, unaryCall); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns an interceptor that limits streams
// when they open, before the handler runs: the request message of a rule's
// KeyFunc and Cost is nil there. It answers as UnaryServerInterceptor
// does, the rate-limit metadata going in the stream's header. The rules
// with PerMessage limit instead each message the handler receives (see
// PerMessage). Install it with grpc.ChainStreamInterceptor (or
// grpc.StreamInterceptor).
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		setHeader := func(_ context.Context, md metadata.MD) error { return ss.SetHeader(md) }
		if err := s.limit(ss.Context(), info.FullMethod, nil, setHeader, streamOpen); err != nil {
			return err
		}
		if s.perMessage(info.FullMethod) {
			ss = &limitedStream{ServerStream: ss, server: s, method: info.FullMethod}
		}
		return handler(srv, ss)
	}
}

// perMessage reports whether a PerMessage rule applies to fullMethod.
func (s *Server) perMessage(fullMethod string) bool {
	for i := range s.rules {
		if s.rules[i].applies(fullMethod, streamMessage) {
			return true
		}
	}
	return false
}

// limitedStream limits the messages its handler receives by the
// PerMessage rules.
type limitedStream struct {
	grpc.ServerStream
	server *Server
	method string
}

// RecvMsg receives the next message into m, and returns the error of its
// denial if the PerMessage rules deny it.
func (s *limitedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.server.limit(s.Context(), s.method, m, nil, streamMessage)
}

// limit decides a call of fullMethod, with request req (nil for a
// stream's opening), at phase p, and returns nil to serve it or the error
// to return instead. setHeader, unless nil, sets the call's response
// header.
func (s *Server) limit(ctx context.Context, fullMethod string, req any, setHeader func(context.Context, metadata.MD) error, p phase) error {
	sc := s.pool.Get().(*scratch)
	defer s.pool.Put(sc)
	if err := s.resolve(ctx, fullMethod, req, &sc.Batch, p); err != nil {
		return s.keyErr(ctx, fullMethod, err)
	}
	n := sc.N
	if n == 0 {
		return nil
	}
	var start time.Time
	if s.observe != nil {
		start = time.Now()
	}
	dctx := ctx
	var substituted *store.Limits
	if s.substitutes {
		dctx, substituted = store.RecordLimits(ctx)
	}
	ds, err := sc.Decide(dctx, s.store)
	if substituted != nil {
		// The metadata describe the limit that decided: a fallback's,
		// while the store's remote is down.
		for i := range n {
			sc.Limits[i] = substituted.Of(sc.Limits[i])
		}
	}
	res := &sc.res
	*res = Result{FullMethod: fullMethod, Limits: sc.Limits[:n], Keys: sc.Keys[:n], Costs: sc.Costs[:n], Decision: ds, Err: err}
	if s.observe != nil {
		res.Latency = time.Since(start)
		s.observe(ctx, res)
	}
	if err != nil {
		return s.storeErr(ctx, fullMethod, err)
	}
	if setHeader != nil {
		_ = setHeader(ctx, s.header(sc.Rules[:n], res.Limits, ds.Each)) // fails only once the header went: nothing to add then
	}
	d := ds.Decision
	if !d.Allowed() {
		return denial(res)
	}
	if d.Delay > 0 && wait.Sleep(ctx, s.clock, d.Delay) != nil {
		_ = sc.Refund(ctx, s.store) // best effort: the client is gone either way
		return contextError(ctx)
	}
	return nil
}

// Reset fills again, for the key of the call whose context ctx is (a
// handler's, or one derived from it), the limit l of a rule that applies
// to the call: after a successful login, the per-user limit, so that the
// user's earlier failures are forgiven, as httplimit's Middleware.Reset
// does. req is the call's request (nil for a stream), which the rule's
// KeyFunc reads. It runs even when ctx is cancelled. It returns an error
// when ctx is not a gRPC server call's, when no rule that applies to the
// call has the limit l, and a key error as the interceptors would.
func (s *Server) Reset(ctx context.Context, req any, l spigot.Limit) (spigot.Decision, error) {
	method, ok := grpc.Method(ctx)
	if !ok {
		return spigot.Decision{}, fmt.Errorf("spigot: grpclimit: Reset: the context is not a gRPC server call's")
	}
	p := phaseOf(req)
	for i := range s.rules {
		ru := &s.rules[i]
		if ru.limit != l || !ru.applies(method, p) {
			continue
		}
		k, err := ru.key(ctx, method, req)
		if err == nil && len(k) > spigot.MaxKeyLen {
			err = fmt.Errorf("the key is %d bytes long, more than %d: %w", len(k), spigot.MaxKeyLen, spigot.ErrInvalidKey)
		}
		if err != nil {
			return spigot.Decision{}, fmt.Errorf("spigot: grpclimit: Reset: %w", &RequestError{Rule: i, Limit: l.Name(), Part: "key", Err: err})
		}
		return s.store.Do(context.WithoutCancel(ctx), spigot.Op{Limit: l, Key: k, Action: spigot.Reset})
	}
	return spigot.Decision{}, fmt.Errorf("spigot: grpclimit: Reset: no rule applies %v to %s", l, method)
}

// Refund gives back to every rule that applies to the call whose context
// ctx is what the call cost it, for the call's keys: for a call that was
// admitted but then not served (the handler failed before doing the
// work), as httplimit's Middleware.Refund does. req is the call's request
// (nil for a stream: the rules of its opening). It runs even when ctx is
// cancelled, and returns an error when ctx is not a gRPC server call's or
// a rule cannot read its key or cost.
func (s *Server) Refund(ctx context.Context, req any) error {
	method, ok := grpc.Method(ctx)
	if !ok {
		return fmt.Errorf("spigot: grpclimit: Refund: the context is not a gRPC server call's")
	}
	sc := s.pool.Get().(*scratch)
	defer s.pool.Put(sc)
	if err := s.resolve(ctx, method, req, &sc.Batch, phaseOf(req)); err != nil {
		return fmt.Errorf("spigot: grpclimit: Refund: %w", err)
	}
	if err := sc.Refund(ctx, s.store); err != nil {
		return fmt.Errorf("spigot: grpclimit: Refund: %w", err)
	}
	return nil
}

// phaseOf returns the phase whose rules Reset and Refund apply for a
// call with request req: a unary call's, or a stream's opening (nil).
func phaseOf(req any) phase {
	if req == nil {
		return streamOpen
	}
	return unaryCall
}

// resolve sets in b the rules that apply, at phase p, to a call of
// fullMethod with request req, with their limits, keys and costs; a rule
// that the call costs 0 is left out.
func (s *Server) resolve(ctx context.Context, fullMethod string, req any, b *batch.Batch, p phase) error {
	b.N = 0
	for i := range s.rules {
		ru := &s.rules[i]
		if !ru.applies(fullMethod, p) {
			continue
		}
		cost := int64(1)
		switch {
		case ru.weight > 0:
			cost = ru.weight
		case ru.cost != nil:
			var err error
			cost, err = ru.cost(ctx, fullMethod, req)
			if err == nil && cost < 0 {
				err = fmt.Errorf("%w %d: a cost must be 0 or more", spigot.ErrInvalidCost, cost)
			}
			if err != nil {
				return &RequestError{Rule: i, Limit: ru.limit.Name(), Part: "cost", Err: err}
			}
		}
		if cost == 0 {
			continue
		}
		k, err := ru.key(ctx, fullMethod, req)
		if err == nil && len(k) > spigot.MaxKeyLen {
			err = fmt.Errorf("the key is %d bytes long, more than %d: %w", len(k), spigot.MaxKeyLen, spigot.ErrInvalidKey)
		}
		if err != nil {
			return &RequestError{Rule: i, Limit: ru.limit.Name(), Part: "key", Err: err}
		}
		b.Add(i, ru.limit, k, cost)
	}
	return nil
}

// A RequestError is what a key error handler (see WithKeyErrorHandler)
// receives when the Server cannot read what a rule needs from a call:
// its key or its cost. Err is the cause, which may hold the client's
// input and Go internals: log it, do not send it to the client.
type RequestError struct {
	// Rule is the index of the rule, in the order of New's options.
	Rule int
	// Limit is the name of the rule's limit.
	Limit string
	// Part is what could not be read: "key" or "cost".
	Part string
	// Err is why.
	Err error
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("spigot: grpclimit: rule %d (%s): the call's %s: %v", e.Rule, e.Limit, e.Part, e.Err)
}

// Unwrap returns e.Err.
func (e *RequestError) Unwrap() error { return e.Err }
