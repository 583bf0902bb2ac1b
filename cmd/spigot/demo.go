package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	spigotredis "github.com/spigot-go/spigot/store/redis"
)

//go:embed demo
var demoFiles embed.FS

// The bounds of the demo's limits: what the page can draw, and rates a
// person can watch.
const (
	demoMaxCapacity = 100
	demoMinRate     = 1.0 / 3600 // tokens per second: 1 an hour
	demoMaxRate     = 100.0      // 100 a second
	demoMaxCost     = 1000
	demoMaxKeys     = 10_000 // pages the demo keeps a config for
)

func demo(args []string, stdout, stderr io.Writer) int {
	const prog = "spigot demo"
	fs := newFlagSet(prog)
	addr := fs.String("addr", "127.0.0.1:8080", "the `address` to serve the page on")
	redisAddr := fs.String("redis", "", "a Redis or Valkey `address` to keep the bucket in, through store/hybrid (default: the memory store)")
	if err := parseFlags(fs, args, stdout, "usage: spigot demo [flags]\n\n"+
		"Demo serves a page that shows spigot's five kinds of limit live, one\n"+
		"at a time or side by side under the same traffic: every request it\n"+
		"shows went through spigot's limiter.\n\n"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return usageError(stderr, prog, "%v", err)
	}
	d, closeStore, err := newDemoStore(*redisAddr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	defer closeStore()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(stderr, "%s: %s is in use; choose another address with -addr (such as -addr 127.0.0.1:8081)\n", prog, *addr)
		} else {
			fmt.Fprintf(stderr, "%s: cannot listen on %s: %v\n", prog, *addr, err)
		}
		return 1
	}
	srv := &http.Server{Handler: d.handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "spigot demo: open http://%s/ (limits in %s; Ctrl-C to stop)\n", ln.Addr(), d.storeName)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	return 0
}

// newDemoStore returns the demo on the memory store, or with a Redis
// address, on that server behind store/hybrid, with opts after its own.
func newDemoStore(redisAddr string, opts ...hybrid.Option) (*demoServer, func(), error) {
	if redisAddr == "" {
		return newDemo(memory.New(), nil, "memory", clock.System()), func() {}, nil
	}
	goredis.SetLogger(&logging.VoidLogger{}) // the demo says what failed, in one line
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("cannot reach Redis at %s: %v", redisAddr, err)
	}
	d := &demoServer{clock: clock.System()}
	d.newMetrics()
	// Every metric of the hybrid store (decisions by path, remote errors
	// and latency, breaker transitions); the page also wants each
	// decision's path.
	obs := otelspigot.HybridObserver(otelspigot.WithMeterProvider(d.meters))
	decided := obs.Decision
	obs.Decision = func(ctx context.Context, op spigot.Op, p hybrid.Path, dec spigot.Decision) {
		d.path.Store(int32(p))
		decided(ctx, op, p, dec)
	}
	h := hybrid.New(spigotredis.New(rdb), memory.New(), append([]hybrid.Option{
		hybrid.WithTimeout(100 * time.Millisecond),
		hybrid.WithBreaker(3, 2*time.Second),
		hybrid.WithObserver(obs),
	}, opts...)...)
	if _, err := otelspigot.ObserveCircuit(h, otelspigot.WithMeterProvider(d.meters)); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	d.init(h, h, "Redis at "+redisAddr+", through store/hybrid")
	return d, func() { rdb.Close() }, nil
}

// A demoServer is what spigot demo serves: the page, and a JSON API whose
// requests go through httplimit, each page on limits of its own (its key)
// whose capacity and rate the page sets: one of each algorithm.
type demoServer struct {
	store     spigot.Store
	hybrid    *hybrid.Store // nil on the memory store
	storeName string
	path      atomic.Int32 // the hybrid path of the last decision
	clock     clock.Clock  // the store's, to place the windows

	mu     sync.Mutex
	limits map[string]*demoLimits // each page's

	mw *httplimit.Middleware

	meters   *sdkmetric.MeterProvider
	registry *prometheus.Registry // what /metrics serves
}

// demoLimits are a page's limits, one per algorithm, in the order of
// algorithms: buckets of the page's capacity that refill at its rate, and
// windows that admit the capacity in each window of capacity ÷ rate, the
// time a bucket takes to refill from empty, so that all five admit the
// same burst and the same rate on average.
type demoLimits [5]spigot.Limit

