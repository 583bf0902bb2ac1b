package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io/fs"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

var demoT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// demoFixture is the demo on a memory store on a fake clock.
func demoFixture(t *testing.T) (*clocktest.Clock, http.Handler) {
	t.Helper()
	c := clocktest.New(demoT0)
	return c, newDemo(memory.New(memory.WithClock(c)), nil, "memory", c).handler()
}

// call sends one request to h for the page key and returns the status,
// the headers and the decoded JSON body.
func call(t *testing.T, h http.Handler, method, path, key string, form url.Values) (int, http.Header, map[string]any) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(form.Encode()))
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if key != "" {
		r.Header.Set("X-Demo-Key", key)
	}
	r.Header.Set("Accept", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s %s: the body is not JSON: %q", method, path, w.Body)
	}
	return w.Code, w.Header(), body
}

// TestDemoAPI: requests of every cost through the limiter, at fixed
// instants, and the state the page draws.
func TestDemoAPI(t *testing.T) {
	c, h := demoFixture(t)
	req := func(cost string) url.Values { return url.Values{"cost": {cost}} }
	for i, s := range []struct {
		after     time.Duration
		cost      string
		status    int
		rateLimit string // the RateLimit header; "" for none
		retryMs   float64
	}{
		{0, "3", 200, `"token-bucket";r=7;t=1`, 0}, // t: the next token, 1 s away
		{0, "", 200, `"token-bucket";r=6;t=1`, 0},  // the default cost is 1
		{0, "7", 429, `"token-bucket";r=6;t=1`, 1000},
		{0, "11", 429, `"token-bucket";r=6;t=1`, -1},                     // never
		{0, "0", 200, "", 0},                                             // cost 0 passes without the store
		{1500 * time.Millisecond, "7", 200, `"token-bucket";r=0;t=1`, 0}, // 7.5 tokens
		{500 * time.Millisecond, "7", 429, `"token-bucket";r=1;t=1`, 6000},
	} {
		c.Advance(s.after)
		status, hdr, body := call(t, h, "POST", "/api/request", "k", req(s.cost))
		if status != s.status || hdr.Get("Ratelimit") != s.rateLimit {
			t.Errorf("step %d: cost %q: got %d, RateLimit %q; want %d, %q", i+1, s.cost, status, hdr.Get("Ratelimit"), s.status, s.rateLimit)
		}
		if allowed := body["allowed"] == true; allowed != (s.status == 200) || body["path"] != "memory" {
			t.Errorf("step %d: body %v; want allowed %v on the memory path", i+1, body, s.status == 200)
		}
		if s.retryMs != 0 && body["retry_after_ms"] != s.retryMs {
			t.Errorf("step %d: retry_after_ms %v; want %v", i+1, body["retry_after_ms"], s.retryMs)
		}
	}
	status, _, st := call(t, h, "GET", "/api/state", "k", nil)
	want := map[string]any{"algo": "token-bucket", "capacity": 10.0, "rate": "1/s", "per_second": 1.0, "remaining": 1.0, "tokens": 1.0,
		"reset_ms": 9000.0, "refill_ms": 10000.0, "detail": "1.00 of 10 tokens, refilled at 1/s", "delay_ms": 0.0, "store": "memory", "path": "memory", "circuit": "", "degraded": false}
	if status != 200 || !equalJSON(st, want) {
		t.Errorf("state: got %d %v; want 200 %v", status, st, want)
	}
	c.Advance(250 * time.Millisecond)
	if _, _, st := call(t, h, "GET", "/api/state", "k", nil); st["tokens"] != 1.25 || st["remaining"] != 1.0 {
		t.Errorf("state 250 ms later: tokens %v, remaining %v; want 1.25 and 1 (the next token a quarter full)", st["tokens"], st["remaining"])
	}
	// Another page's bucket is its own.
	if _, _, st := call(t, h, "GET", "/api/state", "other", nil); st["remaining"] != 10.0 {
		t.Errorf("another page's bucket holds %v; want 10", st["remaining"])
	}
}

