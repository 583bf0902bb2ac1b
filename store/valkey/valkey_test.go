package valkey_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
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
	"github.com/spigot-go/spigot/internal/bench"
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

// A call on a server that answers nothing returns when its caller cancels
// it, or when its deadline passes, whatever the client is doing then:
// waiting for a reply, or connecting again after a connection that timed
// out, which it does many times here. Nothing is sent twice, nothing is
// written into a caller's decisions after its call returned, and the store
// serves again once the server answers.
func TestPausedServer(t *testing.T) {
	testserver.SkipShort(t, "pauses a server for seconds")
	srv := testserver.Start(t, testserver.Valkey)
	var dials atomic.Int32
	c := newClient(t, valkey.ClientOption{
		InitAddress: []string{srv.Addr},
		// The client pings every KeepAlive and drops a connection that
		// answers nothing for ConnWriteTimeout; then the next call
		// connects again, and the new connection's handshake meets the
		// same silence, for as long as ConnWriteTimeout or the call's
		// deadline allows. Short, so that the calls below meet many.
		Dialer:           net.Dialer{KeepAlive: 100 * time.Millisecond},
		ConnWriteTimeout: time.Second,
		DialCtxFn: func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, "tcp", addr)
		},
	})
	s := spigotvalkey.New(c)
	b := spigot.MustBucket("paused", 1_000_000, spigot.PerSecond(1))
	take := spigot.Op{Limit: b, Key: "k", N: 1}
	pair := []spigot.Op{take, {Limit: b, Key: "k2", N: 1}}
	if _, err := s.Do(t.Context(), take); err != nil { // loads the script
		t.Fatal(err)
	}
	evalsha, eval := ran(t, srv, "evalsha"), ran(t, srv, "eval")
	sent := 0 // the most EVALSHA the calls below may send: one each

	// Seven calls in eight are cancelled at 20 ms, long before their
	// deadline; the eighth runs until its deadline. Each must return
	// within bound of the first of the two (of when the cancellation
	// came, however late its timer fired), not counting the time the
	// test process stalled meanwhile on a loaded machine: well before
	// the client's ConnWriteTimeout or the second its handshake can take
	// to give up.
	const (
		cancelAt = 20 * time.Millisecond
		long     = 2 * time.Second        // the deadline of a cancelled call
		deadline = 300 * time.Millisecond // that of a call not cancelled
		bound    = 250 * time.Millisecond
		calls    = 150 // at least,
		redials  = 10  // and until the client connected again this often
	)
	type multi struct {
		out, got []spigot.Decision // what out held when DoMulti returned
	}
	var multis []multi
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	// When a cancellation came, and how long the test had stalled then.
	type mark struct {
		at      time.Time
		stalled time.Duration
	}
	stalls := testserver.MeasureStalls(t)
	before, failed := dials.Load(), 0
	for i := 0; i < calls || dials.Load()-before < redials; i++ {
		if i == 20*calls {
			t.Fatalf("%d calls and the client connected again %d times; want %d", i, dials.Load()-before, redials)
		}
		if failed == 10 {
			t.Fatalf("stopped at call %d after %d failures", i, failed)
		}
		cancels := i%8 != 7
		d, want := deadline, context.DeadlineExceeded
		if cancels {
			d, want = long, context.Canceled
		}
		ctx, cancel := context.WithTimeout(t.Context(), d)
		end, stalled := time.Now().Add(d), stalls.Stalled()
		cancelled := make(chan mark, 1)
		if cancels {
			time.AfterFunc(cancelAt, func() { cancelled <- mark{time.Now(), stalls.Stalled()}; cancel() })
		}
		var err error
		switch i % 3 {
		case 0:
			var got spigot.Decision
			got, err = s.Do(ctx, take)
			if got != (spigot.Decision{}) {
				failed++
				t.Errorf("call %d: Do = %+v, %v; want the zero Decision", i, got, err)
			}
		case 1, 2:
			mode := spigot.Mode(i%3 - 1)
			out := make([]spigot.Decision, len(pair))
			err = s.DoMulti(ctx, mode, pair, out)
			multis = append(multis, multi{out, slices.Clone(out)})
		}
		sent++
		returned := time.Now()
		if cancels {
			m := <-cancelled
			end, stalled = m.at, m.stalled
		}
		late := returned.Sub(end) - (stalls.Stalled() - stalled)
		cancel()
		switch {
		case err == nil:
			t.Fatalf("call %d on a paused server: no error", i)
		case late > bound:
			failed++
			t.Errorf("call %d returned %v after its %s, the test's stalls aside; want at most %v: %v", i, late.Round(time.Millisecond), want, bound, err)
		case !returned.Before(end) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded):
			// The client may fail a call at once with the timeout of a
			// connection that another call was opening: an error that
			// races with the context's.
			failed++
			t.Errorf("call %d: error %v; want one matching %v, or a timeout", i, err, want)
		case !strings.HasPrefix(err.Error(), "spigot: "):
			failed++
			t.Errorf("call %d: error %q; want one starting \"spigot: \"", i, err)
		}
	}

	srv.Resume()
	resumed = true
	// The client may first meet a connection from before the pause, or
	// the end of one that timed out, and fail a call or a few; then each
	// kind of call succeeds.
	for _, call := range []struct {
		name string
		do   func(ctx context.Context) error
	}{
		{"Do", func(ctx context.Context) error {
			d, err := s.Do(ctx, take)
			if err == nil && (!d.Allowed() || d.N != 1) {
				t.Fatalf("Take after the pause = %+v; want allowed, N 1", d)
			}
			return err
		}},
		{"DoMulti(Independent)", func(ctx context.Context) error {
			return s.DoMulti(ctx, spigot.Independent, pair, make([]spigot.Decision, len(pair)))
		}},
		{"DoMulti(AllOrNothing)", func(ctx context.Context) error {
			return s.DoMulti(ctx, spigot.AllOrNothing, pair, make([]spigot.Decision, len(pair)))
		}},
	} {
		for i := 0; ; i++ {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			err := call.do(ctx)
			cancel()
			sent++
			if err == nil {
				break
			}
			if i == 100 {
				t.Fatalf("%s %d after the pause: %v", call.name, i, err)
			}
		}
	}
	for i, m := range multis {
		if !slices.Equal(m.out, m.got) {
			t.Errorf("DoMulti %d: out became %+v after the call returned %+v", i, m.out, m.got)
		}
	}
	if n := ran(t, srv, "evalsha") - evalsha; n > sent {
		t.Errorf("the server ran EVALSHA %d times for %d calls: a request was sent again", n, sent)
	}
	if n := ran(t, srv, "eval") - eval; n != 0 {
		t.Errorf("the server ran EVAL %d times; want none (the script stayed loaded)", n)
	}
}

