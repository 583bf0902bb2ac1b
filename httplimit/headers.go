package httplimit

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/ratefield"
)

// Headers selects the sets of rate-limit headers the middleware sends.
// Combine them with |; IETF and IETFDraft10 exclude each other.
type Headers uint8

// The sets of headers. The default is IETF|Legacy: the IETF fields are
// the standard being written, and the legacy ones are what most clients
// and SDKs read today.
// Retry-After (RFC 9110) is always sent on a denial that a wait can admit.
//
// Every count the fields hold is at most 999,999,999,999,999, the largest
// integer of a structured field (RFC 8941, 15 digits): a larger capacity or
// remaining count is sent as that, which understates it.
//
// A middleware nested in another (one on the mux, one on a route) adds
// to what the outer one set: its RateLimit-Policy and RateLimit members
// go after the outer one's, in one field line, and replace those of the
// same name, since the inner middleware decided later. The legacy fields
// stay those of the limit that decided across both: the inner one's when
// it denies, otherwise the one with the fewest remaining (a Degraded one
// has the fewest), the outer one's on a tie. A field set before that the
// middleware cannot read (not a list of string items with parameters, or
// not an integer) is replaced.
const (
	// IETF is RateLimit-Policy and RateLimit, as in
	// draft-ietf-httpapi-ratelimit-headers-12, with one list member per
	// limit:
	//
	//	RateLimit-Policy: "per-address";q=20;w=60, "per-user";q=5;w=300
	//	RateLimit: "per-address";r=19;t=3, "per-user";r=4;t=60
	//
	// q is the limit's capacity (spigot.Limit.Capacity). For a token
	// bucket, w is the time, in whole seconds rounded up, that it takes to
	// refill from empty (capacity ÷ rate): the bucket admits at most q
	// requests at once, and q more over each w. For a window (fixed,
	// sliding, or a log), w is the window; for a leaky bucket, whose
	// capacity is the places of its queue, w is the time the queue takes to
	// drain. A bucket of capacity 0 has no w.
	//
	// r is what a request may take now, and t the effective window: the
	// seconds, rounded up, until the limit admits more than r in all (see
	// spigot.Decision.RefillAfter). If r were taken now, that is until a
	// bucket's next token, a queue's next free place, a fixed window's
	// next window, a sliding window's count falling enough for one more, a
	// log's oldest request being a window old. A bucket of capacity 0,
	// which never admits more, has no t. A client can rely, barring other
	// traffic on the key, on r requests of cost 1 being admitted now and
	// one more t seconds later.
	// A denial's Retry-After is never earlier than the end of the deciding
	// limit's t. A limit whose decision is Degraded (store/hybrid's
	// FailOpen or FailClosed) says nothing of the bucket, and has no
	// RateLimit member.
	IETF Headers = 1 << iota
	// Legacy is X-RateLimit-Limit (the capacity), X-RateLimit-Remaining
	// and X-RateLimit-Reset (seconds until the bucket is full again,
	// rounded up; an instant in Unix seconds with WithResetAsUnixTime), of
	// the limit that decided the request (see spigot.Combine): the one
	// that denied it, or, when all allowed it, the one with the fewest
	// tokens left. A Degraded decision has only X-RateLimit-Limit.
	Legacy
	// IETFDraft10 is RateLimit-Policy and RateLimit as in
	// draft-ietf-httpapi-ratelimit-headers-10, for clients written to it:
	// as IETF, but every RateLimit member has a t, which is the seconds,
	// rounded up, until the limit is whole again if nothing takes from it
	// (X-RateLimit-Reset; 0 when it is whole), so that a denial may say
	// r=0;t=300 with Retry-After: 60. It excludes IETF: WithHeaders(IETF |
	// IETFDraft10) panics.
	IETFDraft10
)

// valid reports whether h is a set that Headers defines.
func (h Headers) valid() bool {
	return h&^(IETF|Legacy|IETFDraft10) == 0 && h&(IETF|IETFDraft10) != IETF|IETFDraft10
}

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

// maxSF is the largest integer a structured field may hold.
const maxSF = ratefield.Max

