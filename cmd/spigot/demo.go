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
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	spigotredis "github.com/spigot-go/spigot/store/redis"
)

//go:embed demo
var demoFiles embed.FS

// The bounds of the demo's bucket: what the page can draw, and rates a
// person can watch.
const (
	demoMaxCapacity = 100
	demoMinRate     = 1.0 / 3600 // tokens per second: 1 an hour
	demoMaxRate     = 100.0      // 100 a second
	demoMaxCost     = 1000
	demoMaxKeys     = 10_000 // buckets (one per open page) the demo keeps a config for
)

func demo(args []string, stdout, stderr io.Writer) int {
	const prog = "spigot demo"
	fs := newFlagSet(prog)
	addr := fs.String("addr", "127.0.0.1:8080", "the `address` to serve the page on")
	redisAddr := fs.String("redis", "", "a Redis or Valkey `address` to keep the bucket in, through store/hybrid (default: the memory store)")
	if err := parseFlags(fs, args, stdout, "usage: spigot demo [flags]\n\n"+
		"Demo serves a page that shows one bucket draining and refilling live:\n"+
		"every request it shows went through spigot's limiter.\n\n"); err != nil {
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
	fmt.Fprintf(stdout, "spigot demo: open http://%s/ (bucket in %s; Ctrl-C to stop)\n", ln.Addr(), d.storeName)
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
		return newDemo(memory.New(), nil, "memory"), func() {}, nil
	}
	goredis.SetLogger(&logging.VoidLogger{}) // the demo says what failed, in one line
	rdb := goredis.NewClient(&goredis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("cannot reach Redis at %s: %v", redisAddr, err)
	}
	d := &demoServer{}
	d.newMetrics()
	paths := otelspigot.HybridObserver(otelspigot.WithMeterProvider(d.meters))
	h := hybrid.New(spigotredis.New(rdb), memory.New(), append([]hybrid.Option{
		hybrid.WithTimeout(100 * time.Millisecond),
		hybrid.WithBreaker(3, 2*time.Second),
		hybrid.WithObserver(hybrid.Observer{Decision: func(ctx context.Context, op spigot.Op, p hybrid.Path, dec spigot.Decision) {
			d.path.Store(int32(p))
			paths.Decision(ctx, op, p, dec)
		}}),
	}, opts...)...)
	if _, err := otelspigot.ObserveCircuit(h, otelspigot.WithMeterProvider(d.meters)); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	d.init(h, h, "Redis at "+redisAddr+", through store/hybrid")
	return d, func() { rdb.Close() }, nil
}

// A demoServer is what spigot demo serves: the page, and a JSON API whose
// requests go through httplimit, each page on a bucket of its own (its
// key) whose capacity and rate the page sets.
type demoServer struct {
	store     spigot.Store
	hybrid    *hybrid.Store // nil on the memory store
	storeName string
	path      atomic.Int32 // the hybrid path of the last decision

	mu     sync.Mutex
	limits map[string]spigot.Limit // each key's bucket

	mw *httplimit.Middleware

	meters   *sdkmetric.MeterProvider
	registry *prometheus.Registry // what /metrics serves
}

// defaultDemoLimit is the bucket of a page that has set none: the seed's
// worked example, 10 tokens refilled 1 a second.
var defaultDemoLimit = spigot.MustBucket("demo", 10, spigot.PerSecond(1))

func newDemo(s spigot.Store, h *hybrid.Store, name string) *demoServer {
	d := &demoServer{}
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
	d.limits = make(map[string]spigot.Limit)
	d.mw = httplimit.New(s,
		httplimit.ByFunc(func(r *http.Request) (spigot.Limit, error) {
			return d.limit(r.Header.Get("X-Demo-Key")), nil
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
	)
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

// limit returns key's bucket.
func (d *demoServer) limit(key string) spigot.Limit {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l, ok := d.limits[key]; ok {
		return l
	}
	return defaultDemoLimit
}

// handler returns the demo's routes.
func (d *demoServer) handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(demoFiles, "demo")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.Handle("POST /api/request", d.mw.Wrap(http.HandlerFunc(d.admitted)))
	mux.HandleFunc("GET /api/state", keyed(d.state))
	mux.HandleFunc("POST /api/config", keyed(d.config))
	mux.HandleFunc("POST /api/reset", keyed(d.reset))
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.registry, promhttp.HandlerOpts{}))
	return mux
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

// A demoReply is the JSON answer to a request: what the limiter decided,
// and on which path.
type demoReply struct {
	Allowed    bool   `json:"allowed"`
	RetryAfter int64  `json:"retry_after_ms,omitempty"` // -1: never
	Path       string `json:"path"`                     // memory, remote, local, fail-open, fail-closed
}

func (d *demoServer) pathName() string {
	if d.hybrid == nil {
		return "memory"
	}
	return hybrid.Path(d.path.Load()).String()
}

func (d *demoServer) admitted(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, demoReply{Allowed: true, Path: d.pathName()})
}

