// Package outbound is what limits outgoing calls, for httplimit.Transport
// and grpclimit's client interceptors: a Gate takes a call's tokens from a
// spigot.Limiter, waiting for them or not, after the end of the key's
// hold, if a server asked the caller to hold back (Retry-After,
// RetryInfo). Each package reads its own keys, costs and server answers,
// and words its own errors.
package outbound

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/wait"
)

// The bounds of the holds a Gate keeps.
const (
	// HoldCap is the most keys a Gate keeps a hold for.
	HoldCap = 10_000
	// HoldMax is the longest hold a server may ask for: a longer one is
	// taken for a mistake, and ignored.
	HoldMax = 24 * time.Hour
)

// A Gate admits outgoing calls: see Admit. Its fields are set before its
// first use; then it is safe for concurrent use.
type Gate struct {
	Limiter *spigot.Limiter
	Clock   clock.Clock
	// Wait makes Admit wait for tokens and for the end of a hold;
	// without it Admit denies at once.
	Wait bool
	// Margin is the least time a call that waited must have left before
	// its context's deadline: Admit does not wait for tokens, a leaky
	// bucket's turn or a hold's end that leave less (a turn is given
	// back), and denies the call with context.DeadlineExceeded instead.
	Margin time.Duration
	// Holds are the keys that servers asked to hold back, and HoldName
	// what asked ("Retry-After"), for errors.
	Holds    Holds
	HoldName string
}

// A Denied is Admit's error for a call that the limit holds back.
type Denied struct {
	// RetryAfter is how long, from Admit's return, until the call could
	// be sent if nothing else takes the tokens meanwhile; spigot.Never
	// when its cost is above the bucket's capacity.
	RetryAfter time.Duration
	// Held is true when a server's hold denied the call, not the bucket.
	Held bool
	// Err is what the call ran into: an error that wraps
	// spigot.ErrNeverAdmitted (RetryAfter Never), or
	// context.DeadlineExceeded for a call that would have waited past its
	// deadline; nil for a denial without a wait.
	Err error
}

func (e *Denied) Error() string { return e.Describe("spigot: outbound: call", "", "server's hold") }

// Describe words the denial of a call for key: call is what was not sent,
// with the package's prefix ("spigot: httplimit: outgoing request"), and
// hold is what held it back ("server's Retry-After").
func (e *Denied) Describe(call, key, hold string) string {
	var b strings.Builder
	b.WriteString(call)
	b.WriteString(" for key ")
	b.WriteString(strconv.Quote(key))
	b.WriteString(" limited")
	switch {
	case e.Err != nil:
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	case e.RetryAfter == spigot.Never:
		b.WriteString(": its cost exceeds the limit's capacity and can never be admitted")
	case e.Held:
		b.WriteString(": the ")
		b.WriteString(hold)
		b.WriteString(" holds it back for ")
		b.WriteString(e.RetryAfter.String())
	default:
		b.WriteString(": retry after ")
		b.WriteString(e.RetryAfter.String())
	}
	return b.String()
}

// A Failed is Admit's error when the store failed, or when the call's
// context ended while it waited for a hold to end (Waiting).
type Failed struct {
	Waiting bool
	Err     error
}

func (e *Failed) Error() string { return e.Err.Error() }
func (e *Failed) Unwrap() error { return e.Err }

