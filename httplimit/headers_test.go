package httplimit_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// TestHeadersNested: a middleware nested in another adds its members to
// the outer one's RateLimit-Policy and RateLimit, in one field line, and
// the legacy fields are those of the limit that decided across both.
func TestHeadersNested(t *testing.T) {
	c, s := fixture()
	addr := spigot.MustBucket("per-address", 3, spigot.PerMinute(3))
	usr := spigot.MustBucket("per-user", 2, spigot.PerMinute(1))
	outer := httplimit.New(s, httplimit.By(addr, httplimit.ClientIP()), httplimit.WithClock(c))
	inner := httplimit.New(s, httplimit.By(usr, httplimit.Header("X-User")), httplimit.WithClock(c))
	h := outer.Wrap(inner.Wrap(&served{}))
	alice, bob := http.Header{"X-User": {"alice"}}, http.Header{"X-User": {"bob"}}
	both := func(ra, ta, ru, tu int, legacy ...int) map[string]string {
		m := map[string]string{
			"Ratelimit-Policy":      `"per-address";q=3;w=60, "per-user";q=2;w=120`,
			"Ratelimit":             fmt.Sprintf(`"per-address";r=%d;t=%d, "per-user";r=%d;t=%d`, ra, ta, ru, tu),
			"X-Ratelimit-Limit":     strconv.Itoa(legacy[0]),
			"X-Ratelimit-Remaining": strconv.Itoa(legacy[1]),
			"X-Ratelimit-Reset":     strconv.Itoa(legacy[2]),
		}
		if len(legacy) > 3 {
			m["Retry-After"] = strconv.Itoa(legacy[3])
		}
		return m
	}
	play(t, c, h, []step{
		// per-user has the fewest left: its legacy fields.
		{header: alice, status: 204, want: both(2, 20, 1, 60, 2, 1, 60)},
		{header: alice, status: 204, want: both(1, 20, 0, 60, 2, 0, 120)},
		// per-user denies: its legacy fields, its Retry-After. The outer
		// middleware admitted and charged the request before.
		{header: alice, status: 429, want: both(0, 20, 0, 60, 2, 0, 120, 60)},
		// per-address has the fewest left.
		{after: 20 * time.Second, header: bob, status: 204, want: both(0, 20, 1, 60, 3, 0, 60)},
		// per-address denies: the inner middleware never runs.
		{header: bob, status: 429, want: map[string]string{
			"Ratelimit-Policy":      `"per-address";q=3;w=60`,
			"Ratelimit":             `"per-address";r=0;t=20`,
			"X-Ratelimit-Limit":     "3",
			"X-Ratelimit-Remaining": "0",
			"X-Ratelimit-Reset":     "60",
			"Retry-After":           "20",
		}},
	})

	// One middleware wrapped twice: the inner decision replaces the outer
	// one's member of the same name.
	api := spigot.MustBucket("api", 5, spigot.PerSecond(1))
	twice := httplimit.New(s, httplimit.By(api, nil), httplimit.WithClock(c))
	play(t, c, twice.Wrap(twice.Wrap(&served{})), []step{
		{status: 204, want: map[string]string{
			"Ratelimit-Policy":      `"api";q=5;w=5`,
			"Ratelimit":             `"api";r=3;t=1`,
			"X-Ratelimit-Limit":     "5",
			"X-Ratelimit-Remaining": "3",
			"X-Ratelimit-Reset":     "2",
		}},
	})
}

