package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// maxSF is the largest integer of a structured field: 15 digits.
const maxSF = 999_999_999_999_999

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sfLimits are limits of every kind, at the edges the constructors
// accept: capacities up to 2^53, periods of a century, names that a
// structured-field string must escape or cannot hold.
var sfLimits = []spigot.Limit{
	spigot.MustBucket("api", 5, spigot.PerSecond(1)),
	spigot.MustBucket("tb-huge", store.MaxExact, spigot.Per(1_000_000, time.Second)),
	spigot.MustBucket(`quo"te`, 3, spigot.Per(2, 100*365*24*time.Hour)),
	spigot.MustBucket(`back\slash`, 0, spigot.PerMinute(1)),
	spigot.Must(spigot.NewLeakyBucket("lb-huge", store.MaxExact, spigot.Per(1_000_000, time.Second))),
	spigot.Must(spigot.NewLeakyBucket("café ☕", 3, spigot.Per(1, 7*time.Second))),
	spigot.Must(spigot.NewFixedWindow("fw-huge", spigot.Per(store.MaxExact, time.Millisecond), 0)),
	spigot.Must(spigot.NewFixedWindow("tab\there", spigot.PerDay(3), 5*time.Hour)),
	spigot.Must(spigot.NewSlidingWindow("sw-huge", spigot.Per(store.MaxExact, time.Millisecond))),
	spigot.Must(spigot.NewSlidingWindow("{sw}", spigot.PerMinute(3))),
	spigot.Must(spigot.NewSlidingLog("sl", spigot.Per(spigot.MaxLog, 24*time.Hour))),
	spigot.Must(spigot.NewSlidingLog("sl-small", spigot.Per(2, 1500*time.Millisecond))),
}

// sfName is the policy name a limit's name becomes: a byte that a
// structured-field string cannot hold is '?'.
func sfName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// seconds is d in whole seconds, rounded up.
func seconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// policyW is the w of l's policy: a window, or the time a bucket takes to
// refill from empty; 0 for none.
func policyW(l spigot.Limit) int64 {
	if l.Window() > 0 {
		return seconds(l.Window())
	}
	us := (l.Capacity()*scaleOf(l) + refillOf(l) - 1) / refillOf(l)
	return (us + 999_999) / 1_000_000
}

// brokenStore fails every operation, as a Redis that is down does.
type brokenStore struct{}

func (brokenStore) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	return spigot.Decision{}, errors.New("connection refused")
}

func (brokenStore) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return errors.New("connection refused")
}

// instant is a clock whose waits end at once: a leaky bucket's Delay
// does not hold a request.
type instant struct{ *clocktest.Clock }

func (instant) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

// seen is what the observer saw of the last request.
type seen struct {
	limits []spigot.Limit
	each   []spigot.Decision
	by     int
	d      spigot.Decision
}