// setHeaders sets in h the rate-limit headers of the decisions out on
// limits, the limits of the rules of the given indices, of which
// limits[by] decided d, merged with those that an outer
// middleware already set in h. It builds every value in one buffer: one
// allocation for the values and one for their slices.
func (m *Middleware) setHeaders(h http.Header, rules []int, limits []spigot.Limit, out []spigot.Decision, by int, d spigot.Decision) {
	var buf [512]byte
	var keys [6]string
	var ends [6]int
	b, n := buf[:0], 0
	set := len(h) != 0 // what an outer middleware may have set, to merge
	if m.headers&(IETF|IETFDraft10) != 0 {
		from := len(b)
		if old := h[hPolicy]; set && old != nil {
			b = keepMembers(b, old, limits, nil)
		}
		for i := range limits {
			if len(b) > from {
				b = append(b, ", "...)
			}
			if p := m.rules[rules[i]].policy; p != "" && limits[i] == m.rules[rules[i]].limit { // "" for a limit a ByFunc chose; another limit decided
				b = append(b, p...)
			} else {
				b = ratefield.AppendPolicy(b, limits[i])
			}
		}
		keys[n], ends[n], n = hPolicy, len(b), n+1
		from = len(b)
		if old := h[hRateLimit]; set && old != nil {
			b = keepMembers(b, old, limits, out)
		}
		draft10 := m.headers&IETFDraft10 != 0
		for i, d := range out {
			if d.Degraded() {
				continue
			}
			if len(b) > from {
				b = append(b, ", "...)
			}
			if draft10 {
				b = ratefield.AppendString(b, limits[i].Name())
				b = append(b, ";r="...)
				b = strconv.AppendInt(b, min(d.Remaining, maxSF), 10)
				b = append(b, ";t="...)
				b = strconv.AppendInt(b, min(ratefield.Seconds(d.ResetAfter), maxSF), 10)
			} else {
				b = ratefield.AppendLimit(b, limits[i], d)
			}
		}
		if len(b) > from {
			keys[n], ends[n], n = hRateLimit, len(b), n+1
		}
	}
	if m.headers&Legacy != 0 {
		decided := out[by]
		nested := set && h[hLimit] != nil
		if !nested || !d.Allowed() || !keepLegacy(h, decided) {
			b = strconv.AppendInt(b, min(limits[by].Capacity(), maxSF), 10)
			keys[n], ends[n], n = hLimit, len(b), n+1
			if !decided.Degraded() {
				b = strconv.AppendInt(b, min(decided.Remaining, maxSF), 10)
				keys[n], ends[n], n = hRemaining, len(b), n+1
				reset := ratefield.Seconds(decided.ResetAfter)
				if m.unixReset {
					now := m.clock.Now()
					reset = now.Unix() + ratefield.Seconds(time.Duration(now.Nanosecond())+decided.ResetAfter)
				}
				b = strconv.AppendInt(b, min(reset, maxSF), 10)
				keys[n], ends[n], n = hReset, len(b), n+1
			} else if nested {
				delete(h, hRemaining)
				delete(h, hReset)
			}
		}
	}
	if !d.Allowed() && d.RetryAfter != spigot.Never {
		b = strconv.AppendInt(b, min(max(ratefield.Seconds(d.RetryAfter), 1), maxSF), 10)
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

// keepLegacy reports whether the X-RateLimit-* fields already in h, set
// by an outer middleware, describe a limit with no more remaining than
// decided, which admitted the request: if so they stay. A Degraded
// decision has the fewest (none known), and of two equal the outer one
// stays, as spigot.Combine decides. Fields it cannot read are replaced.
func keepLegacy(h http.Header, decided spigot.Decision) bool {
	if _, ok := count(h[hLimit]); !ok {
		return false
	}
	rem := int64(-1) // no X-RateLimit-Remaining: a Degraded decision
	if v := h[hRemaining]; v != nil {
		r, ok := count(v)
		if !ok {
			return false
		}
		rem = r
	}
	return rem <= min(decided.Remaining, maxSF)
}

// count returns the non-negative integer of a field of one line.
func count(v []string) (int64, bool) {
	if len(v) != 1 || v[0] == "" || v[0][0] < '0' || v[0][0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	return n, err == nil
}

// keepMembers appends to b, comma-separated, the members of the list
// field old (an outer middleware's RateLimit-Policy, or RateLimit, in one
// or more field lines) that have no counterpart among limits: a member
// whose name is that of one of limits (with out, of one whose decision is
// not Degraded) is left out, to be replaced. If old is not a list of
// members whose values are strings (RFC 8941), it appends nothing, so
// that the field is replaced.
func keepMembers(b []byte, old []string, limits []spigot.Limit, out []spigot.Decision) []byte {
	from := len(b)
	for _, line := range old {
		s := strings.Trim(line, " \t")
		for s != "" {
			member, name, rest, ok := nextMember(s)
			if !ok {
				return b[:from]
			}
			if !named(name, limits, out) {
				if len(b) > from {
					b = append(b, ", "...)
				}
				b = append(b, member...)
			}
			s = rest
		}
	}
	return b
}

// named reports whether the structured-field string name (quoted) is the
// name of one of limits, as appendSFString writes it; with out, only of a
// limit whose decision is not Degraded.
func named(name string, limits []spigot.Limit, out []spigot.Decision) bool {
	for i := range limits {
		if out != nil && out[i].Degraded() {
			continue
		}
		if sfStringIs(name, limits[i].Name()) {
			return true
		}
	}
	return false
}

// sfStringIs reports whether quoted is s as appendSFString writes it.
func sfStringIs(quoted, s string) bool {
	j := 1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			if j+1 >= len(quoted) || quoted[j] != '\\' || quoted[j+1] != c {
				return false
			}
			j += 2
			continue
		case c < 0x20 || c > 0x7e:
			c = '?'
		}
		if j >= len(quoted) || quoted[j] != c {
			return false
		}
		j++
	}
	return j == len(quoted)-1 && quoted[j] == '"'
}

// nextMember reads the first member of the list s, which starts with
// it: an item whose value is a string, and its parameters (RFC 8941
// §4.2.1). It returns the member, its value (the string, quoted, as
// written), and what follows its comma, or ok false if s does not start
// with such a member followed by the end or a comma and another member.
func nextMember(s string) (member, name, rest string, ok bool) {
	i := sfString(s)
	if i == 0 {
		return "", "", "", false
	}
	name = s[:i]
	for i < len(s) && s[i] == ';' {
		i++
		for i < len(s) && s[i] == ' ' {
			i++
		}
		k := i
		for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] == '*' || i > k && (s[i] >= '0' && s[i] <= '9' || s[i] == '_' || s[i] == '-' || s[i] == '.')) {
			i++
		}
		if i == k {
			return "", "", "", false
		}
		if i < len(s) && s[i] == '=' {
			n := bareItem(s[i+1:])
			if n == 0 {
				return "", "", "", false
			}
			i += 1 + n
		}
	}
	member = s[:i]
	rest = strings.TrimLeft(s[i:], " \t")
	if rest == "" {
		return member, name, "", true
	}
	if rest[0] != ',' {
		return "", "", "", false
	}
	rest = strings.TrimLeft(rest[1:], " \t")
	return member, name, rest, rest != ""
}