// defaultDemoLimits are the limits of a page that has set none: the
// seed's worked example, 10 tokens refilled 1 a second, and windows of 10
// in 10 s.
var defaultDemoLimits = func() *demoLimits {
	l, err := newDemoLimits(10, spigot.PerSecond(1))
	if err != nil {
		panic(err)
	}
	return l
}()

// newDemoLimits returns the limits of capacity and rate, named by their
// algorithm.
func newDemoLimits(capacity int64, rate spigot.Rate) (*demoLimits, error) {
	var ls demoLimits
	for i, a := range algorithms {
		l, err := a.limitOf(a.name, capacity, rate, 0)
		if err != nil {
			return nil, err
		}
		ls[i] = l
	}
	return &ls, nil
}

// refillTime returns how long rate takes to refill capacity, rounded
// down to the nanosecond: capacity × rate.Period ÷ rate.Tokens, without
// overflow for the demo's limits (at most 100 tokens, at least 1 an
// hour).
func refillTime(capacity int64, rate spigot.Rate) time.Duration {
	per, rem := rate.Period/time.Duration(rate.Tokens), rate.Period%time.Duration(rate.Tokens)
	return time.Duration(capacity)*per + time.Duration(capacity)*rem/time.Duration(rate.Tokens)
}

func newDemo(s spigot.Store, h *hybrid.Store, name string, c clock.Clock) *demoServer {
	d := &demoServer{clock: c}
	d.newMetrics()
	d.init(s, h, name)
	return d
}

// newMetrics makes the demo's OpenTelemetry meters, which /metrics
// serves in Prometheus's format.
func (d *demoServer) newMetrics() {
	d.registry = prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(d.registry))
	if err != nil {
		panic(err) // a fresh registry takes the exporter's collector
	}
	d.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
}

// init sets the demo on s (measured by otelspigot), which is h when it
// is a hybrid store.
func (d *demoServer) init(s spigot.Store, h *hybrid.Store, name string) {
	s = otelspigot.Wrap(s, otelspigot.WithMeterProvider(d.meters))
	d.store, d.hybrid, d.storeName = s, h, name
	d.limits = make(map[string]*demoLimits)
	d.mw = httplimit.New(s,
		httplimit.ByFunc(func(r *http.Request) (spigot.Limit, error) {
			i, err := demoAlgorithm(r.FormValue("algo"))
			if err != nil {
				return spigot.Limit{}, err
			}
			return d.limitsOf(r.Header.Get("X-Demo-Key"))[i], nil
		}, demoKey),
		httplimit.WithCost(func(r *http.Request) (int64, error) { return demoCost(r.FormValue("cost")) }),
		httplimit.WithDenyHandler(d.denied),
		httplimit.WithKeyErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			jsonError(w, http.StatusBadRequest, err.Error())
		}),
		httplimit.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) bool {
			jsonError(w, http.StatusServiceUnavailable, "the store failed: "+err.Error())
			return false
		}),
		// The page shows a leaky bucket's request its turn (the reply's
		// delay_ms) rather than the demo holding it: held requests would
		// take the few connections a browser opens to one server.
		httplimit.WithClock(atOnce{d.clock}),
		httplimit.WithObserver(func(r *http.Request, res *httplimit.Result) {
			if c, ok := r.Context().Value(callKey{}).(*demoCall); ok {
				c.delay = res.Decision.Delay
			}
		}),
	)
}

// atOnce is a clock whose waits end at once.
type atOnce struct{ clock.Clock }