// TestHeadersStrictSF: every field the middleware sends parses with a
// strict Structured Fields parser (RFC 9651, httpsfv), on every kind of
// limit, at the largest capacities and longest periods the constructors
// accept, with names to escape, several limits at once, Degraded
// decisions and every set of headers; and each says what the model
// decided (the decisions the observer saw).
func TestHeadersStrictSF(t *testing.T) {
	type config struct {
		name      string
		limits    []spigot.Limit
		headers   httplimit.Headers
		unixReset bool
		degraded  hybrid.Policy // 0: the memory store itself
	}
	var configs []config
	for _, set := range []httplimit.Headers{httplimit.IETF | httplimit.Legacy, httplimit.IETFDraft10 | httplimit.Legacy} {
		for _, l := range sfLimits {
			configs = append(configs, config{name: fmt.Sprint(set, l), limits: []spigot.Limit{l}, headers: set})
		}
		configs = append(configs,
			config{name: fmt.Sprint(set, "all"), limits: slices.Delete(slices.Clone(sfLimits), 3, 4), headers: set}, // but the capacity of 0
			config{name: fmt.Sprint(set, "unix-reset"), limits: sfLimits[:3], headers: set, unixReset: true},
			config{name: fmt.Sprint(set, "open"), limits: sfLimits[:3], headers: set, degraded: hybrid.FailOpen},
			config{name: fmt.Sprint(set, "closed"), limits: sfLimits[:3], headers: set, degraded: hybrid.FailClosed},
		)
	}
	configs = append(configs, config{name: "IETF", limits: sfLimits[:3], headers: httplimit.IETF})
	for _, cf := range configs {
		t.Run(cf.name, func(t *testing.T) {
			clk := clocktest.New(t0)
			var s spigot.Store = memory.New(memory.WithClock(clk))
			if cf.degraded != 0 {
				s = hybrid.New(brokenStore{}, s, hybrid.WithPolicy(cf.degraded), hybrid.WithClock(clk))
			}
			var last seen
			opts := []httplimit.Option{
				httplimit.WithClock(instant{clk}),
				httplimit.WithHeaders(cf.headers),
				httplimit.WithCost(func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("N"), 10, 64) }),
				httplimit.WithObserver(func(_ *http.Request, res *httplimit.Result) {
					last = seen{slices.Clone(res.Limits), slices.Clone(res.Decision.Each), res.Decision.By, res.Decision.Decision}
				}),
			}
			if cf.unixReset {
				opts = append(opts, httplimit.WithResetAsUnixTime())
			}
			for i, l := range cf.limits {
				opts = append(opts, httplimit.By(l, httplimit.Const(strconv.Itoa(i))))
			}
			h := httplimit.New(s, opts...).Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
			rnd := rand.New(rand.NewPCG(24, uint64(len(cf.name))))
			denied, waits := 0, 0
			for i := range 60 {
				clk.Advance(time.Duration(rnd.Int64N(int64(5 * time.Second))))
				var n int64
				switch k := cf.limits[rnd.IntN(len(cf.limits))].Capacity(); rnd.IntN(5) {
				case 0:
					n = 1
				case 1:
					n = 2
				case 2:
					n = max(k/3, 1)
				case 3:
					n = max(k, 1)
				case 4:
					n = k + 1 // never
				}
				r := httptest.NewRequest("GET", "/", nil)
				r.Header.Set("N", strconv.FormatInt(n, 10))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				checkSF(t, fmt.Sprintf("step %d (cost %d)", i, n), w.Result().Header, last, cf.headers, cf.unixReset, clk.Now())
				if w.Code == 429 {
					denied++
				}
				if w.Header().Get("Retry-After") != "" {
					waits++
				}
			}
			// A capacity of 0 admits no wait, nor does a window of 1 ms
			// that the clock's steps always leave.
			waitable := !slices.ContainsFunc(cf.limits, func(l spigot.Limit) bool { return l.Capacity() == 0 || l.Window() == time.Millisecond })
			if cf.degraded != hybrid.FailOpen && (denied == 0 || waitable && waits == 0) {
				t.Errorf("%d denials, %d with Retry-After, in 60 steps; want some of each", denied, waits)
			}
		})
	}
}

