package valkey_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
	spigotvalkey "github.com/spigot-go/spigot/store/valkey"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// client returns a client of miniredis or of a fake server at addr,
// closed when t ends. Neither can track keys for client-side caching,
// which the store does not use: valkey-go needs DisableCache to connect.
func client(t testing.TB, addr string) valkey.Client {
	t.Helper()
	return newClient(t, valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
}

// newClient returns a client with options o, closed when t ends.
func newClient(t testing.TB, o valkey.ClientOption) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(o)
	if err != nil {
		t.Fatalf("valkey.NewClient(%v): %v", o.InitAddress, err)
	}
	t.Cleanup(c.Close)
	return c
}

// serverClient returns a client of a real server with valkey-go's default
// options, as an application would have.
func serverClient(t testing.TB, srv *testserver.Server) valkey.Client {
	t.Helper()
	return newClient(t, valkey.ClientOption{InitAddress: []string{srv.Addr}})
}

func TestConformanceMiniredis(t *testing.T) {
	conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
		return spigotvalkey.New(client(t, miniredis.RunT(t).Addr()), spigotvalkey.WithClock(clk))
	})
}

func TestConformanceServers(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			c := serverClient(t, srv)
			t.Run("fake-clock", func(t *testing.T) {
				conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
					return spigotvalkey.New(c, spigotvalkey.WithClock(clk), spigotvalkey.WithPrefix(t.Name()+":"))
				})
			})
			t.Run("server-time", func(t *testing.T) {
				conformance.RunRealTime(t, func(t *testing.T) spigot.Store { return spigotvalkey.New(c) })
			})
		})
	}
}

// step is one operation on key "k" at t0+at (a Take of n unless action
// says otherwise) and its decision.
type step struct {
	at     time.Duration
	action spigot.Action
	n      int64
	flush  bool // SCRIPT FLUSH before the operation
	want   spigot.Decision
}

// run plays steps on s, moving clk, and fails on any error.
func run(t *testing.T, s spigot.Store, clk *clocktest.Clock, b spigot.Limit, steps []step, flush func()) {
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

// A denial is a result, not an error, in either protocol.
func TestDenialIsNotAnError(t *testing.T) {
	for _, resp2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("resp2=%v", resp2), func(t *testing.T) {
			clk := clocktest.New(t0)
			c := newClient(t, valkey.ClientOption{InitAddress: []string{miniredis.RunT(t).Addr()}, DisableCache: true, AlwaysRESP2: resp2})
			s := spigotvalkey.New(c, spigotvalkey.WithClock(clk))
			b := spigot.MustBucket("deny", 2, spigot.Per(1, 10*time.Second))
			run(t, s, clk, b, []step{
				{at: 0, n: 2, want: spigot.Decision{N: 2, Remaining: 0, ResetAfter: 20 * time.Second}},
				{at: 0, n: 1, want: spigot.Decision{Remaining: 0, RetryAfter: 10 * time.Second, ResetAfter: 20 * time.Second}},
				{at: 4 * time.Second, n: 1, want: spigot.Decision{Remaining: 0, RetryAfter: 6 * time.Second, ResetAfter: 16 * time.Second}},
				{at: 4 * time.Second, action: spigot.Peek, n: 1, want: spigot.Decision{Remaining: 0, RetryAfter: 6 * time.Second, ResetAfter: 16 * time.Second}},
				{at: 4 * time.Second, action: spigot.TakeUpTo, n: 2, want: spigot.Decision{Remaining: 0, RetryAfter: 6 * time.Second, ResetAfter: 16 * time.Second}},
				{at: 4 * time.Second, n: 3, want: spigot.Decision{Remaining: 0, RetryAfter: spigot.Never, ResetAfter: 16 * time.Second}},
				{at: 10 * time.Second, n: 1, want: spigot.Decision{N: 1, Remaining: 0, ResetAfter: 20 * time.Second}},
				{at: 10 * time.Second, action: spigot.Reset, want: spigot.Decision{N: 2, Remaining: 2}},
				{at: 10 * time.Second, action: spigot.Reset, want: spigot.Decision{N: 0, Remaining: 2}},
			}, nil)
		})
	}
}

