package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The headers a test checks, in the canonical form Header.Get also finds.
var limitHeaders = []string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"}

// served is the handler behind the middleware in the tests: 204, and a
// count of the requests it served.
type served struct{ n atomic.Int64 }

func (s *served) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.n.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// A step is one request at an instant (the clock advanced by after first)
// and what its response must be. want holds every header of
// limitHeaders that the response must have; it must have no other.
type step struct {
	after  time.Duration
	remote string // RemoteAddr; default 192.0.2.1:1234
	target string // default /
	header http.Header
	status int
	want   map[string]string
}

// play sends each step's request to h at its instant on c.
func play(t *testing.T, c *clocktest.Clock, h http.Handler, steps []step) {
	t.Helper()
	for i, s := range steps {
		c.Advance(s.after)
		target := s.target
		if target == "" {
			target = "/"
		}
		r := httptest.NewRequest("GET", target, nil)
		r.RemoteAddr = "192.0.2.1:1234"
		if s.remote != "" {
			r.RemoteAddr = s.remote
		}
		for k, v := range s.header {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != s.status {
			t.Errorf("step %d: got status %d; want %d (body %q)", i+1, w.Code, s.status, w.Body)
		}
		for _, k := range limitHeaders {
			got, ok := w.Result().Header[k]
			want, wantOK := s.want[k]
			switch {
			case ok != wantOK:
				t.Errorf("step %d: got %s %q (present %v); want %q (present %v)", i+1, k, got, ok, want, wantOK)
			case ok && (len(got) != 1 || got[0] != want):
				t.Errorf("step %d: got %s %q; want %q", i+1, k, got, want)
			}
		}
	}
}

// fixture returns a fake clock at t0 and a memory store on it.
func fixture() (*clocktest.Clock, *memory.Store) {
	c := clocktest.New(t0)
	return c, memory.New(memory.WithClock(c))
}

// TestHeadersOneLimit: every header of admitted and denied responses, at
// fixed instants, on one bucket of 5 refilled 1 a second.
func TestHeadersOneLimit(t *testing.T) {
	c, s := fixture()
	api := spigot.MustBucket("api", 5, spigot.PerSecond(1))
	next := &served{}
	h := httplimit.New(s, httplimit.By(api, nil), httplimit.WithClock(c)).Wrap(next)
	// t is the next token's second: always 1 here; X-RateLimit-Reset
	// is the seconds until the bucket is full.
	ok := func(r, reset int) map[string]string {
		return map[string]string{
			"Ratelimit-Policy":      `"api";q=5;w=5`,
			"Ratelimit":             fmt.Sprintf(`"api";r=%d;t=1`, r),
			"X-Ratelimit-Limit":     "5",
			"X-Ratelimit-Remaining": strconv.Itoa(r),
			"X-Ratelimit-Reset":     strconv.Itoa(reset),
		}
	}
	denied := func(reset, retry int) map[string]string {
		m := ok(0, reset)
		m["Retry-After"] = strconv.Itoa(retry)
		return m
	}
	play(t, c, h, []step{
		{status: 204, want: ok(4, 1)},
		{status: 204, want: ok(3, 2)},
		{status: 204, want: ok(2, 3)},
		{status: 204, want: ok(1, 4)},
		{status: 204, want: ok(0, 5)},
		{status: 429, want: denied(5, 1)},
		{after: 1 * time.Millisecond, status: 429, want: denied(5, 1)},   // 999 ms: rounded up
		{after: 998 * time.Millisecond, status: 429, want: denied(5, 1)}, // 1 ms: never 0
		{after: 1 * time.Millisecond, status: 204, want: ok(0, 5)},       // exactly RetryAfter
		{remote: "192.0.2.2:1", status: 204, want: ok(4, 1)},             // another client
		{remote: "192.0.2.1:9999", status: 429, want: denied(5, 1)},      // a new connection, the same client
		{after: 10 * time.Second, status: 204, want: ok(4, 1)},           // full again
	})
	if got := next.n.Load(); got != 8 {
		t.Errorf("the handler served %d requests; want 8", got)
	}
}

// TestHeadersSeveralLimits: one member per limit; the legacy headers of
// the limit that decided; a request that one limit denies is charged to
// none, and each other limit's member says what it holds.
func TestHeadersSeveralLimits(t *testing.T) {
	c, s := fixture()
	addr := spigot.MustBucket("per-address", 3, spigot.PerMinute(3))
	usr := spigot.MustBucket("per-user", 2, spigot.PerMinute(1))
	h := httplimit.New(s,
		httplimit.By(addr, httplimit.ClientIP()),
		httplimit.By(usr, httplimit.Header("X-User")),
	).Wrap(&served{})
	alice, bob := http.Header{"X-User": {"alice"}}, http.Header{"X-User": {"bob"}}
	const policy = `"per-address";q=3;w=60, "per-user";q=2;w=120`
	want := func(ra, ta, ru, tu int, legacy ...int) map[string]string {
		m := map[string]string{
			"Ratelimit-Policy":      policy,
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
		{header: alice, status: 204, want: want(2, 20, 1, 60, 2, 1, 60)},
		{header: alice, status: 204, want: want(1, 20, 0, 60, 2, 0, 120)},
		// Denied by per-user: per-address says what it holds, 1, and is
		// not charged (the next step shows it).
		{header: alice, status: 429, want: want(1, 20, 0, 60, 2, 0, 120, 60)},
		{header: bob, status: 204, want: want(0, 20, 1, 60, 3, 0, 60)},
		// Denied by per-address: bob's per-user holds 1.
		{header: bob, status: 429, want: want(0, 20, 1, 60, 3, 0, 60, 20)},
		// bob's per-user bucket holds 1⅓ tokens: after this one, its next
		// is 40 s away, and it is full in 100 s.
		{after: 20 * time.Second, header: bob, status: 204, want: want(0, 20, 0, 40, 3, 0, 60)},
	})
}

// TestCost: a cost from the request; 0 passes without the store; a bad
// cost is a 400 that charges nothing; a cost above the capacity is never
// admitted, and says so without Retry-After.
func TestCost(t *testing.T) {
	c, s := fixture()
	counted := countstore.New(s)
	rows := spigot.MustBucket("rows", 10, spigot.PerSecond(1))
	cost := httplimit.WithCost(func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	})
	next := &served{}
	h := httplimit.New(counted, httplimit.By(rows, nil), cost).Wrap(next)
	h413 := httplimit.New(counted, httplimit.By(rows, nil), cost, httplimit.WithNeverAdmittedStatus(http.StatusRequestEntityTooLarge)).Wrap(next)
	hdr := func(r, reset int, retry ...int) map[string]string {
		m := map[string]string{
			"Ratelimit-Policy":      `"rows";q=10;w=10`,
			"Ratelimit":             fmt.Sprintf(`"rows";r=%d;t=1`, r), // the next row's second
			"X-Ratelimit-Limit":     "10",
			"X-Ratelimit-Remaining": strconv.Itoa(r),
			"X-Ratelimit-Reset":     strconv.Itoa(reset),
		}
		if len(retry) > 0 {
			m["Retry-After"] = strconv.Itoa(retry[0])
		}
		return m
	}
	play(t, c, h, []step{
		{target: "/?n=0", status: 204},
		{target: "/?n=-1", status: 400},
		{target: "/?n=two", status: 400},
		{target: "/?n=", status: 400},
		{target: "/?n=7", status: 204, want: hdr(3, 7)},
		{target: "/?n=4", status: 429, want: hdr(3, 7, 1)},
		{target: "/?n=11", status: 429, want: hdr(3, 7)}, // never: no Retry-After
		{target: "/?n=3", status: 204, want: hdr(0, 10)},
	})
	play(t, c, h413, []step{{target: "/?n=11", status: 413, want: hdr(0, 10)}})
	if got, want := counted.Calls(), int64(5); got != want {
		t.Errorf("the store was called %d times; want %d (not for cost 0 or a bad cost)", got, want)
	}
	if got := next.n.Load(); got != 3 {
		t.Errorf("the handler served %d requests; want 3", got)
	}
}