// checkSF checks every rate-limit field of h against what the middleware
// decided.
func checkSF(t *testing.T, step string, h http.Header, s seen, set httplimit.Headers, unixReset bool, now time.Time) {
	t.Helper()
	integer := func(field string) (int64, bool) {
		v, ok := h[field]
		if !ok {
			return 0, false
		}
		if len(v) != 1 {
			t.Errorf("%s: %s has %d field lines; want 1", step, field, len(v))
		}
		it, err := httpsfv.UnmarshalItem(v)
		if err != nil {
			t.Errorf("%s: %s %q: %v", step, field, v, err)
			return 0, false
		}
		n, ok := it.Value.(int64)
		if !ok || n < 0 || len(it.Params.Names()) != 0 {
			t.Errorf("%s: %s %q: want a non-negative integer", step, field, v)
		}
		return n, true
	}
	list := func(field string) httpsfv.List {
		v, ok := h[field]
		if !ok {
			return nil
		}
		if len(v) != 1 {
			t.Errorf("%s: %s has %d field lines; want 1", step, field, len(v))
		}
		l, err := httpsfv.UnmarshalList(v)
		if err != nil {
			t.Errorf("%s: %s %q: %v", step, field, v, err)
		}
		return l
	}
	// param returns the integer parameter k of m, which must be one of keys.
	param := func(field string, m httpsfv.Item, k string, keys ...string) (int64, bool) {
		for _, name := range m.Params.Names() {
			if !slices.Contains(keys, name) {
				t.Errorf("%s: %s member %v has parameter %q", step, field, m.Value, name)
			}
		}
		v, ok := m.Params.Get(k)
		if !ok {
			return 0, false
		}
		n, isInt := v.(int64)
		if !isInt || n < 0 {
			t.Errorf("%s: %s member %v: %s=%v; want a non-negative integer", step, field, m.Value, k, v)
		}
		return n, true
	}

	ietf := set&(httplimit.IETF|httplimit.IETFDraft10) != 0
	if policy := list("Ratelimit-Policy"); ietf != (policy != nil) {
		t.Errorf("%s: RateLimit-Policy %q with headers %v", step, h["Ratelimit-Policy"], set)
	} else if ietf {
		if len(policy) != len(s.limits) {
			t.Errorf("%s: RateLimit-Policy has %d members; want %d", step, len(policy), len(s.limits))
		}
		for i, m := range policy {
			it, ok := m.(httpsfv.Item)
			if !ok || i >= len(s.limits) || it.Value != sfName(s.limits[i].Name()) {
				t.Errorf("%s: RateLimit-Policy member %d is %#v; want the item %q", step, i, m, s.limits[i].Name())
				continue
			}
			l := s.limits[i]
			if q, ok := param("RateLimit-Policy", it, "q", "q", "w"); !ok || q != min(l.Capacity(), maxSF) {
				t.Errorf("%s: %q has q=%d (present %v); want %d", step, it.Value, q, ok, min(l.Capacity(), maxSF))
			}
			w, ok := param("RateLimit-Policy", it, "w", "q", "w")
			if want := policyW(l); ok != (want > 0) || w != want {
				t.Errorf("%s: %q has w=%d (present %v); want %d", step, it.Value, w, ok, want)
			}
		}
	}

	var tBy int64 = -1 // the deciding limit's t
	rl := list("Ratelimit")
	var members []int // the limits with a member
	for i, d := range s.each {
		if !d.Degraded() {
			members = append(members, i)
		}
	}
	if ietf != (rl != nil) && len(members) > 0 {
		t.Errorf("%s: RateLimit %q with headers %v", step, h["Ratelimit"], set)
	} else if ietf {
		if len(rl) != len(members) {
			t.Errorf("%s: RateLimit has %d members; want %d", step, len(rl), len(members))
		}
		for j, m := range rl {
			it, ok := m.(httpsfv.Item)
			if !ok || j >= len(members) || it.Value != sfName(s.limits[members[j]].Name()) {
				t.Errorf("%s: RateLimit member %d is %#v", step, j, m)
				continue
			}
			i := members[j]
			d := s.each[i]
			if r, ok := param("RateLimit", it, "r", "r", "t"); !ok || r != min(d.Remaining, maxSF) {
				t.Errorf("%s: %q has r=%d (present %v); want %d", step, it.Value, r, ok, min(d.Remaining, maxSF))
			}
			tt, ok := param("RateLimit", it, "t", "r", "t")
			switch {
			case set&httplimit.IETFDraft10 != 0:
				if want := min(seconds(d.ResetAfter), maxSF); !ok || tt != want {
					t.Errorf("%s: %q has t=%d (present %v); want draft-10's %d", step, it.Value, tt, ok, want)
				}
			case d.RefillAfter == spigot.Never: // a capacity of 0
				if ok {
					t.Errorf("%s: %q has t=%d; want none, for RefillAfter Never", step, it.Value, tt)
				}
			case !ok || tt != min(seconds(d.RefillAfter), maxSF) || tt == 0:
				t.Errorf("%s: %q has t=%d (present %v); want the effective window, %v rounded up", step, it.Value, tt, ok, d.RefillAfter)
			}
			if i == s.by && ok {
				tBy = tt
			}
		}
	}

	if set&httplimit.Legacy != 0 {
		d := s.each[s.by]
		if n, ok := integer("X-Ratelimit-Limit"); !ok || n != min(s.limits[s.by].Capacity(), maxSF) {
			t.Errorf("%s: X-RateLimit-Limit %d (present %v); want %d", step, n, ok, min(s.limits[s.by].Capacity(), maxSF))
		}
		n, ok := integer("X-Ratelimit-Remaining")
		if ok == d.Degraded() || ok && n != min(d.Remaining, maxSF) {
			t.Errorf("%s: X-RateLimit-Remaining %d (present %v); want %d", step, n, ok, d.Remaining)
		}
		want := seconds(d.ResetAfter)
		if unixReset {
			want = seconds(time.Duration(now.UnixNano()) + d.ResetAfter)
		}
		if n, ok := integer("X-Ratelimit-Reset"); ok == d.Degraded() || ok && n != want {
			t.Errorf("%s: X-RateLimit-Reset %d (present %v); want %d", step, n, ok, want)
		}
	}

	n, ok := integer("Retry-After")
	switch {
	case s.d.Allowed() || s.d.RetryAfter == spigot.Never:
		if ok {
			t.Errorf("%s: Retry-After %d on %+v", step, n, s.d)
		}
	case !ok || n != max(seconds(s.d.RetryAfter), 1):
		t.Errorf("%s: Retry-After %d (present %v); want %d", step, n, ok, max(seconds(s.d.RetryAfter), 1))
	case set&httplimit.IETF != 0 && n < tBy:
		t.Errorf("%s: Retry-After %d is before the end of the deciding limit's t=%d", step, n, tBy)
	}
}

