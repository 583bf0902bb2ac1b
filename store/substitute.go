package store

import (
	"context"
	"sync"

	"github.com/spigot-go/spigot"
)

// A Substituter is a store that may decide an op by another limit than
// the op's own, such as store/hybrid with WithLocalLimit while its remote
// is down (a Split of the limit in each replica), and says so with
// Substituted. A front door (httplimit, grpclimit) that finds
// SubstitutesLimits true records the limits that decided a request
// (RecordLimits), so that what it tells the client (RateLimit-Policy's q
// and w, RateLimit's r and t) describes the limit that decided, not one
// nobody enforced. A store that wraps another reports the other's.
type Substituter interface {
	SubstitutesLimits() bool
}

// Substitutes reports whether s is a Substituter whose SubstitutesLimits
// is true.
func Substitutes(s spigot.Store) bool {
	x, ok := s.(Substituter)
	return ok && x.SubstitutesLimits()
}

// Limits records, for one request, the limits a store decided its ops by
// in place of their own. The zero Limits records nothing; RecordLimits
// makes one. It is safe for concurrent use.
type Limits struct {
	mu sync.Mutex
	by map[spigot.Limit]spigot.Limit
}

type limitsKey struct{}

// RecordLimits returns a context, derived from ctx, in which a store's
// Substituted calls are recorded in the Limits it returns.
func RecordLimits(ctx context.Context) (context.Context, *Limits) {
	l := &Limits{}
	return context.WithValue(ctx, limitsKey{}, l), l
}

// Substituted records, in the Limits of ctx (if any), that an op on limit
// asked was decided by limit by.
func Substituted(ctx context.Context, asked, by spigot.Limit) {
	l, _ := ctx.Value(limitsKey{}).(*Limits)
	if l == nil || asked == by {
		return
	}
	l.mu.Lock()
	if l.by == nil {
		l.by = make(map[spigot.Limit]spigot.Limit)
	}
	l.by[asked] = by
	l.mu.Unlock()
}

// Of returns the limit that decided the ops on asked: asked itself, unless
// a store recorded another.
func (l *Limits) Of(asked spigot.Limit) spigot.Limit {
	if l == nil {
		return asked
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if by, ok := l.by[asked]; ok {
		return by
	}
	return asked
}