// Admit takes n tokens for key, after the end of key's hold: it returns
// nil when the call may be sent, a *Denied when the limit holds it back,
// or a *Failed. A cost of 0 asks nothing of the store, but obeys the hold.
func (g *Gate) Admit(ctx context.Context, key string, n int64) error {
	if deadline, ok := ctx.Deadline(); ok && g.Wait && g.Margin > 0 {
		// Wait only until the margin before the deadline. The call's own
		// context still bounds the call, once sent.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-g.Margin))
		defer cancel()
	}
	if err := g.waitHold(ctx, key); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if !g.Wait {
		d, err := g.Limiter.AllowN(ctx, key, n)
		switch {
		case err != nil:
			return &Failed{Err: err}
		case d.Allowed() && d.Delay > 0:
			// A leaky bucket's turn comes later: give it back, as the
			// call does not wait.
			_, _ = g.Limiter.Refund(context.WithoutCancel(ctx), key, n)
			return &Denied{RetryAfter: (d.Delay + time.Millisecond - 1).Truncate(time.Millisecond)}
		case d.Allowed():
			return nil
		case d.RetryAfter == spigot.Never:
			return &Denied{RetryAfter: spigot.Never, Err: fmt.Errorf("%w: %d tokens, capacity %d",
				spigot.ErrNeverAdmitted, n, g.Limiter.Limit().Capacity())}
		}
		return &Denied{RetryAfter: d.RetryAfter}
	}
	d, err := g.Limiter.WaitN(ctx, key, n)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, spigot.ErrNeverAdmitted):
		return &Denied{RetryAfter: spigot.Never, Err: err}
	case errors.Is(err, context.DeadlineExceeded) && d.RetryAfter > 0 && d.RetryAfter != spigot.Never:
		// WaitN's own denial: the tokens come after the deadline. (A
		// store that timed out returns no such Decision.)
		return &Denied{RetryAfter: d.RetryAfter, Err: err}
	}
	return &Failed{Err: err}
}

// waitHold waits until key's hold, if any, ends.
func (g *Gate) waitHold(ctx context.Context, key string) error {
	for {
		now := g.Clock.Now()
		d := g.Holds.remaining(key, now)
		if d <= 0 {
			return nil
		}
		if !g.Wait {
			return &Denied{RetryAfter: d, Held: true}
		}
		if deadline, ok := ctx.Deadline(); ok && deadline.Sub(now) < d {
			return &Denied{RetryAfter: d, Held: true, Err: fmt.Errorf(
				"the server's %s holds it back for %v, past the context's deadline: %w", g.HoldName, d, context.DeadlineExceeded)}
		}
		err := ctx.Err()
		if err == nil {
			err = wait.Sleep(ctx, g.Clock, d)
		}
		if err != nil {
			return &Failed{Waiting: true, Err: err}
		}
	}
}

// Hold holds back key's calls for d from now, unless they are held
// longer already; a d that is not above 0 or is above HoldMax is ignored.
func (g *Gate) Hold(key string, d time.Duration) {
	if d <= 0 || d > HoldMax {
		return
	}
	now := g.Clock.Now()
	g.Holds.hold(key, now.Add(d), now)
}

// Holds holds the instant before which no call for a key is sent, for at
// most Max keys (HoldCap when 0). The zero Holds is ready to use; it is
// safe for concurrent use.
type Holds struct {
	mu  sync.Mutex
	Max int
	end map[string]time.Time
}

// remaining returns how long key is still held at now, 0 when it is not,
// and forgets a hold that has ended.
func (h *Holds) remaining(key string, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	end, ok := h.end[key]
	if !ok {
		return 0
	}
	d := end.Sub(now)
	if d <= 0 {
		delete(h.end, key)
		return 0
	}
	return d
}

// hold holds key until end, unless it is already held longer. When the
// table is full it first forgets the holds that have ended at now, then,
// if it is still full, the one that ends first, unless the new hold ends
// before it: the table keeps the holds that end last.
func (h *Holds) hold(key string, end, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.end[key]; ok {
		if end.After(old) {
			h.end[key] = end
		}
		return
	}
	max := h.Max
	if max == 0 {
		max = HoldCap
	}
	if h.end == nil {
		h.end = make(map[string]time.Time)
	}
	if len(h.end) >= max {
		for k, e := range h.end {
			if !e.After(now) {
				delete(h.end, k)
			}
		}
	}
	for len(h.end) >= max {
		var first string
		var firstEnd time.Time
		found := false
		for k, e := range h.end {
			if !found || e.Before(firstEnd) {
				first, firstEnd, found = k, e, true
			}
		}
		if !firstEnd.Before(end) {
			return
		}
		delete(h.end, first)
	}
	h.end[key] = end
}

// Len reports how many keys are held, ended or not.
func (h *Holds) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.end)
}