// TestDenyBody: 429 bodies in plain text and in JSON by Accept, and a
// deny handler of one's own.
func TestDenyBody(t *testing.T) {
	_, s := fixture()
	one := spigot.MustBucket("one", 1, spigot.PerMinute(1))
	cost := httplimit.WithCost(func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	})
	h := httplimit.New(s, httplimit.By(one, nil), cost).Wrap(&served{})
	get := func(h http.Handler, n, accept string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/?n="+n, nil)
		r.Header.Set("Accept", accept)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	get(h, "1", "")
	for i, c := range []struct {
		n, accept, wantType, wantBody string
	}{
		{"1", "", "text/plain; charset=utf-8", "too many requests (one): retry in 60s\n"},
		{"1", "text/html", "text/plain; charset=utf-8", "too many requests (one): retry in 60s\n"},
		{"1", "application/json", "application/json", `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"too many requests (one): retry in 60s","violated-policies":["one"],"retry_after":60}` + "\n"},
		{"1", "application/problem+json, */*", "application/problem+json", `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"too many requests (one): retry in 60s","violated-policies":["one"],"retry_after":60}` + "\n"},
		{"2", "", "text/plain; charset=utf-8", "request exceeds the limit (one): the request costs more than the limit ever holds\n"},
		{"2", "application/json", "application/json", `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"request exceeds the limit (one): the request costs more than the limit ever holds","violated-policies":["one"]}` + "\n"},
	} {
		w := get(h, c.n, c.accept)
		if w.Code != 429 || w.Header().Get("Content-Type") != c.wantType || w.Body.String() != c.wantBody {
			t.Errorf("step %d: got %d %q %q; want 429 %q %q", i+1, w.Code, w.Header().Get("Content-Type"), w.Body, c.wantType, c.wantBody)
		}
		if strings.HasSuffix(c.wantType, "json") && !json.Valid(w.Body.Bytes()) {
			t.Errorf("step %d: the body is not JSON: %q", i+1, w.Body)
		}
	}

	var got *httplimit.Result
	own := httplimit.New(s, httplimit.By(one, nil), httplimit.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, res *httplimit.Result) {
		copied := *res
		got = &copied
		http.Error(w, "slow down, "+res.Keys[0], http.StatusServiceUnavailable)
	})).Wrap(&served{})
	w := get(own, "1", "")
	if w.Code != 503 || w.Body.String() != "slow down, 192.0.2.1\n" || w.Header().Get("Retry-After") != "60" {
		t.Errorf("own deny handler: got %d %q, Retry-After %q; want 503 \"slow down, 192.0.2.1\\n\", 60", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
	if got == nil || got.Decision.Allowed() || got.Decision.RetryAfter != time.Minute || got.Limits[0] != one || got.Costs[0] != 1 {
		t.Errorf("own deny handler saw %+v; want a denial of one, RetryAfter 1m, cost 1", got)
	}
}

// TestKeyError: a request without a key is charged nothing, and gets 400
// or the handler of one's own; it never panics.
func TestKeyError(t *testing.T) {
	_, s := fixture()
	counted := countstore.New(s)
	addr := spigot.MustBucket("addr", 5, spigot.PerSecond(1))
	key := spigot.MustBucket("key", 5, spigot.PerSecond(1))
	rules := []httplimit.Option{httplimit.By(addr, nil), httplimit.By(key, httplimit.Header("X-API-Key"))}
	next := &served{}
	h := httplimit.New(counted, rules...).Wrap(next)
	var seen error
	own := httplimit.New(counted, append(rules, httplimit.WithKeyErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		seen = err
		http.Error(w, "who are you?", http.StatusUnauthorized)
	}))...).Wrap(next)
	for i, c := range []struct {
		h      http.Handler
		remote string
		apiKey string
		status int
	}{
		{h, "192.0.2.1:1", "", 400},
		{h, "@", "k", 400}, // no client address
		{own, "192.0.2.1:1", "", 401},
		{h, "192.0.2.1:1", "k", 204},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		if c.apiKey != "" {
			r.Header.Set("X-API-Key", c.apiKey)
		}
		w := httptest.NewRecorder()
		c.h.ServeHTTP(w, r)
		if w.Code != c.status {
			t.Errorf("step %d: got %d %q; want %d", i+1, w.Code, w.Body, c.status)
		}
		if c.status >= 400 && w.Header().Get("Ratelimit") != "" {
			t.Errorf("step %d: a key error sent RateLimit %q", i+1, w.Header().Get("Ratelimit"))
		}
	}
	if !errors.Is(seen, httplimit.ErrNoKey) {
		t.Errorf("the key error handler saw %v; want an error matching ErrNoKey", seen)
	}
	if counted.Calls() != 1 || next.n.Load() != 1 {
		t.Errorf("store calls %d, served %d; want 1 and 1", counted.Calls(), next.n.Load())
	}
	// Nothing was charged to addr by the failed requests.
	d, err := s.Do(t.Context(), spigot.Op{Limit: addr, Key: "192.0.2.1", Action: spigot.Peek, N: 1})
	if err != nil || d.Remaining != 4 {
		t.Errorf("addr holds %d, %v; want 4 (only the served request charged)", d.Remaining, err)
	}
}

