package httplimit

// The Transport's tests run real requests against real httptest servers,
// with the memory store and a fake clock: nothing sleeps, and a test that
// needs a request to be waiting waits for it with clocktest.Clock's
// BlockUntil. The names of this file's helpers start with "tr", to stay
// clear of the middleware's tests in the same package.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/store/memory"
)

// trT0 is the fake clocks' start: ahead of real time, so that a context
// deadline set from the fake clock is still in the future in real time,
// and on a whole second, as HTTP-dates are.
var trT0 = time.Date(2100, 1, 2, 3, 4, 5, 0, time.UTC)

// trServer is a real HTTP server that counts the requests it served and
// answers each as its query asks: status (200 by default), retry (the
// Retry-After value to send), gate (signal arrived, then wait for
// release).
type trServer struct {
	*httptest.Server
	served  atomic.Int64
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

func newTrServer(t *testing.T) *trServer {
	t.Helper()
	s := &trServer{arrived: make(chan struct{}, 1), release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		s.open()
		s.Close()
	})
	return s
}

func (s *trServer) serve(w http.ResponseWriter, r *http.Request) {
	s.served.Add(1)
	q := r.URL.Query()
	if q.Has("gate") {
		s.arrived <- struct{}{}
		<-s.release
	}
	if q.Has("retry") {
		w.Header().Set("Retry-After", q.Get("retry"))
	}
	status := http.StatusOK
	if v := q.Get("status"); v != "" {
		status, _ = strconv.Atoi(v)
	}
	w.WriteHeader(status)
	io.WriteString(w, "from the partner")
}

// open lets the gated request go.
func (s *trServer) open() { s.once.Do(func() { close(s.release) }) }

// host is the server's key under the default key: its host and port.
func (s *trServer) host() string { return strings.TrimPrefix(s.URL, "http://") }

// url returns the server's URL with the query kv (name, value, ...).
func (s *trServer) url(kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	if len(q) == 0 {
		return s.URL + "/"
	}
	return s.URL + "/?" + q.Encode()
}

func newTrClock() *clocktest.Clock { return clocktest.New(trT0) }

// trLimiter is a Limiter of a bucket named "partner" in s, on clk.
func trLimiter(s spigot.Store, clk *clocktest.Clock, capacity int64, r spigot.Rate) *spigot.Limiter {
	return spigot.New(s, spigot.MustBucket("partner", capacity, r), spigot.WithClock(clk))
}

// trMemory is a memory store on clk.
func trMemory(clk *clocktest.Clock) *memory.Store { return memory.New(memory.WithClock(clk)) }

// trGet sends a GET of u through rt in an http.Client, with header kv.
func trGet(ctx context.Context, rt http.RoundTripper, u string, kv ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	return (&http.Client{Transport: rt}).Do(req)
}

// trOutcome sums up a request's result: the response's status code
// ("200"), "limited " and the RetryAfter of a *LimitedError ("limited
// 1s", "limited never"), or "error". It reads and closes the response's
// body.
func trOutcome(resp *http.Response, err error) string {
	var le *LimitedError
	switch {
	case errors.As(err, &le) && le.RetryAfter == spigot.Never:
		return "limited never"
	case errors.As(err, &le):
		return "limited " + le.RetryAfter.String()
	case err != nil:
		return "error"
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// trAwaitWaiter returns once n After channels of clk are waiting, as when
// a request waits for its token or for the end of a Retry-After. It fails
// the test if done delivers first: the request did not wait.
func trAwaitWaiter(t *testing.T, clk *clocktest.Clock, n int, done <-chan string) {
	t.Helper()
	waiting := make(chan struct{})
	go func() {
		clk.BlockUntil(n)
		close(waiting)
	}()
	select {
	case <-waiting:
	case got := <-done:
		t.Fatalf("the request returned %s at once; want it to wait", got)
	}
}

// trAtOnce returns what send returns, and fails the test if send waits on
// clk instead of returning at once.
func trAtOnce(t *testing.T, clk *clocktest.Clock, send func() (*http.Response, error)) (*http.Response, error) {
	t.Helper()
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := send()
		done <- result{resp, err}
	}()
	waiting := make(chan struct{})
	go func() {
		clk.BlockUntil(1)
		close(waiting)
	}()
	t.Cleanup(func() { clk.After(time.Nanosecond) }) // lets the BlockUntil above return
	select {
	case r := <-done:
		return r.resp, r.err
	case <-waiting:
		t.Fatal("the request waits on the clock; want it to return at once")
		return nil, nil
	}
}

// trGetNow is trGet that must return at once: see trAtOnce.
func trGetNow(t *testing.T, clk *clocktest.Clock, rt http.RoundTripper, u string, kv ...string) (*http.Response, error) {
	t.Helper()
	return trAtOnce(t, clk, func() (*http.Response, error) { return trGet(context.Background(), rt, u, kv...) })
}

var errTrStoreDown = errors.New("the store is down")

// trFailingStore fails every call.
type trFailingStore struct{}

func (trFailingStore) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	return spigot.Decision{}, fmt.Errorf("trFailingStore: %w", errTrStoreDown)
}

func (trFailingStore) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return fmt.Errorf("trFailingStore: %w", errTrStoreDown)
}

// trBody is a request body that records its Close.
type trBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trBody) Close() error {
	b.closed.Store(true)
	return nil
}

