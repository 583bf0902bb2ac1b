package conformance

import (
	"math/big"
	"time"

	"github.com/spigot-go/spigot"
)

// model is the suite's reference: the model of one key of one bucket,
// written as plainly as the design states it, in exact rationals. It is
// independent of Limit.Take, which a store under test may itself call.
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

// take applies a request of cost tokens at now and returns its admission.
func (m *model) take(now time.Time, cost int64) spigot.Decision {
	t := now.UnixMicro()
	if m.tokens != nil && t >= m.fullAt { // full again: as if never seen
		m.tokens = nil
	}
	if m.tokens == nil { // never seen: full
		m.tokens, m.stamp = new(big.Rat).Set(m.capacity), t
	}
	if t > m.stamp { // tokens = min(capacity, tokens + elapsed × refill)
		gained := new(big.Rat).SetInt64(t - m.stamp)
		m.tokens.Add(m.tokens, gained.Mul(gained, m.refill))
		if m.tokens.Cmp(m.capacity) > 0 {
			m.tokens.Set(m.capacity)
		}
		m.stamp = t
	}
	lag := m.stamp - t // > 0 when the clock went back
	c := new(big.Rat).SetInt64(cost)
	var a spigot.Decision
	switch {
	case c.Cmp(m.capacity) > 0:
		a.RetryAfter = spigot.Never
	case m.tokens.Cmp(c) >= 0:
		m.tokens.Sub(m.tokens, c)
		a.Allowed = true
	default:
		a.RetryAfter = m.timeFor(lag, new(big.Rat).Sub(c, m.tokens))
	}
	if m.tokens.Cmp(m.capacity) < 0 {
		a.ResetAfter = m.timeFor(lag, new(big.Rat).Sub(m.capacity, m.tokens))
	}
	a.Remaining = floor(m.tokens)
	// Full again under this config, and the clock caught up with the
	// stamp: nothing to remember.
	if m.fullAt = max(t+a.ResetAfter.Microseconds(), m.stamp); m.fullAt <= t {
		m.tokens = nil
	}
	return a
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
