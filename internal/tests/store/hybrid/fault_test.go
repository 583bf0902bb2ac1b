package hybrid_test

// Real faults against a real redis-server: killed (SIGKILL) under load and
// restarted on the same port, paused (SIGSTOP: it accepts and never
// answers) and resumed, and behind a TCP proxy that adds latency or drops
// connections. Time is real here: the deadlines and the cooldown are what
// is tested: every call returns within the timeout and a margin, but for
// a share of calls small enough that a loaded machine stalling the test
// for a moment never fails it. What each phase waits for is a state (the
// breaker opened, the remote decides again), with a wall-clock limit
// only to fail a hang; workers pace the calls an open breaker decides at
// once, so that a phase's calls outlast the cooldown however fast the
// machine is. Each phase logs the worst latency it saw, and each test the
// share of calls over the bound; run
//
//	SPIGOT_REQUIRE_SERVERS=1 go test -race -run 'Fault' -v ./store/hybrid/ | grep -E 'worst|longest'
//
// to read them. They are skipped under go test -short.

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/hybridtest"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	"github.com/spigot-go/spigot/store/redis"
	spigotrueidis "github.com/spigot-go/spigot/store/rueidis"
)

const (
	faultTimeout  = 50 * ms  // WithTimeout
	faultCooldown = 100 * ms // WithBreaker's cooldown
	faultFailures = 3        // WithBreaker's failures

	// faultMargin is what a call may take beyond faultTimeout: scheduling
	// on a loaded 2-core machine under -race, not network waits.
	faultMargin = 450 * ms
	faultBound  = faultTimeout + faultMargin
	// slowShare is the share of a test's calls, in percent, that may take
	// longer than faultBound: a moment the machine stalls the test delays
	// every call in flight, up to one per worker, and a test makes a few
	// thousand calls at least.
	slowShare = 2

	workers     = 16   // concurrent callers
	maxRequests = 2000 // per worker and phase
	// pace is what a worker waits after a call decided without the
	// remote (the breaker open): maxRequests such calls take at least
	// 2 s, twenty cooldowns, so that a probe always comes.
	pace = ms
	// phaseLimit bounds a phase's wait for its condition, which holds in
	// well under a second: it only fails a hang.
	phaseLimit = time.Minute

	remoteCap = 1_000_000_000 // every worker's bucket: never runs dry
	localCap  = 100_000       // WithLocalLimit's: tells a local decision from a remote one
)

// A faultClient makes the remote store on a server's address with one
// client library, closed when t ends.
type faultClient struct {
	name  string
	store func(t *testing.T, addr string) spigot.Store
}

var faultClients = []faultClient{
	{"go-redis", func(t *testing.T, addr string) spigot.Store {
		return redis.New(serverClient(t, addr))
	}},
	// go-redis retries a failed dial 5 times, 100 ms apart, by default: a
	// refused connection then waits for the whole deadline. One attempt
	// fails at once.
	{"go-redis,DialerRetries=1", func(t *testing.T, addr string) spigot.Store {
		return redis.New(serverClient(t, addr, func(o *goredis.Options) { o.DialerRetries = 1 }))
	}},
	{"rueidis", func(t *testing.T, addr string) spigot.Store {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			t.Fatalf("rueidis.NewClient: %v", err)
		}
		t.Cleanup(c.Close)
		return spigotrueidis.New(c)
	}},
}

// rig is a hybrid store on a real remote, with workers that each use a
// bucket of their own, so that the observer tells whose decision it saw.
type rig struct {
	t      *testing.T
	s      *hybrid.Store
	policy hybrid.Policy

	buckets [workers]spigot.Limit
	index   map[string]int        // bucket name → worker
	last    [workers]atomic.Int32 // the path of each worker's last decision, -1 before

	tried [workers]atomic.Bool // whether each worker's call met a remote error

	opens       atomic.Int64 // transitions to open
	mu          sync.Mutex
	transitions []string
	all         stats // every call so far
}

