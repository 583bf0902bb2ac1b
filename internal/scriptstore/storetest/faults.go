package storetest

import (
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
)

// doesNotCloseClient: the store neither closes the client nor offers to.
func doesNotCloseClient(t *testing.T, h Harness) {
	srv := testserver.Start(t, h.Kind)
	c := h.dial(t, srv.Addr, Options{})
	b := spigot.MustBucket("owner", 1, spigot.PerHour(1))
	func() {
		s := c.Store(nil, store.DefaultPrefix)
		if _, ok := any(s).(io.Closer); ok {
			t.Error("Store has a Close method: it must not own the client")
		}
		if d, err := s.Do(t.Context(), spigot.Op{Limit: b, Key: "k", N: 1}); err != nil || !d.Allowed() || d.N != 1 {
			t.Fatalf("Take of 1 = %+v, %v; want allowed, N 1", d, err)
		}
	}()
	runtime.GC() // a finalizer that closed the client would run now
	runtime.GC()
	if err := c.Do(t.Context(), "PING"); err != nil {
		t.Fatalf("PING after the store is dropped: %v", err)
	}
	s := c.Store(nil, store.DefaultPrefix)
	if a, err := s.Do(t.Context(), spigot.Op{Limit: b, Key: "k", N: 1}); err != nil || a.Allowed() || a.N != 0 {
		t.Fatalf("Take of 1 on the same client after the first store = %+v, %v; want a denial", a, err)
	}
}

// serverDown: a server that goes away gives errors that say where they
// come from and wrap the client's; a restarted server is served again,
// with the script loaded anew and its state lost.
func serverDown(t *testing.T, h Harness) {
	testserver.SkipShort(t, "kills and restarts a server")
	srv := testserver.Start(t, h.Kind)
	s := h.dial(t, srv.Addr, Options{}).Store(nil, store.DefaultPrefix)
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
		// A read-only command (a Peek's EVALSHA_RO) valkey-go and
		// rueidis send again after a network error, until the call's
		// deadline: harmless, since it changes nothing, but a Peek
		// without a deadline waits for the server to come back.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		d, err := s.Do(ctx, op)
		cancel()
		if err == nil || d != (spigot.Decision{}) {
			t.Fatalf("call %d (%v) on a killed server = %+v, %v; want the zero Decision and an error", i, op, d, err)
		}
		if op.Action != spigot.Peek && errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("call %d (%v) on a killed server: %v; want it to fail at once", i, op, err)
		}
		wantErr(t, h, "a call on a killed server", err)
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
		if !strings.HasPrefix(err.Error(), "spigot: "+h.Name+": ") || i == 2 {
			t.Fatalf("Take %d after the restart: %v", i, err)
		}
	}
}

// pausedServer: a call on a server that answers nothing returns when its
// caller cancels it, or when its deadline passes, whatever the client is
// doing then: waiting for a reply, or connecting again after a
// connection that timed out, which it does many times here. Nothing is
// sent twice, nothing is written into a caller's decisions after its call
// returned, and the store serves again once the server answers.
func pausedServer(t *testing.T, h Harness) {
	testserver.SkipShort(t, "pauses a server for seconds")
	srv := testserver.Start(t, h.Kind)
	var dials atomic.Int32
	s := h.dial(t, srv.Addr, Options{
		// The client pings every KeepAlive and drops a connection that
		// answers nothing for WriteTimeout; then the next call connects
		// again, and the new connection's handshake meets the same
		// silence, for as long as WriteTimeout or the call's deadline
		// allows. Short, so that the calls below meet many.
		KeepAlive:    100 * time.Millisecond,
		WriteTimeout: time.Second,
		Dialed:       func() { dials.Add(1) },
	}).Store(nil, store.DefaultPrefix)
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
	// the client's WriteTimeout or the second its handshake can take to
	// give up.
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
