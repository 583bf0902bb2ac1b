package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/store/memory"
)

// One policy for a whole service, around its mux: every request per
// client address, login attempts also per account, exports also per API
// key by the rows they ask for. Each request takes from the rules that
// apply to it, all or nothing, in one store call.
func ExampleOn() {
	perAddress := spigot.MustBucket("api-ip", 60, spigot.PerSecond(1))
	perAccount := spigot.MustBucket("login-user", 5, spigot.PerMinute(1))
	perAPIKey := spigot.MustBucket("export-rows", 100_000, spigot.PerHour(100_000))
	rows := func(r *http.Request) (int64, error) { return strconv.ParseInt(r.URL.Query().Get("rows"), 10, 64) }
	policy := httplimit.New(memory.New(),
		httplimit.By(perAddress, httplimit.ClientIP()),
		httplimit.By(perAccount, httplimit.FormValue("user"), httplimit.On("POST /login")),
		httplimit.By(perAPIKey, httplimit.Header("X-Api-Key"), httplimit.On("GET /export"), httplimit.Cost(rows)),
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "wrong password", http.StatusUnauthorized) })
	mux.HandleFunc("GET /export", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {})
	h := policy.Wrap(mux)

	for _, target := range []string{"GET /", "POST /login", "GET /export?rows=60000", "GET /export?rows=50000"} {
		method, path, _ := strings.Cut(target, " ")
		r := httptest.NewRequest(method, path, strings.NewReader("user=alice"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("X-Api-Key", "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(target, w.Code, w.Header().Get("Ratelimit-Policy"))
	}
	// Output:
	// GET / 200 "api-ip";q=60;w=60
	// POST /login 401 "api-ip";q=60;w=60, "login-user";q=5;w=300
	// GET /export?rows=60000 200 "api-ip";q=60;w=60, "export-rows";q=100000;w=3600
	// GET /export?rows=50000 429 "api-ip";q=60;w=60, "export-rows";q=100000;w=3600
}

// Health checks that cost nothing, and a route that weighs ten times
// what the others do on a limit of its own.
func ExampleWeight() {
	api := spigot.MustBucket("api", 100, spigot.PerSecond(10))
	heavy := spigot.MustBucket("heavy", 50, spigot.PerMinute(50))
	notHealth := func(r *http.Request) bool { return r.URL.Path != "/healthz" }
	policy := httplimit.New(memory.New(),
		httplimit.By(api, httplimit.Header("X-Api-Key"), httplimit.If(notHealth)),
		httplimit.By(heavy, httplimit.Header("X-Api-Key"), httplimit.On("POST /reports"), httplimit.Weight(10)),
	)
	h := policy.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, target := range []string{"GET /healthz", "GET /items", "POST /reports"} {
		method, path, _ := strings.Cut(target, " ")
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("X-Api-Key", "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%s %d %q\n", target, w.Code, w.Header().Get("Ratelimit-Policy"))
	}
	// Output:
	// GET /healthz 200 ""
	// GET /items 200 "\"api\";q=100;w=10"
	// POST /reports 200 "\"api\";q=100;w=10, \"heavy\";q=50;w=60"
}
