package conformance

import (
	"math/big"
	"time"

	"github.com/spigot-go/spigot"
)

// model is the suite's reference: the model of one key of one bucket,
// written as plainly as the design states it, in exact rationals. It is
// independent of spigot.Op.Apply, which a store under test may itself call.
// When time goes back it adds nothing and keeps its stamp, and a wait
// counts the time the clock needs to come back to the stamp.
type model struct {
	capacity *big.Rat
	refill   *big.Rat // tokens per microsecond
	tokens   *big.Rat // held at stamp; nil until the first request
	stamp    int64    // µs since the epoch
	fullAt   int64    // µs from which the state counts as absent
}

func newModel(capacity int64, r spigot.Rate) *model {
	return &model{
		capacity: new(big.Rat).SetInt64(capacity),
		refill:   big.NewRat(r.Tokens, r.Period.Microseconds()),
	}
}

// take applies a Take of cost tokens at now and returns its decision.
func (m *model) take(now time.Time, cost int64) spigot.Decision {
	return m.apply(now, spigot.Take, cost)
}

// apply applies an operation at now and returns its decision. A Peek
// decides as a Take would, on a copy: it changes nothing.
func (m *model) apply(now time.Time, action spigot.Action, n int64) spigot.Decision {
	if action == spigot.Peek {
		saved := *m
		defer func() { *m = saved }()
	}
	t := now.UnixMicro()
	if m.tokens != nil && t >= m.fullAt { // full again: as if never seen
		m.tokens = nil
	}
	if m.tokens == nil { // never seen: full
		m.tokens, m.stamp = new(big.Rat).Set(m.capacity), t
	}
	if t > m.stamp { // tokens = min(capacity, tokens + elapsed × refill)
		gained := new(big.Rat).SetInt64(t - m.stamp)
		m.tokens = new(big.Rat).Add(m.tokens, gained.Mul(gained, m.refill))
		if m.tokens.Cmp(m.capacity) > 0 {
			m.tokens.Set(m.capacity)
		}
		m.stamp = t
	}
	lag := m.stamp - t // > 0 when the clock went back
	c := new(big.Rat).SetInt64(n)
	d := spigot.Decision{}
	switch action {
	case spigot.Take, spigot.Peek:
		switch {
		case c.Cmp(m.capacity) > 0:
			d.RetryAfter = spigot.Never
		case m.tokens.Cmp(c) >= 0:
			if action == spigot.Take {
				m.tokens = new(big.Rat).Sub(m.tokens, c)
				d.N = n
			}
		default:
			d.RetryAfter = m.timeFor(lag, new(big.Rat).Sub(c, m.tokens))
		}
	case spigot.TakeUpTo: // the whole tokens it holds, up to n
		k := min(n, floor(m.tokens))
		switch {
		case k > 0 || n == 0:
			m.tokens = new(big.Rat).Sub(m.tokens, new(big.Rat).SetInt64(k))
			d.N = k
		case m.capacity.Sign() == 0:
			d.RetryAfter = spigot.Never
		default:
			d.RetryAfter = m.timeFor(lag, new(big.Rat).Sub(big.NewRat(1, 1), m.tokens))
		}
	case spigot.Refund: // n more, up to the capacity; N rounded up
		add := new(big.Rat).Sub(m.capacity, m.tokens)
		if c.Cmp(add) < 0 {
			add = c
		}
		m.tokens = new(big.Rat).Add(m.tokens, add)
		d.N = -floor(new(big.Rat).Neg(add))
	case spigot.Reset: // what it lacked, rounded up; then forgotten
		d.N = -floor(new(big.Rat).Sub(m.tokens, m.capacity))
		d.Remaining = floor(m.capacity)
		m.tokens = nil
		return d
	}
	if m.tokens.Cmp(m.capacity) < 0 {
		d.ResetAfter = m.timeFor(lag, new(big.Rat).Sub(m.capacity, m.tokens))
	}
	d.Remaining = floor(m.tokens)
	// Full again under this config, and the clock caught up with the
	// stamp: nothing to remember.
	if m.fullAt = max(t+d.ResetAfter.Microseconds(), m.stamp); m.fullAt <= t {
		m.tokens = nil
	}
	return d
}

// timeFor returns lag µs plus how long the bucket takes to gain n tokens,
// rounded up to the millisecond.
func (m *model) timeFor(lag int64, n *big.Rat) time.Duration {
	ms := n.Quo(n, m.refill)                                    // µs
	ms.Add(ms, new(big.Rat).SetInt64(lag))                      // µs
	ms.Quo(ms, big.NewRat(1000, 1))                             // ms
	return time.Duration(-floor(ms.Neg(ms))) * time.Millisecond // ⌈x⌉ = -⌊-x⌋
}

// floor returns ⌊x⌋.
func floor(x *big.Rat) int64 {
	q, r := new(big.Int).QuoRem(x.Num(), x.Denom(), new(big.Int))
	if r.Sign() < 0 {
		q.Sub(q, big.NewInt(1))
	}
	return q.Int64()
}
