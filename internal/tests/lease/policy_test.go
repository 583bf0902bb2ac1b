package lease_test

// The newcomer's shape: a service of three replicas, each with one
// httplimit policy of two rules on a lease Store of the hybrid store.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
	"github.com/spigot-go/spigot/store/redis"
)

// TestPolicyLeasesTheBucket: three replicas, each lease.New(hybrid.New(a
// go-redis store, memory.New())) of its own on one redis-server, each
// serving HTTP behind one httplimit policy of two rules: per client
// address (X-Forwarded-For from a trusted loopback proxy) on every route,
// a sliding window of 100 a second; and per API key on GET /export,
// a token bucket of rows (40 000, refilled in an hour), an export costing
// its rows query parameter. Six goroutines send 3 000 exports of 10 rows
// on one hot API key, spread over the replicas, with other traffic beside
// them (/items, exports on cold keys); then one replica drains the hot
// key, and requests that only the bucket can deny follow. Measured in
// that one run:
//
//   - at least 90 % of the decisions on the hot key's bucket come from
//     leases (the lease Observer's Hit on the bucket, against the hot
//     key's export requests the store decided);
//   - the global bound of each limit holds: each API key admits at most
//     capacity + rate × t rows, t from the server's TIME before the first
//     request to after the last; each address at most the sliding
//     window's capacity in each of its aligned windows (see fit), which is
//     what a central sliding window guarantees, since a request is
//     admitted only while the window's own count plus the previous
//     window's weighted count, plus the request, is within the capacity;
//   - no denied request is charged anywhere: an address used only for
//     exports that the drained bucket denies has had nothing taken, on
//     the server (its Peek) and by any replica (what each replica's
//     remote took, counted under the hybrid store); every address was
//     charged by the replicas exactly the requests it had admitted; and
//     every row a replica took from the server was admitted, or went back
//     or was dropped as the lease Observer's Return says, so that an
//     export the per-address rule denies (an address kept full at the
//     server while it asks for exports of the hot key) spends no row of
//     the key's leases.
//
// The share is asserted with the leases' WithInterval at a second: a lease
// lasts about an interval, and this machine (two shared cores, -race)
// serves far fewer requests a second than a production replica, so that
// with the default the share would measure the machine; with a second,
// a lease grows to a sixteenth of the capacity (250 exports of 10 rows),
// or to what a replica's exports take in a second. With the default
// interval the run checks the bounds and the charges, and logs the share.
// The hybrid store's timeout is 10s, so that no decision is local: one
// that is fails the test, whose bounds are the server's.
//
//	SPIGOT_REQUIRE_SERVERS=1 go test -race -run TestPolicyLeasesTheBucket -v ./internal/tests/lease
func TestPolicyLeasesTheBucket(t *testing.T) {
	t.Run("interval=1s", func(t *testing.T) { testPolicyFleet(t, time.Second, 0.9) })
	// With the default interval the share of decisions from leases is
	// logged, not asserted: it measures the machine's request rate.
	t.Run("interval=default", func(t *testing.T) { testPolicyFleet(t, 0, 0) })
}