// TestHeadersMerge: what a middleware does with rate-limit fields that
// a handler before it set: list members it keeps, in one field line,
// unless they have its limit's name; legacy fields it keeps when they
// have fewer remaining; fields it cannot read it replaces.
func TestHeadersMerge(t *testing.T) {
	api := spigot.MustBucket("api", 5, spigot.PerSecond(1))
	const (
		policy = `"api";q=5;w=5`
		rl     = `"api";r=4;t=1`
	)
	ours := map[string]string{"Ratelimit-Policy": policy, "Ratelimit": rl, "X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "4", "X-Ratelimit-Reset": "1"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := make(map[string]string)
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(out, kv[i])
			} else {
				out[kv[i]] = kv[i+1]
			}
		}
		return out
	}
	for i, c := range []struct {
		before   http.Header
		degraded bool
		want     map[string]string
	}{
		{nil, false, ours},
		// Lists in several field lines become one.
		{http.Header{"Ratelimit": {`"a";r=1;t=2`, ` "b";r=3 `}, "Ratelimit-Policy": {`"a";q=2;w=4, "b";q=3;w=9`}}, false,
			with(ours, "Ratelimit", `"a";r=1;t=2, "b";r=3, `+rl, "Ratelimit-Policy", `"a";q=2;w=4, "b";q=3;w=9, `+policy)},
		// Parameters of every type are kept as written.
		{http.Header{"Ratelimit-Policy": {`"a";q=1;qu="requests, or so";pk=:YWJj:;x=tok/en:1;y=?1;z=-1.5;d=@1700000000;s=%"caf%c3%a9";flag,"b";q=2`}}, false,
			with(ours, "Ratelimit-Policy", `"a";q=1;qu="requests, or so";pk=:YWJj:;x=tok/en:1;y=?1;z=-1.5;d=@1700000000;s=%"caf%c3%a9";flag, "b";q=2, `+policy)},
		// A member of the same name is replaced, wherever it is.
		{http.Header{"Ratelimit": {`"b";r=1, "api";r=0;t=9, "c";r=2`}, "Ratelimit-Policy": {`"api";q=1;w=1`}}, false,
			with(ours, "Ratelimit", `"b";r=1, "c";r=2, `+rl)},
		// Names are compared as written, escapes included.
		{http.Header{"Ratelimit": {`"ap\\i";r=1, "api\"";r=2, "API";r=3`}}, false,
			with(ours, "Ratelimit", `"ap\\i";r=1, "api\"";r=2, "API";r=3, `+rl)},
		// What is not a list of string items is replaced.
		{http.Header{"Ratelimit": {`api;r=1`}, "Ratelimit-Policy": {`"a";q=1,`}}, false, ours},
		{http.Header{"Ratelimit": {`"a";r=1 "b"`}, "Ratelimit-Policy": {`"a";Q=1`}}, false, ours},
		{http.Header{"Ratelimit": {`"a`}, "Ratelimit-Policy": {`"a";q=1;w=`}}, false, ours},
		{http.Header{"Ratelimit": {`"caf` + "\u00e9" + `";r=1`}, "Ratelimit-Policy": {`"a";q=:YWJj`}}, false, ours},
		// Legacy fields with fewer remaining stay, and on a tie too.
		{http.Header{"X-Ratelimit-Limit": {"9"}, "X-Ratelimit-Remaining": {"2"}, "X-Ratelimit-Reset": {"7"}}, false,
			with(ours, "X-Ratelimit-Limit", "9", "X-Ratelimit-Remaining", "2", "X-Ratelimit-Reset", "7")},
		{http.Header{"X-Ratelimit-Limit": {"9"}, "X-Ratelimit-Remaining": {"4"}, "X-Ratelimit-Reset": {"7"}}, false,
			with(ours, "X-Ratelimit-Limit", "9", "X-Ratelimit-Remaining", "4", "X-Ratelimit-Reset", "7")},
		{http.Header{"X-Ratelimit-Limit": {"9"}}, false, with(ours, "X-Ratelimit-Limit", "9", "X-Ratelimit-Remaining", "", "X-Ratelimit-Reset", "")}, // Degraded: the fewest
		{http.Header{"X-Ratelimit-Limit": {"9"}, "X-Ratelimit-Remaining": {"5"}, "X-Ratelimit-Reset": {"7"}}, false, ours},
		{http.Header{"X-Ratelimit-Limit": {"nine"}, "X-Ratelimit-Remaining": {"2"}}, false, ours},
		{http.Header{"X-Ratelimit-Limit": {"9"}, "X-Ratelimit-Remaining": {"-1"}}, false, ours},
		{http.Header{"X-Ratelimit-Limit": {"9"}, "X-Ratelimit-Remaining": {"2", "3"}}, false, ours},
		{http.Header{"X-Ratelimit-Limit": {"9"}, "X-Ratelimit-Remaining": {"99999999999999999999"}}, false, ours},
		// A Degraded decision leaves the outer member of its name, and
		// its X-RateLimit-Limit alone replaces the legacy fields.
		{http.Header{"Ratelimit": {`"api";r=1`}, "X-Ratelimit-Limit": {"9"}, "X-Ratelimit-Remaining": {"2"}, "X-Ratelimit-Reset": {"7"}}, true,
			map[string]string{"Ratelimit-Policy": policy, "Ratelimit": `"api";r=1`, "X-Ratelimit-Limit": "5"}},
	} {
		clk, s := fixture()
		var store spigot.Store = s
		if c.degraded {
			store = hybrid.New(brokenStore{}, s, hybrid.WithPolicy(hybrid.FailOpen), hybrid.WithClock(clk))
		}
		mw := httplimit.New(store, httplimit.By(api, nil), httplimit.WithClock(clk))
		before := c.before
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, v := range before {
				w.Header()[k] = v
			}
			mw.Wrap(&served{}).ServeHTTP(w, r)
		})
		t.Run(strconv.Itoa(i), func(t *testing.T) { play(t, clk, h, []step{{status: 204, want: c.want}}) })
	}
}