// TestTransportReplicasShareOneBucket: three Transports, as on three
// replicas, each with its own Limiter on one shared store, take from one
// bucket per host: what one replica takes, the others lack.
func TestTransportReplicasShareOneBucket(t *testing.T) {
	clk := newTrClock()
	srv := newTrServer(t)
	store := trMemory(clk)
	var replicas [3]*Transport
	for i := range replicas {
		l := trLimiter(store, clk, 3, spigot.PerSecond(1))
		replicas[i] = NewTransport(nil, l, WithoutWaiting(), WithClock(clk))
	}
	steps := []struct {
		at      time.Duration
		replica int
		want    string
		served  int64 // by the server, after the step
	}{
		{0, 0, "200", 1},
		{0, 1, "200", 2},
		{0, 2, "200", 3},
		{0, 0, "limited 1s", 3}, // the bucket is the other replicas' too
		{0, 1, "limited 1s", 3},
		{500 * time.Millisecond, 2, "limited 500ms", 3},
		{time.Second, 1, "200", 4},
		{time.Second, 0, "limited 1s", 4},
		{3 * time.Second, 2, "200", 5},
		{3 * time.Second, 0, "200", 6},
		{3 * time.Second, 1, "limited 1s", 6},
	}
	for i, st := range steps {
		clk.Set(trT0.Add(st.at))
		resp, err := trGetNow(t, clk, replicas[st.replica], srv.url())
		var le *LimitedError
		if errors.As(err, &le) && le.Key != srv.host() {
			t.Errorf("step %d: LimitedError.Key = %q, want %q", i, le.Key, srv.host())
		}
		if got := trOutcome(resp, err); got != st.want {
			t.Errorf("step %d (t0+%v, replica %d): got %s (%v), want %s", i, st.at, st.replica, got, err, st.want)
		}
		if got := srv.served.Load(); got != st.served {
			t.Errorf("step %d (t0+%v, replica %d): server served %d, want %d", i, st.at, st.replica, got, st.served)
		}
	}
}

// TestTransportReplicasConcurrentBurst: at one instant, concurrent
// requests from three replicas sharing a store reach the server exactly
// capacity times; every other one gets a *LimitedError and never reaches
// it.
func TestTransportReplicasConcurrentBurst(t *testing.T) {
	const capacity, perReplica = 10, 8
	clk := newTrClock()
	srv := newTrServer(t)
	store := trMemory(clk)
	var replicas [3]*Transport
	for i := range replicas {
		l := trLimiter(store, clk, capacity, spigot.PerHour(10))
		replicas[i] = NewTransport(nil, l, WithoutWaiting(), WithClock(clk))
	}
	outcomes := make(chan string, len(replicas)*perReplica)
	// A deadline before the next token: a Transport that waited despite
	// WithoutWaiting would fail the request rather than hang the test.
	ctx, cancel := context.WithDeadline(context.Background(), trT0.Add(time.Minute))
	defer cancel()
	var wg sync.WaitGroup
	for _, tr := range replicas {
		for range perReplica {
			wg.Go(func() {
				resp, err := trGet(ctx, tr, srv.url())
				outcomes <- trOutcome(resp, err)
			})
		}
	}
	wg.Wait()
	close(outcomes)
	got := map[string]int{}
	for o := range outcomes {
		got[o]++
	}
	// The bucket is empty: the next token comes in 6 minutes.
	want := map[string]int{"200": capacity, "limited 6m0s": len(replicas)*perReplica - capacity}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("outcomes: got %v, want %v", got, want)
	}
	if n := srv.served.Load(); n != capacity {
		t.Errorf("server served %d requests, want exactly the capacity, %d", n, capacity)
	}
}

// TestTransportWaitsForTokens: a request that finds the bucket empty waits
// on the clock until the token is there, then is sent.
func TestTransportWaitsForTokens(t *testing.T) {
	clk := newTrClock()
	srv := newTrServer(t)
	tr := NewTransport(nil, trLimiter(trMemory(clk), clk, 1, spigot.Per(1, 3*time.Second)), WithClock(clk))
	ctx := context.Background()
	if got := trOutcome(trGet(ctx, tr, srv.url())); got != "200" {
		t.Fatalf("first request: got %s, want 200", got)
	}
	done := make(chan string)
	go func() { done <- trOutcome(trGet(ctx, tr, srv.url())) }()
	trAwaitWaiter(t, clk, 1, done) // the second request waits for its token
	clk.Advance(2999 * time.Millisecond)
	if n := srv.served.Load(); n != 1 {
		t.Errorf("at t0+2.999s: server served %d, want 1 (the second request must still wait)", n)
	}
	if n := clk.Waiters(); n != 1 {
		t.Errorf("at t0+2.999s: %d waiters, want 1", n)
	}
	clk.Advance(time.Millisecond)
	if got := <-done; got != "200" {
		t.Errorf("second request: got %s, want 200", got)
	}
	if n := srv.served.Load(); n != 2 {
		t.Errorf("server served %d, want 2", n)
	}
}