// testPolicyFleet runs TestPolicyLeasesTheBucket with the leases'
// WithInterval (the default when 0), and wants at least minShare of the
// hot key's decisions from leases.
func testPolicyFleet(t *testing.T, interval time.Duration, minShare float64) {
	const (
		replicas      = 3
		addressCap    = 100    // per address, in any aligned second
		rowsCap       = 40_000 // per API key
		exportRows    = 10
		hotKey        = "hot-api-key"
		hotExports    = 3000
		hotGoroutines = 6
		pool          = 80  // addresses of the hot and other traffic
		other         = 600 // other requests: a third exports on cold keys, the rest /items
		coldKeys      = 4
		burst         = 4 * 60 // /items from the address kept full
		blocked       = 30     // exports of the hot key from the address kept full
		denied        = 30     // exports of the whole capacity from the address used only for them
	)
	// Each address of the pool sends at most ⌈3000/80⌉ + ⌈600/80⌉ = 46
	// requests in the whole run, below addressCap: the per-address rule
	// never denies them, whatever the timing.
	var (
		perAddress = spigot.Must(spigot.NewSlidingWindow("per-address", spigot.PerSecond(addressCap)))
		rowsRate   = spigot.PerHour(rowsCap)
		rows       = spigot.MustBucket("rows", rowsCap, rowsRate)
		loopback   = netip.MustParsePrefix("127.0.0.0/8")
		full       = "203.0.113.1" // the address kept full at the server
		onlyDenied = "203.0.113.2" // the address of requests only the bucket denies
	)
	poolAddr := func(n int) string { return fmt.Sprintf("192.0.2.%d", 1+n%pool) }
	drainAddr := func(n int) string { return fmt.Sprintf("198.51.100.%d", 1+n%200) }
	apiKeys := []string{hotKey}
	for k := range coldKeys {
		apiKeys = append(apiKeys, "cold-"+strconv.Itoa(k))
	}

	srv := testserver.Start(t, testserver.Redis)
	p := prefix(t)
	plain := redis.New(testclient.GoRedis(t, srv.Addr), store.WithPrefix(p)) // the server, as it is

	type replica struct {
		url       string
		ledger    *ledger // what the server took for and gave back to this replica, by key
		calls     *countstore.Store
		lease     *lease.Store
		closed    bool
		hits      atomic.Int64 // bucket ops decided from a lease
		hotHits   atomic.Int64 // and of those, on the hot key
		takes     atomic.Int64 // remote calls that asked for a bucket lease
		returned  atomic.Int64 // bucket tokens given back or dropped
		offRemote atomic.Int64 // hybrid decisions not made by the server
	}
	var fleet [replicas]*replica
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }
	mux.HandleFunc("GET /export", ok)
	mux.HandleFunc("GET /items", ok)
	for i := range fleet {
		r := &replica{}
		fleet[i] = r
		r.ledger = newLedger(newRemote(t, "go-redis", srv.Addr, p))
		r.calls = countstore.New(r.ledger)
		h := hybrid.New(r.calls, memory.New(), hybrid.WithTimeout(10*time.Second), hybrid.WithObserver(hybrid.Observer{
			Decision: func(_ context.Context, _ spigot.Op, path hybrid.Path, _ spigot.Decision) {
				if path != hybrid.PathRemote {
					r.offRemote.Add(1)
				}
			},
		}))
		opts := []lease.Option{lease.WithObserver(lease.Observer{
			Hit: func(_ context.Context, op spigot.Op) {
				if op.Limit == rows {
					r.hits.Add(1)
					if op.Key == hotKey {
						r.hotHits.Add(1)
					}
				}
			},
			Take: func(_ context.Context, op spigot.Op, _, _ int64, _ error) {
				if op.Limit == rows {
					r.takes.Add(1)
				}
			},
			Return: func(_ context.Context, l spigot.Limit, tokens int64, _ error) {
				if l == rows {
					r.returned.Add(tokens)
				}
			},
		})}
		if interval > 0 {
			opts = append(opts, lease.WithInterval(interval))
		}
		r.lease = lease.New(h, opts...)
		t.Cleanup(func() {
			if !r.closed {
				r.lease.Close(context.Background())
			}
		})
		policy := httplimit.New(r.lease,
			httplimit.By(perAddress, httplimit.ClientIP(httplimit.TrustXForwardedFor(loopback))),
			httplimit.By(rows, httplimit.Header("X-Api-Key"), httplimit.On("GET /export"), httplimit.Cost(func(req *http.Request) (int64, error) {
				return strconv.ParseInt(req.URL.Query().Get("rows"), 10, 64)
			})),
		)
		hs := httptest.NewServer(policy.Wrap(mux))
		t.Cleanup(hs.Close)
		r.url = hs.URL
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	t.Cleanup(client.CloseIdleConnections)

	// A call is one request as its client saw it.
	type call struct {
		replica       int
		addr, apiKey  string
		rows          int64 // 0 for /items
		status        int
		violated      []string // the limits that denied it
		before, after int64    // µs since the epoch, on the machine's clock
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	send := func(i int, addr, apiKey string, n int64) call {
		url := fleet[i].url + "/items"
		if apiKey != "" {
			url = fleet[i].url + "/export?rows=" + strconv.FormatInt(n, 10)
		}
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			panic(err)
		}
		req.Header.Set("X-Forwarded-For", addr)
		req.Header.Set("Accept", "application/json")
		if apiKey != "" {
			req.Header.Set("X-Api-Key", apiKey)
		}
		c := call{replica: i, addr: addr, apiKey: apiKey, rows: n, before: time.Now().UnixMicro()}
		resp, err := client.Do(req)
		c.after = time.Now().UnixMicro()
		if err != nil {
			t.Errorf("replica %d, %s: %v", i, url, err)
			return c
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.status = resp.StatusCode
		switch {
		case err != nil:
			t.Errorf("replica %d, %s: reading the body: %v", i, url, err)
		case c.status == http.StatusTooManyRequests:
			var problem struct {
				Violated []string `json:"violated-policies"`
			}
			if err := json.Unmarshal(body, &problem); err != nil {
				t.Errorf("replica %d, %s: 429 with %q: %v", i, url, body, err)
			}
			c.violated = problem.Violated
		case c.status != http.StatusOK:
			t.Errorf("replica %d, %s from %s: %d %q; want 200 or 429", i, url, addr, c.status, body)
		}
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
		return c
	}
	deniedBy := func(c call, name string) bool { return slices.Contains(c.violated, name) }

	start := srv.Micros(t)

	// The hot key, the other traffic, and a burst from the address kept
	// full, at once.
	var (
		wg         sync.WaitGroup
		hotNext    atomic.Int64
		hotDecided atomic.Int64
		hotDone    atomic.Int64
	)
	for range hotGoroutines {
		wg.Go(func() {
			defer hotDone.Add(1)
			for {
				n := int(hotNext.Add(1) - 1)
				if n >= hotExports {
					return
				}
				if c := send(n%replicas, poolAddr(n), hotKey, exportRows); c.status != 0 {
					hotDecided.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		for m := range other {
			if m%3 == 0 {
				send(m%replicas, poolAddr(m), apiKeys[1+m%coldKeys], exportRows)
			} else {
				send(m%replicas, poolAddr(m), "", 0)
			}
		}
	})
	for g := range 4 {
		wg.Go(func() {
			for j := range burst / 4 {
				send((g+j)%replicas, full, "", 0)
			}
		})
	}
	t.Cleanup(wg.Wait) // when the test ends early

	// Once the replicas hold leases of the hot key: exports of it from the
	// address kept full, which the per-address rule denies (but when its
	// window turns between the top-up and the request's decision). The
	// top-up takes what the address's window has room for at the server,
	// as another service on the same limit would.
	waitFor(t, "a third of the hot exports decided", func() bool {
		return hotDecided.Load() >= hotExports/3 || hotDone.Load() == hotGoroutines
	})
	for j := range blocked {
		if _, err := plain.Do(context.Background(), spigot.Op{Limit: perAddress, Key: full, Action: spigot.TakeUpTo, N: addressCap}); err != nil {
			t.Fatalf("filling %s's window at the server: %v", full, err)
		}
		send(j%replicas, full, hotKey, exportRows)
	}
	wg.Wait()

	// Drain the hot key through replica 0, in smaller and smaller exports,
	// each size until the bucket denies it.
	drains := 0
	for _, n := range []int64{1000, 100, 10, 1} {
		for j := int64(0); ; j++ {
			c := send(0, drainAddr(drains), hotKey, n)
			drains++
			if c.status == http.StatusTooManyRequests {
				if !deniedBy(c, rows.Name()) {
					t.Fatalf("draining with exports of %d rows: denied by %v; want %s", n, c.violated, rows.Name())
				}
				break
			}
			if c.status != http.StatusOK || j > rowsCap/n+1 {
				t.Fatalf("draining with exports of %d rows: %d admitted, then status %d", n, j, c.status)
			}
		}
	}

	// Exports of the bucket's whole capacity from an address used for
	// nothing else: the bucket, drained (it has admitted far more than its
	// rate refills in the run), denies every one, and the address must be
	// charged nothing.
	for j := range denied {
		c := send(j%replicas, onlyDenied, hotKey, rowsCap)
		if c.status != http.StatusTooManyRequests || !slices.Equal(c.violated, []string{rows.Name()}) {
			t.Errorf("export %d of %d rows from %s, replica %d: status %d, denied by %v; want 429 denied by [%s]", j, rowsCap, onlyDenied, j%replicas, c.status, c.violated, rows.Name())
		}
	}
	d, err := plain.Do(context.Background(), spigot.Op{Limit: perAddress, Key: onlyDenied, Action: spigot.Peek, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d.Remaining != addressCap {
		t.Errorf("after %d denied exports from %s, the server's Peek of its window: Remaining %d; want %d, nothing taken", denied, onlyDenied, d.Remaining, addressCap)
	}
	end := srv.Micros(t)
	for i, r := range fleet {
		r.closed = true
		if err := r.lease.Close(context.Background()); err != nil {
			t.Errorf("replica %d: Close: %v", i, err)
		}
	}

	// What the clients saw.
	var (
		admittedRows    = make(map[string]int64) // by API key
		replicaRows     [replicas]int64          // admitted rows, every API key
		admittedByAddr  = make(map[string]int64)
		spansByAddr     = make(map[string][]span)
		hotDecisions    int64
		hotDenied       int64
		fullExports     [3]int64 // of the address kept full: admitted, denied by the per-address rule, by the bucket only
		burstDenied     int64
		poolDenied      int64
		admittedByRoute [2]int64 // /items, /export
	)
	for _, c := range calls {
		if c.status == 0 {
			continue
		}
		allowed := c.status == http.StatusOK
		if c.apiKey == hotKey {
			hotDecisions++
			if !allowed {
				hotDenied++
			}
		}
		switch {
		case c.addr == full && c.apiKey != "":
			switch {
			case allowed:
				fullExports[0]++
			case deniedBy(c, perAddress.Name()):
				fullExports[1]++
			default:
				fullExports[2]++
			}
		case c.addr == full:
			if !allowed {
				burstDenied++
			}
		case c.addr != onlyDenied && !allowed && deniedBy(c, perAddress.Name()):
			poolDenied++ // a drain address too: each sends a request or two
		}
		if !allowed {
			continue
		}
		admittedByAddr[c.addr]++
		spansByAddr[c.addr] = append(spansByAddr[c.addr], spanOf(perAddress, c.before, c.after))
		if c.apiKey != "" {
			admittedRows[c.apiKey] += c.rows
			replicaRows[c.replica] += c.rows
			admittedByRoute[1]++
		} else {
			admittedByRoute[0]++
		}
	}

	// (a) The hot key's bucket decided from leases.
	var hits, hotHits, takes, remoteCalls int64
	for _, r := range fleet {
		hits += r.hits.Load()
		hotHits += r.hotHits.Load()
		takes += r.takes.Load()
		remoteCalls += r.calls.Calls()
	}
	share := float64(hotHits) / float64(max(hotDecisions, 1))
	t.Logf("hot key: %d decisions (%d denied), %d from leases (%.1f %%); every API key: %d bucket ops from leases, %d lease takes; %d remote calls in all for %d admitted requests (%d /items, %d exports)",
		hotDecisions, hotDenied, hotHits, 100*share, hits, takes, remoteCalls, admittedByRoute[0]+admittedByRoute[1], admittedByRoute[0], admittedByRoute[1])
	for i, r := range fleet {
		t.Logf("replica %d: %d bucket ops from leases (%d on the hot key), %d lease takes, %d tokens returned or dropped, %d remote calls, %d rows admitted",
			i, r.hits.Load(), r.hotHits.Load(), r.takes.Load(), r.returned.Load(), r.calls.Calls(), replicaRows[i])
	}
	if share < minShare {
		t.Errorf("the hot key's bucket decided %d of its %d decisions from leases (%.1f %%); want at least %.0f %%", hotHits, hotDecisions, 100*share, 100*minShare)
	}

	// (b) The global bounds.
	elapsed := end - start
	limit := bound(rowsCap, rowsRate, elapsed)
	for _, k := range apiKeys {
		if admittedRows[k] > limit {
			t.Errorf("API key %s: %d rows admitted in %v of the server's clock; want at most capacity + rate × t = %d", k, admittedRows[k], time.Duration(elapsed)*time.Microsecond, limit)
		}
	}
	t.Logf("%v on the server's clock: the hot key admitted %d rows, at most %d (capacity + rate × t); drained in %d requests", time.Duration(elapsed)*time.Microsecond, admittedRows[hotKey], limit, drains)
	for addr, spans := range spansByAddr {
		if ok, w := fit(spans, addressCap); !ok {
			inside, _, _ := windowCounts(spans)
			t.Errorf("address %s: more than %d admitted in the window starting %v (%d inside it, the rest straddling its boundaries), however the straddlers are counted", addr, addressCap, windowStart(perAddress, w), inside[w])
		}
	}
	_, most, straddlers := windowCounts(spansByAddr[full])
	t.Logf("%s (kept full): %d of %d /items denied; at most %d admitted inside one aligned window, %d admissions straddling two; its exports of the hot key: %d admitted, %d denied by %s, %d by %s alone",
		full, burstDenied, burst, most, straddlers, fullExports[0], fullExports[1], perAddress.Name(), fullExports[2], rows.Name())
	if poolDenied > 0 {
		t.Errorf("%d requests from addresses that each sent fewer than %d were denied by %s", poolDenied, addressCap, perAddress.Name())
	}

	// (c) No denied request charged anywhere.
	for i, r := range fleet {
		if n := r.ledger.took(onlyDenied); n != 0 {
			t.Errorf("replica %d: the server took %d of %s's %s for exports that were all denied; want none", i, n, onlyDenied, perAddress.Name())
		}
		var took int64
		for _, k := range apiKeys {
			took += r.ledger.took(k)
		}
		if back := r.returned.Load(); took != replicaRows[i]+back {
			t.Errorf("replica %d: the server gave it %d rows; it admitted %d and returned or dropped %d (%d unaccounted for: a denied request spent them, or more were admitted than taken)",
				i, took, replicaRows[i], back, took-replicaRows[i]-back)
		}
		if n := r.offRemote.Load(); n > 0 {
			t.Errorf("replica %d: %d decisions not made by the server (the hybrid store's policy decided them): the run proves nothing of the global bounds", i, n)
		}
	}
	addrs := make(map[string]bool)
	for _, c := range calls {
		addrs[c.addr] = true
	}
	for addr := range addrs {
		var charged int64
		for _, r := range fleet {
			charged += r.ledger.net(addr)
		}
		if charged != admittedByAddr[addr] {
			t.Errorf("address %s: the replicas took %d from its %s; it was admitted %d requests", addr, charged, perAddress.Name(), admittedByAddr[addr])
		}
	}
}

// took returns what the store took for key (Take and TakeUpTo), whatever
// it gave back.
func (l *ledger) took(key string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.taken[key]
}