// sfString returns the length of the structured-field string that s
// starts with, quotes included, or 0.
func sfString(s string) int {
	if s == "" || s[0] != '"' {
		return 0
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 == len(s) || s[i+1] != '"' && s[i+1] != '\\' {
				return 0
			}
			i++
		case c == '"':
			return i + 1
		case c < 0x20 || c > 0x7e:
			return 0
		}
	}
	return 0
}

// bareItem returns the length of the structured-field bare item that s
// starts with (RFC 9651 §3.3), or 0.
func bareItem(s string) int {
	if s == "" {
		return 0
	}
	i := 0
	switch c := s[0]; {
	case c == '"':
		return sfString(s)
	case c == '?':
		if len(s) > 1 && (s[1] == '0' || s[1] == '1') {
			return 2
		}
	case c == ':': // a byte sequence, in base64
		for i = 1; i < len(s) && (isAlnum(s[i]) || s[i] == '+' || s[i] == '/' || s[i] == '='); i++ {
		}
		if i < len(s) && s[i] == ':' {
			if _, err := base64.StdEncoding.DecodeString(s[1:i]); err == nil {
				return i + 1
			}
		}
	case c == '%': // a display string: UTF-8, percent-encoded
		if len(s) < 2 || s[1] != '"' {
			return 0
		}
		var text []byte
		for i = 2; i < len(s); i++ {
			switch c := s[i]; {
			case c == '"':
				if !utf8.Valid(text) {
					return 0
				}
				return i + 1
			case c == '%':
				if i+2 >= len(s) || !isLowerHex(s[i+1]) || !isLowerHex(s[i+2]) {
					return 0
				}
				text = append(text, unhex(s[i+1])<<4|unhex(s[i+2]))
				i += 2
			case c < 0x20 || c > 0x7e: // as RFC 9651 §4.2.10 parses
				return 0
			default:
				text = append(text, c)
			}
		}
	case c == '@': // a date: an integer
		if n := number(s[1:]); n > 0 && !strings.Contains(s[1:1+n], ".") {
			return 1 + n
		}
	case c == '-' || isDigit(c):
		return number(s)
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z': // a token
		for i = 1; i < len(s) && (isAlnum(s[i]) || strings.IndexByte("!#$%&'*+-.^_`|~:/", s[i]) >= 0); i++ {
		}
		return i
	}
	return 0
}

// number returns the length of the structured-field integer (at most 15
// digits) or decimal (at most 12, a dot, 1 to 3) that s starts with, or 0.
func number(s string) int {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	start := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	n := i - start
	switch {
	case n == 0:
		return 0
	case i < len(s) && s[i] == '.':
		i++
		frac := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if n > 12 || i-frac < 1 || i-frac > 3 {
			return 0
		}
		return i
	case n > 15:
		return 0
	}
	return i
}

func isDigit(c byte) bool    { return c >= '0' && c <= '9' }
func isLowerHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' }

// unhex returns the value of the lower-case hex digit c.
func unhex(c byte) byte {
	if isDigit(c) {
		return c - '0'
	}
	return c - 'a' + 10
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) }