func (atOnce) After(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

// A demoCall carries a request's Delay from the middleware's observer to
// the reply.
type demoCall struct{ delay time.Duration }

type callKey struct{}

// demoAlgorithm returns the index in algorithms of the algorithm a request
// names: the token bucket when it names none.
func demoAlgorithm(name string) (int, error) {
	if name == "" {
		return 0, nil
	}
	for i, a := range algorithms {
		if a.name == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("algo %q: want %s", name, algorithmNames())
}

// keyPattern is what a page may name its bucket.
var keyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// demoKey is the key of a request: its page's, from X-Demo-Key.
func demoKey(r *http.Request) (string, error) {
	k := r.Header.Get("X-Demo-Key")
	if !keyPattern.MatchString(k) {
		return "", fmt.Errorf("the X-Demo-Key header must be 1 to 64 letters, digits, '-' or '_', got %q", k)
	}
	return k, nil
}

// demoCost parses a request's cost: a whole number from 0 to
// demoMaxCost, 1 when empty.
func demoCost(s string) (int64, error) {
	if s == "" {
		return 1, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > demoMaxCost {
		return 0, fmt.Errorf("cost %q: want a whole number from 0 to %d", s, demoMaxCost)
	}
	return n, nil
}

// limitsOf returns key's limits.
func (d *demoServer) limitsOf(key string) *demoLimits {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l, ok := d.limits[key]; ok {
		return l
	}
	return defaultDemoLimits
}

// handler returns the demo's routes.
func (d *demoServer) handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(demoFiles, "demo")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /favicon.ico", favicon)
	mux.Handle("POST /api/request", withCall(d.mw.Wrap(http.HandlerFunc(d.admitted))))
	mux.HandleFunc("GET /api/state", keyed(d.state))
	mux.HandleFunc("GET /api/states", keyed(d.states))
	mux.HandleFunc("POST /api/config", keyed(d.config))
	mux.HandleFunc("POST /api/reset", keyed(d.reset))
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.registry, promhttp.HandlerOpts{}))
	return mux
}

// favicon answers the page's icon, an SVG, where browsers look for it
// first.
func favicon(w http.ResponseWriter, r *http.Request) {
	b, err := demoFiles.ReadFile("demo/favicon.svg")
	if err != nil {
		http.NotFound(w, r) // not built in: cannot happen
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "max-age=86400")
	w.Write(b)
}

// keyed returns the handler that calls h with the request's page key, or
// answers 400 without one.
func keyed(h func(w http.ResponseWriter, r *http.Request, key string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, err := demoKey(r)
		if err != nil {
			jsonError(w, http.StatusBadRequest, err.Error())
			return
		}
		h(w, r, key)
	}
}

// withCall gives next's requests a demoCall.
func withCall(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callKey{}, &demoCall{})))
	})
}

// A demoReply is the JSON answer to a request: what the limiter decided,
// and on which path.
type demoReply struct {
	Allowed    bool   `json:"allowed"`
	RetryAfter int64  `json:"retry_after_ms,omitempty"` // -1: never
	Delay      int64  `json:"delay_ms"`                 // a leaky bucket's: the wait for its turn
	Path       string `json:"path"`                     // memory, remote, local, fail-open, fail-closed
}

func (d *demoServer) pathName() string {
	if d.hybrid == nil {
		return "memory"
	}
	return hybrid.Path(d.path.Load()).String()
}

func (d *demoServer) admitted(w http.ResponseWriter, r *http.Request) {
	reply := demoReply{Allowed: true, Path: d.pathName()}
	if c, ok := r.Context().Value(callKey{}).(*demoCall); ok {
		reply.Delay = c.delay.Milliseconds()
	}
	writeJSON(w, http.StatusOK, reply)
}

func (d *demoServer) denied(w http.ResponseWriter, r *http.Request, res *httplimit.Result) {
	reply := demoReply{RetryAfter: res.Decision.RetryAfter.Milliseconds(), Path: d.pathName()}
	if res.Decision.RetryAfter == spigot.Never {
		reply.RetryAfter = -1
	}
	writeJSON(w, http.StatusTooManyRequests, reply)
}

// A demoState is a limit as the page draws it, from Peeks.
type demoState struct {
	Algo       string  `json:"algo"`
	Capacity   int64   `json:"capacity"`
	Rate       string  `json:"rate"`
	PerSecond  float64 `json:"per_second"`
	Remaining  int64   `json:"remaining"`        // whole tokens, places or requests
	Tokens     float64 `json:"tokens"`           // with a bucket's fraction of the next one
	ResetAfter int64   `json:"reset_ms"`         // until whole
	RefillMs   int64   `json:"refill_ms"`        // a bucket's from empty to full, a window's length
	Detail     string  `json:"detail"`           // the state in words
	Delay      int64   `json:"delay_ms"`         // a leaky bucket's: what a request admitted now waits
	Log        []int64 `json:"log_ms,omitempty"` // a sliding log's: when each entry leaves, oldest first
	Store      string  `json:"store"`            // where the limit lives
	Path       string  `json:"path"`             // the path of the last decision
	Circuit    string  `json:"circuit"`          // the hybrid store's breaker, or ""
	Degraded   bool    `json:"degraded"`         // the peek says nothing of the limit
}