func newRig(t *testing.T, remote spigot.Store, policy hybrid.Policy) *rig {
	r := &rig{t: t, policy: policy, index: map[string]int{}}
	suffix := fmt.Sprintf("-%d", time.Now().UnixNano())
	for i := range r.buckets {
		r.buckets[i] = spigot.MustBucket(fmt.Sprint("fault-", i, suffix), remoteCap, spigot.PerSecond(remoteCap))
		r.index[r.buckets[i].Name()] = i
	}
	r.s = hybrid.New(remote, memory.New(),
		hybrid.WithPolicy(policy),
		hybrid.WithTimeout(faultTimeout),
		hybrid.WithBreaker(faultFailures, faultCooldown),
		hybrid.WithLocalLimit(func(b spigot.Limit) spigot.Limit {
			return spigot.MustBucket(b.Name(), localCap, spigot.PerSecond(localCap))
		}),
		hybrid.WithObserver(hybrid.Observer{
			Decision: func(_ context.Context, op spigot.Op, p hybrid.Path, _ spigot.Decision) {
				r.last[r.index[op.Limit.Name()]].Store(int32(p))
			},
			RemoteError: func(_ context.Context, op spigot.Op, _ error, _ time.Duration) {
				r.tried[r.index[op.Limit.Name()]].Store(true)
			},
			Transition: func(_ context.Context, from, to hybrid.Circuit) {
				if to == hybrid.CircuitOpen {
					r.opens.Add(1)
				}
				r.mu.Lock()
				r.transitions = append(r.transitions, from.String()+">"+to.String())
				r.mu.Unlock()
			},
		}))
	return r
}

// takeTransitions returns the transitions since the last call.
func (r *rig) takeTransitions() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := strings.Join(r.transitions, " ")
	r.transitions = nil
	return s
}

// stats sums up calls.
type stats struct {
	n     int
	worst time.Duration
	paths map[hybrid.Path]int
	bad   int    // calls that broke a rule
	first string // the first of them

	// The latency of the calls that waited on the remote (it decided, or
	// it failed), and of the others (decided at once, the breaker open).
	remote, local []time.Duration
}

func (s *stats) add(o stats) {
	s.n += o.n
	s.worst = max(s.worst, o.worst)
	s.remote = append(s.remote, o.remote...)
	s.local = append(s.local, o.local...)
	if s.paths == nil {
		s.paths = map[hybrid.Path]int{}
	}
	for p, n := range o.paths {
		s.paths[p] += n
	}
	if s.bad == 0 {
		s.first = o.first
	}
	s.bad += o.bad
}

// policyPath is the path of the policy's decisions.
func (r *rig) policyPath() hybrid.Path {
	return [...]hybrid.Path{hybrid.Local: hybrid.PathLocal, hybrid.FailOpen: hybrid.PathFailOpen, hybrid.FailClosed: hybrid.PathFailClosed}[r.policy]
}