// TestHeadersDraft10: IETFDraft10 sends draft-10's t, the seconds until
// the limit is whole again (0 when it is), where IETF sends the effective
// window.
func TestHeadersDraft10(t *testing.T) {
	api := spigot.MustBucket("api", 5, spigot.PerMinute(1))
	cost := httplimit.WithCost(func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	})
	for _, c := range []struct {
		set  httplimit.Headers
		want []string // RateLimit of each step
	}{
		{httplimit.IETF, []string{`"api";r=5;t=60`, `"api";r=4;t=60`, `"api";r=0;t=60`, `"api";r=0;t=60`, `"api";r=0;t=30`}},
		{httplimit.IETFDraft10, []string{`"api";r=5;t=0`, `"api";r=4;t=60`, `"api";r=0;t=300`, `"api";r=0;t=300`, `"api";r=0;t=270`}},
	} {
		clk, s := fixture()
		h := httplimit.New(s, httplimit.By(api, nil), cost, httplimit.WithClock(clk), httplimit.WithHeaders(c.set|httplimit.Legacy)).Wrap(&served{})
		want := func(i, retry, reset int) map[string]string {
			m := map[string]string{
				"Ratelimit-Policy":      `"api";q=5;w=300`,
				"Ratelimit":             c.want[i],
				"X-Ratelimit-Limit":     "5",
				"X-Ratelimit-Remaining": c.want[i][len(`"api";r=`) : len(`"api";r=`)+1],
				"X-Ratelimit-Reset":     strconv.Itoa(reset),
			}
			if retry > 0 {
				m["Retry-After"] = strconv.Itoa(retry)
			}
			return m
		}
		t.Run(fmt.Sprint(c.set), func(t *testing.T) {
			play(t, clk, h, []step{
				{target: "/?n=6", status: 429, want: want(0, 0, 0)}, // never: a whole limit
				{target: "/?n=1", status: 204, want: want(1, 0, 60)},
				{target: "/?n=4", status: 204, want: want(2, 0, 300)},
				{target: "/?n=1", status: 429, want: want(3, 60, 300)},
				{after: 30 * time.Second, target: "/?n=1", status: 429, want: want(4, 30, 270)},
			})
		})
	}
}

// instant is a clock whose waits end at once: a leaky bucket's Delay
// does not hold a request.
type instant struct{ *clocktest.Clock }

func (instant) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