// TestTransportDeadline: a request whose deadline falls less than the
// margin (DefaultDeadlineMargin, or WithDeadlineMargin's) after its token
// or the end of its Retry-After returns at once, unsent, with an error
// that matches both ErrLimited and context.DeadlineExceeded; one whose
// deadline leaves the margin waits and is sent.
func TestTransportDeadline(t *testing.T) {
	m := DefaultDeadlineMargin
	cases := []struct {
		name     string
		retry    string        // the first response's Retry-After, if any
		deadline time.Duration // from t0
		opts     []Option
		want     string
	}{
		{"token after the deadline", "", 2999 * time.Millisecond, nil, "limited 3s"},
		{"token within the margin", "", 3*time.Second + m - time.Millisecond, nil, "limited 3s"},
		{"token at the margin", "", 3*time.Second + m, nil, "200"},
		{"token at the deadline, no margin", "", 3 * time.Second, []Option{WithDeadlineMargin(0)}, "200"},
		{"token at a margin of 1s", "", 4 * time.Second, []Option{WithDeadlineMargin(time.Second)}, "200"},
		{"token within a margin of 1s", "", 3*time.Second + m, []Option{WithDeadlineMargin(time.Second)}, "limited 3s"},
		{"Retry-After after the deadline", "30", 29 * time.Second, nil, "limited 30s"},
		{"Retry-After within the margin", "30", 30 * time.Second, nil, "limited 30s"},
		{"Retry-After at the margin", "30", 30*time.Second + m, nil, "200"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newTrClock()
			srv := newTrServer(t)
			capacity, r := int64(1), spigot.Per(1, 3*time.Second)
			if c.retry != "" {
				capacity, r = 2, spigot.PerSecond(1) // the bucket does not hold it back
			}
			tr := NewTransport(nil, trLimiter(trMemory(clk), clk, capacity, r), append(c.opts, WithClock(clk))...)
			first := srv.url()
			if c.retry != "" {
				first = srv.url("status", "429", "retry", c.retry)
			}
			if _, err := trGet(context.Background(), tr, first); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithDeadline(context.Background(), trT0.Add(c.deadline))
			defer cancel()
			if c.want == "200" {
				done := make(chan string, 1)
				go func() { done <- trOutcome(trGet(ctx, tr, srv.url())) }()
				trAwaitWaiter(t, clk, 1, done)
				clk.Advance(c.deadline)
				if got := <-done; got != c.want {
					t.Errorf("got %s, want %s", got, c.want)
				}
			} else {
				resp, err := trAtOnce(t, clk, func() (*http.Response, error) { return trGet(ctx, tr, srv.url()) })
				if got := trOutcome(resp, err); got != c.want {
					t.Errorf("got %s (%v), want %s", got, err, c.want)
				}
				if !errors.Is(err, ErrLimited) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("error %v: want one that matches ErrLimited and context.DeadlineExceeded", err)
				}
				if n := clk.Waiters(); n != 0 {
					t.Errorf("%d waiters: the request must return at once", n)
				}
			}
			wantServed := int64(1)
			if c.want == "200" {
				wantServed = 2
			}
			if n := srv.served.Load(); n != wantServed {
				t.Errorf("server served %d, want %d", n, wantServed)
			}
		})
	}
}

// TestTransportCostAboveCapacity: a cost that no bucket of this capacity
// can hold is denied at once with RetryAfter Never, waiting or not.
func TestTransportCostAboveCapacity(t *testing.T) {
	for _, wait := range []bool{true, false} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			clk := newTrClock()
			srv := newTrServer(t)
			opts := []Option{WithClock(clk), WithCost(func(*http.Request) (int64, error) { return 5, nil })}
			if !wait {
				opts = append(opts, WithoutWaiting())
			}
			tr := NewTransport(nil, trLimiter(trMemory(clk), clk, 3, spigot.PerSecond(1)), opts...)
			resp, err := trGetNow(t, clk, tr, srv.url())
			if got := trOutcome(resp, err); got != "limited never" {
				t.Errorf("got %s (%v), want limited never", got, err)
			}
			if !errors.Is(err, ErrLimited) || !errors.Is(err, spigot.ErrNeverAdmitted) {
				t.Errorf("error %v: want one that matches ErrLimited and spigot.ErrNeverAdmitted", err)
			}
			if n := srv.served.Load(); n != 0 {
				t.Errorf("server served %d, want 0", n)
			}
		})
	}
}

// TestTransportCost: the cost function says how many tokens a request
// takes; a cost of 0 is sent without asking the store, even when the
// bucket is empty, but still obeys a Retry-After.
func TestTransportCost(t *testing.T) {
	clk := newTrClock()
	srv := newTrServer(t)
	store := countstore.New(trMemory(clk))
	errBadCost := errors.New("bad X-Cost")
	cost := func(r *http.Request) (int64, error) {
		n, err := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
		if err != nil {
			return 0, errBadCost
		}
		return n, nil
	}
	tr := NewTransport(nil, trLimiter(store, clk, 2, spigot.PerSecond(1)),
		WithoutWaiting(), WithClock(clk), WithCost(cost))
	steps := []struct {
		at     time.Duration
		cost   string
		query  []string
		want   string
		wantIs error
		calls  int64 // to the store, after the step
		served int64
	}{
		{0, "0", nil, "200", nil, 0, 1},
		{0, "2", nil, "200", nil, 1, 2},
		{0, "0", nil, "200", nil, 1, 3}, // the bucket is empty
		{0, "1", nil, "limited 1s", ErrLimited, 2, 3},
		{0, "-1", nil, "error", spigot.ErrInvalidCost, 2, 3},
		{0, "two", nil, "error", errBadCost, 2, 3},
		{2 * time.Second, "1", []string{"status", "429", "retry", "10"}, "429", nil, 3, 4},
		{2 * time.Second, "0", nil, "limited 10s", ErrLimited, 3, 4}, // held: free is not exempt
		{12 * time.Second, "0", nil, "200", nil, 3, 5},
	}
	for i, st := range steps {
		clk.Set(trT0.Add(st.at))
		resp, err := trGetNow(t, clk, tr, srv.url(st.query...), "X-Cost", st.cost)
		if got := trOutcome(resp, err); got != st.want {
			t.Errorf("step %d (t0+%v, cost %s): got %s (%v), want %s", i, st.at, st.cost, got, err, st.want)
		}
		if st.wantIs != nil && !errors.Is(err, st.wantIs) {
			t.Errorf("step %d (t0+%v, cost %s): error %v does not match %v", i, st.at, st.cost, err, st.wantIs)
		}
		if got := store.Calls(); got != st.calls {
			t.Errorf("step %d (t0+%v, cost %s): %d store calls, want %d", i, st.at, st.cost, got, st.calls)
		}
		if got := srv.served.Load(); got != st.served {
			t.Errorf("step %d (t0+%v, cost %s): server served %d, want %d", i, st.at, st.cost, got, st.served)
		}
	}
}