// call makes one request of worker i, adds it to st, and returns its path
// and whether it waited on the remote (the remote decided, or failed). A
// call breaks a rule when it fails, is decided by neither the remote nor
// the policy, or its decision does not fit its path. How long it took is
// checked over many calls, by checkLatency.
func (r *rig) call(i int, st *stats) (p hybrid.Path, waited bool) {
	if st.paths == nil {
		st.paths = map[hybrid.Path]int{}
	}
	r.last[i].Store(-1)
	r.tried[i].Store(false)
	start := time.Now()
	a, err := r.s.Do(r.t.Context(), spigot.Op{Limit: r.buckets[i], Key: "k", N: 1})
	d := time.Since(start)
	p = hybrid.Path(r.last[i].Load())
	waited = p == hybrid.PathRemote || r.tried[i].Load()
	st.n++
	st.worst = max(st.worst, d)
	st.paths[p]++
	if waited {
		st.remote = append(st.remote, d)
	} else {
		st.local = append(st.local, d)
	}
	var bad string
	switch {
	case err != nil:
		bad = fmt.Sprintf("error %v", err)
	case p == hybrid.PathRemote:
		if !a.Allowed() || a.N != 1 || a.Remaining < localCap || a.Degraded() {
			bad = fmt.Sprintf("remote decision %+v; want allowed, N 1, Remaining ≥ %d, not degraded", a, localCap)
		}
	case p != r.policyPath():
		bad = fmt.Sprintf("decided by %v; want %v or %v", p, hybrid.PathRemote, r.policyPath())
	case p == hybrid.PathLocal:
		if !a.Allowed() || a.N != 1 || a.Remaining >= localCap || a.Degraded() {
			bad = fmt.Sprintf("local decision %+v; want allowed, N 1, Remaining < %d, not degraded", a, localCap)
		}
	case p == hybrid.PathFailOpen:
		if want := (spigot.Decision{N: 1, Remaining: -1}); a != want {
			bad = fmt.Sprintf("fail-open decision %+v; want %+v", a, want)
		}
	case p == hybrid.PathFailClosed:
		if a != (spigot.Decision{RetryAfter: a.RetryAfter, Remaining: -1}) || a.RetryAfter < ms || a.RetryAfter > faultCooldown {
			bad = fmt.Sprintf("fail-closed decision %+v; want %+v with RetryAfter in [1ms, %v]", a, spigot.Decision{RetryAfter: faultCooldown, Remaining: -1}, faultCooldown)
		}
	}
	if bad != "" {
		if st.bad == 0 {
			st.first = fmt.Sprintf("worker %d: %s", i, bad)
		}
		st.bad++
	}
	return p, waited
}