// A SCRIPT FLUSH between requests costs no request an error, and the
// request that meets NOSCRIPT is charged once.
func TestScriptFlush(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			c := serverClient(t, srv)
			clk := clocktest.New(t0)
			s := spigotvalkey.New(c, spigotvalkey.WithClock(clk))
			flush := func() {
				t.Helper()
				if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
					t.Fatalf("SCRIPT FLUSH: %v", err)
				}
				if loaded(t, c) {
					t.Fatal("the script is still loaded after SCRIPT FLUSH")
				}
			}
			const h = time.Hour
			b := spigot.MustBucket("flush", 5, spigot.PerHour(1))
			run(t, s, clk, b, []step{
				{n: 1, want: spigot.Decision{N: 1, Remaining: 4, ResetAfter: 1 * h}},
				{n: 1, flush: true, want: spigot.Decision{N: 1, Remaining: 3, ResetAfter: 2 * h}},
				{n: 1, want: spigot.Decision{N: 1, Remaining: 2, ResetAfter: 3 * h}},
				{n: 3, flush: true, want: spigot.Decision{Remaining: 2, RetryAfter: 1 * h, ResetAfter: 3 * h}},
				{action: spigot.Refund, n: 1, flush: true, want: spigot.Decision{N: 1, Remaining: 3, ResetAfter: 2 * h}},
				{action: spigot.Reset, flush: true, want: spigot.Decision{N: 2, Remaining: 5}},
				{n: 0, flush: true, want: spigot.Decision{Remaining: 5}},
			}, flush)
			if !loaded(t, c) {
				t.Error("the script is not loaded again after the NOSCRIPT reply")
			}
		})
	}
}

// loaded reports whether the server has the script.
func loaded(t *testing.T, c valkey.Client) bool {
	t.Helper()
	got, err := c.Do(t.Context(), c.B().ScriptExists().Sha1(wire.SHA1()).Build()).AsIntSlice()
	if err != nil || len(got) != 1 {
		t.Fatalf("SCRIPT EXISTS = %v, %v", got, err)
	}
	return got[0] == 1
}

// The store neither closes the client nor offers to.
func TestDoesNotCloseClient(t *testing.T) {
	c := client(t, miniredis.RunT(t).Addr())
	b := spigot.MustBucket("owner", 1, spigot.PerHour(1))
	func() {
		s := spigotvalkey.New(c)
		if _, ok := any(s).(io.Closer); ok {
			t.Error("Store has a Close method: it must not own the client")
		}
		if d, err := s.Do(t.Context(), spigot.Op{Limit: b, Key: "k", N: 1}); err != nil || !d.Allowed() || d.N != 1 {
			t.Fatalf("Take of 1 = %+v, %v; want allowed, N 1", d, err)
		}
	}()
	runtime.GC() // a finalizer that closed the client would run now
	runtime.GC()
	if err := c.Do(t.Context(), c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("PING after the store is dropped: %v", err)
	}
	s := spigotvalkey.New(c)
	if a, err := s.Do(t.Context(), spigot.Op{Limit: b, Key: "k", N: 1}); err != nil || a.Allowed() || a.N != 0 {
		t.Fatalf("Take of 1 on the same client after the first store = %+v, %v; want a denial", a, err)
	}
}

