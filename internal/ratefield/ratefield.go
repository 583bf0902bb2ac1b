// Package ratefield writes the members of the IETF RateLimit-Policy and
// RateLimit fields (draft-ietf-httpapi-ratelimit-headers-12), for
// httplimit's headers and grpclimit's metadata.
package ratefield

import (
	"strconv"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/core"
)

// Max is the largest integer a structured field may hold (RFC 8941
// §3.3.1: 15 digits). Counts above it are sent as it.
const Max = 999_999_999_999_999

// AppendPolicy appends the RateLimit-Policy member of l: "name";q=…;w=….
func AppendPolicy(b []byte, l spigot.Limit) []byte {
	b = AppendString(b, l.Name())
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, min(l.Capacity(), Max), 10)
	if w := windowSeconds(l); w > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, min(w, Max), 10)
	}
	return b
}

// AppendLimit appends the RateLimit member of the decision d on l:
// "name";r=…;t=…, where r is d's Remaining and t its RefillAfter in
// seconds, rounded up (left out when d has none).
func AppendLimit(b []byte, l spigot.Limit, d spigot.Decision) []byte {
	b = AppendString(b, l.Name())
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, min(d.Remaining, Max), 10)
	if d.RefillAfter > 0 && d.RefillAfter != spigot.Never {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, min(Seconds(d.RefillAfter), Max), 10)
	}
	return b
}

// configOf returns a Limit's config.
var configOf = core.Of[spigot.Limit]()

// windowSeconds returns the w of l's policy, in whole seconds rounded up:
// a window's length, or the time a bucket takes to refill from empty (a
// leaky bucket's queue to drain).
func windowSeconds(l spigot.Limit) int64 {
	if w := l.Window(); w > 0 {
		return Seconds(w)
	}
	c := configOf(l)
	if c.Refill == 0 {
		return 0
	}
	us := ceilDiv(c.Max, c.Refill) // ≤ 2^53: exact
	return ceilDiv(us, 1_000_000)
}

// AppendString appends s as a structured-field string (RFC 8941): in
// quotes, with '"' and '\' escaped; a byte outside printable ASCII, which
// a field string cannot hold, becomes '?'.
func AppendString(b []byte, s string) []byte {
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

// Seconds returns d ≥ 0 in whole seconds, rounded up.
func Seconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