// phase runs the workers, each making up to maxRequests requests (paced
// while the breaker is open); once every worker has made one, it injects
// the fault (if any), then stops the workers when until reports true
// (given the number of requests so far), when they have all made their
// requests, or after phaseLimit. It fails the test if a call broke a rule
// or until never held, and logs the worst latency.
func (r *rig) phase(name string, fault func(), until func(requests int64) bool) stats {
	r.t.Helper()
	var stop atomic.Bool
	var done atomic.Int64
	results := make([]stats, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for range maxRequests {
				if stop.Load() {
					return
				}
				_, waited := r.call(i, &results[i])
				done.Add(1)
				if !waited {
					time.Sleep(pace)
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	// wait polls cond until it holds, every worker has finished, or the
	// phase's limit; it reports whether cond held.
	deadline := time.Now().Add(phaseLimit)
	wait := func(cond func() bool) bool {
		for !cond() && time.Now().Before(deadline) {
			select {
			case <-finished:
				return cond()
			case <-time.After(ms):
			}
		}
		return cond()
	}
	wait(func() bool { return done.Load() >= workers })
	start := time.Now()
	if fault != nil {
		fault()
	}
	met := wait(func() bool { return until(done.Load()) })
	stop.Store(true)
	wg.Wait()
	var total stats
	for _, s := range results {
		total.add(s)
	}
	r.all.add(total)
	r.t.Logf("%s: %d requests in %v, worst latency %v (timeout %v), paths %v, breaker %v",
		name, total.n, time.Since(start).Round(ms), total.worst, faultTimeout, total.paths, r.s.Circuit())
	if total.bad > 0 {
		r.t.Errorf("%s: %d of %d calls broke a rule; the first: %s", name, total.bad, total.n, total.first)
	}
	if !met {
		r.t.Errorf("%s: its condition did not hold (%d requests in %v, breaker %v)", name, total.n, time.Since(start).Round(ms), r.s.Circuit())
	}
	return total
}

// checkLatency fails the test if more than slowShare percent of its calls
// took longer than faultBound, and logs, for the calls that waited on the
// remote and for the others, how many did, the 99th percentile and the
// longest.
func (r *rig) checkLatency() {
	r.t.Helper()
	over := func(ds []time.Duration) int {
		return len(ds) - sort.Search(len(ds), func(i int) bool { return ds[i] > faultBound })
	}
	var n, slow int
	for _, c := range []struct {
		which string
		ds    []time.Duration
	}{
		{"calls that waited on the remote", r.all.remote},
		{"calls decided without waiting", r.all.local},
	} {
		ds := slices.Clone(c.ds)
		slices.Sort(ds)
		n, slow = n+len(ds), slow+over(ds)
		if len(ds) > 0 {
			r.t.Logf("%s: %d of %d took longer than %v; 99th percentile %v, longest %v",
				c.which, over(ds), len(ds), faultBound, ds[len(ds)*99/100], ds[len(ds)-1])
		}
	}
	if slow*100 > n*slowShare {
		r.t.Errorf("%d of %d calls took longer than %v (the timeout %v and a margin); want at most %d%%", slow, n, faultBound, faultTimeout, slowShare)
	}
}

// count is a phase's condition: n requests were made.
func count(n int64) func(int64) bool { return func(done int64) bool { return done >= n } }

// recover makes requests, one at a time, until the remote decides one with
// the breaker closed, and logs how long that took.
func (r *rig) recover(name string) {
	r.t.Helper()
	var st stats
	start := time.Now()
	wasClosed := r.s.Circuit() == hybrid.CircuitClosed
	defer func() { r.all.add(st) }()
	for time.Since(start) < phaseLimit {
		if p, _ := r.call(0, &st); p == hybrid.PathRemote && r.s.Circuit() == hybrid.CircuitClosed {
			r.t.Logf("%s: the remote decides again after %v (%d requests, worst latency %v)", name, time.Since(start).Round(ms), st.n, st.worst)
			if st.bad > 0 {
				r.t.Errorf("%s: %d of %d calls broke a rule; the first: %s", name, st.bad, st.n, st.first)
			}
			if tr := r.takeTransitions(); !wasClosed && !strings.HasSuffix(tr, "half-open>closed") {
				r.t.Errorf("%s: got transitions %q, want them to end in half-open>closed", name, tr)
			}
			return
		}
		time.Sleep(5 * ms) // the cooldown runs in real time
	}
	r.t.Fatalf("%s: the remote did not decide again within %v (breaker %v)", name, phaseLimit, r.s.Circuit())
}

// warm runs a phase to fill the client's connection pool, then waits for
// the breaker to close: under -race, dialling 16 connections at once can
// take longer than the timeout.
func (r *rig) warm() {
	r.t.Helper()
	r.phase("warm-up", nil, count(workers*20))
	r.recover("warm-up")
}

// healthy runs a phase without a fault, which checks the rules of every
// call. It does not require the remote to decide: on a starved CPU (under
// -race, next to other tests) go-redis may not get there. Each call that
// misses the 50 ms deadline costs it a connection, whose replacement must
// then dial and handshake within the next call's deadline, so its pool
// may never warm up under 16 concurrent callers; rueidis keeps its one
// pipelined connection across timeouts. recover, one call at a time, is
// what checks that the remote decides again.
func (r *rig) healthy(name string) {
	r.t.Helper()
	st := r.phase(name, nil, count(workers*20))
	if remote := st.paths[hybrid.PathRemote]; remote < st.n*9/10 {
		r.t.Logf("%s: NOTE: the remote decided only %d of %d requests", name, remote, st.n)
	}
	r.takeTransitions()
}

// fault runs a phase with a fault, until the fault opens the breaker (or
// reopens it, after a failed probe, if the load had opened it before).
func (r *rig) fault(name string, inject func()) {
	r.t.Helper()
	var before int64
	st := r.phase(name, func() { before = r.opens.Load(); inject() }, func(int64) bool { return r.opens.Load() > before })
	if st.paths[r.policyPath()] == 0 {
		r.t.Errorf("%s: the policy decided no request", name)
	}
	r.takeTransitions()
}

// TestFaultServer kills a loaded server, restarts it, pauses it and resumes
// it: every call returns with the policy's decision or the remote's, all
// but a small share within the timeout and a margin (checkLatency), the
// breaker opens, and after each recovery the breaker closes and the remote
// decides again.
func TestFaultServer(t *testing.T) {
	testserver.SkipShort(t, "kills, restarts and pauses a server")
	for _, c := range []struct {
		client faultClient
		policy hybrid.Policy
	}{
		{faultClients[0], hybrid.Local},
		{faultClients[0], hybrid.FailOpen},
		{faultClients[0], hybrid.FailClosed},
		{faultClients[1], hybrid.Local},
		{faultClients[2], hybrid.Local},
	} {
		t.Run(fmt.Sprintf("client=%s/policy=%v", c.client.name, c.policy), func(t *testing.T) {
			hybridtest.CheckGoroutines(t, patience)
			srv := testserver.Start(t, testserver.Redis)
			r := newRig(t, c.client.store(t, srv.Addr), c.policy)

			r.warm()
			r.healthy("healthy")
			r.fault("SIGKILL", srv.Kill)
			t.Logf("breaker %v; restarting", r.s.Circuit())
			srv.Restart()
			r.recover("restart")
			r.healthy("after restart")

			r.fault("SIGSTOP", srv.Pause)
			srv.Resume()
			r.recover("SIGCONT")
			r.healthy("after SIGCONT")
			r.checkLatency()
		})
	}
}

// TestFaultProxy puts a TCP proxy between the client and the server, which
// first delays every reply beyond the timeout, then drops every
// connection: the policy decides, within the timeout and a margin (but
// for a small share of calls, see checkLatency), until the proxy behaves
// again.
func TestFaultProxy(t *testing.T) {
	testserver.SkipShort(t, "delays and drops a server's connections")
	for _, client := range faultClients {
		t.Run("client="+client.name, func(t *testing.T) {
			hybridtest.CheckGoroutines(t, patience)
			srv := testserver.Start(t, testserver.Redis)
			p := startProxy(t, srv.Addr)
			r := newRig(t, client.store(t, p.addr()), hybrid.Local)

			r.warm()
			r.healthy("healthy")
			r.fault("latency 200ms", func() { p.setDelay(200 * ms) })
			p.setDelay(0)
			r.recover("latency 0")
			r.healthy("after latency")

			r.fault("dropped connections", func() { p.setDrop(true) })
			p.setDrop(false)
			r.recover("connections accepted")
			r.healthy("after dropped connections")
			r.checkLatency()
		})
	}
}

// proxy is a TCP proxy on 127.0.0.1 in front of a server. It can delay
// each reply of the server by a fixed latency, and drop every connection
// (closing those open and every new one at once).
type proxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // time.Duration
	drop   atomic.Bool

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// startProxy starts a proxy to target, closed when t ends.
func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) setDelay(d time.Duration) { p.delay.Store(int64(d)) }

// setDrop sets whether the proxy drops connections; turning it on closes
// every open one.
func (p *proxy) setDrop(on bool) {
	p.drop.Store(on)
	if on {
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	}
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if p.drop.Load() {
			client.Close()
			continue
		}
		server, err := net.DialTimeout("tcp", p.target, sec)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			client.Close()
			server.Close()
			return
		}
		p.wg.Add(3)
		go p.forward(server, client)
		delayed := make(chan chunk, 1024)
		go p.read(server, delayed, client)
		go p.write(client, delayed, server)
	}
}