// A server that goes away gives errors that say where they come from and
// wrap the client's; a restarted server is served again, with the script
// loaded anew and its state lost.
func TestServerDown(t *testing.T) {
	testserver.SkipShort(t, "kills and restarts a server")
	srv := testserver.Start(t, testserver.Valkey)
	s := spigotvalkey.New(serverClient(t, srv))
	b := spigot.MustBucket("down", 3, spigot.PerHour(1))
	take := spigot.Op{Limit: b, Key: "k", N: 1}
	if a, err := s.Do(t.Context(), take); err != nil || !a.Allowed() || a.N != 1 || a.Remaining != 2 {
		t.Fatalf("Take of 1 before the kill = %+v, %v; want allowed, N 1, Remaining 2", a, err)
	}
	srv.Kill()
	for i, op := range []spigot.Op{
		take,
		{Limit: b, Key: "k", Action: spigot.Reset},
		{Limit: b, Key: "k", Action: spigot.Refund, N: 1},
		{Limit: b, Key: "k", Action: spigot.Peek, N: 1},
		take,
	} {
		d, err := s.Do(t.Context(), op)
		if err == nil || d != (spigot.Decision{}) {
			t.Fatalf("call %d (%v) on a killed server = %+v, %v; want the zero Decision and an error", i, op, d, err)
		}
		inner := errors.Unwrap(err)
		if !strings.HasPrefix(err.Error(), "spigot: valkey: ") || inner == nil || err.Error() != "spigot: valkey: "+inner.Error() {
			t.Errorf("call %d on a killed server: error %q (wrapping %v); want \"spigot: valkey: \" and the client's error", i, err, inner)
		}
		if errors.Is(err, spigot.ErrInvalidLimit) || errors.Is(err, spigot.ErrInvalidCost) {
			t.Errorf("call %d on a killed server: error %v matches an input error", i, err)
		}
	}
	srv.Restart()
	// The client may first use a connection from before the restart and
	// get an error (not retried: the store never replays); the next call
	// reconnects. The state is lost with the old server.
	for i := 0; ; i++ {
		a, err := s.Do(t.Context(), take)
		if err == nil {
			if want := int64(2 - i); !a.Allowed() || a.N != 1 || a.Remaining < want {
				t.Fatalf("Take %d after the restart = %+v; want allowed, N 1, Remaining at least %d (the state is lost)", i, a, want)
			}
			break
		}
		if !strings.HasPrefix(err.Error(), "spigot: valkey: ") || i == 2 {
			t.Fatalf("Take %d after the restart: %v", i, err)
		}
	}
}

// fake is a server that answers EVALSHA and EVAL as a test says and counts
// them.
type fake struct {
	evalsha, eval atomic.Int32
}

func startFake(t *testing.T, evalsha, eval func(*server.Peer)) (*fake, string) {
	t.Helper()
	srv, err := server.NewServer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	f := &fake{}
	if eval == nil {
		eval = func(p *server.Peer) { p.WriteError("ERR the test sends no EVAL") }
	}
	srv.Register("EVALSHA", func(p *server.Peer, _ string, _ []string) { f.evalsha.Add(1); evalsha(p) })
	srv.Register("EVAL", func(p *server.Peer, _ string, _ []string) { f.eval.Add(1); eval(p) })
	return f, srv.Addr().String()
}

func ints(ns ...int) func(*server.Peer) {
	return func(p *server.Peer) {
		p.WriteLen(len(ns))
		for _, n := range ns {
			p.WriteInt(n)
		}
	}
}

