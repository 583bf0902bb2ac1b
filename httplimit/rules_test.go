package httplimit_test

import (
	"context"
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
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/internal/countstore"
)

// The limits of a service's one policy, as in the README: per address on
// everything, per account on login, a tenant's rows on export.
var (
	svcAddr   = spigot.MustBucket("api-ip", 10, spigot.PerMinute(10))
	svcUser   = spigot.MustBucket("login-user", 3, spigot.PerMinute(1))
	svcTenant = spigot.MustBucket("export-rows", 1000, spigot.PerHour(1000))
)

// rows is the cost of an export: its rows parameter.
func rows(r *http.Request) (int64, error) {
	return strconv.ParseInt(r.URL.Query().Get("rows"), 10, 64)
}

// service returns the mux of a small service behind one policy, around
// the whole mux, in s.
func service(s spigot.Store, opts ...httplimit.Option) (http.Handler, *httplimit.Middleware) {
	var mw *httplimit.Middleware
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "hunter2" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		if _, err := mw.Reset(r, svcUser); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /export", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mw = httplimit.New(s, append([]httplimit.Option{
		httplimit.By(svcAddr, httplimit.ClientIP()),
		httplimit.By(svcUser, httplimit.FormValue("user"), httplimit.On("POST /login")),
		httplimit.By(svcTenant, httplimit.Header("X-Api-Key"), httplimit.On("GET /export"), httplimit.Cost(rows)),
	}, opts...)...)
	return mw.Wrap(mux), mw
}

// remaining peeks at what each of limits holds for its key.
func remaining(t *testing.T, s spigot.Store, keys map[spigot.Limit]string) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for l, k := range keys {
		d, err := s.Do(context.Background(), spigot.Op{Limit: l, Key: k, Action: spigot.Peek})
		if err != nil {
			t.Fatal(err)
		}
		got[l.Name()] = d.Remaining
	}
	return got
}

// members returns the names of the members of a RateLimit field, in
// order.
func members(field string) []string {
	var names []string
	for _, m := range strings.Split(field, ", ") {
		if name, _, ok := strings.Cut(m, ";"); ok {
			names = append(names, name)
		}
	}
	return names
}