// brokenStore fails every operation, as a Redis that is down does.
type brokenStore struct{}

var errDown = errors.New("connection refused")

func (brokenStore) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	return spigot.Decision{}, errDown
}

func (brokenStore) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return errDown
}

// TestStoreError: with FailOpen a request is served when the store fails,
// and the observer sees the error; an error handler of one's own can
// refuse instead (the default is TestStoreErrorFailsSafe's).
func TestStoreError(t *testing.T) {
	api := spigot.MustBucket("api", 5, spigot.PerSecond(1))
	var observed []error
	obs := httplimit.WithObserver(func(r *http.Request, res *httplimit.Result) { observed = append(observed, res.Err) })
	next := &served{}
	open := httplimit.New(brokenStore{}, httplimit.By(api, nil), obs, httplimit.WithErrorHandler(httplimit.FailOpen)).Wrap(next)
	closed := httplimit.New(brokenStore{}, httplimit.By(api, nil), httplimit.By(api, httplimit.Const("all")), obs,
		httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) bool {
			http.Error(w, "limiter unavailable", http.StatusServiceUnavailable)
			return false
		})).Wrap(next)
	for i, c := range []struct {
		h      http.Handler
		status int
	}{{open, 204}, {closed, 503}} {
		w := httptest.NewRecorder()
		c.h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != c.status {
			t.Errorf("step %d: got %d; want %d", i+1, w.Code, c.status)
		}
		for _, k := range limitHeaders {
			if v := w.Header().Get(k); v != "" {
				t.Errorf("step %d: a store error sent %s: %q", i+1, k, v)
			}
		}
	}
	if len(observed) != 2 || !errors.Is(observed[0], errDown) || !errors.Is(observed[1], errDown) {
		t.Errorf("the observer saw %v; want the store's error twice", observed)
	}
	if next.n.Load() != 1 {
		t.Errorf("served %d; want 1", next.n.Load())
	}
}