func equalJSON(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestDemoConfig: a page sets its bucket's capacity and rate, on the
// running bucket (its tokens carry over); bad input is a 400 with a
// message, and changes nothing.
func TestDemoConfig(t *testing.T) {
	_, h := demoFixture(t)
	call(t, h, "POST", "/api/request", "k", url.Values{"cost": {"4"}}) // 6 left of 10
	for i, c := range []struct {
		capacity, rate string
		status         int
		want           string // the error, or the state's remaining
	}{
		{"0", "1/s", 400, `capacity "0": want a whole number from 1 to 100`},
		{"101", "1/s", 400, `capacity "101"`},
		{"ten", "1/s", 400, `capacity "ten"`},
		{"", "1/s", 400, `capacity ""`},
		{"5", "1000/s", 400, `rate "1000/s": want from 1/h to 100/s`},
		{"5", "1/5h", 400, `rate "1/5h": want from 1/h to 100/s`},
		{"5", "0/s", 400, `rate "0/s"`},
		{"5", "-1/s", 400, `rate "-1/s"`},
		{"5", "1/-1s", 400, `rate "1/-1s"`},
		{"5", "fast", 400, `rate "fast": want tokens/period`},
		{"5", "", 400, `rate ""`},
		{"20", "2/s", 200, "6"}, // the 6 tokens carry over
		// 1 token in 1000s: windows of 100 in 100000s (capacity × the
		// period, 9e20 ns, is more than a time.Duration holds).
		{"100", "9000000/2500000h", 200, "6"},
		{"4", "2/s", 200, "4"}, // clamped to the new capacity
	} {
		status, _, body := call(t, h, "POST", "/api/config", "k", url.Values{"capacity": {c.capacity}, "rate": {c.rate}})
		got := ""
		if status == 200 {
			got = strings.TrimSuffix(strings.TrimSuffix(jsonText(body["remaining"]), ".0"), "")
		} else {
			got, _ = body["error"].(string)
		}
		if status != c.status || !strings.HasPrefix(got, c.want) {
			t.Errorf("step %d: capacity %q, rate %q: got %d %q; want %d %q", i+1, c.capacity, c.rate, status, got, c.status, c.want)
		}
		if status == 400 {
			if _, _, st := call(t, h, "GET", "/api/state", "k", nil); st["capacity"] != 10.0 || st["remaining"] != 6.0 {
				t.Errorf("step %d: after a bad config the bucket is %v / %v; want 6 / 10, unchanged", i+1, st["remaining"], st["capacity"])
			}
		}
	}
	// Reset fills the bucket again.
	if status, _, st := call(t, h, "POST", "/api/reset", "k", url.Values{}); status != 200 || st["remaining"] != 4.0 || st["tokens"] != 4.0 {
		t.Errorf("reset: got %d %v; want 200 and a full bucket of 4", status, st)
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestDemoBadRequests: a bad cost or key is a 400 with a message, and
// charges nothing.
func TestDemoBadRequests(t *testing.T) {
	_, h := demoFixture(t)
	for i, c := range []struct {
		method, path, key string
		form              url.Values
		want              string
	}{
		{"POST", "/api/request", "k", url.Values{"cost": {"-1"}}, `cost "-1": want a whole number from 0 to 1000`},
		{"POST", "/api/request", "k", url.Values{"cost": {"two"}}, `cost "two"`},
		{"POST", "/api/request", "k", url.Values{"cost": {"1.5"}}, `cost "1.5"`},
		{"POST", "/api/request", "k", url.Values{"cost": {"1001"}}, `cost "1001"`},
		{"POST", "/api/request", "", url.Values{"cost": {"1"}}, `the X-Demo-Key header must be`},
		{"POST", "/api/request", "a b", url.Values{"cost": {"1"}}, `the X-Demo-Key header must be`},
		{"POST", "/api/request", strings.Repeat("k", 65), url.Values{"cost": {"1"}}, `the X-Demo-Key header must be`},
		{"GET", "/api/state", "", nil, `the X-Demo-Key header must be`},
		{"POST", "/api/config", "", url.Values{"capacity": {"5"}, "rate": {"1/s"}}, `the X-Demo-Key header must be`},
		{"POST", "/api/reset", "<k>", url.Values{}, `the X-Demo-Key header must be`},
	} {
		status, _, body := call(t, h, c.method, c.path, c.key, c.form)
		if msg, _ := body["error"].(string); status != 400 || !strings.Contains(msg, c.want) {
			t.Errorf("step %d: %s %s: got %d %v; want 400 with %q", i+1, c.method, c.path, status, body, c.want)
		}
	}
	if _, _, st := call(t, h, "GET", "/api/state", "k", nil); st["remaining"] != 10.0 {
		t.Errorf("after bad requests the bucket holds %v; want 10, untouched", st["remaining"])
	}
}

// TestDemoPage: the page and its files are served, and name nothing off
// the machine (no CDN, no external font): it works offline.
func TestDemoPage(t *testing.T) {
	_, h := demoFixture(t)
	for _, path := range []string{"/", "/demo.js", "/demo.css", "/favicon.ico", "/favicon.svg"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != 200 || w.Body.Len() == 0 {
			t.Errorf("GET %s: %d, %d bytes", path, w.Code, w.Body.Len())
		}
	}
	// The icon is an SVG, linked from the page, where browsers look first.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/favicon.ico", nil))
	if ct := w.Header().Get("Content-Type"); ct != "image/svg+xml" || !strings.HasPrefix(w.Body.String(), "<svg ") {
		t.Errorf("GET /favicon.ico: %s, %.20q; want an SVG", ct, w.Body.String())
	}
	if err := xml.Unmarshal(w.Body.Bytes(), new(struct{ XMLName xml.Name })); err != nil {
		t.Errorf("GET /favicon.ico: not well-formed: %v", err)
	}
	index, _ := demoFiles.ReadFile("demo/index.html")
	if !strings.Contains(string(index), `<link rel="icon" href="favicon.ico" type="image/svg+xml">`) {
		t.Errorf("the page does not link its icon")
	}
	// The SVG namespace names no resource to fetch.
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|url\(`)
	svgNamespace := "http://www.w3.org/2000/svg"
	fs.WalkDir(demoFiles, "demo", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := demoFiles.ReadFile(path)
		if strings.HasSuffix(path, ".svg") {
			b = bytes.Replace(b, []byte(`xmlns="`+svgNamespace+`"`), nil, 1)
		}
		if m := external.Find(b); m != nil {
			t.Errorf("%s names something off the machine: %q", path, m)
		}
		return nil
	})
}

// TestDemoCommand: a taken port, an unreachable Redis and bad flags each
// fail with one clear line.
func TestDemoCommand(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	for i, c := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"-addr", ln.Addr().String()}, 1, "spigot demo: " + ln.Addr().String() + " is in use; choose another address with -addr"},
		{[]string{"-redis", closedAddr}, 1, "spigot demo: cannot reach Redis at " + closedAddr},
		{[]string{"-port", "1"}, 2, "spigot demo: flag provided but not defined: -port"},
		{[]string{"extra"}, 2, `spigot demo: unexpected argument "extra"`},
	} {
		var stdout, stderr bytes.Buffer
		status := run(append([]string{"demo"}, c.args...), &stdout, &stderr)
		if status != c.status || !strings.HasPrefix(stderr.String(), c.want) || strings.Count(strings.TrimSpace(stderr.String()), "\n") > 1 {
			t.Errorf("step %d: spigot demo %v: exit %d, stderr %q; want %d, %q", i+1, c.args, status, stderr.String(), c.status, c.want)
		}
	}
	var stdout bytes.Buffer
	if status := run([]string{"demo", "-h"}, &stdout, &bytes.Buffer{}); status != 0 || !strings.Contains(stdout.String(), "-addr") {
		t.Errorf("spigot demo -h: exit %d, %q", status, stdout.String())
	}
}

// TestDemoRedis: with -redis, a real redis-server decides, the page is
// told so, and while the server is down the local fallback decides and
// the breaker opens; once it is back, Redis decides again.
func TestDemoRedis(t *testing.T) {
	srv := testserver.Start(t, testserver.Redis)
	clk := clocktest.New(time.Now()) // the breaker's
	d, closeStore, err := newDemoStore(srv.Addr, hybrid.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	h := d.handler()
	request := func() map[string]any {
		_, _, body := call(t, h, "POST", "/api/request", "k", url.Values{"cost": {"1"}})
		return body
	}
	if body := request(); body["allowed"] != true || body["path"] != "remote" {
		t.Fatalf("with Redis up: %v; want allowed by the remote", body)
	}
	if _, _, st := call(t, h, "GET", "/api/state", "k", nil); st["circuit"] != "closed" || st["remaining"] != 9.0 || !strings.HasPrefix(st["store"].(string), "Redis at "+srv.Addr) {
		t.Fatalf("state with Redis up: %v; want the breaker closed, 9 left, in Redis", st)
	}
	// Every kind runs on the server: a request to each, and their states.
	for i, a := range algorithms {
		_, _, body := call(t, h, "POST", "/api/request", "k", url.Values{"algo": {a.name}})
		if body["allowed"] != true || body["path"] != "remote" {
			t.Fatalf("step %d: %s with Redis up: %v; want allowed by the remote", i, a.name, body)
		}
	}
	r := httptest.NewRequest("GET", "/api/states", nil)
	r.Header.Set("X-Demo-Key", "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var states []demoState
	if err := json.Unmarshal(w.Body.Bytes(), &states); err != nil || w.Code != 200 || len(states) != len(algorithms) {
		t.Fatalf("GET /api/states with Redis up: %d %q", w.Code, w.Body)
	}
	if st := states[3]; st.Algo != "sliding-log" || st.Remaining != 9 || len(st.Log) != 1 {
		t.Errorf("the sliding log in Redis: %+v; want 9 left and one entry", st)
	}
	srv.Kill()
	for i := range 3 { // the breaker's run of failures
		if body := request(); body["allowed"] != true || body["path"] != "local" {
			t.Fatalf("with Redis down, request %d: %v; want allowed by the local fallback", i+1, body)
		}
	}
	if _, _, st := call(t, h, "GET", "/api/state", "k", nil); st["circuit"] != "open" || st["path"] != "local" {
		t.Fatalf("state with Redis down: %v; want the breaker open, the local path", st)
	}
	srv.Restart()
	clk.Advance(2 * time.Second) // the breaker's cooldown: the next request probes Redis
	if body := request(); body["path"] != "remote" || d.hybrid.Circuit() != hybrid.CircuitClosed {
		t.Fatalf("with Redis back after the cooldown: %v, breaker %v; want the remote path, closed", body, d.hybrid.Circuit())
	}
}

// TestDemoMetrics: the demo serves its OpenTelemetry metrics on /metrics,
// in Prometheus's format: the decisions by limit and outcome, never by
// key.
func TestDemoMetrics(t *testing.T) {
	_, h := demoFixture(t)
	call(t, h, "POST", "/api/request", "page-1", url.Values{"cost": {"11"}}) // never
	call(t, h, "POST", "/api/request", "page-1", url.Values{"cost": {"4"}})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	for _, want := range []string{
		`spigot_decisions_total{otel_scope_name="github.com/spigot-go/spigot/otelspigot",otel_scope_schema_url="",otel_scope_version="",spigot_limit="token-bucket",spigot_outcome="allowed"} 1`,
		`spigot_decisions_total{otel_scope_name="github.com/spigot-go/spigot/otelspigot",otel_scope_schema_url="",otel_scope_version="",spigot_limit="token-bucket",spigot_outcome="never"} 1`,
		`spigot_tokens_requested_total{otel_scope_name="github.com/spigot-go/spigot/otelspigot",otel_scope_schema_url="",otel_scope_version="",spigot_limit="token-bucket"} 15`,
		`spigot_store_duration_seconds_count{otel_scope_name="github.com/spigot-go/spigot/otelspigot",otel_scope_schema_url="",otel_scope_version="",spigot_operation="do"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no line %s", want)
		}
	}
	if w.Code != 200 || strings.Contains(body, "page-1") {
		t.Errorf("/metrics: %d, and a key among its values: %v", w.Code, strings.Contains(body, "page-1"))
	}
}

// TestDemoAlgorithms: a page's five limits under the same traffic, at
// fixed instants: 10 requests 10ms before a second ends, and 10 more
// 10ms after, on limits of 10 that refill at 10/s, windows of 10 in 1s.
// The fixed window admits all 20, twice its limit, across its boundary;
// the others admit 10, the leaky bucket each with its turn, 100ms apart.
func TestDemoAlgorithms(t *testing.T) {
	c := clocktest.New(demoT0.Add(990 * time.Millisecond))
	h := newDemo(memory.New(memory.WithClock(c)), nil, "memory", c).handler()
	if status, _, body := call(t, h, "POST", "/api/config", "k", url.Values{"capacity": {"10"}, "rate": {"10/s"}}); status != 200 {
		t.Fatalf("config: %d %v", status, body)
	}
	type count struct{ admitted, denied int }
	got := make(map[string]count)
	delays := make(map[string][]float64)
	burst := func() {
		for _, a := range algorithms {
			for range 10 {
				status, _, body := call(t, h, "POST", "/api/request", "k", url.Values{"algo": {a.name}})
				n := got[a.name]
				if status == 200 {
					n.admitted++
					delays[a.name] = append(delays[a.name], body["delay_ms"].(float64))
				} else {
					n.denied++
				}
				got[a.name] = n
			}
		}
	}
	burst()
	c.Advance(20 * time.Millisecond) // across the second's boundary
	burst()
	want := map[string]count{
		"token-bucket":   {10, 10}, // 0.2 token refilled
		"fixed-window":   {20, 0},  // a new window
		"sliding-window": {10, 10}, // 10 × 0.99 + 1 > 10
		"sliding-log":    {10, 10}, // 10 in the last second
		"leaky-bucket":   {10, 10}, // 0.2 of a place free
	}
	for i, a := range algorithms {
		if got[a.name] != want[a.name] {
			t.Errorf("step %d: %s: got %+v admitted/denied, want %+v", i, a.name, got[a.name], want[a.name])
		}
	}
	if got, want := jsonText(delays["leaky-bucket"]), "[0,100,200,300,400,500,600,700,800,900]"; got != want {
		t.Errorf("leaky-bucket: delays %s ms, want %s", got, want)
	}
	if got, want := jsonText(delays["fixed-window"]), jsonText(make([]float64, 20)); got != want {
		t.Errorf("fixed-window: delays %s ms, want none", got)
	}

	// The states the page draws, 20ms after the burst at 990ms.
	r := httptest.NewRequest("GET", "/api/states", nil)
	r.Header.Set("X-Demo-Key", "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	var states []demoState
	if err := json.Unmarshal(w.Body.Bytes(), &states); w.Code != 200 || err != nil || len(states) != len(algorithms) {
		t.Fatalf("GET /api/states: %d %q: want five states", w.Code, w.Body)
	}
	wantDetail := []string{
		"0.20 of 10 tokens, refilled at 10/s",
		"10 of 10 taken in this window of 1 s; the next starts in 990 ms",
		"weighted count 10 of 10: this window's and 99% of the last one's; the next window starts in 990 ms",
		"10 of 10 in the last 1 s; the oldest leaves in 980 ms",
		"10 of 10 places queued, one leaving every 100 ms; the queue is full for 80 ms",
	}
	for i, st := range states {
		if st.Algo != algorithms[i].name || st.Detail != wantDetail[i] {
			t.Errorf("step %d: state %s %q, want %s %q", i, st.Algo, st.Detail, algorithms[i].name, wantDetail[i])
		}
	}
	if got, want := jsonText(states[3].Log), "[980,980,980,980,980,980,980,980,980,980]"; got != want {
		t.Errorf("sliding-log: log_ms %s, want %s", got, want)
	}
	if st := states[1]; st.RefillMs != 1000 || st.Remaining != 0 || st.Rate != "10/s" {
		t.Errorf("fixed-window: window %d ms, %d remaining, rate %s; want 1000, 0, 10/s", st.RefillMs, st.Remaining, st.Rate)
	}

	// GET /api/state names one algorithm; an unknown one is a 400.
	if _, _, st := call(t, h, "GET", "/api/state?algo=sliding-log", "k", nil); st["algo"] != "sliding-log" {
		t.Errorf("GET /api/state?algo=sliding-log: %v", st)
	}
	for _, path := range []string{"/api/state?algo=gcra", "/api/request?algo=all"} {
		method := "GET"
		if strings.HasPrefix(path, "/api/request") {
			method = "POST"
		}
		if status, _, body := call(t, h, method, path, "k", url.Values{}); status != 400 || !strings.Contains(body["error"].(string), "want token-bucket, fixed-window") {
			t.Errorf("%s %s: got %d %v, want 400 naming the algorithms", method, path, status, body)
		}
	}

	// Reset makes all five whole again.
	call(t, h, "POST", "/api/reset", "k", url.Values{})
	_, _, st := call(t, h, "GET", "/api/state?algo=fixed-window", "k", nil)
	if st["remaining"] != 10.0 {
		t.Errorf("after a reset the fixed window has %v left, want 10", st["remaining"])
	}
}

// FuzzDemoConfig: whatever a page sends as capacity and rate, the demo
// answers with five limits within its bounds, or a 400 that changes
// nothing.
func FuzzDemoConfig(f *testing.F) {
	for _, s := range [][2]string{{"10", "1/s"}, {"100", "1/h"}, {"1", "100/s"}, {"7", "3/7ms"}, {"0", "x"}, {"5", "9223372036854775807/s"}, {"100", "2500000/2500000h"}, {"100", "9000000/2500000h"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, capacity, rate string) {
		ls, err := demoLimit(capacity, rate)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "capacity ") && !strings.HasPrefix(err.Error(), "rate ") {
				t.Fatalf("demoLimit(%q, %q): error %q names neither", capacity, rate, err)
			}
			return
		}
		for i, l := range ls {
			if l.Kind() != algorithms[i].kind || l.Capacity() < 1 || l.Capacity() > demoMaxCapacity {
				t.Fatalf("demoLimit(%q, %q): limit %d is %v", capacity, rate, i, l)
			}
			// A window is capacity ÷ rate, rounded up to the ms: from 10ms
			// (1 at 100/s) to 100h (100 at 1/h).
			r := ls[0].Rate()
			exact := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(l.Capacity()), big.NewInt(int64(r.Period))), big.NewInt(r.Tokens))
			if w := l.Window(); l.Kind() != spigot.TokenBucket && l.Kind() != spigot.LeakyBucket &&
				(w < 10*time.Millisecond || w > 100*time.Hour || new(big.Rat).SetInt64(int64(w)).Cmp(exact) < 0 ||
					new(big.Rat).SetInt64(int64(w-time.Millisecond)).Cmp(exact) >= 0) {
				t.Fatalf("demoLimit(%q, %q): %v has a window of %v, want %v ns rounded up to the ms", capacity, rate, l, w, exact.FloatString(0))
			}
		}
	})
}

