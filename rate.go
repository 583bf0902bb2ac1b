package spigot

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is how fast a bucket refills: Tokens every Period, continuously (not
// in steps); for a window, how many Tokens it admits in each window of
// Period. The zero Rate is invalid: a bucket must refill at least one
// token, over a period of at least one whole microsecond.
type Rate struct {
	Tokens int64
	Period time.Duration
}

// Per returns a Rate of tokens every period.
func Per(tokens int64, period time.Duration) Rate { return Rate{Tokens: tokens, Period: period} }

// PerSecond returns a Rate of n tokens every second.
func PerSecond(n int64) Rate { return Rate{Tokens: n, Period: time.Second} }

// PerMinute returns a Rate of n tokens every minute.
func PerMinute(n int64) Rate { return Rate{Tokens: n, Period: time.Minute} }

// PerHour returns a Rate of n tokens every hour.
func PerHour(n int64) Rate { return Rate{Tokens: n, Period: time.Hour} }

// PerDay returns a Rate of n tokens every 24 hours.
func PerDay(n int64) Rate { return Rate{Tokens: n, Period: 24 * time.Hour} }

// units are the period suffixes of String and ParseRate, largest first.
var units = []struct {
	name string
	d    time.Duration
}{
	{"h", time.Hour},
	{"m", time.Minute},
	{"s", time.Second},
	{"ms", time.Millisecond},
	{"us", time.Microsecond},
	{"ns", time.Nanosecond},
}

// String returns the rate as tokens/period with the period in the largest
// unit that divides it and a count of 1 left out: "3/s", "7/10s", "1/24h",
// "1000/ms", "20/90s". ParseRate reads it back.
func (r Rate) String() string {
	if r.Period <= 0 {
		return strconv.FormatInt(r.Tokens, 10) + "/" + r.Period.String()
	}
	for _, u := range units {
		if r.Period%u.d == 0 {
			n := int64(r.Period / u.d)
			if n == 1 {
				return fmt.Sprintf("%d/%s", r.Tokens, u.name)
			}
			return fmt.Sprintf("%d/%d%s", r.Tokens, n, u.name)
		}
	}
	panic("unreachable")
}

// ParseRate parses a rate written as tokens/period, where period is a
// time.Duration ("90s", "1m30s") or a bare unit meaning one of it ("s",
// "m", "h", "ms", "us", "µs"): "20/3s", "3/s", "1000/ms". It accepts
// everything String returns. It checks only the syntax; NewBucket checks
// that the rate is usable.
func ParseRate(s string) (Rate, error) {
	num, per, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, fmt.Errorf("spigot: rate %q: want tokens/period, such as 20/3s", s)
	}
	tokens, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil {
		return Rate{}, fmt.Errorf("spigot: rate %q: bad token count: %w", s, err)
	}
	per = strings.TrimSpace(per)
	if per != "" && (per[0] < '0' || per[0] > '9') && per[0] != '.' {
		per = "1" + per // a bare unit: "s" means "1s"
	}
	d, err := time.ParseDuration(per)
	if err != nil {
		return Rate{}, fmt.Errorf("spigot: rate %q: bad period: %w", s, err)
	}
	return Rate{Tokens: tokens, Period: d}, nil
}