// TestTransportKeyFunc: a key function gives each tenant its bucket on one
// host, and one that fails sends nothing.
func TestTransportKeyFunc(t *testing.T) {
	clk := newTrClock()
	srv := newTrServer(t)
	errNoTenant := errors.New("no X-Tenant")
	key := func(r *http.Request) (string, error) {
		if v := r.Header.Get("X-Tenant"); v != "" {
			return v, nil
		}
		return "", errNoTenant
	}
	store := countstore.New(trMemory(clk))
	tr := NewTransport(nil, trLimiter(store, clk, 1, spigot.PerSecond(1)),
		WithoutWaiting(), WithClock(clk), WithTransportKey(key))
	steps := []struct {
		tenant  string
		want    string
		wantKey string // of the LimitedError
		calls   int64
		served  int64
	}{
		{"a", "200", "", 1, 1},
		{"a", "limited 1s", "a", 2, 1},
		{"b", "200", "", 3, 2},
		{"", "error", "", 3, 2},
		{"b", "limited 1s", "b", 4, 2},
	}
	for i, st := range steps {
		resp, err := trGetNow(t, clk, tr, srv.url(), "X-Tenant", st.tenant)
		if got := trOutcome(resp, err); got != st.want {
			t.Errorf("step %d (tenant %q): got %s (%v), want %s", i, st.tenant, got, err, st.want)
		}
		var le *LimitedError
		if errors.As(err, &le) && le.Key != st.wantKey {
			t.Errorf("step %d (tenant %q): LimitedError.Key = %q, want %q", i, st.tenant, le.Key, st.wantKey)
		}
		if st.want == "error" && (!errors.Is(err, errNoTenant) || errors.Is(err, ErrLimited)) {
			t.Errorf("step %d (tenant %q): error %v: want the key function's, not ErrLimited", i, st.tenant, err)
		}
		if got := store.Calls(); got != st.calls {
			t.Errorf("step %d (tenant %q): %d store calls, want %d", i, st.tenant, got, st.calls)
		}
		if got := srv.served.Load(); got != st.served {
			t.Errorf("step %d (tenant %q): server served %d, want %d", i, st.tenant, got, st.served)
		}
	}
}

// TestTransportHostKey: the default key is the URL's host, lowercased,
// with its port when it has one.
func TestTransportHostKey(t *testing.T) {
	cases := []struct {
		url     string
		want    string
		wantErr bool
	}{
		{"http://api.example.com/v1", "api.example.com", false},
		{"https://API.Example.COM:8443/v1?q=1", "api.example.com:8443", false},
		{"http://[2001:DB8::1]:80/", "[2001:db8::1]:80", false},
		{"/relative", "", true},
	}
	for i, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		got, err := hostKey(&http.Request{URL: u})
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("step %d (%s): got %q, %v; want %q, error %v", i, c.url, got, err, c.want, c.wantErr)
		}
	}
	if _, err := hostKey(&http.Request{}); err == nil {
		t.Error("nil URL: got no error")
	}
}