func (d *demoServer) denied(w http.ResponseWriter, r *http.Request, res *httplimit.Result) {
	reply := demoReply{RetryAfter: res.Decisions.RetryAfter.Milliseconds(), Path: d.pathName()}
	if res.Decisions.RetryAfter == spigot.Never {
		reply.RetryAfter = -1
	}
	writeJSON(w, http.StatusTooManyRequests, reply)
}

// A demoState is a bucket as the page draws it, from a Peek.
type demoState struct {
	Capacity   int64   `json:"capacity"`
	Rate       string  `json:"rate"`
	PerSecond  float64 `json:"per_second"`
	Remaining  int64   `json:"remaining"` // whole tokens
	Tokens     float64 `json:"tokens"`    // with the fraction of the next one
	ResetAfter int64   `json:"reset_ms"`  // until full
	RefillMs   int64   `json:"refill_ms"` // from empty to full
	Store      string  `json:"store"`     // where the bucket lives
	Path       string  `json:"path"`      // the path of the last decision
	Circuit    string  `json:"circuit"`   // the hybrid store's breaker, or ""
	Degraded   bool    `json:"degraded"`  // the peek says nothing of the bucket
}

func (d *demoServer) state(w http.ResponseWriter, r *http.Request, key string) {
	d.writeState(w, r.Context(), key)
}

func (d *demoServer) writeState(w http.ResponseWriter, ctx context.Context, key string) {
	l := d.limit(key)
	p, err := d.store.Do(ctx, spigot.Op{Limit: l, Key: key, Action: spigot.Peek, N: 1})
	if err != nil {
		jsonError(w, http.StatusServiceUnavailable, "the store failed: "+err.Error())
		return
	}
	rate := l.Rate()
	perSecond := float64(rate.Tokens) / rate.Period.Seconds()
	st := demoState{
		Capacity:   l.Capacity(),
		Rate:       rate.String(),
		PerSecond:  perSecond,
		Remaining:  p.Remaining,
		ResetAfter: p.ResetAfter.Milliseconds(),
		RefillMs:   (time.Duration(l.Capacity()) * rate.Period / time.Duration(rate.Tokens)).Milliseconds(),
		Store:      d.storeName,
		Path:       d.pathName(),
		Degraded:   p.Degraded(),
	}
	// The bucket lacks ResetAfter × rate tokens (ResetAfter is rounded up
	// to the ms), but holds at least its whole Remaining.
	st.Tokens = max(float64(st.Capacity)-p.ResetAfter.Seconds()*perSecond, float64(p.Remaining))
	if p.Degraded() {
		st.Tokens, st.Remaining = 0, 0
	}
	if d.hybrid != nil {
		st.Circuit = d.hybrid.Circuit().String()
	}
	writeJSON(w, http.StatusOK, st)
}

// config sets a page's bucket: capacity and rate, as form values. The
// bucket keeps its name, so its tokens carry over (spigot's config-change
// rule). Bad input changes nothing.
func (d *demoServer) config(w http.ResponseWriter, r *http.Request, key string) {
	l, err := demoLimit(r.FormValue("capacity"), r.FormValue("rate"))
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	d.mu.Lock()
	if _, ok := d.limits[key]; !ok && len(d.limits) >= demoMaxKeys {
		for k := range d.limits { // forget one page's bucket
			delete(d.limits, k)
			break
		}
	}
	d.limits[key] = l
	d.mu.Unlock()
	d.writeState(w, r.Context(), key)
}

// demoLimit checks a capacity and a rate from the page.
func demoLimit(capacity, rate string) (spigot.Limit, error) {
	c, err := strconv.ParseInt(capacity, 10, 64)
	if err != nil || c < 1 || c > demoMaxCapacity {
		return spigot.Limit{}, fmt.Errorf("capacity %q: want a whole number from 1 to %d", capacity, demoMaxCapacity)
	}
	r, err := spigot.ParseRate(rate)
	if err != nil {
		return spigot.Limit{}, fmt.Errorf("rate %q: want tokens/period, such as 1/s, 20/3s or 5/m", rate)
	}
	if r.Tokens < 1 || r.Period <= 0 {
		return spigot.Limit{}, fmt.Errorf("rate %q: want at least 1 token over a positive period", rate)
	}
	if per := float64(r.Tokens) / r.Period.Seconds(); per < demoMinRate || per > demoMaxRate {
		return spigot.Limit{}, fmt.Errorf("rate %q: want from 1/h to 100/s, a rate a person can watch", rate)
	}
	l, err := spigot.NewBucket("demo", c, r)
	if err != nil {
		return spigot.Limit{}, fmt.Errorf("rate %q: %v", rate, err)
	}
	return l, nil
}

// reset fills a page's bucket again.
func (d *demoServer) reset(w http.ResponseWriter, r *http.Request, key string) {
	if _, err := d.store.Do(r.Context(), spigot.Op{Limit: d.limit(key), Key: key, Action: spigot.Reset}); err != nil {
		jsonError(w, http.StatusServiceUnavailable, "the store failed: "+err.Error())
		return
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
