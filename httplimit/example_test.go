package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/store/memory"
)

// send serves r through h and prints the status and the headers named.
func send(h http.Handler, r *http.Request, headers ...string) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Print(w.Code)
	for _, k := range headers {
		if v := w.Header().Get(k); v != "" {
			fmt.Printf(" %s: %s", k, v)
		}
	}
	fmt.Println()
}

func request(remoteAddr string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remoteAddr
	return r
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })

// A route limited per client address: 3 requests at once, then 1 a
// second. Every connection of a client shares its key.
func Example() {
	api := spigot.MustBucket("api", 3, spigot.PerSecond(1))
	mw := httplimit.New(memory.New(), httplimit.By(api, httplimit.ClientIP()))
	mux := http.NewServeMux()
	mux.Handle("GET /", mw.Wrap(hello))

	for port := range 4 {
		send(mux, request("203.0.113.7:"+strconv.Itoa(5000+port)), "Ratelimit", "Retry-After")
	}
	send(mux, request("198.51.100.1:5000"), "Ratelimit")
	// Output:
	// 200 Ratelimit: "api";r=2;t=1
	// 200 Ratelimit: "api";r=1;t=1
	// 200 Ratelimit: "api";r=0;t=1
	// 429 Ratelimit: "api";r=0;t=1 Retry-After: 1
	// 200 Ratelimit: "api";r=2;t=1
}

// Behind a load balancer, the client's address comes from the
// X-Forwarded-For entries that the trusted proxies wrote; what the client
// wrote itself is never read.
func ExampleTrustXForwardedFor() {
	lb := netip.MustParsePrefix("10.0.0.0/8")
	key := httplimit.ClientIP(httplimit.TrustXForwardedFor(lb))

	r := request("10.0.0.1:80") // the load balancer
	// The client sent "X-Forwarded-For: 1.2.3.4" to pick its own key; the
	// load balancer appended the address it saw.
	r.Header.Set("X-Forwarded-For", "1.2.3.4, 198.51.100.9")
	fmt.Println(key(r))

	direct := request("198.51.100.20:1234") // not through the proxy
	direct.Header.Set("X-Forwarded-For", "1.2.3.4")
	fmt.Println(key(direct))
	// Output:
	// 198.51.100.9 <nil>
	// 198.51.100.20 <nil>
}

// IPv6 clients grouped by /64: one host usually holds a whole /64.
func ExampleIPv6Prefix() {
	key := httplimit.ClientIP(httplimit.IPv6Prefix(64))
	for _, addr := range []string{"[2001:db8:1:2::1]:443", "[2001:db8:1:2:ffff::7]:443", "192.0.2.1:443"} {
		fmt.Println(key(request(addr)))
	}
	// Output:
	// 2001:db8:1:2::/64 <nil>
	// 2001:db8:1:2::/64 <nil>
	// 192.0.2.1 <nil>
}

type tenantKey struct{}

// Several limits on one route, taken all or nothing: per tenant (the
// value an authentication middleware put in the context) and per tenant
// and endpoint.
func ExampleNew_severalLimits() {
	perTenant := spigot.MustBucket("tenant", 100, spigot.PerSecond(10))
	perEndpoint := spigot.MustBucket("tenant-endpoint", 2, spigot.PerMinute(1))
	mw := httplimit.New(memory.New(),
		httplimit.By(perTenant, httplimit.FromContext(tenantKey{})),
		httplimit.By(perEndpoint, httplimit.Join(httplimit.FromContext(tenantKey{}), httplimit.Route())),
	)
	mux := http.NewServeMux()
	mux.Handle("POST /reports", mw.Wrap(hello))
	auth := func(r *http.Request) *http.Request { // what an auth middleware does
		return r.WithContext(context.WithValue(r.Context(), tenantKey{}, "acme"))
	}
	for range 3 {
		send(mux, auth(httptest.NewRequest("POST", "/reports", nil)), "Ratelimit")
	}
	// Output:
	// 200 Ratelimit: "tenant";r=99;t=1, "tenant-endpoint";r=1;t=60
	// 200 Ratelimit: "tenant";r=98;t=1, "tenant-endpoint";r=0;t=60
	// 429 Ratelimit: "tenant";r=98;t=1, "tenant-endpoint";r=0;t=60
}

// A plan's limit, chosen per request from limits made once.
func ExampleByFunc() {
	free := spigot.MustBucket("plan", 60, spigot.PerMinute(60))
	paid := spigot.MustBucket("plan", 6000, spigot.PerMinute(6000))
	plan := func(r *http.Request) (spigot.Limit, error) {
		if r.Header.Get("X-API-Key") == "paid-key" { // your lookup of the key's plan
			return paid, nil
		}
		return free, nil
	}
	mw := httplimit.New(memory.New(), httplimit.ByFunc(plan, httplimit.Header("X-API-Key")))
	for _, key := range []string{"free-key", "paid-key"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", key)
		send(mw.Wrap(hello), r, "Ratelimit-Policy")
	}
	// Output:
	// 200 Ratelimit-Policy: "plan";q=60;w=60
	// 200 Ratelimit-Policy: "plan";q=6000;w=60
}