// TestTransportRetryAfterHolds: a 429's Retry-After holds back the
// requests to that host, not another's, until the clock passes it; the
// response itself reaches the caller unchanged.
func TestTransportRetryAfterHolds(t *testing.T) {
	clk := newTrClock()
	a, b := newTrServer(t), newTrServer(t)
	tr := NewTransport(nil, trLimiter(trMemory(clk), clk, 1000, spigot.PerSecond(1000)), WithoutWaiting(), WithClock(clk))

	resp, err := trGet(context.Background(), tr, a.url("status", "429", "retry", "30"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "30" || string(body) != "from the partner" {
		t.Errorf("the 429 reached the caller as %d, Retry-After %q, body %q; want it unchanged",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}

	steps := []struct {
		at     time.Duration
		srv    *trServer
		want   string
		served [2]int64 // by a and b, after the step
	}{
		{0, a, "limited 30s", [2]int64{1, 0}},
		{0, b, "200", [2]int64{1, 1}}, // another host is not held
		{10 * time.Second, a, "limited 20s", [2]int64{1, 1}},
		{29999 * time.Millisecond, a, "limited 1ms", [2]int64{1, 1}},
		{30 * time.Second, a, "200", [2]int64{2, 1}},
		{30 * time.Second, a, "200", [2]int64{3, 1}},
	}
	for i, st := range steps {
		clk.Set(trT0.Add(st.at))
		resp, err := trGetNow(t, clk, tr, st.srv.url())
		if got := trOutcome(resp, err); got != st.want {
			t.Errorf("step %d (t0+%v): got %s (%v), want %s", i, st.at, got, err, st.want)
		}
		var le *LimitedError
		if errors.As(err, &le) && le.Key != a.host() {
			t.Errorf("step %d (t0+%v): LimitedError.Key = %q, want %q", i, st.at, le.Key, a.host())
		}
		if got := [2]int64{a.served.Load(), b.served.Load()}; got != st.served {
			t.Errorf("step %d (t0+%v): servers served %v, want %v", i, st.at, got, st.served)
		}
	}
}

// TestTransportRetryAfterWaits: a waiting request sits out the
// Retry-After, while a request to another host goes at once; then it takes
// its token, waiting for it if the bucket lacks it, and only then is sent.
func TestTransportRetryAfterWaits(t *testing.T) {
	cases := []struct {
		name      string
		capacity  int64
		tokenWait time.Duration // after the Retry-After ends
	}{
		{"token there", 2, 0},
		// One token, back in 40 s: the 429 took it, so after the 30 s of
		// the Retry-After the request waits 10 s more for its token.
		{"token after the Retry-After", 1, 10 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newTrClock()
			a, b := newTrServer(t), newTrServer(t)
			tr := NewTransport(nil, trLimiter(trMemory(clk), clk, c.capacity, spigot.Per(1, 40*time.Second)), WithClock(clk))
			ctx := context.Background()
			if got := trOutcome(trGet(ctx, tr, a.url("status", "429", "retry", "30"))); got != "429" {
				t.Fatalf("first request: got %s, want 429", got)
			}
			done := make(chan string, 1)
			go func() { done <- trOutcome(trGet(ctx, tr, a.url())) }()
			trAwaitWaiter(t, clk, 1, done) // waiting for the Retry-After to end
			if got := trOutcome(trGet(ctx, tr, b.url())); got != "200" {
				t.Errorf("request to another host: got %s, want 200 at once", got)
			}
			clk.Advance(29999 * time.Millisecond)
			if n := a.served.Load(); n != 1 {
				t.Errorf("at t0+29.999s: a served %d, want 1", n)
			}
			clk.Advance(time.Millisecond)
			if c.tokenWait > 0 {
				trAwaitWaiter(t, clk, 1, done) // waiting for its token
				if n := a.served.Load(); n != 1 {
					t.Errorf("at t0+30s: a served %d, want 1 (the request waits for its token)", n)
				}
				clk.Advance(c.tokenWait)
			}
			if got := <-done; got != "200" {
				t.Errorf("held request: got %s, want 200", got)
			}
			if n := a.served.Load(); n != 2 {
				t.Errorf("a served %d, want 2", n)
			}
		})
	}
}

// TestTransportRetryAfterValues: which responses hold a host back, and for
// how long.
func TestTransportRetryAfterValues(t *testing.T) {
	date := func(d time.Duration) string { return trT0.Add(d).Format(http.TimeFormat) }
	cases := []struct {
		status int
		retry  string // "-" for no header
		want   string // of the next request, at the same instant
	}{
		{429, "30", "limited 30s"},
		{503, "30", "limited 30s"},
		{429, date(40 * time.Second), "limited 40s"},                        // an HTTP-date
		{503, trT0.Add(50 * time.Second).Format(time.ANSIC), "limited 50s"}, // its asctime form
		{429, trT0.Add(time.Minute).Format(time.RFC1123Z), "200"},           // not an HTTP-date
		{429, "86400", "limited 24h0m0s"},                                   // a day at most
		{429, "86401", "200"},                                               // absurd: ignored
		{429, date(24*time.Hour + time.Second), "200"},                      // absurd: ignored
		{429, date(0), "200"},                                               // now
		{429, date(-time.Second), "200"},                                    // past
		{429, "0", "200"},
		{429, "-5", "200"},
		{429, "+5", "200"},
		{429, "1.5", "200"},
		{429, "soon", "200"},
		{429, "", "200"},
		{429, "-", "200"},
		{429, "99999999999999999999999", "200"},
		{200, "30", "200"}, // only 429 and 503 hold
		{500, "30", "200"},
		{301, "30", "200"},
	}
	srv := newTrServer(t)
	for i, c := range cases {
		clk := newTrClock()
		tr := NewTransport(nil, trLimiter(trMemory(clk), clk, 100, spigot.PerSecond(100)), WithoutWaiting(), WithClock(clk))
		q := []string{"status", strconv.Itoa(c.status)}
		if c.retry != "-" {
			q = append(q, "retry", c.retry)
		}
		req, err := http.NewRequest(http.MethodGet, srv.url(q...), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req) // not through a Client, which would follow the 301
		if got := trOutcome(resp, err); got != strconv.Itoa(c.status) {
			t.Fatalf("step %d: first request: got %s (%v), want %d", i, got, err, c.status)
		}
		resp, err = trGetNow(t, clk, tr, srv.url())
		if got := trOutcome(resp, err); got != c.want {
			t.Errorf("step %d (%d, Retry-After %q): got %s (%v), want %s", i, c.status, c.retry, got, err, c.want)
		}
	}
}

// TestTransportRetryAfterKeepsTheLater: of two holds on a key, the one
// that ends later holds, in whichever order the responses come.
func TestTransportRetryAfterKeepsTheLater(t *testing.T) {
	for _, c := range []struct{ first, second string }{{"60", "10"}, {"10", "60"}} {
		t.Run(c.first+" then "+c.second, func(t *testing.T) {
			clk := newTrClock()
			srv := newTrServer(t)
			tr := NewTransport(nil, trLimiter(trMemory(clk), clk, 100, spigot.PerSecond(100)), WithoutWaiting(), WithClock(clk))
			ctx := context.Background()
			// The request that answers second is sent first, and waits in the
			// server while the other is sent and answered.
			late := make(chan string)
			go func() { late <- trOutcome(trGet(ctx, tr, srv.url("gate", "1", "status", "429", "retry", c.second))) }()
			<-srv.arrived
			if got := trOutcome(trGet(ctx, tr, srv.url("status", "429", "retry", c.first))); got != "429" {
				t.Fatalf("first answer: got %s, want 429", got)
			}
			srv.open()
			if got := <-late; got != "429" {
				t.Fatalf("second answer: got %s, want 429", got)
			}
			if got := trOutcome(trGetNow(t, clk, tr, srv.url())); got != "limited 1m0s" {
				t.Errorf("got %s, want limited 1m0s", got)
			}
		})
	}
}

// TestTransportWithoutRetryAfter: the option ignores Retry-After, waiting
// or not.
func TestTransportWithoutRetryAfter(t *testing.T) {
	for _, wait := range []bool{true, false} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			clk := newTrClock()
			srv := newTrServer(t)
			opts := []Option{WithClock(clk), WithoutRetryAfter()}
			if !wait {
				opts = append(opts, WithoutWaiting())
			}
			tr := NewTransport(nil, trLimiter(trMemory(clk), clk, 100, spigot.PerSecond(100)), opts...)
			ctx := context.Background()
			if got := trOutcome(trGet(ctx, tr, srv.url("status", "429", "retry", "30"))); got != "429" {
				t.Fatalf("first request: got %s, want 429", got)
			}
			if got := trOutcome(trGetNow(t, clk, tr, srv.url())); got != "200" {
				t.Errorf("next request: got %s, want 200 at once", got)
			}
			if got := tr.gate.Holds.Len(); got != 0 {
				t.Errorf("%d holds kept, want 0", got)
			}
		})
	}
}

