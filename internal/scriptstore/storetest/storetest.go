// Package storetest holds the tests of the Redis-protocol stores
// (store/redis, store/valkey, store/rueidis), written once over a
// Harness: what the tests need of one client library. Each store's tests
// call Run with the Harness of its library; the tests start real servers
// (package testserver), or a fake one (resp.Fake) for replies a real
// server seldom sends.
package storetest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

// A Harness is what the tests need of one client library.
type Harness struct {
	// Name is the store's name in its errors ("spigot: valkey: …").
	Name string

	// Kind is the server the library's own tests run on where one kind
	// is enough.
	Kind testserver.Kind

	// Dial returns a client of the server at addr, set as o says, that is
	// closed when tb ends.
	Dial func(tb testing.TB, addr string, o Options) Client

	// ServerError reports whether err wraps the library's type of an
	// error reply of the server.
	ServerError func(err error) bool

	// Routes says that Dial honours Options.Replica.
	Routes bool

	// Detached says that the store's calls return as soon as their
	// context is done, whatever the client is doing then (valkey-go and
	// rueidis); go-redis waits for the context's deadline, which its
	// store's doc says.
	Detached bool
}

// Options say how Harness.Dial sets a client. The zero Options are the
// library's defaults, as an application would have them.
type Options struct {
	RESP2 bool // speak RESP2, never RESP3

	// Fake says that the server is a resp.Fake, which knows none of the
	// commands of client-side caching.
	Fake bool

	// Replica is the address of a replica of the server to which the
	// client sends read-only commands, and the others to the server
	// (only where Harness.Routes).
	Replica string

	// KeepAlive is how often the client pings an idle connection, and
	// WriteTimeout how long it waits for an answer before it drops it
	// (0: the library's defaults); Dialed, when not nil, is called on each
	// connection the client opens.
	KeepAlive, WriteTimeout time.Duration
	Dialed                  func()

	// Group turns group commit on in the client's stores
	// (store.WithGroupCommit), off otherwise.
	Group bool
}

// A Client is a client of Harness.Dial.
type Client struct {
	// New returns the library's store on the client, with opts.
	New func(opts ...store.Option) spigot.Store

	// Do sends a command through the client, reads its reply and returns
	// its error.
	Do func(ctx context.Context, args ...string) error

	group bool // Options.Group of the client's Dial
}

// Store returns a store on c that reads the time from clk (nil for the
// server's TIME), names its keys with prefix, and does group commit if
// the Options of c's Dial say so.
func (c Client) Store(clk clock.Clock, prefix string) spigot.Store {
	return c.New(store.WithClock(clk), store.WithPrefix(prefix), store.WithGroupCommit(c.group))
}

// dial is h.Dial, with the Options that Client.Store needs kept.
func (h Harness) dial(tb testing.TB, addr string, o Options) Client {
	c := h.Dial(tb, addr, o)
	c.group = o.Group
	return c
}

// SetOptions sets *opt, a ClientOption of valkey-go or rueidis (which
// name their fields alike), to reach addr as o says: InitAddress,
// AlwaysRESP2, DisableCache (on a fake server or in RESP2), Dialer.KeepAlive,
// ConnWriteTimeout, DialCtxFn (for o.Dialed), and for o.Replica
// Standalone.ReplicaAddress and SendToReplicas (the commands the library
// marks read-only).
func SetOptions(opt any, addr string, o Options) {
	v := reflect.ValueOf(opt).Elem()
	set := func(name string, x any) { v.FieldByName(name).Set(reflect.ValueOf(x)) }
	set("InitAddress", []string{addr})
	set("AlwaysRESP2", o.RESP2)
	set("DisableCache", o.Fake || o.RESP2) // client-side caching needs RESP3
	v.FieldByName("Dialer").FieldByName("KeepAlive").Set(reflect.ValueOf(o.KeepAlive))
	set("ConnWriteTimeout", o.WriteTimeout)
	if dialed := o.Dialed; dialed != nil {
		set("DialCtxFn", func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			dialed()
			return d.DialContext(ctx, "tcp", addr)
		})
	}
	if o.Replica != "" {
		v.FieldByName("Standalone").FieldByName("ReplicaAddress").Set(reflect.ValueOf([]string{o.Replica}))
		f := v.FieldByName("SendToReplicas")
		f.Set(reflect.MakeFunc(f.Type(), func(args []reflect.Value) []reflect.Value {
			cmd := reflect.New(args[0].Type()) // IsReadOnly has a pointer receiver
			cmd.Elem().Set(args[0])
			return cmd.MethodByName("IsReadOnly").Call(nil)
		}))
	}
}

