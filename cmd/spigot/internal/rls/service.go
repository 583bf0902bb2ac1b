package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/ratefield"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The bounds of a request. A request past them is refused with
// InvalidArgument; envoyproxy/ratelimit has none.
const (
	// MaxDescriptors is the most descriptors one request may name.
	MaxDescriptors = 256
	// MaxEntries is the most entries one descriptor may have.
	MaxEntries = 64
)

// HeaderNames are the names of envoyproxy/ratelimit's response headers;
// an empty name is its default.
type HeaderNames struct {
	Limit     string // RateLimit-Limit
	Remaining string // RateLimit-Remaining
	Reset     string // RateLimit-Reset
}

// An Option configures a Service.
type Option func(*Service)

// WithClock makes the service read the time from c, to compute a fixed
// window's duration_until_reset and the RateLimit-Reset header. Give the
// store the same clock.
func WithClock(c clock.Clock) Option {
	if c == nil {
		panic("rls: WithClock: nil clock")
	}
	return func(s *Service) { s.clock = c }
}

// WithResponseHeaders makes the service add, as envoyproxy/ratelimit does
// with LIMIT_RESPONSE_HEADERS_ENABLED, three headers to each response that
// has a limited descriptor: its limit, its remaining hits and the seconds
// until its window resets, of the descriptor that refused the request (the
// last one that did), or else of the one with the fewest remaining.
func WithResponseHeaders(names HeaderNames) Option {
	if names.Limit == "" {
		names.Limit = "RateLimit-Limit"
	}
	if names.Remaining == "" {
		names.Remaining = "RateLimit-Remaining"
	}
	if names.Reset == "" {
		names.Reset = "RateLimit-Reset"
	}
	return func(s *Service) { s.headers = &names }
}

// WithRateLimitFields makes the service add the IETF RateLimit-Policy and
// RateLimit fields (draft-ietf-httpapi-ratelimit-headers) to each response
// that has a limited descriptor: one member for each, in the request's
// order, named by its rate limit's name, or else by its path.
func WithRateLimitFields() Option {
	return func(s *Service) { s.fields = true }
}

// WithShadowMode makes every response's overall_code OK, as
// envoyproxy/ratelimit's SHADOW_MODE does; the descriptors' statuses still
// say which were over their limit.
func WithShadowMode() Option {
	return func(s *Service) { s.shadow = true }
}

// WithQuotaMode puts every limit in quota mode, as envoyproxy/ratelimit's
// GLOBAL_QUOTA_MODE does: a descriptor over its limit is OK, with
// limit_remaining 0 and no duration_until_reset, and refuses nothing.
func WithQuotaMode() Option {
	return func(s *Service) { s.quota = true }
}

// A Stat is what one descriptor of a request did, for statistics named as
// envoyproxy/ratelimit names its own: the domain, the descriptor's path
// (RateLimit.Path), its hits, and whether they were over the limit (Over),
// near it (Near: within the limit, past 80 % of it, envoyproxy/ratelimit's
// NEAR_LIMIT_RATIO) and over it in shadow mode (Shadow).
type Stat struct {
	Domain, Descriptor string
	Hits               uint64
	Over, Near, Shadow bool
}

// WithStats makes the service call f with the Stat of each limited
// descriptor of each request it decided, on the request's goroutine: f
// must be fast and safe for concurrent use.
func WithStats(f func(Stat)) Option {
	if f == nil {
		panic("rls: WithStats: nil func")
	}
	return func(s *Service) { s.stats = f }
}

// WithErrorHandler makes the service call f with each error of the store,
// which clients never see.
func WithErrorHandler(f func(error)) Option {
	if f == nil {
		panic("rls: WithErrorHandler: nil func")
	}
	return func(s *Service) { s.onError = f }
}

