package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/internal/scriptstore"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
)

// groupCommit runs the tests of group commit (store.WithGroupCommit(true)).
func groupCommit(t *testing.T, h Harness) {
	t.Run("Conformance", func(t *testing.T) {
		eachKind(t, func(t *testing.T, srv *testserver.Server) {
			c := h.dial(t, srv.Addr, Options{Group: true})
			t.Run("fake-clock", func(t *testing.T) {
				conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store { return c.Store(clk, t.Name()+":") })
			})
			t.Run("server-time", func(t *testing.T) {
				conformance.RunRealTime(t, func(t *testing.T) spigot.Store { return c.Store(nil, store.DefaultPrefix) })
			})
		})
	})
	t.Run("ExactCounts", func(t *testing.T) { groupExactCounts(t, h) })
	t.Run("CancelledWhileQueued", func(t *testing.T) { groupCancelled(t, h) })
	t.Run("KilledMidBatch", func(t *testing.T) { groupKilled(t, h) })
	t.Run("PausedMidBatch", func(t *testing.T) { groupPaused(t, h) })
}

// A recorder holds what the store with prefix queues and sends, through
// scriptstore's hooks, and can hold a round trip in flight.
type recorder struct {
	prefix string
	queued chan spigot.Op // each op queued

	mu    sync.Mutex
	sent  [][][]spigot.Op            // each round trip's calls
	holds map[int]chan chan struct{} // round trip → where it says it is held
}

// record sets scriptstore's hooks to rec until t ends.
func record(t *testing.T, prefix string) *recorder {
	rec := &recorder{prefix: prefix, queued: make(chan spigot.Op, 1024), holds: map[int]chan chan struct{}{}}
	restore := scriptstore.SetHooks(scriptstore.Hooks{
		Queued: func(p string, op spigot.Op) {
			if p == prefix {
				rec.queued <- op
			}
		},
		Sent: func(p string, calls [][]spigot.Op) {
			if p != prefix {
				return
			}
			rec.mu.Lock()
			trip := len(rec.sent)
			rec.sent = append(rec.sent, calls)
			held := rec.holds[trip]
			rec.mu.Unlock()
			if held != nil {
				release := make(chan struct{})
				held <- release
				<-release
			}
		},
	})
	t.Cleanup(restore)
	return rec
}

// holdTrip makes the round trip numbered trip (from 0) wait, once sent to
// the hook, until the test releases it: the channel returned receives,
// when the round trip is held, the channel to close to release it.
func (r *recorder) holdTrip(trip int) chan chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := make(chan chan struct{}, 1)
	r.holds[trip] = c
	return c
}

// trips returns the round trips sent so far, each as its ops.
func (r *recorder) trips() [][]spigot.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]spigot.Op
	for _, calls := range r.sent {
		var ops []spigot.Op
		for _, c := range calls {
			ops = append(ops, c...)
		}
		out = append(out, ops)
	}
	return out
}

// A result is what a call of Do returned.
type result struct {
	d   spigot.Decision
	err error
}

// goDo calls s.Do(ctx, op) on a goroutine of its own, and returns where
// its result comes.
func goDo(ctx context.Context, s spigot.Store, op spigot.Op) chan result {
	c := make(chan result, 1)
	go func() {
		d, err := s.Do(ctx, op)
		c <- result{d, err}
	}()
	return c
}

// groupExactCounts: many goroutines taking one token at a time from a few
// keys at once admit exactly each key's capacity, each Remaining once,
// and the calls went in batches.
func groupExactCounts(t *testing.T, h Harness) {
	srv := testserver.Start(t, h.Kind)
	p := "exact:"
	rec := record(t, p)
	s := h.dial(t, srv.Addr, Options{Group: true}).Store(nil, p)
	const capacity, goroutines, rounds = 200, 48, 6
	b := spigot.MustBucket("exact", capacity, spigot.Per(1, 24*time.Hour))
	keys := []string{"a", "b", "c"}
	ExactTakes(t, []spigot.Store{s}, b, keys, goroutines, rounds)
	trips, ops, most := rec.trips(), 0, 0
	for _, trip := range trips {
		ops += len(trip)
		most = max(most, len(trip))
	}
	if want := goroutines * rounds * len(keys); ops != want {
		t.Errorf("the round trips carried %d ops; want %d, one per call", ops, want)
	}
	if most < 2 {
		t.Errorf("%d round trips of at most %d op: no call went with another", len(trips), most)
	}
}