// The store sends EVAL only after NOSCRIPT, never resends a request whose
// fate is unknown, and names what is wrong with a reply it cannot decode.
func TestReplies(t *testing.T) {
	noscript := func(p *server.Peer) { p.WriteError("NOSCRIPT No matching script. Please use EVAL.") }
	hangUp := func(p *server.Peer) { p.Close() }
	for _, c := range []struct {
		name           string
		evalsha, eval  func(*server.Peer)
		want           spigot.Decision
		err            string // the error's start; "" for none
		sends, evals   int32
		wrapsServerErr bool
		requestFailed  bool // the error concerns this request, not the server
	}{
		{name: "ok", evalsha: ints(1, 4, 0, 3600000), want: spigot.Decision{N: 1, Remaining: 4, ResetAfter: time.Hour}, sends: 1},
		{name: "noscript", evalsha: noscript, eval: ints(0, 300, 1500, 3600000), want: spigot.Decision{Remaining: 300, RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Hour}, sends: 1, evals: 1},
		{name: "noscript-twice", evalsha: noscript, eval: noscript, err: "spigot: valkey: NOSCRIPT", sends: 1, evals: 1, wrapsServerErr: true, requestFailed: true},
		{name: "other-error", evalsha: func(p *server.Peer) { p.WriteError("BUSY Valkey is busy running a script") }, err: "spigot: valkey: BUSY", sends: 1, wrapsServerErr: true},
		{name: "hang-up", evalsha: hangUp, err: "spigot: valkey: ", sends: 1},
		{name: "hang-up-after-noscript", evalsha: noscript, eval: hangUp, err: "spigot: valkey: ", sends: 1, evals: 1},
		{name: "unreadable-state", evalsha: func(p *server.Peer) { p.WriteError("ERR spigot: unreadable state at spigot:fake:k") }, err: "spigot: valkey: ", sends: 1, wrapsServerErr: true, requestFailed: true},
		{name: "nil", evalsha: func(p *server.Peer) { p.WriteNull() }, err: "spigot: malformed reply from the script: want an array of 4 integers, got <nil>", sends: 1, requestFailed: true},
		{name: "short", evalsha: ints(1, 4, 0), err: "spigot: malformed reply from the script: want 4 integers, got 3 values", sends: 1, requestFailed: true},
		// The reply of the script before this one, {allowed, moved,
		// remaining, retry, reset}. (That of the script before operations,
		// {allowed, remaining, retry, reset}, has today's length and reads
		// as today's: {1, 4, 0, 3600000} is the "ok" case.)
		{name: "old-reply", evalsha: ints(1, 1, 4, 0, 3600000), err: "spigot: malformed reply from the script: want 4 integers, got 5 values", sends: 1, requestFailed: true},
		{name: "string", evalsha: func(p *server.Peer) { p.WriteBulk("1 4 0 0") }, err: "spigot: malformed reply from the script: want an array of 4 integers, got string", sends: 1, requestFailed: true},
		{name: "string-in-array", evalsha: func(p *server.Peer) { p.WriteStrings([]string{"1", "4", "0", "0"}) }, err: "spigot: malformed reply from the script: value 1 is string, want an integer", sends: 1, requestFailed: true},
		{name: "impossible", evalsha: ints(0, 4, -2, 0), err: "spigot: malformed reply from the script: retry-after is -2 ms", sends: 1, requestFailed: true},
		{name: "denied-yet-moved", evalsha: ints(1, 4, 7, 0), err: "spigot: malformed reply from the script: denied, yet moved 1 tokens", sends: 1, requestFailed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, addr := startFake(t, c.evalsha, c.eval)
			s := spigotvalkey.New(client(t, addr))
			b := spigot.MustBucket("fake", 5, spigot.PerHour(1))
			// A bound, so that a store that resends forever fails rather than hangs.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			got, err := s.Do(ctx, spigot.Op{Limit: b, Key: "k", N: 1})
			switch {
			case c.err == "" && (err != nil || got != c.want):
				t.Errorf("Do = %+v, %v; want %+v, nil", got, err, c.want)
			case c.err != "" && (err == nil || !strings.HasPrefix(err.Error(), c.err) || got != spigot.Decision{}):
				t.Errorf("Do = %+v, %v; want the zero Decision and an error starting %q", got, err, c.err)
			}
			if got := errors.Is(err, spigot.ErrRequestFailed); got != c.requestFailed {
				t.Errorf("error %v matches spigot.ErrRequestFailed: %v, want %v", err, got, c.requestFailed)
			}
			var serverErr *valkey.ValkeyError
			if ok := errors.As(err, &serverErr); ok != c.wrapsServerErr {
				t.Errorf("error %v wraps a *valkey.ValkeyError: %v, want %v", err, ok, c.wrapsServerErr)
			}
			if n, m := f.evalsha.Load(), f.eval.Load(); n != c.sends || m != c.evals {
				t.Errorf("the server got %d EVALSHA and %d EVAL, want %d and %d", n, m, c.sends, c.evals)
			}
		})
	}
}