// TestNestedStrictSF: the fields of two nested middlewares, merged, parse
// with a strict parser: the outer one's members, then the inner one's,
// which replace those of the same name.
func TestNestedStrictSF(t *testing.T) {
	clk := clocktest.New(t0)
	s := memory.New(memory.WithClock(clk))
	api, cafe, sl := sfLimits[0], sfLimits[5], sfLimits[11]
	outer := httplimit.New(s, httplimit.By(api, nil), httplimit.By(cafe, nil), httplimit.WithClock(instant{clk}))
	inner := httplimit.New(s, httplimit.By(api, httplimit.Const("x")), httplimit.By(sl, nil), httplimit.WithClock(instant{clk}))
	h := outer.Wrap(inner.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) })))
	both := []string{sfName(cafe.Name()), "api", "sl-small"}
	for i, c := range []struct {
		status int
		want   []string
	}{
		{204, both},
		{204, both},
		{429, both}, // the inner sl-small denies
		{429, []string{"api", sfName(cafe.Name())}}, // the outer café denies
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != c.status {
			t.Errorf("step %d: got %d; want %d", i, w.Code, c.status)
		}
		for _, field := range []string{"Ratelimit-Policy", "Ratelimit"} {
			v := w.Result().Header[field]
			l, err := httpsfv.UnmarshalList(v)
			if err != nil || len(v) != 1 {
				t.Errorf("step %d: %s %q: %v", i, field, v, err)
				continue
			}
			var names []string
			for _, m := range l {
				names = append(names, fmt.Sprint(m.(httpsfv.Item).Value))
			}
			if !slices.Equal(names, c.want) {
				t.Errorf("step %d: %s names %q; want %q", i, field, names, c.want)
			}
		}
	}
}

// FuzzMergeStrict: whatever RateLimit field a handler before the
// middleware set, the middleware sends one that a strict parser reads, and
// keeps every member of a valid one (a list of string items) but the one
// of its limit's name.
func FuzzMergeStrict(f *testing.F) {
	for _, s := range []string{
		`"a";r=1;t=2, "b";r=3`,
		`"a";q=1;qu="requests, or so";pk=:YWJj:;x=tok/en:1;y=?1;z=-1.5;d=@1700000000;s=%"caf%c3%a9";flag,"b";q=2`,
		`"b";r=1, "api";r=0;t=9`, `"ap\\i";r=1, "api\"";r=2`,
		`api;r=1`, `"a";q=1,`, `"a";r=1 "b"`, `"a`, `"a";q=:YWJj`, `("a" "b");r=1`, `"a";r=%"%ff"`, `"a";r=1.2345`,
		`"a";r=1234567890123456`, `"a";r=@1.5`, `"a";*k=*t`, "\"a\"\t, \"b\"",
	} {
		f.Add(s)
	}
	api := spigot.MustBucket("api", 5, spigot.PerSecond(1))
	clk := clocktest.New(t0)
	mw := httplimit.New(memory.New(memory.WithClock(clk)), httplimit.By(api, nil), httplimit.WithClock(clk))
	next := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	f.Fuzz(func(t *testing.T, before string) {
		w := httptest.NewRecorder()
		w.Header()["Ratelimit"] = []string{before}
		clk.Advance(time.Hour) // a full bucket: r=4;t=1 after the request
		next.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		got := w.Result().Header["Ratelimit"]
		l, err := httpsfv.UnmarshalList(got)
		if err != nil || len(got) != 1 {
			t.Fatalf("RateLimit %q after %q: %v", got, before, err)
		}
		var want []string // the valid field's members but api's, then api's
		// A field value's leading and trailing white space is not its own
		// (RFC 9110 §5.5): net/http trims it before writing a field.
		if old, err := httpsfv.UnmarshalList([]string{strings.Trim(before, " \t")}); err == nil {
			for _, m := range old {
				it, ok := m.(httpsfv.Item)
				if _, isString := it.Value.(string); !ok || !isString {
					want = nil
					break
				}
				if it.Value != "api" {
					want = append(want, it.Value.(string))
				}
			}
		}
		want = append(want, "api")
		var names []string
		for _, m := range l {
			it, _ := m.(httpsfv.Item)
			s, _ := it.Value.(string)
			names = append(names, s)
		}
		if !slices.Equal(names, want) {
			t.Fatalf("RateLimit %q after %q: names %q; want %q", got, before, names, want)
		}
	})
}

// scaleOf and refillOf return a bucket's scaled units (see store.Scaled).
func scaleOf(l spigot.Limit) int64  { s, _ := store.Scaled(l); return s }
func refillOf(l spigot.Limit) int64 { _, r := store.Scaled(l); return r }