// A request's cost from the request: rows to export. A cost of 0 passes
// without touching the store; one above the capacity is never admitted.
func ExampleWithCost() {
	rows := spigot.MustBucket("rows", 1000, spigot.PerMinute(1000))
	mw := httplimit.New(memory.New(), httplimit.By(rows, httplimit.Const("acme")),
		httplimit.WithCost(func(r *http.Request) (int64, error) {
			return strconv.ParseInt(r.URL.Query().Get("rows"), 10, 64)
		}),
		httplimit.WithNeverAdmittedStatus(http.StatusRequestEntityTooLarge),
	)
	for _, n := range []string{"0", "600", "600", "5000", "many"} {
		send(mw.Wrap(hello), httptest.NewRequest("GET", "/export?rows="+n, nil), "Ratelimit", "Retry-After")
	}
	// Output:
	// 200
	// 200 Ratelimit: "rows";r=400;t=1
	// 429 Ratelimit: "rows";r=400;t=1 Retry-After: 12
	// 413 Ratelimit: "rows";r=400;t=1
	// 400
}

// The denial's body is problem details (RFC 9457) in JSON when the client
// accepts JSON.
func ExampleWithDenyHandler() {
	one := spigot.MustBucket("one", 1, spigot.PerMinute(1))
	mw := httplimit.New(memory.New(), httplimit.By(one, nil))
	h := mw.Wrap(hello)
	for range 2 {
		r := request("192.0.2.1:1")
		r.Header.Set("Accept", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body)
	}

	// Or answer denials your own way; the headers are already set.
	own := httplimit.New(memory.New(), httplimit.By(one, nil), httplimit.WithDenyHandler(
		func(w http.ResponseWriter, r *http.Request, res *httplimit.Result) {
			http.Error(w, "slow down: "+res.Limits[res.Decision.By].Name(), http.StatusTooManyRequests)
		})).Wrap(hello)
	own.ServeHTTP(httptest.NewRecorder(), request("192.0.2.1:1"))
	w := httptest.NewRecorder()
	own.ServeHTTP(w, request("192.0.2.1:1"))
	fmt.Print(w.Code, " ", w.Header().Get("Retry-After"), " ", w.Body)
	// Output:
	// 200 hello
	// 429 {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"too many requests (one): retry in 60s","violated-policies":["one"],"retry_after":60}
	// 429 60 slow down: one
}

// An observer sees every decision, for metrics and logs; a store error
// serves the request by default, and the observer sees it too.
func ExampleWithObserver() {
	api := spigot.MustBucket("api", 1, spigot.PerMinute(1))
	observe := httplimit.WithObserver(func(r *http.Request, res *httplimit.Result) {
		if res.Err != nil {
			fmt.Printf("%s: store error: %v\n", res.Route, res.Err)
			return
		}
		fmt.Printf("%s: %s allowed=%v\n", res.Route, res.Limits[0].Name(), res.Decision.Allowed())
	})
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", httplimit.New(memory.New(), httplimit.By(api, nil), observe).Wrap(hello))
	// A store error fails safe (503), unless the route chose FailOpen.
	mux.Handle("GET /down", httplimit.New(downStore{}, httplimit.By(api, nil), observe).Wrap(hello))
	mux.Handle("GET /open", httplimit.New(downStore{}, httplimit.By(api, nil), observe,
		httplimit.WithErrorHandler(httplimit.FailOpen)).Wrap(hello))
	for _, path := range []string{"/items/1", "/items/2", "/down", "/open"} {
		send(mux, httptest.NewRequest("GET", path, nil))
	}
	// Output:
	// GET /items/{id}: api allowed=true
	// 200
	// GET /items/{id}: api allowed=false
	// 429
	// GET /down: store error: redis: connection refused
	// 503
	// GET /open: store error: redis: connection refused
	// 200
}

// downStore is a store that is down.
type downStore struct{}

func (downStore) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	return spigot.Decision{}, errors.New("redis: connection refused")
}

func (downStore) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return errors.New("redis: connection refused")
}

// A successful login resets the account's limit; the address's stays.
func ExampleMiddleware_Reset() {
	perAddress := spigot.MustBucket("login-ip", 20, spigot.Per(1, 3*time.Second))
	perAccount := spigot.MustBucket("login-user", 5, spigot.PerMinute(1))
	var mw *httplimit.Middleware
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "hunter2" {
			http.Error(w, "wrong password", http.StatusUnauthorized)
			return
		}
		mw.Reset(r, perAccount)
		w.WriteHeader(http.StatusNoContent)
	})
	mw = httplimit.New(memory.New(),
		httplimit.By(perAddress, httplimit.ClientIP()),
		httplimit.By(perAccount, httplimit.FormValue("user")),
	)
	h := mw.Wrap(login)
	for _, password := range []string{"guess", "guess", "hunter2", "guess"} {
		send(h, httptest.NewRequest("POST", "/login?user=alice&password="+password, nil), "Ratelimit")
	}
	// Output:
	// 401 Ratelimit: "login-ip";r=19;t=3, "login-user";r=4;t=60
	// 401 Ratelimit: "login-ip";r=18;t=3, "login-user";r=3;t=60
	// 204 Ratelimit: "login-ip";r=17;t=3, "login-user";r=2;t=60
	// 401 Ratelimit: "login-ip";r=16;t=3, "login-user";r=4;t=60
}