// Run runs every test that applies to h's library, each as a subtest
// named after what it checks.
func Run(t *testing.T, h Harness) {
	t.Run("Conformance", func(t *testing.T) { conformanceOnServers(t, h) })
	t.Run("DenialIsNotAnError", func(t *testing.T) { denialIsNotAnError(t, h) })
	t.Run("ScriptFlush", func(t *testing.T) { scriptFlush(t, h) })
	t.Run("DoesNotCloseClient", func(t *testing.T) { doesNotCloseClient(t, h) })
	t.Run("ServerDown", func(t *testing.T) { serverDown(t, h) })
	if h.Detached {
		t.Run("PausedServer", func(t *testing.T) { pausedServer(t, h) })
	}
	t.Run("Replies", func(t *testing.T) { replies(t, h) })
	t.Run("ReadOnlyCommands", func(t *testing.T) { readOnlyCommands(t, h) })
	t.Run("PeekOnReplica", func(t *testing.T) { peekOnReplica(t, h) })
	t.Run("UnreadableState", func(t *testing.T) { unreadableState(t, h) })
	t.Run("GroupCommit", func(t *testing.T) { groupCommit(t, h) })
	t.Run("ConcurrentKeys", func(t *testing.T) { concurrentKeys(t, h) })
}

// concurrentKeys: many goroutines, each on keys of its own (short, long,
// with a '{'), some calls on a context that can end and some not, charge
// each key exactly its own requests, and the server holds exactly those
// keys: no call's key is sent in another's place.
func concurrentKeys(t *testing.T, h Harness) {
	srv := testserver.Start(t, h.Kind)
	const prefix = "names:"
	s := h.dial(t, srv.Addr, Options{}).Store(nil, prefix)
	const goroutines, perGoroutine, capacity = 32, 6, 100
	b := spigot.MustBucket("names", capacity, spigot.Per(1, 24*time.Hour))
	// key returns goroutine g's i-th key, which gets i+1 Takes.
	key := func(g, i int) string {
		switch i % 3 {
		case 0:
			return fmt.Sprintf("%s-%d-%d", strings.Repeat("long", 40), g, i)
		case 1:
			return fmt.Sprintf("{g%d}-%d", g, i)
		}
		return fmt.Sprintf("g%d-%d", g, i)
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for round := range perGoroutine {
				ctx := context.Background()
				if (g+round)%2 == 1 {
					ctx = t.Context() // one that can end
				}
				for i := round; i < perGoroutine; i++ { // key i, round 0 to i
					k := key(g, i)
					if _, err := s.Do(ctx, spigot.Op{Limit: b, Key: k, N: 1}); err != nil {
						t.Errorf("Take(%q): %v", k, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for g := range goroutines {
		for i := range perGoroutine {
			k := key(g, i)
			d, err := s.Do(t.Context(), spigot.Op{Limit: b, Key: k, Action: spigot.Peek})
			if want := int64(capacity - i - 1); err != nil || d.Remaining != want {
				t.Errorf("Peek(%q) = %+v, %v; want Remaining %d (%d Takes)", k, d, err, want, i+1)
			}
		}
	}
	n, err := srv.Do("EVAL", "return #redis.call('KEYS', ARGV[1])", "0", prefix+"*")
	if want := strconv.Itoa(goroutines * perGoroutine); err != nil || n != want {
		t.Errorf("the server holds %s keys named %s*, %v; want %s", n, prefix, err, want)
	}
}

// eachKind runs f on a server of each kind, in a subtest named after it.
func eachKind(t *testing.T, f func(t *testing.T, srv *testserver.Server)) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) { f(t, testserver.Start(t, kind)) })
	}
}

// conformanceOnServers runs the conformance suite on each kind of server:
// on the fake clock, and on the server's own.
func conformanceOnServers(t *testing.T, h Harness) {
	eachKind(t, func(t *testing.T, srv *testserver.Server) {
		c := h.dial(t, srv.Addr, Options{})
		t.Run("fake-clock", func(t *testing.T) {
			conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store { return c.Store(clk, t.Name()+":") })
		})
		t.Run("server-time", func(t *testing.T) {
			conformance.RunRealTime(t, func(t *testing.T) spigot.Store { return c.Store(nil, store.DefaultPrefix) })
		})
	})
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// step is one operation on key "k" at t0+at (a Take of n unless action
// says otherwise) and its decision.
type step struct {
	at     time.Duration
	action spigot.Action
	n      int64
	flush  bool // SCRIPT FLUSH before the operation
	want   spigot.Decision
}

// play plays steps on s, moving clk, and fails on any error.
func play(t *testing.T, s spigot.Store, clk *clocktest.Clock, b spigot.Limit, steps []step, flush func()) {
	t.Helper()
	for i, st := range steps {
		clk.Set(t0.Add(st.at))
		if st.flush {
			flush()
		}
		op := spigot.Op{Limit: b, Key: "k", Action: st.action, N: st.n}
		got, err := s.Do(t.Context(), op)
		if err != nil || got != st.want {
			t.Fatalf("step %d: Do(%v) = %+v, %v; want %+v, nil", i, op, got, err, st.want)
		}
	}
}

// denialIsNotAnError: a denial is a result, not an error, in either
// protocol.
func denialIsNotAnError(t *testing.T, h Harness) {
	eachKind(t, func(t *testing.T, srv *testserver.Server) {
		for _, resp2 := range []bool{false, true} {
			t.Run(fmt.Sprintf("resp2=%v", resp2), func(t *testing.T) {
				clk := clocktest.New(t0)
				s := h.dial(t, srv.Addr, Options{RESP2: resp2}).Store(clk, t.Name()+":")
				b := spigot.MustBucket("deny", 2, spigot.Per(1, 10*time.Second))
				play(t, s, clk, b, []step{
					{at: 0, n: 2, want: spigot.Decision{N: 2, Remaining: 0, ResetAfter: 20 * time.Second, RefillAfter: 10 * time.Second}},
					{at: 0, n: 1, want: spigot.Decision{Remaining: 0, RetryAfter: 10 * time.Second, ResetAfter: 20 * time.Second, RefillAfter: 10 * time.Second}},
					{at: 4 * time.Second, n: 1, want: spigot.Decision{Remaining: 0, RetryAfter: 6 * time.Second, ResetAfter: 16 * time.Second, RefillAfter: 6 * time.Second}},
					{at: 4 * time.Second, action: spigot.Peek, n: 1, want: spigot.Decision{Remaining: 0, RetryAfter: 6 * time.Second, ResetAfter: 16 * time.Second, RefillAfter: 6 * time.Second}},
					{at: 4 * time.Second, action: spigot.TakeUpTo, n: 2, want: spigot.Decision{Remaining: 0, RetryAfter: 6 * time.Second, ResetAfter: 16 * time.Second, RefillAfter: 6 * time.Second}},
					{at: 4 * time.Second, n: 3, want: spigot.Decision{Remaining: 0, RetryAfter: spigot.Never, ResetAfter: 16 * time.Second, RefillAfter: 6 * time.Second}},
					{at: 10 * time.Second, n: 1, want: spigot.Decision{N: 1, Remaining: 0, ResetAfter: 20 * time.Second, RefillAfter: 10 * time.Second}},
					{at: 10 * time.Second, action: spigot.Reset, want: spigot.Decision{N: 2, Remaining: 2, RefillAfter: 10 * time.Second}},
					{at: 10 * time.Second, action: spigot.Reset, want: spigot.Decision{N: 0, Remaining: 2, RefillAfter: 10 * time.Second}},
				}, nil)
			})
		}
	})
}

// scriptFlush: a SCRIPT FLUSH between requests costs no request an error,
// and the request that meets NOSCRIPT is charged once.
func scriptFlush(t *testing.T, h Harness) {
	eachKind(t, func(t *testing.T, srv *testserver.Server) {
		clk := clocktest.New(t0)
		s := h.dial(t, srv.Addr, Options{}).Store(clk, store.DefaultPrefix)
		flush := func() {
			t.Helper()
			if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
			if cached(t, srv) != 0 {
				t.Fatal("the script is still loaded after SCRIPT FLUSH")
			}
		}
		const hour = time.Hour
		b := spigot.MustBucket("flush", 5, spigot.PerHour(1))
		play(t, s, clk, b, []step{
			{n: 1, want: spigot.Decision{N: 1, Remaining: 4, ResetAfter: 1 * hour, RefillAfter: hour}},
			{n: 1, flush: true, want: spigot.Decision{N: 1, Remaining: 3, ResetAfter: 2 * hour, RefillAfter: hour}},
			{n: 1, want: spigot.Decision{N: 1, Remaining: 2, ResetAfter: 3 * hour, RefillAfter: hour}},
			{n: 3, flush: true, want: spigot.Decision{Remaining: 2, RetryAfter: 1 * hour, ResetAfter: 3 * hour, RefillAfter: hour}},
			{action: spigot.Refund, n: 1, flush: true, want: spigot.Decision{N: 1, Remaining: 3, ResetAfter: 2 * hour, RefillAfter: hour}},
			{action: spigot.Reset, flush: true, want: spigot.Decision{N: 2, Remaining: 5, RefillAfter: hour}},
			{n: 0, flush: true, want: spigot.Decision{Remaining: 5, RefillAfter: hour}},
		}, flush)
		if cached(t, srv) != 1 {
			t.Error("the script is not loaded again after the NOSCRIPT reply")
		}
	})
}

// cached returns how many scripts srv holds (INFO memory's
// number_of_cached_scripts): spigot's, on a server of these tests, or
// none.
func cached(t *testing.T, srv *testserver.Server) int {
	t.Helper()
	info, err := srv.Info("memory")
	if err != nil {
		t.Fatalf("INFO memory: %v", err)
	}
	n, err := strconv.Atoi(info["number_of_cached_scripts"])
	if err != nil {
		t.Fatalf("INFO memory: number_of_cached_scripts:%q", info["number_of_cached_scripts"])
	}
	return n
}

// ran returns how many times srv ran cmd, from INFO commandstats.
func ran(t testing.TB, srv *testserver.Server, cmd string) int {
	t.Helper()
	info, err := srv.Info("commandstats")
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	// calls=3,usec=…; a command never run has no line.
	n, _, _ := strings.Cut(strings.TrimPrefix(info["cmdstat_"+cmd], "calls="), ",")
	calls, _ := strconv.Atoi(n)
	return calls
}

// wantErr checks that err says it comes from h's store and wraps the
// client's error.
func wantErr(t *testing.T, h Harness, what string, err error) {
	t.Helper()
	prefix := "spigot: " + h.Name + ": "
	inner := errors.Unwrap(err)
	if err == nil || !strings.HasPrefix(err.Error(), prefix) || inner == nil || err.Error() != prefix+inner.Error() {
		t.Errorf("%s: error %v (wrapping %v); want %q and the client's error", what, err, inner, prefix)
	}
}

// BenchmarkDo compares h's store with the same EVALSHA sent through the
// client directly (the same script, key and arguments, the reply read
// whole): the difference is what spigot's layer costs. ctx is the calls'
// context: one that never ends (context.Background), one that a caller
// can cancel, as a request's is, or one with a deadline besides. Run it
// with SPIGOT_REQUIRE_SERVERS=1 go test -run - -bench . -benchmem.
func BenchmarkDo(b *testing.B, h Harness) {
	srv := testserver.Start(b, h.Kind)
	c := h.dial(b, srv.Addr, Options{})
	cancelable, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	bucket := spigot.MustBucket("bench", 1_000_000, spigot.PerSecond(100_000))
	s := c.Store(nil, store.DefaultPrefix)
	op := spigot.Op{Limit: bucket, Key: "k", N: 1}
	argv := wire.NewArgs(nil).Op(op)
	raw := append([]string{"EVALSHA", wire.SHA1(), "1", store.Key(store.DefaultPrefix, bucket, "k")}, argv[:]...)
	if _, err := s.Do(cancelable, op); err != nil { // loads the script
		b.Fatal(err)
	}
	for _, impl := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"raw-evalsha", func(ctx context.Context) error { return c.Do(ctx, raw...) }},
		{"store", func(ctx context.Context) error {
			_, err := s.Do(ctx, op)
			return err
		}},
	} {
		for _, ctx := range []struct {
			name string
			ctx  context.Context
		}{{"background", context.Background()}, {"cancelable", cancelable}, {"deadline", deadline}} {
			for _, per := range []int{0, max(1, 64/runtime.GOMAXPROCS(0))} { // goroutines per P; 0: the benchmark's own
				g := max(1, per*runtime.GOMAXPROCS(0))
				b.Run(fmt.Sprintf("impl=%s/ctx=%s/goroutines=%d", impl.name, ctx.name, g), func(b *testing.B) {
					b.ReportAllocs()
					if per == 0 {
						for b.Loop() {
							if err := impl.call(ctx.ctx); err != nil {
								b.Fatal(err)
							}
						}
						return
					}
					b.SetParallelism(per)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := impl.call(ctx.ctx); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		}
	}
}
