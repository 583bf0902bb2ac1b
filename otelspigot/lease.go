package otelspigot

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store/lease"
)

// LeaseObserver returns a store/lease observer that records what the
// lease Store does, by limit (spigot.limit), each in the context of the
// call that caused it:
//
//   - spigot.lease.hits: each request admitted from a lease, with no call
//     of the remote store (a request on several limits counts once for
//     each);
//   - spigot.lease.denials: each request denied on what the remote store
//     last told of its key, with no call of it;
//   - spigot.lease.takes: each call of the remote store that took tokens
//     for the Store's decisions (a request's cost that a lease did not
//     hold, and a new lease); a failed one has error.type, as ErrorType
//     names it;
//   - spigot.lease.tokens.taken: the tokens those calls took from the
//     remote store: the request's own cost and the new lease;
//   - spigot.lease.tokens.returned: the unspent tokens of leases given
//     back to the remote store (when their key is idle, at Close, with a
//     Refund, or when the limit's refill or configuration overtakes
//     them); those of a Refund that failed have error.type, and are lost
//     until the limit refills.
//
// Give it to lease.WithObserver:
//
//	s := lease.New(spigotredis.New(rdb), lease.WithObserver(otelspigot.LeaseObserver()))
//
// (hits + denials) / (hits + denials + takes) is the share of requests
// decided in memory. Requests that the Store passes to the remote as they
// are (peeks, refunds, resets, kinds of limit it does not lease, keys past
// lease.WithMaxKeys) count in none. tokens.taken less tokens.returned is
// the tokens admitted to the requests counted in hits and takes, and
// those the leases hold now: after Close, exactly the tokens admitted.
//
// Recording allocates nothing once a limit's attributes are built (for
// the first 1000 limit names, as Wrap's). An instrument the MeterProvider
// refuses is left out (the provider reports why to otel's error handler).
// It makes no spans.
func LeaseObserver(opts ...Option) lease.Observer {
	c := newConfig(opts)
	m := c.MeterProvider.Meter(ScopeName)
	o := &leaseInstruments{limits: make(map[string]*leaseAttrs)}
	var err, e error
	o.hits, e = m.Int64Counter("spigot.lease.hits", metric.WithUnit("{request}"),
		metric.WithDescription("Requests store/lease decided from a lease, with no call of its remote store, by limit."))
	err = errors.Join(err, e)
	o.denials, e = m.Int64Counter("spigot.lease.denials", metric.WithUnit("{request}"),
		metric.WithDescription("Requests store/lease denied on what its remote store last told, with no call of it, by limit."))
	err = errors.Join(err, e)
	o.takes, e = m.Int64Counter("spigot.lease.takes", metric.WithUnit("{call}"),
		metric.WithDescription("Calls of store/lease's remote store that took tokens for its decisions, by limit, and by kind of error for those that failed."))
	err = errors.Join(err, e)
	o.taken, e = m.Int64Counter("spigot.lease.tokens.taken", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens store/lease took from its remote store, for requests and leases, by limit."))
	err = errors.Join(err, e)
	o.returned, e = m.Int64Counter("spigot.lease.tokens.returned", metric.WithUnit("{token}"),
		metric.WithDescription("Unspent tokens of leases store/lease gave back to its remote store, by limit, and by kind of error for those lost."))
	err = errors.Join(err, e)
	if err != nil {
		otel.Handle(err)
	}
	return lease.Observer{Hit: o.hit, Deny: o.deny, Take: o.take, Return: o.give}
}

// leaseInstruments are LeaseObserver's instruments, and the attribute
// sets of each limit, made once.
type leaseInstruments struct {
	hits, denials, takes, taken, returned metric.Int64Counter

	mu     sync.RWMutex
	limits map[string]*leaseAttrs
}

// leaseAttrs are the measurement options of one limit, built once so that
// recording allocates nothing.
type leaseAttrs struct {
	limit  []metric.AddOption                  // spigot.limit
	failed [len(errorTypes)][]metric.AddOption // spigot.limit, error.type
}

// attrs returns the options of the limit named name.
func (o *leaseInstruments) attrs(name string) *leaseAttrs {
	o.mu.RLock()
	a := o.limits[name]
	o.mu.RUnlock()
	if a != nil {
		return a
	}
	limit := LimitKey.String(name)
	a = &leaseAttrs{limit: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(limit))}}
	for i, t := range errorTypes {
		a.failed[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(limit, ErrorTypeKey.String(t)))}
	}
	o.mu.Lock()
	if len(o.limits) < maxLimits {
		o.limits[name] = a
	}
	o.mu.Unlock()
	return a
}

// options returns a's options for a call that failed with err, or
// succeeded if err is nil.
func (a *leaseAttrs) options(err error) []metric.AddOption {
	if err != nil {
		return a.failed[errorKind(err)]
	}
	return a.limit
}

func (o *leaseInstruments) hit(ctx context.Context, op spigot.Op) {
	if o.hits.Enabled(ctx) {
		o.hits.Add(ctx, 1, o.attrs(op.Limit.Name()).limit...)
	}
}

func (o *leaseInstruments) deny(ctx context.Context, op spigot.Op) {
	if o.denials.Enabled(ctx) {
		o.denials.Add(ctx, 1, o.attrs(op.Limit.Name()).limit...)
	}
}

func (o *leaseInstruments) take(ctx context.Context, op spigot.Op, _, got int64, err error) {
	if !o.takes.Enabled(ctx) && !o.taken.Enabled(ctx) {
		return
	}
	a := o.attrs(op.Limit.Name())
	o.takes.Add(ctx, 1, a.options(err)...)
	if got > 0 {
		// A failed call of several ops may still have taken them.
		o.taken.Add(ctx, got, a.limit...)
	}
}

func (o *leaseInstruments) give(ctx context.Context, limit spigot.Limit, tokens int64, err error) {
	if tokens > 0 && o.returned.Enabled(ctx) {
		o.returned.Add(ctx, tokens, o.attrs(limit.Name()).options(err)...)
	}
}