// Service is a rate limit service: the v3 RateLimitService of Envoy, on a
// spigot.Store. It is safe for concurrent use, Reload included. Create one
// with NewService; the zero Service is not usable.
type Service struct {
	pb.UnimplementedRateLimitServiceServer

	store   spigot.Store
	cfg     atomic.Pointer[Config]
	clock   clock.Clock
	headers *HeaderNames
	fields  bool
	shadow  bool
	quota   bool
	onError func(error)
	stats   func(Stat) // WithStats', or nil
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// NewService returns a service that decides in store by cfg (nil: no
// domain, so every descriptor is unmatched). It panics if store is nil.
func NewService(store spigot.Store, cfg *Config, opts ...Option) *Service {
	if store == nil {
		panic("rls: NewService: nil store")
	}
	s := &Service{store: store, clock: clock.System(), onError: func(error) {}}
	for _, o := range opts {
		o(s)
	}
	s.Reload(cfg)
	return s
}

// Reload makes the service decide by cfg from its next request on; a
// request under way finishes with the config it started with. The
// counters are kept: a limit whose algorithm and unit are unchanged goes
// on counting each key where it was.
func (s *Service) Reload(cfg *Config) {
	if cfg == nil {
		cfg = &Config{}
	}
	s.cfg.Store(cfg)
}

// Config returns the config the service decides by.
func (s *Service) Config() *Config { return s.cfg.Load() }

// the state of one descriptor of a request.
type item struct {
	rl        *RateLimit
	limit     spigot.Limit // zero for 0 requests per unit
	key       string
	hits      uint64
	n         int64 // hits, clamped to the capacity + 1
	unlimited bool
	enforced  bool // neither shadow nor quota mode
	// the outcome
	decided bool // by the store
	over    bool
	d       spigot.Decision
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, "rls: "+format, args...)
}

// ShouldRateLimit decides a request, as envoyproxy/ratelimit does, in the
// service's store. A request without a domain or descriptors, or past
// MaxDescriptors or MaxEntries, is an InvalidArgument error; a failure of
// the store is Unavailable, and its detail goes to WithErrorHandler only.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	// envoyproxy/ratelimit's answers to these two, code and message.
	if req.GetDomain() == "" {
		return nil, status.Error(codes.Unknown, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.Unknown, "rate limit descriptor list must not be empty")
	}
	if len(req.Descriptors) > MaxDescriptors {
		return nil, invalid("%d descriptors: at most %d are allowed", len(req.Descriptors), MaxDescriptors)
	}
	cfg := s.cfg.Load()
	items := make([]item, len(req.Descriptors))
	replacing := map[string]bool{}
	for i, d := range req.Descriptors {
		if len(d.GetEntries()) > MaxEntries {
			return nil, invalid("descriptor %d has %d entries: at most %d are allowed", i, len(d.Entries), MaxEntries)
		}
		if d.GetIsNegativeHits() {
			return nil, invalid("descriptor %d: is_negative_hits is not supported", i)
		}
		entries := make([]Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = Entry{e.GetKey(), e.GetValue()}
		}
		it := &items[i]
		if h := d.GetHitsAddend(); h != nil {
			it.hits = h.GetValue()
		} else {
			it.hits = uint64(max(1, req.GetHitsAddend()))
		}
		var m match
		if cfg.domains[req.Domain] == nil {
			// An unknown domain: no limit, not even an override.
		} else if o := d.GetLimit(); o != nil {
			u := Unit(o.GetUnit())
			if u.Duration() == 0 {
				return nil, invalid("descriptor %d: limit override has no valid unit", i)
			}
			r := &RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: u, Algorithm: FixedWindow, Capacity: int64(o.GetRequestsPerUnit()), path: overridePath(req.Domain, entries)}
			if r.RequestsPerUnit > 0 {
				lim, err := newLimit(FixedWindow, r.RequestsPerUnit, u, r.Capacity, "")
				if err != nil {
					return nil, invalid("descriptor %d: limit override: %v", i, err)
				}
				r.limit, r.over = lim, overMarker(FixedWindow, u, lim.Name())
			}
			m.limit = r
		} else {
			m = cfg.lookup(req.Domain, entries)
		}
		if m.limit == nil {
			continue
		}
		for _, name := range m.limit.Replaces {
			replacing[name] = true
		}
		if m.limit.Unlimited {
			it.unlimited = true
			continue
		}
		it.rl = m.limit
		it.limit = m.limit.limit
		it.key = storeKey(req.Domain, entries, m.shared)
		if m.limit.Shared != "" && len(entries) > 0 {
			it.key = entries[len(entries)-1].Value // the library's key: the shared limit's
		}
		it.enforced = !m.limit.ShadowMode && !m.limit.QuotaMode && !s.quota
		c := it.limit.Capacity()
		it.n = int64(min(it.hits, uint64(c)+1))
	}
	for i := range items {
		if it := &items[i]; it.rl != nil && it.rl.Name != "" && replacing[it.rl.Name] {
			it.rl = nil
		}
	}
	if err := s.decide(ctx, cfg.Charging(req.Domain), items); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, status.FromContextError(cerr).Err()
		}
		if errors.Is(err, spigot.ErrInvalidKey) || errors.Is(err, spigot.ErrInvalidCost) {
			return nil, invalid("a descriptor cannot be limited")
		}
		s.onError(err)
		return nil, status.Error(codes.Unavailable, "rls: the rate limit store is unavailable")
	}
	resp := s.respond(items)
	if s.stats != nil {
		for i := range items {
			it := &items[i]
			if it.rl == nil || it.unlimited {
				continue
			}
			st := Stat{Domain: req.Domain, Descriptor: it.rl.path, Hits: it.hits, Over: it.over}
			if !it.over && it.rl.RequestsPerUnit > 0 {
				used := uint64(it.rl.RequestsPerUnit) - uint64(it.remaining())
				st.Near = used*5 > uint64(it.rl.RequestsPerUnit)*4
			}
			st.Shadow = it.over && it.rl.ShadowMode
			s.stats(st)
		}
	}
	return resp, nil
}