// TestDegraded: a hybrid store's FailOpen answer is served and claims no
// remaining tokens; FailClosed denies with its Retry-After.
func TestDegraded(t *testing.T) {
	c := clocktest.New(t0)
	api := spigot.MustBucket("api", 5, spigot.PerSecond(1))
	for i, p := range []struct {
		policy hybrid.Policy
		status int
		want   map[string]string
	}{
		{hybrid.FailOpen, 204, map[string]string{"Ratelimit-Policy": `"api";q=5;w=5`, "X-Ratelimit-Limit": "5"}},
		{hybrid.FailClosed, 429, map[string]string{"Ratelimit-Policy": `"api";q=5;w=5`, "X-Ratelimit-Limit": "5", "Retry-After": "5"}},
	} {
		s := hybrid.New(brokenStore{}, memory.New(memory.WithClock(c)), hybrid.WithPolicy(p.policy), hybrid.WithClock(c))
		h := httplimit.New(s, httplimit.By(api, nil)).Wrap(&served{})
		t.Run(fmt.Sprint(i), func(t *testing.T) { play(t, c, h, []step{{status: p.status, want: p.want}}) })
	}
}

// TestHeaderSets: WithHeaders chooses the sets; WithResetAsUnixTime sends an
// instant.
func TestHeaderSets(t *testing.T) {
	api := spigot.MustBucket("api", 5, spigot.PerSecond(1))
	for i, c := range []struct {
		opts []httplimit.Option
		want map[string]string
	}{
		{[]httplimit.Option{httplimit.WithHeaders(httplimit.IETF)}, map[string]string{"Ratelimit-Policy": `"api";q=5;w=5`, "Ratelimit": `"api";r=4;t=1`}},
		{[]httplimit.Option{httplimit.WithHeaders(httplimit.Legacy)}, map[string]string{"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "4", "X-Ratelimit-Reset": "1"}},
		{[]httplimit.Option{httplimit.WithHeaders(0)}, map[string]string{}},
		{[]httplimit.Option{httplimit.WithHeaders(httplimit.Legacy), httplimit.WithResetAsUnixTime()},
			map[string]string{"X-Ratelimit-Limit": "5", "X-Ratelimit-Remaining": "4", "X-Ratelimit-Reset": strconv.FormatInt(t0.Unix()+2, 10)}},
	} {
		clk, s := fixture()
		clk.Advance(500 * time.Millisecond) // the Unix-time reset rounds t0+1.5s up
		h := httplimit.New(s, append(c.opts, httplimit.By(api, nil), httplimit.WithClock(clk))...).Wrap(&served{})
		t.Run(strconv.Itoa(i), func(t *testing.T) { play(t, clk, h, []step{{status: 204, want: c.want}}) })
	}
}

// TestPolicyNames: a limit's name is a structured-field string; w rounds
// the refill time up.
func TestPolicyNames(t *testing.T) {
	for i, c := range []struct {
		limit spigot.Limit
		want  string
	}{
		{spigot.MustBucket(`a"b\c`, 1, spigot.PerSecond(1)), `"a\"b\\c";q=1;w=1`},
		{spigot.MustBucket("café", 1, spigot.PerSecond(1)), `"caf??";q=1;w=1`},
		{spigot.MustBucket("slow", 20, spigot.Per(1, 3*time.Second)), `"slow";q=20;w=60`},
		{spigot.MustBucket("odd", 10, spigot.Per(3, time.Second)), `"odd";q=10;w=4`},
		{spigot.MustBucket("day", 1000, spigot.Per(1000, 24*time.Hour)), `"day";q=1000;w=86400`},
	} {
		_, s := fixture()
		w := httptest.NewRecorder()
		httplimit.New(s, httplimit.By(c.limit, nil)).Wrap(&served{}).ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if got := w.Header().Get("Ratelimit-Policy"); got != c.want {
			t.Errorf("step %d: got RateLimit-Policy %s; want %s", i+1, got, c.want)
		}
	}
}

// TestByFunc: a plan's limit chosen per request.
func TestByFunc(t *testing.T) {
	c, s := fixture()
	free := spigot.MustBucket("plan", 2, spigot.PerMinute(60))
	paid := spigot.MustBucket("plan", 100, spigot.PerMinute(6000))
	choose := func(r *http.Request) (spigot.Limit, error) {
		switch r.Header.Get("X-Plan") {
		case "free":
			return free, nil
		case "paid":
			return paid, nil
		}
		return spigot.Limit{}, errors.New("no plan")
	}
	h := httplimit.New(s, httplimit.ByFunc(choose, httplimit.Header("X-Tenant")), httplimit.WithHeaders(httplimit.IETF)).Wrap(&served{})
	hdr := func(plan, tenant string) http.Header { return http.Header{"X-Plan": {plan}, "X-Tenant": {tenant}} }
	play(t, c, h, []step{
		{header: hdr("free", "t1"), status: 204, want: map[string]string{"Ratelimit-Policy": `"plan";q=2;w=2`, "Ratelimit": `"plan";r=1;t=1`}},
		{header: hdr("free", "t1"), status: 204, want: map[string]string{"Ratelimit-Policy": `"plan";q=2;w=2`, "Ratelimit": `"plan";r=0;t=1`}},
		{header: hdr("free", "t1"), status: 429, want: map[string]string{"Ratelimit-Policy": `"plan";q=2;w=2`, "Ratelimit": `"plan";r=0;t=1`, "Retry-After": "1"}},
		{header: hdr("paid", "t2"), status: 204, want: map[string]string{"Ratelimit-Policy": `"plan";q=100;w=1`, "Ratelimit": `"plan";r=99;t=1`}},
		{header: hdr("gold", "t2"), status: 400},
	})
}

// TestReset: a successful login resets the per-user limit and leaves the
// per-address one charged.
func TestReset(t *testing.T) {
	_, s := fixture()
	addr := spigot.MustBucket("login-addr", 10, spigot.PerMinute(1))
	usr := spigot.MustBucket("login-user", 3, spigot.PerMinute(1))
	other := spigot.MustBucket("other", 3, spigot.PerMinute(1))
	var mw *httplimit.Middleware
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "hunter2" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		if _, err := mw.Reset(r, usr); err != nil {
			t.Errorf("Reset: %v", err)
		}
		if _, err := mw.Reset(r, other); err == nil {
			t.Errorf("Reset of a limit no rule applies: no error")
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mw = httplimit.New(s, httplimit.By(addr, nil), httplimit.By(usr, httplimit.FormValue("user")))
	h := mw.Wrap(login)
	try := func(password string) (int, string) {
		r := httptest.NewRequest("POST", "/login?user=alice&password="+password, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Header().Get("Ratelimit")
	}
	for i, c := range []struct {
		password string
		status   int
		rl       string
	}{
		{"x", 401, `"login-addr";r=9;t=60, "login-user";r=2;t=60`},
		{"x", 401, `"login-addr";r=8;t=60, "login-user";r=1;t=60`},
		{"hunter2", 204, `"login-addr";r=7;t=60, "login-user";r=0;t=60`},
		{"x", 401, `"login-addr";r=6;t=60, "login-user";r=2;t=60`}, // the user's failures are forgiven, the address's are not
	} {
		if status, rl := try(c.password); status != c.status || rl != c.rl {
			t.Errorf("step %d: got %d %s; want %d %s", i+1, status, rl, c.status, c.rl)
		}
	}
}

// TestRefund: a request admitted and then not served gets its cost back.
func TestRefund(t *testing.T) {
	_, s := fixture()
	a := spigot.MustBucket("a", 3, spigot.PerMinute(1))
	b := spigot.MustBucket("b", 3, spigot.PerMinute(1))
	for _, rules := range [][]httplimit.Option{{httplimit.By(a, nil)}, {httplimit.By(a, nil), httplimit.By(b, httplimit.Const("all"))}} {
		mw := httplimit.New(s, rules...)
		h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := mw.Refund(r); err != nil {
				t.Errorf("Refund: %v", err)
			}
			http.Error(w, "failed", http.StatusInternalServerError)
		}))
		for i := range 5 {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
			if w.Code != 500 || w.Header().Get("X-Ratelimit-Remaining") != "2" {
				t.Errorf("%d rules, step %d: got %d, remaining %q; want 500 and 2 every time", len(rules), i+1, w.Code, w.Header().Get("X-Ratelimit-Remaining"))
			}
		}
	}
}

// TestObserver: one call per decided request, with the route, the limits,
// the keys and the decision.
func TestObserver(t *testing.T) {
	_, s := fixture()
	api := spigot.MustBucket("api", 1, spigot.PerMinute(1))
	type seen struct {
		route, limit, key string
		allowed           bool
		latency           bool
	}
	var got []seen
	mw := httplimit.New(s, httplimit.By(api, httplimit.Route()), httplimit.WithObserver(func(r *http.Request, res *httplimit.Result) {
		got = append(got, seen{res.Route, res.Limits[0].Name(), res.Keys[0], res.Decision.Allowed(), res.Latency > 0})
	}))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", mw.Wrap(&served{}))
	for _, path := range []string{"/items/1", "/items/2", "/nothing"} {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}
	want := []seen{
		{"GET /items/{id}", "api", "GET /items/{id}", true, true},
		{"GET /items/{id}", "api", "GET /items/{id}", false, true},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("observed %v; want %v", got, want)
	}
}

// TestIPv6Prefix: every address of a /64 shares a bucket.
func TestIPv6Prefix(t *testing.T) {
	c, s := fixture()
	api := spigot.MustBucket("api", 2, spigot.PerMinute(1))
	h := httplimit.New(s, httplimit.By(api, httplimit.ClientIP(httplimit.IPv6Prefix(64))), httplimit.WithHeaders(httplimit.IETF)).Wrap(&served{})
	pol := `"api";q=2;w=120`
	play(t, c, h, []step{
		{remote: "[2001:db8:1:2::1]:1", status: 204, want: map[string]string{"Ratelimit-Policy": pol, "Ratelimit": `"api";r=1;t=60`}},
		{remote: "[2001:db8:1:2::ffff]:2", status: 204, want: map[string]string{"Ratelimit-Policy": pol, "Ratelimit": `"api";r=0;t=60`}},
		{remote: "[2001:db8:1:2:aaaa::1]:3", status: 429, want: map[string]string{"Ratelimit-Policy": pol, "Ratelimit": `"api";r=0;t=60`, "Retry-After": "60"}},
		{remote: "[2001:db8:1:3::1]:4", status: 204, want: map[string]string{"Ratelimit-Policy": pol, "Ratelimit": `"api";r=1;t=60`}},
	})
}

// TestNewPanics: programmer errors panic at construction, naming the
// argument.
func TestNewPanics(t *testing.T) {
	api := spigot.MustBucket("api", 1, spigot.PerMinute(1))
	for i, c := range []struct {
		f    func()
		want string
	}{
		{func() { httplimit.New(nil, httplimit.By(api, nil)) }, "nil Store"},
		{func() { httplimit.New((*memory.Store)(nil), httplimit.By(api, nil)) }, "nil Store"},
		{func() { httplimit.New(memory.New()) }, "no rule"},
		{func() { httplimit.New(memory.New(), httplimit.By(spigot.Limit{}, nil)) }, "rule 0 has the zero Limit"},
		{func() { httplimit.New(memory.New(), httplimit.ByFunc(nil, nil)) }, "ByFunc: nil func"},
		{func() { httplimit.New(memory.New(), httplimit.By(api, nil)).Wrap(nil) }, "Wrap: nil Handler"},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), c.want) {
					t.Errorf("step %d: recovered %v; want a panic naming %q", i+1, r, c.want)
				}
			}()
			c.f()
		}()
	}
}