// state answers one limit's state: the algorithm the query names, or the
// token bucket.
func (d *demoServer) state(w http.ResponseWriter, r *http.Request, key string) {
	i, err := demoAlgorithm(r.URL.Query().Get("algo"))
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	st, err := d.stateOf(r.Context(), key, d.limitsOf(key)[i])
	if err != nil {
		jsonError(w, http.StatusServiceUnavailable, "the store failed: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// states answers the state of each of a page's limits, in the order of
// algorithms.
func (d *demoServer) states(w http.ResponseWriter, r *http.Request, key string) {
	var out []demoState
	for _, l := range d.limitsOf(key) {
		st, err := d.stateOf(r.Context(), key, l)
		if err != nil {
			jsonError(w, http.StatusServiceUnavailable, "the store failed: "+err.Error())
			return
		}
		out = append(out, st)
	}
	writeJSON(w, http.StatusOK, out)
}

// writeState answers the token bucket's state.
func (d *demoServer) writeState(w http.ResponseWriter, ctx context.Context, key string) {
	st, err := d.stateOf(ctx, key, d.limitsOf(key)[0])
	if err != nil {
		jsonError(w, http.StatusServiceUnavailable, "the store failed: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// stateOf returns l's state for key, from a Peek (and, for a sliding log,
// one Peek for each entry, in one call: the retry-after of a Peek of one
// more than what remains is when the oldest entry leaves, of two more the
// next).
func (d *demoServer) stateOf(ctx context.Context, key string, l spigot.Limit) (demoState, error) {
	p, err := d.store.Do(ctx, spigot.Op{Limit: l, Key: key, Action: spigot.Peek, N: 1})
	if err != nil {
		return demoState{}, err
	}
	rate := l.Rate()
	perSecond := float64(rate.Tokens) / rate.Period.Seconds()
	st := demoState{
		Algo:       algorithms[slices.IndexFunc(algorithms, func(a algorithm) bool { return a.kind == l.Kind() })].name,
		Capacity:   l.Capacity(),
		Rate:       rate.String(),
		PerSecond:  perSecond,
		Remaining:  p.Remaining,
		Tokens:     float64(p.Remaining),
		ResetAfter: p.ResetAfter.Milliseconds(),
		RefillMs:   l.Window().Milliseconds(),
		Delay:      p.Delay.Milliseconds(),
		Store:      d.storeName,
		Path:       d.pathName(),
		Degraded:   p.Degraded(),
	}
	if d.hybrid != nil {
		st.Circuit = d.hybrid.Circuit().String()
	}
	if p.Degraded() {
		st.Tokens, st.Remaining, st.Detail = 0, 0, "unknown: the store is unavailable"
		return st, nil
	}
	c, used := l.Capacity(), l.Capacity()-p.Remaining
	// Where now falls in the windows laid from the Unix epoch.
	var left, elapsed time.Duration
	if w := l.Window(); w > 0 {
		elapsed = time.Duration(mod(d.clock.Now().Sub(time.Unix(0, 0))-l.Offset(), w))
		left = w - elapsed
	}
	switch l.Kind() {
	case spigot.TokenBucket, spigot.LeakyBucket:
		st.RefillMs = refillTime(c, rate).Milliseconds()
		// The bucket lacks ResetAfter × rate tokens (ResetAfter is rounded
		// up to the ms), but holds at least its whole Remaining.
		st.Tokens = max(float64(c)-p.ResetAfter.Seconds()*perSecond, float64(p.Remaining))
		if l.Kind() == spigot.TokenBucket {
			st.Detail = fmt.Sprintf("%.2f of %d tokens, refilled at %v", st.Tokens, c, rate)
			break
		}
		wait := "a request admitted now waits " + ms(p.Delay)
		if !p.Allowed() {
			wait = "the queue is full for " + ms(p.RetryAfter)
		}
		st.Detail = fmt.Sprintf("%d of %d places queued, one leaving every %s; %s", used, c, ms(rate.Period/time.Duration(rate.Tokens)), wait)
	case spigot.FixedWindow:
		st.Detail = fmt.Sprintf("%d of %d taken in this window of %s; the next starts in %s", used, c, ms(l.Window()), ms(left))
	case spigot.SlidingWindow:
		weight := 100 * int64(l.Window()-elapsed.Truncate(time.Millisecond)) / int64(l.Window())
		st.Detail = fmt.Sprintf("weighted count %d of %d: this window's and %d%% of the last one's; the next window starts in %s", used, c, weight, ms(left))
	case spigot.SlidingLog:
		var ops []spigot.Op
		for n := p.Remaining + 1; n <= c; n++ {
			ops = append(ops, spigot.Op{Limit: l, Key: key, Action: spigot.Peek, N: n})
		}
		out := make([]spigot.Decision, len(ops))
		if err := spigot.DoMulti(ctx, d.store, spigot.Independent, ops, out); err != nil {
			return demoState{}, err
		}
		for _, e := range out {
			st.Log = append(st.Log, e.RetryAfter.Milliseconds())
		}
		st.Detail = fmt.Sprintf("%d of %d in the last %s", used, c, ms(l.Window()))
		if len(st.Log) > 0 {
			st.Detail += fmt.Sprintf("; the oldest leaves in %s", ms(time.Duration(st.Log[0])*time.Millisecond))
		}
	}
	return st, nil
}

// mod returns a mod m in [0, m), for m > 0.
func mod(a, m time.Duration) time.Duration {
	if r := a % m; r < 0 {
		return r + m
	}
	return a % m
}

// ms formats d for the page: 340 ms, 1.5 s, 10 min.
func ms(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < 2*time.Minute:
		// As the page prints seconds: whole, or to a tenth.
		if d%time.Second == 0 {
			return strconv.FormatInt(int64(d/time.Second), 10) + " s"
		}
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < 2*time.Hour:
		return strconv.FormatFloat(d.Minutes(), 'f', 1, 64) + " min"
	}
	return strconv.FormatFloat(d.Hours(), 'f', 1, 64) + " h"
}

// config sets a page's limits: capacity and rate, as form values. The
// limits keep their names, so a bucket's tokens carry over (spigot's
// config-change rule); a window whose length changes starts whole. Bad
// input changes nothing. It answers the token bucket's state.
func (d *demoServer) config(w http.ResponseWriter, r *http.Request, key string) {
	ls, err := demoLimit(r.FormValue("capacity"), r.FormValue("rate"))
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	d.mu.Lock()
	if _, ok := d.limits[key]; !ok && len(d.limits) >= demoMaxKeys {
		for k := range d.limits { // forget one page's limits
			delete(d.limits, k)
			break
		}
	}
	d.limits[key] = ls
	d.mu.Unlock()
	d.writeState(w, r.Context(), key)
}

// demoLimit checks a capacity and a rate from the page, and returns the
// page's limits.
func demoLimit(capacity, rate string) (*demoLimits, error) {
	c, err := strconv.ParseInt(capacity, 10, 64)
	if err != nil || c < 1 || c > demoMaxCapacity {
		return nil, fmt.Errorf("capacity %q: want a whole number from 1 to %d", capacity, demoMaxCapacity)
	}
	r, err := spigot.ParseRate(rate)
	if err != nil {
		return nil, fmt.Errorf("rate %q: want tokens/period, such as 1/s, 20/3s or 5/m", rate)
	}
	if r.Tokens < 1 || r.Period <= 0 {
		return nil, fmt.Errorf("rate %q: want at least 1 token over a positive period", rate)
	}
	if per := float64(r.Tokens) / r.Period.Seconds(); per < demoMinRate || per > demoMaxRate {
		return nil, fmt.Errorf("rate %q: want from 1/h to 100/s, a rate a person can watch", rate)
	}
	ls, err := newDemoLimits(c, r)
	if err != nil {
		return nil, fmt.Errorf("rate %q: %v", rate, err)
	}
	return ls, nil
}

// reset makes a page's limits whole again, every algorithm's.
func (d *demoServer) reset(w http.ResponseWriter, r *http.Request, key string) {
	for _, l := range d.limitsOf(key) {
		if _, err := d.store.Do(r.Context(), spigot.Op{Limit: l, Key: key, Action: spigot.Reset}); err != nil {
			jsonError(w, http.StatusServiceUnavailable, "the store failed: "+err.Error())
			return
		}
	}
	d.writeState(w, r.Context(), key)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func jsonError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
