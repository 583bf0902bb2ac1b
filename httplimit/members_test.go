package httplimit_test

import (
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
)

// TestDenialMembersHold: the case of issue 39. Rules fast (a bucket of 1,
// 1 a second) and slow (a bucket of 5, 1 a minute) on one request; four
// requests 1 s apart, then one 0.5 s later, which fast denies: slow, which
// still holds a unit (nothing was taken), says so, r=1, instead of r=0 and
// t=57 (the "as if admitted" reading of old); a client honouring slow's
// member alone is not denied by slow. The request after fast's Retry-After
// is admitted, as both members said.
func TestDenialMembersHold(t *testing.T) {
	c, s := fixture()
	fast := spigot.MustBucket("fast", 1, spigot.PerSecond(1))
	slow := spigot.MustBucket("slow", 5, spigot.PerMinute(1))
	h := httplimit.New(s, httplimit.By(fast, nil), httplimit.By(slow, nil), httplimit.WithHeaders(httplimit.IETF)).Wrap(&served{})
	ok := func(rf, tf, rs, ts string) map[string]string {
		return map[string]string{"Ratelimit-Policy": `"fast";q=1;w=1, "slow";q=5;w=300`, "Ratelimit": `"fast";r=` + rf + ";t=" + tf + `, "slow";r=` + rs + ";t=" + ts}
	}
	denied := ok("0", "1", "1", "57")
	denied["Retry-After"] = "1"
	play(t, c, h, []step{
		{status: 204, want: ok("0", "1", "4", "60")},
		{after: time.Second, status: 204, want: ok("0", "1", "3", "59")},
		{after: time.Second, status: 204, want: ok("0", "1", "2", "58")},
		{after: time.Second, status: 204, want: ok("0", "1", "1", "57")},
		{after: 500 * time.Millisecond, status: 429, want: denied}, // slow holds 1: r=1
		{after: 500 * time.Millisecond, status: 204, want: ok("0", "1", "0", "56")},
	})
	if d, err := s.Do(t.Context(), spigot.Op{Limit: slow, Key: "192.0.2.1", Action: spigot.Peek, N: 1}); err != nil || d.Remaining != 0 {
		t.Errorf("slow after five admitted requests: %+v, %v; want 0 left, the denied request charged nothing", d, err)
	}
}