func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

// forward copies what the client sends to the server, at once.
func (p *proxy) forward(dst, src net.Conn) {
	defer p.wg.Done()
	defer p.untrack(dst, src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A chunk is what the server sent, and when.
type chunk struct {
	data []byte
	at   time.Time
}

// read reads the server's replies as they come, stamped with their time;
// write sends each to the client once the delay has passed since then.
func (p *proxy) read(src net.Conn, out chan<- chunk, other net.Conn) {
	defer p.wg.Done()
	defer close(out)
	defer p.untrack(src, other)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			out <- chunk{buf[:n], time.Now()}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) write(dst net.Conn, in <-chan chunk, other net.Conn) {
	defer p.wg.Done()
	defer p.untrack(dst, other)
	for c := range in {
		if wait := time.Until(c.at.Add(time.Duration(p.delay.Load()))); wait > 0 {
			time.Sleep(wait) // the latency the proxy adds
		}
		if _, err := dst.Write(c.data); err != nil {
			for range in { // let read finish
			}
			return
		}
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.setDrop(true)
	p.wg.Wait()
}

// TestFaultBlink measures what a blink adds: steady traffic on one key of
// a bucket of 20 tokens at 20 a second, through a hybrid store on a real
// redis-server that is paused (SIGSTOP) long enough for the local store
// to admit a few requests, then resumed. Over the whole window, from the
// first request to the last, the key is admitted at most what its bucket
// admits, capacity + rate × window, and a token of rounding (the package
// doc's bound with one replica), however long each phase took. Without
// memory (WithMaxKeys(0), logged, not checked) the local store starts
// full, and the remote has refilled for the outage when it is back.
func TestFaultBlink(t *testing.T) {
	testserver.SkipShort(t, "pauses a server")
	for _, keys := range []int{hybrid.DefaultMaxKeys, 0} {
		t.Run(fmt.Sprintf("memory=%d", keys), func(t *testing.T) {
			hybridtest.CheckGoroutines(t, patience)
			srv := testserver.Start(t, testserver.Redis)
			const capacity, rate = 20, 20 // tokens, per second
			b := spigot.MustBucket(fmt.Sprint("blink-", time.Now().UnixNano()), capacity, spigot.PerSecond(rate))
			var paths [hybrid.PathGuard + 1]atomic.Int64
			s := hybrid.New(redis.New(serverClient(t, srv.Addr)), memory.New(),
				hybrid.WithTimeout(faultTimeout), hybrid.WithBreaker(faultFailures, faultCooldown), hybrid.WithMaxKeys(keys),
				hybrid.WithObserver(hybrid.Observer{Decision: func(_ context.Context, _ spigot.Op, p hybrid.Path, _ spigot.Decision) { paths[p].Add(1) }}))

			var admitted, remoteDenied, localAdmitted int64
			start := time.Now()
			// run makes requests, 2 ms apart (100 times the bucket's rate),
			// until done holds; it fails the test if that takes a minute.
			run := func(phase string, done func() bool) {
				t.Helper()
				for limit := time.Now().Add(time.Minute); !done(); time.Sleep(2 * ms) {
					if time.Now().After(limit) {
						t.Fatalf("%s: not done within a minute (paths %v, breaker %v)", phase, &paths, s.Circuit())
					}
					remote, local := paths[hybrid.PathRemote].Load(), paths[hybrid.PathLocal].Load()
					d, err := s.Do(t.Context(), spigot.Op{Limit: b, Key: "k", N: 1})
					if err != nil {
						t.Fatalf("%s: %v", phase, err)
					}
					admitted += d.N
					switch {
					case paths[hybrid.PathRemote].Load() > remote && !d.Allowed():
						remoteDenied++
					case paths[hybrid.PathLocal].Load() > local && d.Allowed():
						localAdmitted++
					}
				}
			}
			// The remote decides until the bucket is empty.
			run("healthy", func() bool { return remoteDenied > 0 })
			srv.Pause()
			run("paused", func() bool { return localAdmitted >= 5 })
			srv.Resume()
			after := paths[hybrid.PathRemote].Load()
			run("resumed", func() bool {
				return s.Circuit() == hybrid.CircuitClosed && paths[hybrid.PathRemote].Load() >= after+2*capacity
			})
			window := time.Since(start)
			bound := capacity + int64(window.Seconds()*rate) + 1
			t.Logf("%d admitted in %v (bound %d: capacity %d + rate %d/s × window + 1); by the remote %d, locally %d",
				admitted, window.Round(ms), bound, capacity, rate, paths[hybrid.PathRemote].Load(), paths[hybrid.PathLocal].Load())
			if keys > 0 && admitted > bound {
				t.Errorf("%d admitted in %v, want at most %d", admitted, window.Round(ms), bound)
			}
		})
	}
}