// TestTransportNotSent: every request the Transport does not send returns
// an error that starts "spigot: httplimit: " and matches its cause, with
// the request's body closed and the request unchanged; none reaches the
// server, and none waits.
func TestTransportNotSent(t *testing.T) {
	errKey, errCost := errors.New("no key"), errors.New("no cost")
	costOf := func(n int64) Option {
		return WithCost(func(*http.Request) (int64, error) { return n, nil })
	}
	drain := func(t *testing.T, tr *Transport, l *spigot.Limiter, srv *trServer) {
		if _, err := l.AllowN(context.Background(), srv.host(), 3); err != nil {
			t.Fatal(err)
		}
	}
	hold := func(t *testing.T, tr *Transport, l *spigot.Limiter, srv *trServer) {
		if got := trOutcome(trGet(context.Background(), tr, srv.url("status", "503", "retry", "30"))); got != "503" {
			t.Fatalf("setup: got %s, want 503", got)
		}
	}
	cases := []struct {
		name     string
		zero     bool // the zero Transport
		failing  bool // a store that fails
		opts     []Option
		setup    func(t *testing.T, tr *Transport, l *spigot.Limiter, srv *trServer)
		deadline time.Duration // from t0; 0 for none
		cancel   bool
		wantIs   []error
		wantNot  []error
		want     string
	}{
		{name: "zero Transport", zero: true, want: "error"},
		{name: "key error", opts: []Option{WithTransportKey(func(*http.Request) (string, error) { return "", errKey })},
			wantIs: []error{errKey}, wantNot: []error{ErrLimited}, want: "error"},
		{name: "cost error", opts: []Option{WithCost(func(*http.Request) (int64, error) { return 0, errCost })},
			wantIs: []error{errCost}, wantNot: []error{ErrLimited}, want: "error"},
		{name: "negative cost", opts: []Option{costOf(-1)},
			wantIs: []error{spigot.ErrInvalidCost}, wantNot: []error{ErrLimited}, want: "error"},
		{name: "store error, waiting", failing: true,
			wantIs: []error{errTrStoreDown}, wantNot: []error{ErrLimited}, want: "error"},
		{name: "store error, not waiting", failing: true, opts: []Option{WithoutWaiting()},
			wantIs: []error{errTrStoreDown}, wantNot: []error{ErrLimited}, want: "error"},
		{name: "cost above capacity, waiting", opts: []Option{costOf(4)},
			wantIs: []error{ErrLimited, spigot.ErrNeverAdmitted}, want: "limited never"},
		{name: "cost above capacity, not waiting", opts: []Option{costOf(4), WithoutWaiting()},
			wantIs: []error{ErrLimited, spigot.ErrNeverAdmitted}, want: "limited never"},
		{name: "empty bucket, not waiting", opts: []Option{WithoutWaiting()}, setup: drain,
			wantIs: []error{ErrLimited}, wantNot: []error{context.DeadlineExceeded}, want: "limited 1s"},
		{name: "empty bucket, deadline first", setup: drain, deadline: 999 * time.Millisecond,
			wantIs: []error{ErrLimited, context.DeadlineExceeded}, want: "limited 1s"},
		{name: "empty bucket, cancelled", setup: drain, cancel: true,
			wantIs: []error{context.Canceled}, wantNot: []error{ErrLimited}, want: "error"},
		{name: "Retry-After, not waiting", opts: []Option{WithoutWaiting()}, setup: hold,
			wantIs: []error{ErrLimited}, want: "limited 30s"},
		{name: "Retry-After, deadline first", setup: hold, deadline: 10 * time.Second,
			wantIs: []error{ErrLimited, context.DeadlineExceeded}, want: "limited 30s"},
		{name: "Retry-After, cancelled", setup: hold, cancel: true,
			wantIs: []error{context.Canceled}, wantNot: []error{ErrLimited}, want: "error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newTrClock()
			srv := newTrServer(t)
			var store spigot.Store = trMemory(clk)
			if c.failing {
				store = trFailingStore{}
			}
			l := trLimiter(store, clk, 3, spigot.PerSecond(1))
			tr := &Transport{}
			if !c.zero {
				tr = NewTransport(nil, l, append([]Option{WithClock(clk)}, c.opts...)...)
			}
			if c.setup != nil {
				c.setup(t, tr, l, srv)
			}
			served := srv.served.Load()

			ctx := context.Background()
			if c.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, trT0.Add(c.deadline))
				defer cancel()
			}
			if c.cancel {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			body := &trBody{Reader: strings.NewReader("payload")}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.url(), body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Request", "1")
			wantHeader, wantURL := req.Header.Clone(), req.URL.String()

			resp, err := trAtOnce(t, clk, func() (*http.Response, error) { return tr.RoundTrip(req) })
			if resp != nil {
				t.Errorf("got a response, %d", resp.StatusCode)
				resp.Body.Close()
			}
			if got := trOutcome(nil, err); got != c.want {
				t.Errorf("got %s (%v), want %s", got, err, c.want)
			}
			if err == nil || !strings.HasPrefix(err.Error(), "spigot: httplimit: ") {
				t.Errorf("error %v: want one that starts %q", err, "spigot: httplimit: ")
			}
			for _, target := range c.wantIs {
				if !errors.Is(err, target) {
					t.Errorf("error %v does not match %v", err, target)
				}
			}
			for _, target := range c.wantNot {
				if errors.Is(err, target) {
					t.Errorf("error %v matches %v", err, target)
				}
			}
			if !body.closed.Load() {
				t.Error("the request's body was not closed")
			}
			if !reflect.DeepEqual(req.Header, wantHeader) || req.URL.String() != wantURL || req.Body != body {
				t.Errorf("the request was modified: %v %s", req.Header, req.URL)
			}
			if n := srv.served.Load(); n != served {
				t.Errorf("server served %d, want %d", n, served)
			}
			if n := clk.Waiters(); n != 0 {
				t.Errorf("%d waiters: the request must return at once", n)
			}
		})
	}
}

