package spigot_test

import (
	"time"

	"github.com/spigot-go/spigot"
)

// t0 is the fixed instant every step table starts from.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const ms, s = time.Millisecond, time.Second

func allow(remaining int64, reset time.Duration) spigot.Decision {
	return spigot.Decision{Remaining: remaining, ResetAfter: reset}
}

func deny(remaining int64, retry, reset time.Duration) spigot.Decision {
	return spigot.Decision{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// taken returns want with the N of a Take of cost: cost when allowed.
func taken(want spigot.Decision, cost int64) spigot.Decision {
	if want.Allowed() {
		want.N = cost
	}
	return want
}

// refill returns want with RefillAfter r.
func refill(want spigot.Decision, r time.Duration) spigot.Decision {
	want.RefillAfter = r
	return want
}