// ran returns how many times the server ran cmd, from INFO commandstats.
func ran(t *testing.T, srv *testserver.Server, cmd string) int {
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
// ToAny): the difference is what spigot's layer costs. ctx is the calls'
// context: one that never ends (context.Background), one that a caller
// can cancel, as a request's is, or one with a deadline besides. Besides
// ns/op it reports cpu-ns/op, the CPU time of the whole test process per
// call, which the load of other processes changes less. Run it with
// SPIGOT_REQUIRE_SERVERS=1 go test -run - -bench . -benchmem.
func BenchmarkDo(b *testing.B) {
	srv := testserver.Start(b, testserver.Valkey)
	c := serverClient(b, srv)
	cancelable, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	bucket := spigot.MustBucket("bench", 1_000_000, spigot.PerSecond(100_000))
	s := spigotvalkey.New(c)
	op := spigot.Op{Limit: bucket, Key: "k", N: 1}
	key := store.Key(store.DefaultPrefix, bucket, "k")
	argv := wire.NewArgs(nil).Op(op)
	if _, err := s.Do(cancelable, op); err != nil { // loads the script
		b.Fatal(err)
	}
	for _, impl := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"raw-evalsha", func(ctx context.Context) error {
			_, err := c.Do(ctx, c.B().Evalsha().Sha1(wire.SHA1()).Numkeys(1).Key(key).Arg(argv[:]...).Build()).ToAny()
			return err
		}},
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
					start := bench.CPUTime()
					defer func() {
						b.ReportMetric(float64(bench.CPUTime()-start)/float64(b.N), "cpu-ns/op")
					}()
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