// groupCancelled: a call queued behind one in flight whose context is
// cancelled returns at once with the context's error, is never sent and
// charges nothing; the calls queued with it go on.
func groupCancelled(t *testing.T, h Harness) {
	srv := testserver.Start(t, h.Kind)
	p := "cancel:"
	rec := record(t, p)
	clk := clocktest.New(t0)
	s := h.dial(t, srv.Addr, Options{Group: true}).Store(clk, p)
	b := spigot.MustBucket("cancel", 10, spigot.PerHour(1))
	op := func(n int64) spigot.Op { return spigot.Op{Limit: b, Key: "k", N: n} }

	held := rec.holdTrip(0)
	first := goDo(t.Context(), s, op(1))
	release := <-held
	ctx, cancel := context.WithCancel(t.Context())
	cancelled := goDo(ctx, s, op(2))
	if got := <-rec.queued; got != op(2) {
		t.Fatalf("queued %v; want %v", got, op(2))
	}
	third := goDo(t.Context(), s, op(3))
	if got := <-rec.queued; got != op(3) {
		t.Fatalf("queued %v; want %v", got, op(3))
	}
	cancel()
	if r := <-cancelled; !errors.Is(r.err, context.Canceled) || r.d != (spigot.Decision{}) {
		t.Errorf("the cancelled call = %+v, %v; want the zero Decision and context.Canceled", r.d, r.err)
	} else {
		wantErr(t, h, "the cancelled call", r.err)
	}
	close(release)
	hour := time.Hour
	for i, c := range []struct {
		got  chan result
		want spigot.Decision
	}{
		{first, spigot.Decision{N: 1, Remaining: 9, ResetAfter: 1 * hour, RefillAfter: hour}},
		{third, spigot.Decision{N: 3, Remaining: 6, ResetAfter: 4 * hour, RefillAfter: hour}},
	} {
		if r := <-c.got; r.err != nil || r.d != c.want {
			t.Errorf("call %d = %+v, %v; want %+v", i, r.d, r.err, c.want)
		}
	}
	peek := spigot.Op{Limit: b, Key: "k", Action: spigot.Peek}
	if d, err := s.Do(t.Context(), peek); err != nil || d.Remaining != 6 {
		t.Errorf("Peek after the calls = %+v, %v; want Remaining 6 (the cancelled call charged nothing)", d, err)
	}
	if got, want := rec.trips(), [][]spigot.Op{{op(1)}, {op(3)}, {peek}}; !tripsEqual(got, want) {
		t.Errorf("round trips %v; want %v", got, want)
	}
}

// tripsEqual reports whether two lists of round trips are equal.
func tripsEqual(a, b [][]spigot.Op) bool {
	return slices.EqualFunc(a, b, func(x, y []spigot.Op) bool { return slices.Equal(x, y) })
}

// queueBehind sends op alone, held in flight (round trip 0), and then
// queues each of ops behind it (each with ctx), and returns the first
// call's result, the results of the others, and the held round trip's
// release.
func queueBehind(t *testing.T, rec *recorder, s spigot.Store, ctx context.Context, op spigot.Op, ops []spigot.Op) (chan result, []chan result, chan struct{}) {
	t.Helper()
	held := rec.holdTrip(0)
	first := goDo(t.Context(), s, op)
	release := <-held
	var rest []chan result
	for _, o := range ops {
		rest = append(rest, goDo(ctx, s, o))
		if got := <-rec.queued; got != o {
			t.Fatalf("queued %v; want %v", got, o)
		}
	}
	return first, rest, release
}

// batchOps returns a Take of one token of b on each of n keys.
func batchOps(b spigot.Limit, n int) []spigot.Op {
	ops := make([]spigot.Op, n)
	for i := range ops {
		ops[i] = spigot.Op{Limit: b, Key: fmt.Sprint("k", i), N: 1}
	}
	return ops
}

// groupKilled: a batch in flight when its server dies fails every call
// in it, and none is sent again, to the server restarted either.
func groupKilled(t *testing.T, h Harness) {
	testserver.SkipShort(t, "kills and restarts a server")
	srv := testserver.Start(t, h.Kind)
	p := "killed:"
	rec := record(t, p)
	s := h.dial(t, srv.Addr, Options{Group: true}).Store(nil, p)
	b := spigot.MustBucket("killed", 100, spigot.PerHour(1))
	ops := batchOps(b, 5)
	first, rest, release := queueBehind(t, rec, s, t.Context(), spigot.Op{Limit: b, Key: "first", N: 1}, ops)
	batch := rec.holdTrip(1)
	close(release)
	if r := <-first; r.err != nil || !r.d.Allowed() {
		t.Fatalf("the call in flight = %+v, %v; want allowed", r.d, r.err)
	}
	releaseBatch := <-batch
	srv.Kill()
	close(releaseBatch)
	for i, c := range rest {
		r := <-c
		if r.err == nil || r.d != (spigot.Decision{}) {
			t.Errorf("call %d of the batch on a killed server = %+v, %v; want the zero Decision and an error", i, r.d, r.err)
			continue
		}
		wantErr(t, h, "a call of a batch on a killed server", r.err)
	}
	if got, want := rec.trips(), [][]spigot.Op{{{Limit: b, Key: "first", N: 1}}, ops}; !tripsEqual(got, want) {
		t.Errorf("round trips %v; want %v", got, want)
	}
	srv.Restart()
	if n := ran(t, srv, "evalsha") + ran(t, srv, "eval"); n != 0 {
		t.Errorf("the restarted server ran the script %d times; want none (a call was sent again)", n)
	}
	for _, op := range ops {
		if n, err := srv.Do("EXISTS", store.Key(p, b, op.Key)); err != nil || n != "0" {
			t.Errorf("EXISTS %s on the restarted server = %s, %v; want 0", op.Key, n, err)
		}
	}
}