// A key that holds what the script cannot read fails the request with an
// error that names the key and concerns that request alone, for every
// action, and the key keeps its value.
func TestUnreadableState(t *testing.T) {
	b := spigot.MustBucket("garbage", 5, spigot.PerSecond(1))
	key := store.Key(store.DefaultPrefix, b, "k")
	check := func(t *testing.T, c valkey.Client, get func() string) {
		t.Helper()
		s := spigotvalkey.New(c, spigotvalkey.WithClock(clocktest.New(t0)))
		for _, a := range []spigot.Action{spigot.Take, spigot.TakeUpTo, spigot.Refund, spigot.Reset, spigot.Peek} {
			op := spigot.Op{Limit: b, Key: "k", Action: a, N: 1}
			d, err := s.Do(t.Context(), op)
			if err == nil || !strings.Contains(err.Error(), "spigot: unreadable state at "+key) || d != (spigot.Decision{}) {
				t.Errorf("Do(%v) = %+v, %v; want the zero Decision and an error naming %q", op, d, err, key)
			}
			if !errors.Is(err, spigot.ErrRequestFailed) {
				t.Errorf("Do(%v): error %v does not match spigot.ErrRequestFailed", op, err)
			}
		}
		if got := get(); got != "garbage" {
			t.Errorf("the key holds %q after the requests, want %q", got, "garbage")
		}
	}
	t.Run("miniredis", func(t *testing.T) {
		srv := miniredis.RunT(t)
		if err := srv.Set(key, "garbage"); err != nil {
			t.Fatal(err)
		}
		check(t, client(t, srv.Addr()), func() string { v, _ := srv.Get(key); return v })
	})
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			if _, err := srv.Do("SET", key, "garbage"); err != nil {
				t.Fatal(err)
			}
			check(t, serverClient(t, srv), func() string { v, _ := srv.Do("GET", key); return v })
		})
	}
}

// BenchmarkDo compares the store with the same EVALSHA sent through
// the client directly (the same script, key and arguments, decoded with
// ToAny): the difference is what spigot's layer costs. Run it with
// SPIGOT_REQUIRE_SERVERS=1 go test -run - -bench . -benchmem.
func BenchmarkDo(b *testing.B) {
	srv := testserver.Start(b, testserver.Valkey)
	c := serverClient(b, srv)
	ctx := context.Background()
	bucket := spigot.MustBucket("bench", 1_000_000, spigot.PerSecond(100_000))
	s := spigotvalkey.New(c)
	op := spigot.Op{Limit: bucket, Key: "k", N: 1}
	key := store.Key(store.DefaultPrefix, bucket, "k")
	argv := wire.NewArgs(nil).Op(op)
	if _, err := s.Do(ctx, op); err != nil { // loads the script
		b.Fatal(err)
	}
	for _, impl := range []struct {
		name string
		call func() error
	}{
		{"raw-evalsha", func() error {
			_, err := c.Do(ctx, c.B().Evalsha().Sha1(wire.SHA1()).Numkeys(1).Key(key).Arg(argv[:]...).Build()).ToAny()
			return err
		}},
		{"store", func() error {
			_, err := s.Do(ctx, op)
			return err
		}},
	} {
		for _, per := range []int{0, max(1, 64/runtime.GOMAXPROCS(0))} { // goroutines per P; 0: the benchmark's own
			g := max(1, per*runtime.GOMAXPROCS(0))
			b.Run(fmt.Sprintf("impl=%s/goroutines=%d", impl.name, g), func(b *testing.B) {
				b.ReportAllocs()
				if per == 0 {
					for b.Loop() {
						if err := impl.call(); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism(per)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := impl.call(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
