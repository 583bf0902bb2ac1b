package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/spigot-go/spigot"
)

// Headers selects the sets of rate-limit headers the middleware sends.
type Headers uint8

// The sets of headers. The default is IETF|Legacy: the IETF fields are
// the standard being written, and the legacy ones are what most clients
// and SDKs read today; together they cost about 150 bytes a response.
// Retry-After (RFC 9110) is always sent on a denial that a wait can admit.
const (
	// IETF is RateLimit-Policy and RateLimit, as in
	// draft-ietf-httpapi-ratelimit-headers-10, with one list member per
	// limit:
	//
	//	RateLimit-Policy: "per-address";q=20;w=60, "per-user";q=5;w=300
	//	RateLimit: "per-address";r=19;t=3, "per-user";r=4;t=60
	//
	// For a token bucket, q is the capacity and w the time, in whole
	// seconds rounded up, that it takes to refill from empty (capacity ÷
	// rate): the bucket admits at most q requests at once, and q more over
	// each w. For a window (fixed, sliding, or a log), q is the limit and w
	// the window; for a leaky bucket, q is the queue's size and w the time
	// it takes to drain. r is what a request may take now and t the
	// seconds, rounded up, until the limit is whole again if nothing takes
	// from it (a fixed window's next window, a sliding one's or a log's
	// last request a window old, a queue drained). A client can rely
	// on r requests of cost 1 being admitted now, barring other traffic
	// on the key, and on t never being early. A limit whose decision is
	// Degraded (store/hybrid's FailOpen or FailClosed) says nothing of the
	// bucket, and has no RateLimit member.
	IETF Headers = 1 << iota
	// Legacy is X-RateLimit-Limit (the capacity), X-RateLimit-Remaining
	// and X-RateLimit-Reset (seconds until the bucket is full again,
	// rounded up; an instant in Unix seconds with WithEpochReset), of the
	// limit that decided the request (see spigot.Combine): the one that
	// denied it, or, when all allowed it, the one with the fewest tokens
	// left. A Degraded decision has only X-RateLimit-Limit.
	Legacy
)

// The canonical forms of the header names (as http.CanonicalHeaderKey
// writes them, so that Header.Get finds them).
const (
	hPolicy     = "Ratelimit-Policy"
	hRateLimit  = "Ratelimit"
	hLimit      = "X-Ratelimit-Limit"
	hRemaining  = "X-Ratelimit-Remaining"
	hReset      = "X-Ratelimit-Reset"
	hRetryAfter = "Retry-After"
)

// setHeaders sets in h the rate-limit headers of the decisions out on
// limits, of which limits[by] decided d. It builds every value in one
// buffer: one allocation for the values and one for their slices.
func (m *Middleware) setHeaders(h http.Header, limits []spigot.Limit, out []spigot.Decision, by int, d spigot.Decision) {
	var buf [512]byte
	var keys [6]string
	var ends [6]int
	b, n := buf[:0], 0
	if m.headers&IETF != 0 {
		for i := range limits {
			if i > 0 {
				b = append(b, ", "...)
			}
			if p := m.policyOf(limits[i]); p != "" {
				b = append(b, p...)
			} else {
				b = policyItem(b, limits[i])
			}
		}
		keys[n], ends[n], n = hPolicy, len(b), n+1
		members := 0
		for i, d := range out {
			if d.Degraded() {
				continue
			}
			if members++; members > 1 {
				b = append(b, ", "...)
			}
			b = appendSFString(b, limits[i].Name())
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, d.Remaining, 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, seconds(d.ResetAfter), 10)
		}
		if members > 0 {
			keys[n], ends[n], n = hRateLimit, len(b), n+1
		}
	}
	if m.headers&Legacy != 0 {
		decided := out[by]
		b = strconv.AppendInt(b, limits[by].Capacity(), 10)
		keys[n], ends[n], n = hLimit, len(b), n+1
		if !decided.Degraded() {
			b = strconv.AppendInt(b, decided.Remaining, 10)
			keys[n], ends[n], n = hRemaining, len(b), n+1
			reset := decided.ResetAfter
			if m.epoch {
				reset += time.Duration(m.clock.Now().UnixNano())
			}
			b = strconv.AppendInt(b, seconds(reset), 10)
			keys[n], ends[n], n = hReset, len(b), n+1
		}
	}
	if !d.Allowed() && d.RetryAfter != spigot.Never {
		b = strconv.AppendInt(b, max(seconds(d.RetryAfter), 1), 10)
		keys[n], ends[n], n = hRetryAfter, len(b), n+1
	}
	if n == 0 {
		return
	}
	all := string(b)
	vals := make([]string, n)
	from := 0
	for i := range n {
		vals[i] = all[from:ends[i]]
		from = ends[i]
		h[keys[i]] = vals[i : i+1 : i+1]
	}
}

// policyItem returns the RateLimit-Policy member of l: "name";q=…;w=….
func policyItem(b []byte, l spigot.Limit) []byte {
	b = appendSFString(b, l.Name())
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, l.Capacity(), 10)
	if w := windowSeconds(l); w > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, w, 10)
	}
	return b
}

// windowSeconds returns the w of l's policy, in whole seconds rounded up:
// a window's length, or the time a bucket takes to refill from empty (a
// leaky bucket's queue to drain).
func windowSeconds(l spigot.Limit) int64 {
	if w := l.Window(); w > 0 {
		return seconds(w)
	}
	if l.Refill() == 0 {
		return 0
	}
	us := ceilDiv(l.Capacity()*l.Scale(), l.Refill()) // ≤ 2^53: exact
	return ceilDiv(us, 1_000_000)
}

// appendSFString appends s as a structured-field string (RFC 8941): in
// quotes, with '"' and '\' escaped; a byte outside printable ASCII, which
// a field string cannot hold, becomes '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// seconds returns d in whole seconds, rounded up.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