// TestOnePolicy: one middleware around a whole mux applies each rule to
// the requests it matches, takes every rule that applies all or nothing
// in one store call, charges each its own cost, and says so in one
// RateLimit field; a login's success forgives the account alone.
func TestOnePolicy(t *testing.T) {
	c, s := fixture()
	counted := countstore.New(s)
	h, _ := service(counted)
	keys := map[spigot.Limit]string{svcAddr: "192.0.2.1", svcUser: "alice", svcTenant: "k1"}
	type want struct {
		status  int
		members string           // the RateLimit members' names, in order
		left    map[string]int64 // what each limit holds afterwards
		retry   string
	}
	left := func(addr, user, tenant int64) map[string]int64 {
		return map[string]int64{"api-ip": addr, "login-user": user, "export-rows": tenant}
	}
	for i, st := range []struct {
		method, target, body string
		header               http.Header
		want                 want
	}{
		{"GET", "/", "", nil, want{200, `"api-ip"`, left(9, 3, 1000), ""}},
		{"POST", "/login", "user=alice&password=x", nil, want{401, `"api-ip" "login-user"`, left(8, 2, 1000), ""}},
		{"POST", "/login", "user=alice&password=x", nil, want{401, `"api-ip" "login-user"`, left(7, 1, 1000), ""}},
		{"POST", "/login", "user=alice&password=x", nil, want{401, `"api-ip" "login-user"`, left(6, 0, 1000), ""}},
		// Denied by the account: the address is not charged.
		{"POST", "/login", "user=alice&password=x", nil, want{429, `"api-ip" "login-user"`, left(6, 0, 1000), "60"}},
		// Another method on /login: the per-account rule does not apply.
		{"GET", "/login", "", nil, want{200, `"api-ip"`, left(5, 0, 1000), ""}},
		// An export takes its rows from the tenant, and 1 from the address.
		{"GET", "/export?rows=600", "", http.Header{"X-Api-Key": {"k1"}}, want{200, `"api-ip" "export-rows"`, left(4, 0, 400), ""}},
		{"GET", "/export?rows=500", "", http.Header{"X-Api-Key": {"k1"}}, want{429, `"api-ip" "export-rows"`, left(4, 0, 400), "360"}},
		{"GET", "/export?rows=400", "", http.Header{"X-Api-Key": {"k1"}}, want{200, `"api-ip" "export-rows"`, left(3, 0, 0), ""}},
		// An export of 0 rows costs the tenant nothing: only the address.
		{"GET", "/export?rows=0", "", http.Header{"X-Api-Key": {"k1"}}, want{200, `"api-ip"`, left(2, 0, 0), ""}},
		// A bad cost is charged to no rule.
		{"GET", "/export?rows=many", "", http.Header{"X-Api-Key": {"k1"}}, want{400, ``, left(2, 0, 0), ""}},
	} {
		r := httptest.NewRequest(st.method, st.target, strings.NewReader(st.body))
		r.RemoteAddr = "192.0.2.1:1234"
		if st.body != "" {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for k, v := range st.header {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got := want{w.Code, strings.Join(members(w.Header().Get("Ratelimit")), " "), remaining(t, s, keys), w.Header().Get("Retry-After")}
		if policy := strings.Join(members(w.Header().Get("Ratelimit-Policy")), " "); policy != st.want.members {
			t.Errorf("step %d: %s %s: RateLimit-Policy %q; want the members %s", i+1, st.method, st.target, w.Header().Get("Ratelimit-Policy"), st.want.members)
		}
		if fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Errorf("step %d: %s %s: got %v; want %v", i+1, st.method, st.target, got, st.want)
		}
	}
	if got, want := counted.Calls(), int64(10); got != want {
		t.Errorf("the store was called %d times; want %d: one per request, none for a bad cost", got, want)
	}
	// The account's failures are forgiven on success, the address's not.
	c.Advance(time.Minute)
	r := httptest.NewRequest("POST", "/login", strings.NewReader("user=alice&password=hunter2"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "192.0.2.1:1234"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if got, want := remaining(t, s, keys), left(9, 3, 16); w.Code != 204 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("a success after a minute: got %d %v; want 204 %v", w.Code, got, want)
	}
}

// TestNoRuleApplies: a request that no rule applies to passes untouched:
// no store call, no header.
func TestNoRuleApplies(t *testing.T) {
	_, s := fixture()
	counted := countstore.New(s)
	api := spigot.MustBucket("api", 1, spigot.PerMinute(1))
	next := &served{}
	for _, mw := range []*httplimit.Middleware{
		httplimit.New(counted, httplimit.By(api, nil, httplimit.On("/api/"))),
		httplimit.New(counted, httplimit.By(api, nil, httplimit.On("/api/")), httplimit.By(api, httplimit.Const("all"), httplimit.Methods("POST"))),
	} {
		w := httptest.NewRecorder()
		mw.Wrap(next).ServeHTTP(w, httptest.NewRequest("GET", "/health", nil))
		if w.Code != 204 || len(w.Header()) != 0 {
			t.Errorf("got %d %v; want 204 and no header", w.Code, w.Header())
		}
	}
	if got := counted.Calls(); got != 0 {
		t.Errorf("the store was called %d times; want 0", got)
	}
	if got := next.n.Load(); got != 2 {
		t.Errorf("served %d; want 2", got)
	}
}

// TestMatchers: which requests a rule applies to, for each matcher and
// their combinations.
func TestMatchers(t *testing.T) {
	api := spigot.MustBucket("api", 1000, spigot.PerMinute(1))
	hasKey := func(r *http.Request) bool { return r.Header.Get("X-Api-Key") != "" }
	for i, c := range []struct {
		opts   []httplimit.RuleOption
		method string
		target string
		key    string
		want   bool
	}{
		{nil, "GET", "/", "", true},
		{[]httplimit.RuleOption{httplimit.On("POST /login")}, "POST", "/login", "", true},
		{[]httplimit.RuleOption{httplimit.On("POST /login")}, "GET", "/login", "", false},
		{[]httplimit.RuleOption{httplimit.On("POST /login")}, "POST", "/login/", "", false},
		{[]httplimit.RuleOption{httplimit.On("GET /items/{id}")}, "GET", "/items/7", "", true},
		{[]httplimit.RuleOption{httplimit.On("GET /items/{id}")}, "HEAD", "/items/7", "", true}, // as ServeMux: GET covers HEAD
		{[]httplimit.RuleOption{httplimit.On("GET /items/{id}")}, "GET", "/items/7/x", "", false},
		{[]httplimit.RuleOption{httplimit.On("/export/")}, "GET", "/export/a/b", "", true},
		{[]httplimit.RuleOption{httplimit.On("/export/")}, "GET", "/export", "", false},      // redirected, not matched
		{[]httplimit.RuleOption{httplimit.On("/a")}, "GET", "/b/../a", "", false},            // redirected, not matched
		{[]httplimit.RuleOption{httplimit.On("example.com/a")}, "GET", "/a", "", true},       // httptest's host
		{[]httplimit.RuleOption{httplimit.On("other.example/a")}, "GET", "/a", "", false},    //
		{[]httplimit.RuleOption{httplimit.On("/{$}")}, "GET", "/", "", true},                 //
		{[]httplimit.RuleOption{httplimit.On("/{$}")}, "GET", "/x", "", false},               //
		{[]httplimit.RuleOption{httplimit.On("/a/{x}", "/{y}/b")}, "GET", "/z/b", "", true},  // any pattern; conflicting ones too
		{[]httplimit.RuleOption{httplimit.On("/a/{x}", "/{y}/b")}, "GET", "/z/c", "", false}, //
		{[]httplimit.RuleOption{httplimit.On("/")}, "DELETE", "/any/thing", "", true},
		{[]httplimit.RuleOption{httplimit.On("/{rest...}")}, "GET", "/a/b", "", true},
		{[]httplimit.RuleOption{httplimit.Methods("POST", "PUT")}, "PUT", "/", "", true},
		{[]httplimit.RuleOption{httplimit.Methods("POST", "PUT")}, "GET", "/", "", false},
		{[]httplimit.RuleOption{httplimit.If(hasKey)}, "GET", "/", "k", true},
		{[]httplimit.RuleOption{httplimit.If(hasKey)}, "GET", "/", "", false},
		// Several matchers: every one must select the request.
		{[]httplimit.RuleOption{httplimit.On("/api/"), httplimit.Methods("POST"), httplimit.If(hasKey)}, "POST", "/api/x", "k", true},
		{[]httplimit.RuleOption{httplimit.On("/api/"), httplimit.Methods("POST"), httplimit.If(hasKey)}, "GET", "/api/x", "k", false},
		{[]httplimit.RuleOption{httplimit.On("/api/"), httplimit.Methods("POST"), httplimit.If(hasKey)}, "POST", "/x", "k", false},
		{[]httplimit.RuleOption{httplimit.On("/api/"), httplimit.Methods("POST"), httplimit.If(hasKey)}, "POST", "/api/x", "", false},
	} {
		_, s := fixture()
		counted := countstore.New(s)
		h := httplimit.New(counted, httplimit.By(api, nil, c.opts...)).Wrap(&served{})
		r := httptest.NewRequest(c.method, c.target, nil)
		if c.key != "" {
			r.Header.Set("X-Api-Key", c.key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := counted.Calls() == 1 && w.Header().Get("Ratelimit") != ""; got != c.want || w.Code != 204 {
			t.Errorf("step %d: %s %s: applied %v (status %d); want %v", i+1, c.method, c.target, got, w.Code, c.want)
		}
	}
}

// TestRuleCosts: Weight and Cost set one rule's cost; WithCost the
// others', read once per request; a rule a request costs 0 is left out.
func TestRuleCosts(t *testing.T) {
	_, s := fixture()
	a := spigot.MustBucket("a", 100, spigot.PerHour(1))
	b := spigot.MustBucket("b", 100, spigot.PerHour(1))
	cc := spigot.MustBucket("c", 100, spigot.PerHour(1))
	var reads atomic.Int64
	n := func(name string) func(*http.Request) (int64, error) {
		return func(r *http.Request) (int64, error) {
			if name == "default" {
				reads.Add(1)
			}
			return strconv.ParseInt(r.URL.Query().Get(name), 10, 64)
		}
	}
	var seen []int64
	h := httplimit.New(s,
		httplimit.By(a, httplimit.Const("k")),
		httplimit.By(b, httplimit.Const("k"), httplimit.Weight(10)),
		httplimit.By(cc, httplimit.Const("k"), httplimit.Cost(n("c"))),
		httplimit.WithCost(n("default")),
		httplimit.WithObserver(func(_ *http.Request, res *httplimit.Result) { seen = append(seen, res.Costs...) }),
	).Wrap(&served{})
	keys := map[spigot.Limit]string{a: "k", b: "k", cc: "k"}
	for i, st := range []struct {
		target string
		status int
		left   string
		costs  string
	}{
		{"/?default=1&c=5", 204, "map[a:99 b:90 c:95]", "[1 10 5]"},
		{"/?default=0&c=5", 204, "map[a:99 b:80 c:90]", "[10 5]"},
		{"/?default=2&c=0", 204, "map[a:97 b:70 c:90]", "[2 10]"},
		{"/?default=2&c=91", 429, "map[a:97 b:70 c:90]", "[2 10 91]"},
		{"/?default=2&c=x", 400, "map[a:97 b:70 c:90]", "[]"},
		{"/?default=-1&c=1", 400, "map[a:97 b:70 c:90]", "[]"},
	} {
		seen = nil
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", st.target, nil))
		got := fmt.Sprint(remaining(t, s, keys))
		if w.Code != st.status || got != st.left || fmt.Sprint(seen) != st.costs && !(st.costs == "[]" && seen == nil) {
			t.Errorf("step %d: %s: got %d %s costs %v; want %d %s costs %s", i+1, st.target, w.Code, got, seen, st.status, st.left, st.costs)
		}
	}
	if got := reads.Load(); got != 6 {
		t.Errorf("WithCost's func was called %d times for 6 requests; want 6", got)
	}
}

// TestRequestErrors: what the key error handler receives names the rule,
// its limit and the part of the request that could not be read.
func TestRequestErrors(t *testing.T) {
	_, s := fixture()
	a := spigot.MustBucket("a", 10, spigot.PerHour(1))
	boom := errors.New("boom")
	var got error
	h := httplimit.New(s,
		httplimit.By(a, httplimit.Header("X-User"), httplimit.On("/key")),
		httplimit.By(a, httplimit.Const("k"), httplimit.On("/cost"), httplimit.Cost(func(*http.Request) (int64, error) { return 0, boom })),
		httplimit.By(a, httplimit.Const("k"), httplimit.On("/negative"), httplimit.Cost(func(*http.Request) (int64, error) { return -3, nil })),
		httplimit.ByFunc(func(*http.Request) (spigot.Limit, error) { return spigot.Limit{}, nil }, httplimit.Const("k"), httplimit.On("/limit")),
		httplimit.By(a, httplimit.Const(strings.Repeat("k", spigot.MaxKeyLen+1)), httplimit.On("/long")),
		httplimit.WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			got = err
			w.WriteHeader(http.StatusBadRequest)
		}),
	).Wrap(&served{})
	for i, c := range []struct {
		target string
		want   httplimit.RequestError
		is     error
	}{
		{"/key", httplimit.RequestError{Rule: 0, Limit: "a", Part: "key"}, httplimit.ErrNoKey},
		{"/cost", httplimit.RequestError{Rule: 1, Limit: "a", Part: "cost"}, boom},
		{"/negative", httplimit.RequestError{Rule: 2, Limit: "a", Part: "cost"}, spigot.ErrInvalidCost},
		{"/limit", httplimit.RequestError{Rule: 3, Part: "limit"}, spigot.ErrInvalidLimit},
		{"/long", httplimit.RequestError{Rule: 4, Limit: "a", Part: "key"}, spigot.ErrInvalidKey},
	} {
		got = nil
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", c.target, nil))
		var re *httplimit.RequestError
		if w.Code != 400 || !errors.As(got, &re) || re.Rule != c.want.Rule || re.Limit != c.want.Limit || re.Part != c.want.Part || !errors.Is(got, c.is) {
			t.Errorf("step %d: %s: got %d %#v; want 400 and a *RequestError %+v matching %v", i+1, c.target, w.Code, got, c.want, c.is)
		}
	}
}

// TestResetAndRefundApplying: Reset finds the limit among the rules that
// apply to the request; Refund gives back to each what it cost.
func TestResetAndRefundApplying(t *testing.T) {
	_, s := fixture()
	a := spigot.MustBucket("a", 100, spigot.PerHour(1))
	b := spigot.MustBucket("b", 100, spigot.PerHour(1))
	mw := httplimit.New(s,
		httplimit.By(a, httplimit.Const("k")),
		httplimit.By(b, httplimit.Const("k"), httplimit.On("POST /b"), httplimit.Weight(7)),
	)
	keys := map[spigot.Limit]string{a: "k", b: "k"}
	do := func(method, target string, f func(r *http.Request)) {
		mw.Wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { f(r) })).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, target, nil))
	}
	do("POST", "/b", func(*http.Request) {})
	if got := fmt.Sprint(remaining(t, s, keys)); got != "map[a:99 b:93]" {
		t.Fatalf("after POST /b: %s", got)
	}
	do("GET", "/b", func(r *http.Request) {
		if _, err := mw.Reset(r, b); err == nil {
			t.Errorf("Reset of b on GET /b, which b's rule does not apply to: no error")
		}
		if err := mw.Refund(r); err != nil {
			t.Errorf("Refund: %v", err)
		}
	})
	if got := fmt.Sprint(remaining(t, s, keys)); got != "map[a:99 b:93]" {
		t.Errorf("after GET /b refunded: %s; want a:99 b:93", got)
	}
	do("POST", "/b", func(r *http.Request) {
		if err := mw.Refund(r); err != nil {
			t.Errorf("Refund: %v", err)
		}
	})
	if got := fmt.Sprint(remaining(t, s, keys)); got != "map[a:99 b:93]" {
		t.Errorf("after POST /b refunded: %s; want a:99 b:93", got)
	}
	do("POST", "/b", func(r *http.Request) {
		if _, err := mw.Reset(r, b); err != nil {
			t.Errorf("Reset: %v", err)
		}
	})
	if got := fmt.Sprint(remaining(t, s, keys)); got != "map[a:98 b:100]" {
		t.Errorf("after POST /b reset b: %s; want a:98 b:100", got)
	}
}

// TestRuleOptionPanics: programmer errors in rule options panic at once,
// naming the argument.
func TestRuleOptionPanics(t *testing.T) {
	for i, c := range []struct {
		f    func()
		want string
	}{
		{func() { httplimit.On("GET") }, `On("GET")`},
		{func() { httplimit.On("/a", "/b/{x") }, `On("/b/{x")`},
		{func() { httplimit.If(nil) }, "If: nil func"},
		{func() { httplimit.Cost(nil) }, "Cost: nil func"},
		{func() { httplimit.Weight(0) }, "Weight(0)"},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), c.want) || !strings.HasPrefix(fmt.Sprint(r), "spigot: httplimit: ") {
					t.Errorf("step %d: recovered %v; want a panic naming %q", i+1, r, c.want)
				}
			}()
			c.f()
		}()
	}
}