// overridePath names a limit override's descriptor: the domain, then
// each entry's key and value.
func overridePath(domainName string, entries []Entry) string {
	p := domainName
	for _, e := range entries {
		p += "." + e.Key
		if e.Value != "" {
			p += "_" + e.Value
		}
	}
	return p
}

// decide applies the items' hits in the store as charging says.
func (s *Service) decide(ctx context.Context, charging Charging, items []item) error {
	// A limit of 0 requests per unit refuses any hit, without the store.
	for i := range items {
		if it := &items[i]; it.rl != nil && it.rl.RequestsPerUnit == 0 {
			it.over = it.hits > 0
		}
	}
	inStore := func(it *item) bool { return it.rl != nil && it.rl.RequestsPerUnit > 0 }
	switch charging {
	case ChargeStopWhenOver:
		anyOver := false
		var idx []int
		var ops []spigot.Op
		for i := range items {
			it := &items[i]
			if it.rl != nil && it.over {
				anyOver = true
			}
			if inStore(it) && it.hits > 0 {
				idx = append(idx, i)
				ops = append(ops, spigot.Op{Limit: it.limit, Key: it.key, Action: spigot.Peek, N: it.n})
			}
		}
		wouldOver := make([]bool, len(items))
		if len(ops) > 0 {
			out := make([]spigot.Decision, len(ops))
			if err := spigot.DoMulti(ctx, s.store, spigot.Independent, ops, out); err != nil {
				return err
			}
			for j, i := range idx {
				if !out[j].Allowed() {
					wouldOver[i] = true
					anyOver = true
				}
			}
		}
		return s.charge(ctx, items, func(i int) bool { return !anyOver || wouldOver[i] })
	case ChargeAllOrNothing:
		refused := false
		for i := range items {
			if it := &items[i]; it.rl != nil && it.enforced && it.over {
				refused = true
			}
		}
		var idx []int
		var ops []spigot.Op
		for i := range items {
			it := &items[i]
			if inStore(it) && it.enforced {
				idx = append(idx, i)
				op := spigot.Op{Limit: it.limit, Key: it.key, Action: spigot.Take, N: it.n}
				if refused || it.hits == 0 {
					op.Action = spigot.Peek
				}
				ops = append(ops, op)
			}
		}
		if len(ops) > 0 {
			out := make([]spigot.Decision, len(ops))
			if err := spigot.DoMulti(ctx, s.store, spigot.AllOrNothing, ops, out); err != nil {
				return err
			}
			for j, i := range idx {
				items[i].d, items[i].decided = out[j], true
				items[i].over = items[i].hits > 0 && !out[j].Allowed()
				if items[i].over {
					refused = true
				}
			}
		}
		// Shadow and quota mode limits never refuse: they are charged
		// as envoyproxy/ratelimit charges, unless the request is refused.
		return s.charge(ctx, items, func(i int) bool { return !items[i].enforced && !refused })
	default:
		return s.charge(ctx, items, func(int) bool { return true })
	}
}

