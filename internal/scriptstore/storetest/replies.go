package storetest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/resp"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
)

// fake starts a resp.Fake that answers EVALSHA with evalsha and EVAL with
// eval (nil: an error, since the test expects none), stopped when t ends.
func fake(t *testing.T, evalsha, eval resp.Handler) *resp.Fake {
	t.Helper()
	f, err := resp.NewFake()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	if eval == nil {
		eval = func(w *resp.Writer, _ []string) { w.Error("ERR the test sends no EVAL") }
	}
	f.Handle("EVALSHA", evalsha)
	f.Handle("EVAL", eval)
	return f
}

// ints answers with the integers ns.
func ints(ns ...int64) resp.Handler { return func(w *resp.Writer, _ []string) { w.Ints(ns...) } }

// replies: the store sends EVAL only after NOSCRIPT, never resends a
// request whose fate is unknown, and names what is wrong with a reply it
// cannot decode.
func replies(t *testing.T, h Harness) {
	noscript := func(w *resp.Writer, _ []string) { w.Error("NOSCRIPT No matching script. Please use EVAL.") }
	hangUp := func(w *resp.Writer, _ []string) { w.HangUp() }
	for _, c := range []struct {
		name           string
		evalsha, eval  resp.Handler
		want           spigot.Decision
		err            string // the error's start, NAME for the store's name; "" for none
		sends, evals   int
		wrapsServerErr bool
		requestFailed  bool // the error concerns this request, not the server
	}{
		{name: "ok", evalsha: ints(1, 4, 0, 3600000, 3600000), want: spigot.Decision{N: 1, Remaining: 4, ResetAfter: time.Hour, RefillAfter: time.Hour}, sends: 1},
		{name: "noscript", evalsha: noscript, eval: ints(0, 300, 1500, 3600000, 1500), want: spigot.Decision{Remaining: 300, RetryAfter: 1500 * time.Millisecond, ResetAfter: time.Hour, RefillAfter: 1500 * time.Millisecond}, sends: 1, evals: 1},
		{name: "noscript-twice", evalsha: noscript, eval: noscript, err: "spigot: NAME: NOSCRIPT", sends: 1, evals: 1, wrapsServerErr: true, requestFailed: true},
		{name: "other-error", evalsha: func(w *resp.Writer, _ []string) { w.Error("BUSY Redis is busy running a script") }, err: "spigot: NAME: BUSY", sends: 1, wrapsServerErr: true},
		{name: "hang-up", evalsha: hangUp, err: "spigot: NAME: ", sends: 1},
		{name: "hang-up-after-noscript", evalsha: noscript, eval: hangUp, err: "spigot: NAME: ", sends: 1, evals: 1},
		{name: "unreadable-state", evalsha: func(w *resp.Writer, _ []string) { w.Error("ERR spigot: unreadable state at spigot:fake:k") }, err: "spigot: NAME: ", sends: 1, wrapsServerErr: true, requestFailed: true},
		{name: "nil", evalsha: func(w *resp.Writer, _ []string) { w.Nil() }, err: "spigot: malformed reply from the script: want an array of 5 integers, got <nil>", sends: 1, requestFailed: true},
		{name: "short", evalsha: ints(1, 4, 0), err: "spigot: malformed reply from the script: want 5 integers, got 3 values", sends: 1, requestFailed: true},
		// The reply of the scripts before this one, {moved, remaining,
		// retry, reset} and, before operations, {allowed, remaining, retry,
		// reset}. (That of the script between them, {allowed, moved,
		// remaining, retry, reset}, has today's length and reads as
		// today's, or as a malformed one.)
		{name: "old-reply", evalsha: ints(1, 4, 0, 3600000), err: "spigot: malformed reply from the script: want 5 integers, got 4 values", sends: 1, requestFailed: true},
		{name: "string", evalsha: func(w *resp.Writer, _ []string) { w.Bulk("1 4 0 0 0") }, err: "spigot: malformed reply from the script: want an array of 5 integers, got string", sends: 1, requestFailed: true},
		{name: "string-in-array", evalsha: func(w *resp.Writer, _ []string) { w.Strings("1", "4", "0", "0", "0") }, err: "spigot: malformed reply from the script: value 1 is string, want an integer", sends: 1, requestFailed: true},
		{name: "impossible", evalsha: ints(0, 4, -2, 0, 1), err: "spigot: malformed reply from the script: retry-after is -2 ms", sends: 1, requestFailed: true},
		{name: "impossible-refill", evalsha: ints(0, 4, 0, 0, -2), err: "spigot: malformed reply from the script: refill-after is -2 ms", sends: 1, requestFailed: true},
		{name: "denied-yet-moved", evalsha: ints(1, 4, 7, 0, 7), err: "spigot: malformed reply from the script: denied, yet moved 1 tokens", sends: 1, requestFailed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := fake(t, c.evalsha, c.eval)
			s := h.dial(t, f.Addr, Options{Fake: true}).Store(nil, store.DefaultPrefix)
			b := spigot.MustBucket("fake", 5, spigot.PerHour(1))
			// A bound, so that a store that resends forever fails rather than hangs.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			got, err := s.Do(ctx, spigot.Op{Limit: b, Key: "k", N: 1})
			wantErr := strings.ReplaceAll(c.err, "NAME", h.Name)
			switch {
			case c.err == "" && (err != nil || got != c.want):
				t.Errorf("Do = %+v, %v; want %+v, nil", got, err, c.want)
			case c.err != "" && (err == nil || !strings.HasPrefix(err.Error(), wantErr) || got != spigot.Decision{}):
				t.Errorf("Do = %+v, %v; want the zero Decision and an error starting %q", got, err, wantErr)
			}
			if got := errors.Is(err, spigot.ErrRequestFailed); got != c.requestFailed {
				t.Errorf("error %v matches spigot.ErrRequestFailed: %v, want %v", err, got, c.requestFailed)
			}
			if ok := h.ServerError(err); ok != c.wrapsServerErr {
				t.Errorf("error %v wraps the client's error reply: %v, want %v", err, ok, c.wrapsServerErr)
			}
			if n, m := f.Count("EVALSHA"), f.Count("EVAL"); n != c.sends || m != c.evals {
				t.Errorf("the server got %d EVALSHA and %d EVAL, want %d and %d", n, m, c.sends, c.evals)
			}
		})
	}
}