// groupPaused: a batch in flight to a server that answers nothing fails
// every call in it when its context ends; when the server answers again,
// it has run the batch at most once.
func groupPaused(t *testing.T, h Harness) {
	testserver.SkipShort(t, "pauses a server")
	srv := testserver.Start(t, h.Kind)
	p := "paused:"
	rec := record(t, p)
	s := h.dial(t, srv.Addr, Options{Group: true}).Store(nil, p)
	b := spigot.MustBucket("paused", 100, spigot.PerHour(1))
	if _, err := s.Do(t.Context(), spigot.Op{Limit: b, Key: "warm", Action: spigot.Peek}); err != nil { // loads the script
		t.Fatal(err)
	}
	evalsha := ran(t, srv, "evalsha")
	rec.mu.Lock()
	rec.sent = nil
	rec.mu.Unlock()

	ops := batchOps(b, 5)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	first, rest, release := queueBehind(t, rec, s, ctx, spigot.Op{Limit: b, Key: "first", N: 1}, ops)
	batch := rec.holdTrip(1)
	close(release)
	if r := <-first; r.err != nil || !r.d.Allowed() {
		t.Fatalf("the call in flight = %+v, %v; want allowed", r.d, r.err)
	}
	releaseBatch := <-batch
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	close(releaseBatch)
	for i, c := range rest {
		r := <-c
		if r.err == nil || r.d != (spigot.Decision{}) {
			t.Errorf("call %d of the batch on a paused server = %+v, %v; want the zero Decision and an error", i, r.d, r.err)
			continue
		}
		wantErr(t, h, "a call of a batch on a paused server", r.err)
	}
	srv.Resume()
	resumed = true
	for i, op := range ops {
		peek := op
		peek.Action = spigot.Peek
		for try := 0; ; try++ {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			d, err := s.Do(ctx, peek)
			cancel()
			if err == nil {
				if d.Remaining != 100 && d.Remaining != 99 {
					t.Errorf("Peek of key %d after the pause: Remaining %d; want 100 or 99 (charged at most once)", i, d.Remaining)
				}
				break
			}
			if try == 100 {
				t.Fatalf("Peek after the pause: %v", err)
			}
		}
	}
	if n := ran(t, srv, "evalsha") - evalsha; n > len(rec.trips()) {
		t.Errorf("the server ran EVALSHA %d times for %d round trips: a call was sent again", n, len(rec.trips()))
	}
}

// ExactTakes sends rounds Takes of one token on each of keys from each of
// goroutines goroutines, spread over stores (goroutine g walks the keys
// from the g-th on, so that the keys are busy at once), and checks that
// each key admits exactly b's capacity, with Remaining capacity−1 down to
// 0 each once, and that every denial is one (N 0, Remaining 0, a
// RetryAfter). b must not refill during the test, and each key must get
// more requests than its capacity.
func ExactTakes(t *testing.T, stores []spigot.Store, b spigot.Limit, keys []string, goroutines, rounds int) {
	t.Helper()
	if goroutines*rounds <= int(b.Capacity()) {
		t.Fatalf("ExactTakes: %d requests per key cannot exhaust %v", goroutines*rounds, b)
	}
	var (
		mu   sync.Mutex
		seen = make(map[string]map[int64]int) // key → Remaining → admissions
		wg   sync.WaitGroup
	)
	for _, k := range keys {
		seen[k] = make(map[int64]int)
	}
	for g := range goroutines {
		s := stores[g%len(stores)]
		wg.Go(func() {
			for r := range rounds * len(keys) {
				key := keys[(g+r)%len(keys)]
				d, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: key, Action: spigot.Take, N: 1})
				if err != nil {
					t.Errorf("Take(%q): %v", key, err)
					return
				}
				if !d.Allowed() {
					if d.N != 0 || d.Remaining != 0 || d.RetryAfter <= 0 {
						t.Errorf("key %q: a denial = %+v; want N 0, Remaining 0 and a RetryAfter", key, d)
					}
					continue
				}
				if d.N != 1 {
					t.Errorf("key %q: an admission = %+v; want N 1", key, d)
				}
				mu.Lock()
				seen[key][d.Remaining]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, k := range keys {
		admitted := 0
		for r, n := range seen[k] {
			admitted += n
			if n != 1 || r < 0 || r >= b.Capacity() {
				t.Errorf("key %q: Remaining %d was reported by %d admitted requests; want each of 0..%d once", k, r, n, b.Capacity()-1)
			}
		}
		if admitted != int(b.Capacity()) {
			t.Errorf("key %q: %d requests from %d goroutines on %v admitted %d; want exactly %d", k, goroutines*rounds, goroutines, b, admitted, b.Capacity())
		}
	}
}