// charge applies, in one batch, a TakeUpTo of its hits to every item in
// the store for which charged(i) is true and that has not been decided
// (the hits of a refused request use up what its limit had left, as
// envoyproxy/ratelimit's counters count them) and a Peek of 0 to the
// others, for what their limits hold.
//
// A fixed window's counter stops at its limit, where envoyproxy/ratelimit's
// goes on past it: so that a check of 0 hits after a refused hit is over
// the limit, as there, a refused hit also marks its key's window over (a
// window of one on the key, under the limit's over-marker), which a check
// of 0 hits reads.
func (s *Service) charge(ctx context.Context, items []item, charged func(int) bool) error {
	var idx, checks []int // checks: the ops that read an over-marker, by item
	var ops []spigot.Op
	for i := range items {
		it := &items[i]
		if it.rl == nil || it.rl.RequestsPerUnit == 0 || it.decided {
			continue
		}
		op := spigot.Op{Limit: it.limit, Key: it.key, Action: spigot.Peek}
		if it.hits > 0 && charged(i) {
			op.Action, op.N = spigot.TakeUpTo, it.n
		}
		idx = append(idx, i)
		ops = append(ops, op)
		if it.hits == 0 && it.rl.Algorithm == FixedWindow {
			checks = append(checks, i)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	n := len(ops)
	for _, i := range checks {
		ops = append(ops, spigot.Op{Limit: items[i].rl.over, Key: items[i].key, Action: spigot.Peek, N: 1})
	}
	out := make([]spigot.Decision, len(ops))
	if err := spigot.DoMulti(ctx, s.store, spigot.Independent, ops, out); err != nil {
		return err
	}
	var marks []spigot.Op
	for j, i := range idx {
		it := &items[i]
		it.d, it.decided = out[j], true
		it.over = ops[j].Action == spigot.TakeUpTo && out[j].N < it.n
		if it.over && it.rl.Algorithm == FixedWindow {
			marks = append(marks, spigot.Op{Limit: it.rl.over, Key: it.key, Action: spigot.TakeUpTo, N: 1})
		}
	}
	for j, i := range checks {
		if !out[n+j].Allowed() { // marked: a hit was refused in this window
			items[i].over = true
		}
	}
	if len(marks) > 0 {
		return spigot.DoMulti(ctx, s.store, spigot.Independent, marks, make([]spigot.Decision, len(marks)))
	}
	return nil
}

const maxUint32 = math.MaxUint32

// remaining returns what an item's status says is left.
func (it *item) remaining() uint32 {
	if it.over || it.d.Remaining < 0 {
		return 0
	}
	return uint32(min(it.d.Remaining, maxUint32))
}

// reset returns the time until an item's limit resets: for a fixed window,
// the seconds to the end of the epoch-aligned window, as
// envoyproxy/ratelimit computes it; for the other algorithms, the time
// until the limit is whole again, in whole seconds rounded up.
func (s *Service) reset(it *item) time.Duration {
	if it.rl.Algorithm == FixedWindow || it.rl.RequestsPerUnit == 0 {
		sec := int64(it.rl.Unit.Duration() / time.Second)
		now := s.clock.Now().Unix()
		return time.Duration(sec-now%sec) * time.Second
	}
	return time.Duration(ratefield.Seconds(it.d.ResetAfter)) * time.Second
}

func (s *Service) respond(items []item) *pb.RateLimitResponse {
	resp := &pb.RateLimitResponse{
		OverallCode: pb.RateLimitResponse_OK,
		Statuses:    make([]*pb.RateLimitResponse_DescriptorStatus, len(items)),
	}
	minRemaining := uint32(maxUint32)
	header := -1
	for i := range items {
		it := &items[i]
		switch {
		case it.unlimited:
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: maxUint32}
			continue
		case it.rl == nil:
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
			continue
		}
		st := &pb.RateLimitResponse_DescriptorStatus{
			Code:               pb.RateLimitResponse_OK,
			CurrentLimit:       &pb.RateLimitResponse_RateLimit{Name: it.rl.Name, RequestsPerUnit: it.rl.RequestsPerUnit, Unit: pb.RateLimitResponse_RateLimit_Unit(it.rl.Unit)},
			LimitRemaining:     it.remaining(),
			DurationUntilReset: durationpb.New(s.reset(it)),
		}
		if st.LimitRemaining < minRemaining {
			header, minRemaining = i, st.LimitRemaining
		}
		if it.over {
			switch {
			case it.rl.ShadowMode:
				// Over, but only watched: OK, with nothing remaining.
			case it.rl.QuotaMode || s.quota:
				st.DurationUntilReset = nil
			default:
				st.Code = pb.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
				header, minRemaining = i, 0
			}
		}
		resp.Statuses[i] = st
	}
	if s.shadow {
		resp.OverallCode = pb.RateLimitResponse_OK
	}
	if s.headers != nil && header >= 0 {
		it := &items[header]
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corepb.HeaderValue{Key: s.headers.Limit, Value: strconv.FormatUint(uint64(it.rl.RequestsPerUnit), 10)},
			&corepb.HeaderValue{Key: s.headers.Remaining, Value: strconv.FormatUint(uint64(it.remaining()), 10)},
			&corepb.HeaderValue{Key: s.headers.Reset, Value: strconv.FormatInt(int64(s.reset(it)/time.Second), 10)},
		)
	}
	if s.fields {
		var policy, limit []byte
		for i := range items {
			it := &items[i]
			if it.rl == nil || it.unlimited {
				continue
			}
			if len(policy) > 0 {
				policy, limit = append(policy, ", "...), append(limit, ", "...)
			}
			name := it.rl.Name
			if name == "" {
				name = it.rl.path
			}
			policy = ratefield.AppendString(policy, name)
			policy = fmt.Appendf(policy, ";q=%d;w=%d", it.rl.RequestsPerUnit, int64(it.rl.Unit.Duration()/time.Second))
			limit = ratefield.AppendString(limit, name)
			limit = fmt.Appendf(limit, ";r=%d", it.remaining())
			if t := s.refill(it); t > 0 {
				limit = fmt.Appendf(limit, ";t=%d", t)
			}
		}
		if len(policy) > 0 {
			resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
				&corepb.HeaderValue{Key: "RateLimit-Policy", Value: string(policy)},
				&corepb.HeaderValue{Key: "RateLimit", Value: string(limit)},
			)
		}
	}
	return resp
}

// refill returns the t of an item's RateLimit member, in seconds: when
// more is admitted (0 when never).
func (s *Service) refill(it *item) int64 {
	if it.rl.RequestsPerUnit == 0 {
		return 0
	}
	if it.rl.Algorithm == FixedWindow {
		return int64(s.reset(it) / time.Second)
	}
	if it.d.RefillAfter <= 0 || it.d.RefillAfter == spigot.Never {
		return 0
	}
	return ratefield.Seconds(it.d.RefillAfter)
}