// TestTransportHoldsBounded: the Transport keeps the holds of at most so
// many keys: it forgets ended holds, then the ones that end first, and
// never one that ends later than a new one. The cap is lowered to 4 for
// the requests; the real cap is then filled directly.
func TestTransportHoldsBounded(t *testing.T) {
	clk := newTrClock()
	srv := newTrServer(t)
	tr := NewTransport(nil, trLimiter(trMemory(clk), clk, 100, spigot.PerSecond(100)),
		WithoutWaiting(), WithClock(clk), WithTransportKey(func(r *http.Request) (string, error) {
			return r.Header.Get("X-Key"), nil
		}))
	tr.gate.Holds.Max = 4
	steps := []struct {
		at    time.Duration
		key   string
		retry string // "" for a 200
		want  string
		size  int // holds kept after the step
	}{
		{0, "k0", "10", "429", 1},
		{0, "k1", "20", "429", 2},
		{0, "k2", "30", "429", 3},
		{0, "k3", "40", "429", 4},
		{0, "k4", "50", "429", 4}, // k0, which ends first, is forgotten
		{0, "k0", "", "200", 4},
		{0, "k1", "", "limited 20s", 4},
		{0, "k5", "5", "429", 4}, // ends before all the others: not kept
		{0, "k5", "", "200", 4},
		{25 * time.Second, "k6", "100", "429", 4}, // k1 has ended, and goes
		{25 * time.Second, "k2", "", "limited 5s", 4},
		{25 * time.Second, "k6", "", "limited 1m40s", 4},
		{25 * time.Second, "k4", "", "limited 25s", 4},
		{30 * time.Second, "k2", "", "200", 3},   // an ended hold is forgotten when read
		{200 * time.Second, "k7", "1", "429", 4}, // not full: nothing is swept
		{200 * time.Second, "k8", "1", "429", 2}, // full: every ended hold goes
	}
	for i, st := range steps {
		clk.Set(trT0.Add(st.at))
		u := srv.url()
		if st.retry != "" {
			u = srv.url("status", "429", "retry", st.retry)
		}
		resp, err := trGetNow(t, clk, tr, u, "X-Key", st.key)
		if got := trOutcome(resp, err); got != st.want {
			t.Errorf("step %d (t0+%v, %s): got %s (%v), want %s", i, st.at, st.key, got, err, st.want)
		}
		if got := tr.gate.Holds.Len(); got != st.size {
			t.Errorf("step %d (t0+%v, %s): %d holds kept, want %d", i, st.at, st.key, got, st.size)
		}
	}

}

// TestTransportCloseIdleConnections: the Transport passes an http.Client's
// CloseIdleConnections on to its base.
func TestTransportCloseIdleConnections(t *testing.T) {
	closed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			select {
			case closed <- struct{}{}:
			default:
			}
		}
	}
	srv.Start()
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	clk := newTrClock()
	client := &http.Client{Transport: NewTransport(base, trLimiter(trMemory(clk), clk, 1, spigot.PerSecond(1)), WithClock(clk))}
	if got := trOutcome(client.Get(srv.URL)); got != "200" {
		t.Fatalf("got %s, want 200", got)
	}
	client.CloseIdleConnections()
	<-closed // the server saw the idle connection close
}