// multi returns a call of DoMulti on ops.
func multi(mode spigot.Mode, ops ...spigot.Op) func(s spigot.Store, ctx context.Context) error {
	return func(s spigot.Store, ctx context.Context) error {
		return s.DoMulti(ctx, mode, ops, make([]spigot.Decision, len(ops)))
	}
}

// readOnlyCommands: a call of Peeks only is sent as EVALSHA_RO (EVAL_RO
// after NOSCRIPT), any other call as EVALSHA; a server that does not know
// EVALSHA_RO gets the call again as EVALSHA, and every later Peek as
// EVALSHA at once.
func readOnlyCommands(t *testing.T, h Harness) {
	b := spigot.MustBucket("ro", 5, spigot.PerHour(1))
	peek := spigot.Op{Limit: b, Key: "p", Action: spigot.Peek, N: 1}
	peek2 := spigot.Op{Limit: b, Key: "q", Action: spigot.Peek, N: 1}
	take := spigot.Op{Limit: b, Key: "t", N: 1}
	// full answers each of a call's keys with an allowed decision.
	full := func(w *resp.Writer, args []string) {
		n, _ := strconv.Atoi(args[2])
		var reply []int64
		for range n {
			reply = append(reply, 1, 4, 0, 3600000, 3600000)
		}
		w.Ints(reply...)
	}
	calls := []struct {
		name string
		do   func(s spigot.Store, ctx context.Context) error
		ro   bool // a call of Peeks only
	}{
		{"Do(Peek)", func(s spigot.Store, ctx context.Context) error { _, err := s.Do(ctx, peek); return err }, true},
		{"Do(Take)", func(s spigot.Store, ctx context.Context) error { _, err := s.Do(ctx, take); return err }, false},
		{"DoMulti(AllOrNothing, Peeks)", multi(spigot.AllOrNothing, peek, peek2), true},
		{"DoMulti(AllOrNothing, Peek and Take)", multi(spigot.AllOrNothing, peek, take), false},
		{"DoMulti(Independent, Peeks)", multi(spigot.Independent, peek, peek2), true},
		{"DoMulti(Independent, Peek and Take)", multi(spigot.Independent, peek, take), false},
	}
	scripts := func(f *resp.Fake) []string {
		return slices.DeleteFunc(f.Received(), func(name string) bool { return !strings.HasPrefix(name, "EVAL") })
	}
	t.Run("loaded", func(t *testing.T) {
		for _, c := range calls {
			t.Run(c.name, func(t *testing.T) {
				f := fake(t, full, nil)
				f.Handle("EVALSHA_RO", full)
				s := h.dial(t, f.Addr, Options{Fake: true}).Store(nil, store.DefaultPrefix)
				if err := c.do(s, t.Context()); err != nil {
					t.Fatal(err)
				}
				want := []string{"EVALSHA"}
				if c.ro {
					want = []string{"EVALSHA_RO"}
				}
				if got := scripts(f); !slices.Equal(got, want) {
					t.Errorf("the server got %q, want %q", got, want)
				}
			})
		}
	})
	t.Run("noscript", func(t *testing.T) {
		f := fake(t, full, full)
		f.Handle("EVALSHA_RO", func(w *resp.Writer, _ []string) { w.Error("NOSCRIPT No matching script. Please use EVAL.") })
		f.Handle("EVAL_RO", full)
		s := h.dial(t, f.Addr, Options{Fake: true}).Store(nil, store.DefaultPrefix)
		if err := calls[0].do(s, t.Context()); err != nil {
			t.Fatal(err)
		}
		if got, want := scripts(f), []string{"EVALSHA_RO", "EVAL_RO"}; !slices.Equal(got, want) {
			t.Errorf("the server got %q, want %q", got, want)
		}
	})
	t.Run("unknown-command", func(t *testing.T) {
		f := fake(t, full, nil) // EVALSHA_RO: unknown command
		s := h.dial(t, f.Addr, Options{Fake: true}).Store(nil, store.DefaultPrefix)
		for range 2 {
			if err := calls[0].do(s, t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := scripts(f), []string{"EVALSHA_RO", "EVALSHA", "EVALSHA"}; !slices.Equal(got, want) {
			t.Errorf("two Peeks: the server got %q, want %q (EVALSHA_RO once)", got, want)
		}
	})
}

// peekOnReplica: a Peek is an EVALSHA_RO, which a replica serves with the
// state written on its primary; a Take through a client of the replica
// alone fails (READONLY) rather than being served there, and one through
// a client that sends read-only commands to the replica goes to the
// primary.
func peekOnReplica(t *testing.T, h Harness) {
	eachKind(t, func(t *testing.T, primary *testserver.Server) {
		replica := testserver.StartReplica(t, primary)
		clk := clocktest.New(t0)
		b := spigot.MustBucket("replica", 5, spigot.PerHour(1))
		take := spigot.Op{Limit: b, Key: "k", N: 2}
		peek := spigot.Op{Limit: b, Key: "k", Action: spigot.Peek, N: 1}
		if d, err := h.dial(t, primary.Addr, Options{}).Store(clk, store.DefaultPrefix).Do(t.Context(), take); err != nil || d.N != 2 || d.Remaining != 3 {
			t.Fatalf("Take of 2 on the primary = %+v, %v; want N 2, Remaining 3", d, err)
		}
		primary.CaughtUp(t, replica)
		// peekThere peeks through s and checks that the replica ran it
		// read-only and nothing else.
		peekThere := func(s spigot.Store) {
			t.Helper()
			ro, rw := ran(t, replica, "evalsha_ro")+ran(t, replica, "eval_ro"), ran(t, replica, "evalsha")+ran(t, replica, "eval")
			if d, err := s.Do(t.Context(), peek); err != nil || !d.Allowed() || d.Remaining != 3 || d.ResetAfter != 2*time.Hour {
				t.Errorf("Peek of 1 on the replica = %+v, %v; want allowed, Remaining 3, ResetAfter 2h, as the primary said", d, err)
			}
			if n := ran(t, replica, "evalsha_ro") + ran(t, replica, "eval_ro") - ro; n == 0 {
				t.Error("the replica ran no EVALSHA_RO or EVAL_RO for the Peek")
			}
			if n := ran(t, replica, "evalsha") + ran(t, replica, "eval") - rw; n != 0 {
				t.Errorf("the replica ran EVALSHA or EVAL %d times for the Peek; want none", n)
			}
		}

		alone := h.dial(t, replica.Addr, Options{}).Store(clk, store.DefaultPrefix)
		peekThere(alone)
		d, err := alone.Do(t.Context(), take)
		if err == nil || d != (spigot.Decision{}) || !strings.Contains(err.Error(), "READONLY") {
			t.Errorf("Take on a client of the replica alone = %+v, %v; want the zero Decision and a READONLY error", d, err)
		}
		wantErr(t, h, "Take on a client of the replica alone", err)

		if !h.Routes {
			return
		}
		routed := h.dial(t, primary.Addr, Options{Replica: replica.Addr}).Store(clk, store.DefaultPrefix)
		peekThere(routed)
		sha := ran(t, primary, "evalsha")
		if d, err := routed.Do(t.Context(), take); err != nil || d.N != 2 || d.Remaining != 1 {
			t.Errorf("Take of 2 through the client that sends reads to the replica = %+v, %v; want N 2, Remaining 1", d, err)
		}
		if n := ran(t, primary, "evalsha") - sha; n != 1 {
			t.Errorf("the primary ran EVALSHA %d times for the Take; want 1", n)
		}
	})
}

// unreadableState: a key that holds what the script cannot read fails the
// request with an error that names the key and concerns that request
// alone, for every action, and the key keeps its value.
func unreadableState(t *testing.T, h Harness) {
	b := spigot.MustBucket("garbage", 5, spigot.PerSecond(1))
	key := store.Key(store.DefaultPrefix, b, "k")
	eachKind(t, func(t *testing.T, srv *testserver.Server) {
		if _, err := srv.Do("SET", key, "garbage"); err != nil {
			t.Fatal(err)
		}
		s := h.dial(t, srv.Addr, Options{}).Store(clocktest.New(t0), store.DefaultPrefix)
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
		if got, err := srv.Do("GET", key); err != nil || got != "garbage" {
			t.Errorf("the key holds %q (%v) after the requests, want %q", got, err, "garbage")
		}
	})
}