// TestRetryAfterNotBeforeT: on every kind of limit, alone and beside
// another, a denial's Retry-After is never earlier than the end of the
// deciding limit's effective window (its member's t), and a t is never 0.
func TestRetryAfterNotBeforeT(t *testing.T) {
	kinds := []spigot.Limit{
		spigot.MustBucket("tb", 4, spigot.Per(3, 10*time.Second)),
		spigot.Must(spigot.NewLeakyBucket("lb", 4, spigot.Per(3, 10*time.Second))),
		spigot.Must(spigot.NewFixedWindow("fw", spigot.Per(4, 10*time.Second), 1500*time.Millisecond)),
		spigot.Must(spigot.NewSlidingWindow("sw", spigot.Per(4, 10*time.Second))),
		spigot.Must(spigot.NewSlidingLog("sl", spigot.Per(4, 10*time.Second))),
	}
	other := spigot.MustBucket("other", 7, spigot.Per(5, 7*time.Second))
	member := regexp.MustCompile(`^"([a-z]+)";r=(\d+)(?:;t=(\d+))?$`)
	for _, l := range kinds {
		for _, rules := range [][]spigot.Limit{{l}, {l, other}} {
			t.Run(fmt.Sprint(l.Kind(), len(rules)), func(t *testing.T) {
				c, s := fixture()
				var i int // the step
				opts := []httplimit.Option{httplimit.WithClock(instant{c}), httplimit.WithCost(func(r *http.Request) (int64, error) {
					return strconv.ParseInt(r.Header.Get("N"), 10, 64)
				}), httplimit.WithObserver(func(_ *http.Request, res *httplimit.Result) {
					// By construction: a denial asks for more than
					// Remaining, so its wait is at least the one for
					// Remaining + 1, which is RefillAfter.
					if d := res.Decision.Each[res.Decision.By]; !d.Allowed() && d.RetryAfter < d.RefillAfter {
						t.Errorf("step %d: %v denied with RetryAfter %v, below its RefillAfter %v", i, res.Limits[res.Decision.By], d.RetryAfter, d.RefillAfter)
					}
				})}
				caps := map[string]int64{}
				for i, l := range rules {
					opts = append(opts, httplimit.By(l, httplimit.Const(strconv.Itoa(i))))
					caps[l.Name()] = l.Capacity()
				}
				h := httplimit.New(s, opts...).Wrap(&served{})
				rnd := rand.New(rand.NewPCG(1, uint64(l.Kind())))
				denials := 0
				for i = range 400 {
					c.Advance(time.Duration(rnd.IntN(3000)) * time.Millisecond)
					r := httptest.NewRequest("GET", "/", nil)
					r.Header.Set("N", strconv.Itoa(1+rnd.IntN(3)))
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					ts := map[int64]int64{} // t by capacity: the capacities differ
					for _, m := range strings.Split(w.Header().Get("Ratelimit"), ", ") {
						sm := member.FindStringSubmatch(m)
						if sm == nil {
							t.Fatalf("step %d: RateLimit member %q", i, m)
						}
						tt := int64(-1)
						if sm[3] != "" {
							tt, _ = strconv.ParseInt(sm[3], 10, 64)
							if tt == 0 {
								t.Errorf("step %d: RateLimit member %q has t=0", i, m)
							}
						}
						ts[caps[sm[1]]] = tt
					}
					retry := w.Header().Get("Retry-After")
					if w.Code == 204 {
						if retry != "" {
							t.Errorf("step %d: admitted with Retry-After %s", i, retry)
						}
						continue
					}
					denials++
					q, _ := strconv.ParseInt(w.Header().Get("X-Ratelimit-Limit"), 10, 64)
					ra, err := strconv.ParseInt(retry, 10, 64)
					switch tt, ok := ts[q]; {
					case err != nil || w.Code != 429:
						t.Errorf("step %d: got %d, Retry-After %q; want 429 and seconds", i, w.Code, retry)
					case !ok || tt < 1:
						t.Errorf("step %d: the deciding limit (q=%d) has no t: RateLimit %q", i, q, w.Header().Get("Ratelimit"))
					case ra < tt:
						t.Errorf("step %d: got Retry-After %d before the end of the deciding limit's t=%d: RateLimit %q", i, ra, tt, w.Header().Get("Ratelimit"))
					}
				}
				if denials < 50 {
					t.Errorf("%d denials in 400 steps; want more for the test to mean something", denials)
				}
			})
		}
	}
}

// TestHugeLimits: counts beyond 15 digits are sent as 999999999999999.
func TestHugeLimits(t *testing.T) {
	huge := spigot.MustBucket("huge", store.MaxExact, spigot.Per(1_000_000, time.Second))
	s := memory.New(memory.WithClock(clocktest.New(t0)))
	w := httptest.NewRecorder()
	httplimit.New(s, httplimit.By(huge, nil)).Wrap(&served{}).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	for k, want := range map[string]string{
		"Ratelimit-Policy":      `"huge";q=999999999999999;w=9007199255`,
		"Ratelimit":             `"huge";r=999999999999999;t=1`,
		"X-Ratelimit-Limit":     "999999999999999",
		"X-Ratelimit-Remaining": "999999999999999",
		"X-Ratelimit-Reset":     "1",
	} {
		if got := w.Header().Get(k); got != want {
			t.Errorf("got %s %q; want %q", k, got, want)
		}
	}
}