// TestTransportPanics: programmer errors at construction panic with a
// message that names the argument; an option given to the side it does
// not configure is one.
func TestTransportPanics(t *testing.T) {
	clk := newTrClock()
	s := trMemory(clk)
	l := trLimiter(s, clk, 1, spigot.PerSecond(1))
	rule := By(l.Limit(), nil)
	deny := func(http.ResponseWriter, *http.Request, *Result) {}
	cases := []struct {
		f    func()
		want string
	}{
		{func() { NewTransport(nil, nil) }, "spigot: httplimit: NewTransport: nil Limiter"},
		{func() { NewTransport(nil, l, WithTransportKey(nil)) }, "spigot: httplimit: WithTransportKey: nil func"},
		{func() { NewTransport(nil, l, WithCost(nil)) }, "spigot: httplimit: WithCost: nil func"},
		{func() { NewTransport(nil, l, WithClock(nil)) }, "spigot: httplimit: WithClock: nil Clock"},
		{func() { NewTransport(nil, l, WithClock((*clocktest.Clock)(nil))) }, "spigot: httplimit: WithClock: nil Clock"},
		{func() { NewTransport(nil, l, rule) }, "spigot: httplimit: NewTransport: By configures a Middleware (New), not a Transport"},
		{func() { NewTransport(nil, l, WithHeaders(Legacy)) }, "spigot: httplimit: NewTransport: WithHeaders configures a Middleware (New), not a Transport"},
		{func() { NewTransport(nil, l, WithDenyHandler(deny)) }, "spigot: httplimit: NewTransport: WithDenyHandler configures a Middleware (New), not a Transport"},
		{func() { New(s, rule, WithoutWaiting()) }, "spigot: httplimit: New: WithoutWaiting configures a Transport (NewTransport), not a Middleware"},
		{func() { New(s, rule, WithoutRetryAfter()) }, "spigot: httplimit: New: WithoutRetryAfter configures a Transport (NewTransport), not a Middleware"},
		{func() { New(s, rule, WithTransportKey(hostKey)) }, "spigot: httplimit: New: WithTransportKey configures a Transport (NewTransport), not a Middleware"},
	}
	for i, c := range cases {
		func() {
			defer func() {
				if got := recover(); got != c.want {
					t.Errorf("step %d: panic %v, want %q", i, got, c.want)
				}
			}()
			c.f()
		}()
	}
}

// TestTransportLimitedError: the error's message and matching.
func TestTransportLimitedError(t *testing.T) {
	cause := fmt.Errorf("wait: %w", context.DeadlineExceeded)
	cases := []struct {
		err  *LimitedError
		want string
	}{
		{&LimitedError{Key: "api", RetryAfter: time.Second},
			`spigot: httplimit: outgoing request for key "api" limited: retry after 1s`},
		{&LimitedError{Key: "api", RetryAfter: 30 * time.Second, held: true},
			`spigot: httplimit: outgoing request for key "api" limited: the server's Retry-After holds it back for 30s`},
		{&LimitedError{Key: "api", RetryAfter: spigot.Never},
			`spigot: httplimit: outgoing request for key "api" limited: its cost exceeds the limit's capacity and can never be admitted`},
		{&LimitedError{Key: "api", RetryAfter: time.Second, Err: cause},
			`spigot: httplimit: outgoing request for key "api" limited: wait: context deadline exceeded`},
	}
	for i, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("step %d: Error() = %q, want %q", i, got, c.want)
		}
		var err error = c.err
		if !errors.Is(err, ErrLimited) {
			t.Errorf("step %d: does not match ErrLimited", i)
		}
		if got := errors.Is(err, context.DeadlineExceeded); got != (c.err.Err != nil) {
			t.Errorf("step %d: matches context.DeadlineExceeded: %v", i, got)
		}
	}
}

// TestTransportShaper: through a leaky bucket, a waiting Transport sends
// each request at its turn, gives back a turn that would leave less than
// the margin before the deadline, and WithoutWaiting gives a later turn
// back and answers a *LimitedError at once.
func TestTransportShaper(t *testing.T) {
	srv := newTrServer(t)
	clk := newTrClock()
	store := trMemory(clk)
	shaper := spigot.New(store, spigot.Must(spigot.NewLeakyBucket("partner", 2, spigot.PerSecond(1))), spigot.WithClock(clk))

	waiting := NewTransport(http.DefaultTransport, shaper, WithClock(clk))
	if _, err := trGet(context.Background(), waiting, srv.url()); err != nil || srv.served.Load() != 1 {
		t.Fatalf("step 1: got %v, %d served; want sent at once", err, srv.served.Load())
	}
	errc := make(chan error, 1)
	go func() {
		_, err := trGet(context.Background(), waiting, srv.url())
		errc <- err
	}()
	clk.BlockUntil(1)
	if n := srv.served.Load(); n != 1 {
		t.Fatalf("step 2: sent before its turn (%d served)", n)
	}
	clk.Advance(time.Second)
	if err := <-errc; err != nil || srv.served.Load() != 2 {
		t.Fatalf("step 2: got %v, %d served; want sent at its turn", err, srv.served.Load())
	}

	// The next turn is 1s away, and the deadline half the margin after
	// it: the turn is given back, nothing is sent.
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(time.Second+DefaultDeadlineMargin/2))
	_, err := trGet(ctx, waiting, srv.url())
	cancel()
	var late *LimitedError
	if !errors.As(err, &late) || !errors.Is(err, context.DeadlineExceeded) || srv.served.Load() != 2 {
		t.Fatalf("step 3: got %v, %d served; want a *LimitedError matching DeadlineExceeded, nothing sent", err, srv.served.Load())
	}
	if d, _ := shaper.Peek(context.Background(), srv.host(), 1); d.Remaining != 1 {
		t.Fatalf("step 3: Peek = %+v; want the late turn given back (Remaining 1)", d)
	}

	eager := NewTransport(http.DefaultTransport, shaper, WithClock(clk), WithoutWaiting())
	_, err = trGet(context.Background(), eager, srv.url())
	var limited *LimitedError
	if !errors.As(err, &limited) || limited.RetryAfter != time.Second || srv.served.Load() != 2 {
		t.Fatalf("step 4: got %v, %d served; want a *LimitedError with RetryAfter 1s, nothing sent", err, srv.served.Load())
	}
	if d, _ := shaper.Peek(context.Background(), srv.host(), 1); d.Remaining != 1 {
		t.Errorf("step 4: Peek = %+v; want the turn given back (Remaining 1)", d)
	}
}