// FuzzDemoRequest: whatever a client sends as the algorithm, the cost and
// its key, a request is admitted (200), denied (429) or refused with a
// message (400), as JSON, and a refused one charges nothing.
func FuzzDemoRequest(f *testing.F) {
	for _, s := range [][3]string{{"fixed-window", "1", "k"}, {"leaky-bucket", "3", "k"}, {"", "", "k"}, {"all", "1", "k"},
		{"sliding-log", "1001", "k"}, {"token-bucket", "-1", "a b"}, {"Sliding-Log", "0", "k"}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, algo, cost, key string) {
		_, h := demoFixture(t)
		r := httptest.NewRequest("POST", "/api/request", strings.NewReader(url.Values{"algo": {algo}, "cost": {cost}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("X-Demo-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 200 && w.Code != 429 && w.Code != 400 {
			t.Fatalf("algo %q, cost %q, key %q: %d %q", algo, cost, key, w.Code, w.Body)
		}
		if w.Code == 400 && keyPattern.MatchString(key) {
			for _, a := range algorithms {
				if _, _, st := call(t, h, "GET", "/api/state?algo="+a.name, key, nil); st["remaining"] != 10.0 {
					t.Fatalf("algo %q, cost %q, key %q: refused, but %s has %v left, not 10", algo, cost, key, a.name, st["remaining"])
				}
			}
		}
	})
}

// TestDurationText: the state text's durations, as the page prints them:
// milliseconds below a second, then seconds whole or to a tenth, minutes
// and hours to a tenth.
func TestDurationText(t *testing.T) {
	for i, c := range []struct {
		d    time.Duration
		want string
	}{
		{990 * time.Millisecond, "990 ms"},
		{time.Second, "1 s"},
		{9793554139 * time.Nanosecond, "9.8 s"},
		{90 * time.Second, "90 s"},
		{1500 * time.Millisecond, "1.5 s"},
		{3 * time.Minute, "3.0 min"},
		{3 * time.Hour, "3.0 h"},
	} {
		if got := ms(c.d); got != c.want {
			t.Errorf("step %d: ms(%v) = %q; want %q", i, c.d, got, c.want)
		}
	}
}
