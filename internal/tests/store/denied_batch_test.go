package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

// runScriptOps runs the script on keys (all or nothing, for more than
// one), at now by the caller's clock (ARGV[1]), for ops (ops[i] on
// keys[i]), and returns its decisions.
func runScriptOps(c goredis.UniversalClient, keys []string, ops []spigot.Op, now time.Time) ([]spigot.Decision, error) {
	argv := wire.NewArgs(clocktest.New(now)).Ops(ops)
	args := make([]any, len(argv))
	for i, a := range argv {
		args[i] = a
	}
	reply, err := goredis.NewScript(wire.Script()).Run(context.Background(), c, keys, args...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]spigot.Decision, len(ops))
	return out, wire.DecodeAll(reply, ops, out)
}

// cloneState returns a copy of s that Apply may change without changing
// s: a log's entries are copied.
func cloneState(s store.State) store.State {
	s.Log = slices.Clone(s.Log)
	return s
}

// denies reports whether op, decided d in sequence, denies an all-or-nothing
// call: a Take or a TakeUpTo denied.
func denies(op spigot.Op, d spigot.Decision) bool {
	return !d.Allowed() && (op.Action == spigot.Take || op.Action == spigot.TakeUpTo)
}

// foundPeek is the Peek that reports op, which did not deny a denied
// all-or-nothing call, on the state its key was found in: of its N for a
// Take or a Peek, of at most 1 for a TakeUpTo, of 0 for a Refund or a
// Reset.
func foundPeek(op spigot.Op) spigot.Op {
	p := spigot.Op{Limit: op.Limit, Key: op.Key, Action: spigot.Peek}
	switch op.Action {
	case spigot.Take, spigot.Peek:
		p.N = op.N
	case spigot.TakeUpTo:
		p.N = min(op.N, 1)
	}
	return p
}

// allOrNothing is the Go model of a call of the script on ops (ops[i] on
// keys[i]) all or nothing at now, on the states of m: each op on the state
// the ones before it left; kept (and m changed) unless a Take or TakeUpTo
// was denied. A denied call changes nothing and moves nothing: an op that
// denied keeps its decision in sequence, and every other is decided as its
// foundPeek on its key's state as the call found it.
func (m model) allOrNothing(keys []string, ops []spigot.Op, now time.Time) (want []spigot.Decision, denied bool) {
	seq := model{}
	for _, k := range keys {
		if s, ok := m[k]; ok {
			seq[k] = cloneState(s)
		}
	}
	want = make([]spigot.Decision, len(ops))
	for i, op := range ops {
		want[i] = seq.apply(keys[i], op, now)
		denied = denied || denies(op, want[i])
	}
	if !denied {
		for _, k := range keys {
			if s, ok := seq[k]; ok {
				m[k] = s
			} else {
				delete(m, k)
			}
		}
		return want, false
	}
	for i, op := range ops {
		if !denies(op, want[i]) {
			_, want[i] = apply(foundPeek(op), cloneState(m[keys[i]]), now)
		}
		want[i].N = 0
	}
	return want, true
}

// deniedLimits are two limits of each kind: a of 5 a minute, b of 3.
var deniedLimits = [][2]spigot.Limit{
	{spigot.MustBucket("a", 5, spigot.PerMinute(5)), spigot.MustBucket("b", 3, spigot.PerMinute(3))},
	{spigot.Must(spigot.NewLeakyBucket("a", 5, spigot.PerMinute(5))), spigot.Must(spigot.NewLeakyBucket("b", 3, spigot.PerMinute(3)))},
	{spigot.Must(spigot.NewFixedWindow("a", spigot.PerMinute(5), 0)), spigot.Must(spigot.NewFixedWindow("b", spigot.PerMinute(3), 0))},
	{spigot.Must(spigot.NewSlidingWindow("a", spigot.PerMinute(5))), spigot.Must(spigot.NewSlidingWindow("b", spigot.PerMinute(3)))},
	{spigot.Must(spigot.NewSlidingLog("a", spigot.PerMinute(5))), spigot.Must(spigot.NewSlidingLog("b", spigot.PerMinute(3)))},
}

// A batchOp is an op of a deniedCase on limit a or b of its kind, at key
// "k".
type batchOp struct {
	b      bool // limit b; a otherwise
	action spigot.Action
	n      int64
}

// A deniedCase is a call of the script all or nothing at t1, after seed
// (each op alone) at t0: whether it is denied, and, for some kinds, the
// decisions spelled out.
type deniedCase struct {
	name   string
	seed   []batchOp
	batch  []batchOp
	denied bool
	byHand map[spigot.Kind][]spigot.Decision
}

// Decisions spelled out, for byHand: allowed with remaining, reset,
// refill, delay; denied with remaining, retry, reset, refill.
func allowedAt(remaining int64, reset, refill, delay time.Duration) spigot.Decision {
	return spigot.Decision{Remaining: remaining, ResetAfter: reset, RefillAfter: refill, Delay: delay}
}

func deniedAt(remaining int64, retry, reset, refill time.Duration) spigot.Decision {
	return spigot.Decision{Remaining: remaining, RetryAfter: retry, ResetAfter: reset, RefillAfter: refill}
}

var deniedCases = []deniedCase{
	{
		// a holds 4 (1 taken), b none: b denies, a reports what it holds,
		// 4 and not the 2 an admitted call would leave.
		name:   "second-denies",
		seed:   []batchOp{{false, spigot.Take, 1}, {true, spigot.Take, 3}},
		batch:  []batchOp{{false, spigot.Take, 2}, {true, spigot.Take, 1}},
		denied: true,
		byHand: map[spigot.Kind][]spigot.Decision{
			// a refills a token in 12 s, b in 20 s; t1 is t0 + 10 s.
			spigot.TokenBucket: {
				allowedAt(4, 2*time.Second, 2*time.Second, 0),
				deniedAt(0, 10*time.Second, 50*time.Second, 10*time.Second),
			},
			spigot.LeakyBucket: {
				allowedAt(4, 2*time.Second, 2*time.Second, 2*time.Second),
				deniedAt(0, 10*time.Second, 50*time.Second, 10*time.Second),
			},
			// The window of t0 (10 s into a minute) ends 40 s after t1.
			spigot.FixedWindow: {
				allowedAt(4, 40*time.Second, 40*time.Second, 0),
				deniedAt(0, 40*time.Second, 40*time.Second, 40*time.Second),
			},
			// Each token leaves a minute after t0, 50 s after t1.
			spigot.SlidingLog: {
				allowedAt(4, 50*time.Second, 50*time.Second, 0),
				deniedAt(0, 50*time.Second, 50*time.Second, 50*time.Second),
			},
		},
	},
	{
		// The first op denies: the second, which would fit, is a Peek.
		name:   "first-denies",
		seed:   []batchOp{{true, spigot.Take, 3}},
		batch:  []batchOp{{true, spigot.Take, 1}, {false, spigot.Take, 5}},
		denied: true,
		byHand: map[spigot.Kind][]spigot.Decision{
			spigot.TokenBucket: {
				deniedAt(0, 10*time.Second, 50*time.Second, 10*time.Second),
				allowedAt(5, 0, 12*time.Second, 0),
			},
		},
	},
	{
		// a, found full, named twice: 3 fit, 3 more do not; the first is
		// a Peek of 3 on the full limit.
		name:   "key-named-twice",
		batch:  []batchOp{{false, spigot.Take, 3}, {false, spigot.Take, 3}},
		denied: true,
		byHand: map[spigot.Kind][]spigot.Decision{
			spigot.TokenBucket: {
				allowedAt(5, 0, 12*time.Second, 0),
				deniedAt(2, 12*time.Second, 36*time.Second, 12*time.Second),
			},
			spigot.LeakyBucket: {
				allowedAt(5, 0, 12*time.Second, 0),
				deniedAt(2, 12*time.Second, 36*time.Second, 12*time.Second),
			},
		},
	},
	{
		// Named twice beside a denial: both of a's ops are Peeks on the
		// state found, the second of 4 denied there as a Peek.
		name:   "key-named-twice-second-denies",
		seed:   []batchOp{{false, spigot.Take, 2}, {true, spigot.Take, 3}},
		batch:  []batchOp{{false, spigot.Take, 1}, {false, spigot.Take, 4}, {true, spigot.Take, 1}},
		denied: true,
	},
	{
		// A TakeUpTo that fits is a Peek of 1; b's denial stands.
		name:   "takeupto",
		seed:   []batchOp{{false, spigot.Take, 4}, {true, spigot.Take, 3}},
		batch:  []batchOp{{false, spigot.TakeUpTo, 3}, {true, spigot.Take, 1}},
		denied: true,
		byHand: map[spigot.Kind][]spigot.Decision{
			spigot.TokenBucket: {
				allowedAt(1, 38*time.Second, 2*time.Second, 0),
				deniedAt(0, 10*time.Second, 50*time.Second, 10*time.Second),
			},
		},
	},
	{
		// A TakeUpTo that denies keeps its decision.
		name:   "takeupto-denies",
		seed:   []batchOp{{true, spigot.Take, 3}},
		batch:  []batchOp{{false, spigot.Take, 2}, {true, spigot.TakeUpTo, 2}},
		denied: true,
	},
	{
		// A TakeUpTo of 0 is a Peek of 0.
		name:   "takeupto-zero",
		seed:   []batchOp{{false, spigot.Take, 5}, {true, spigot.Take, 3}},
		batch:  []batchOp{{false, spigot.TakeUpTo, 0}, {true, spigot.Take, 2}},
		denied: true,
	},
	{
		// A Peek after a Take of its key: on the state found (4 of 5
		// left, 3 fit), not the one the Take left (2).
		name:   "peek",
		seed:   []batchOp{{false, spigot.Take, 1}, {true, spigot.Take, 3}},
		batch:  []batchOp{{false, spigot.Take, 2}, {false, spigot.Peek, 3}, {true, spigot.Take, 1}},
		denied: true,
		byHand: map[spigot.Kind][]spigot.Decision{
			spigot.TokenBucket: {
				allowedAt(4, 2*time.Second, 2*time.Second, 0),
				allowedAt(4, 2*time.Second, 2*time.Second, 0),
				deniedAt(0, 10*time.Second, 50*time.Second, 10*time.Second),
			},
		},
	},
	{
		// A Peek denied on the state found is reported so.
		name:   "peek-denied",
		seed:   []batchOp{{false, spigot.Take, 5}, {true, spigot.Take, 3}},
		batch:  []batchOp{{false, spigot.Peek, 2}, {true, spigot.Take, 1}},
		denied: true,
	},
	{
		// A Refund and a Reset are Peeks of 0: nothing given back.
		name:   "refund-and-reset",
		seed:   []batchOp{{false, spigot.Take, 4}, {true, spigot.Take, 3}},
		batch:  []batchOp{{false, spigot.Refund, 2}, {true, spigot.Take, 1}, {false, spigot.Reset, 0}},
		denied: true,
		byHand: map[spigot.Kind][]spigot.Decision{
			spigot.TokenBucket: {
				allowedAt(1, 38*time.Second, 2*time.Second, 0),
				deniedAt(0, 10*time.Second, 50*time.Second, 10*time.Second),
				allowedAt(1, 38*time.Second, 2*time.Second, 0),
			},
		},
	},
	{
		// A Refund that would make room for the Take after it: in sequence
		// the Take fits, so nothing denies.
		name:   "refund-then-take",
		seed:   []batchOp{{true, spigot.Take, 3}},
		batch:  []batchOp{{true, spigot.Refund, 1}, {true, spigot.Take, 1}, {false, spigot.Take, 1}},
		denied: false,
	},
	{
		// Admitted: every decision in sequence, moved and written.
		name:   "admitted",
		seed:   []batchOp{{false, spigot.Take, 1}, {true, spigot.Take, 1}},
		batch:  []batchOp{{false, spigot.Take, 2}, {false, spigot.Peek, 3}, {true, spigot.TakeUpTo, 5}, {false, spigot.Refund, 1}},
		denied: false,
		byHand: map[spigot.Kind][]spigot.Decision{
			spigot.TokenBucket: {
				{N: 2, Remaining: 2, ResetAfter: 26 * time.Second, RefillAfter: 2 * time.Second},
				deniedAt(2, 2*time.Second, 26*time.Second, 2*time.Second), // a Peek denies no call
				{N: 2, Remaining: 0, ResetAfter: 50 * time.Second, RefillAfter: 10 * time.Second},
				{N: 1, Remaining: 3, ResetAfter: 14 * time.Second, RefillAfter: 2 * time.Second},
			},
		},
	},
}

// TestDeniedBatchScript: a call of the script all or nothing, at fixed
// instants (the caller's clock, ARGV[1]), on redis-server and
// valkey-server, for every kind: denied, it writes nothing and moves
// nothing, each Take or TakeUpTo that denied keeps its decision in
// sequence, and every other op is a Peek on its key's state as the call
// found it; admitted, every op decides in sequence and the keys hold what
// Apply leaves. The Go model decides each case, and for some the
// decisions are spelled out too.
func TestDeniedBatchScript(t *testing.T) {
	// Windows start on the minute: t0 is 10 s into one, t1 10 s later.
	t0 := t0.Truncate(time.Minute).Add(10 * time.Second)
	t1 := t0.Add(10 * time.Second)
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			c := testclient.GoRedis(t, srv.Addr)
			for _, limits := range deniedLimits {
				k := limits[0].Kind()
				for _, tc := range deniedCases {
					t.Run(fmt.Sprintf("%v/%s", k, tc.name), func(t *testing.T) {
						p := prefix(t)
						key := func(o batchOp) (string, spigot.Op) {
							l := limits[0]
							if o.b {
								l = limits[1]
							}
							return store.Key(p, l, "k"), spigot.Op{Limit: l, Key: "k", Action: o.action, N: o.n}
						}
						m := model{}
						for i, o := range tc.seed {
							kk, op := key(o)
							want := m.apply(kk, op, t0)
							got, err := runScriptOps(c, []string{kk}, []spigot.Op{op}, t0)
							if err != nil {
								t.Fatalf("seed %d: %v: %v", i, op, err)
							}
							if d := diffDecisions(got[0], want); d != "" {
								t.Fatalf("seed %d: %v: the script and Op.Apply: %s", i, op, d)
							}
						}
						keys, ops := make([]string, len(tc.batch)), make([]spigot.Op, len(tc.batch))
						for i, o := range tc.batch {
							keys[i], ops[i] = key(o)
						}
						before := map[string]string{}
						for _, kk := range keys {
							before[kk], _ = getValue(t, c, kk)
						}
						want, denied := m.allOrNothing(keys, ops, t1)
						if denied != tc.denied {
							t.Fatalf("%v: the model denies it: %v; the case says %v", ops, denied, tc.denied)
						}
						if byHand, ok := tc.byHand[k]; ok {
							for i := range ops {
								if d := diffDecisions(want[i], byHand[i]); d != "" {
									t.Errorf("op %d: %v: the model and the case spelled out: %s", i, ops[i], d)
								}
							}
						}
						got, err := runScriptOps(c, keys, ops, t1)
						if err != nil {
							t.Fatalf("%v: %v", ops, err)
						}
						for i := range ops {
							if d := diffDecisions(got[i], want[i]); d != "" {
								t.Errorf("op %d: %v of %v: the script and the model: %s", i, ops[i], ops, d)
							}
						}
						for _, kk := range keys {
							if denied {
								if v, _ := getValue(t, c, kk); v != before[kk] {
									t.Errorf("after the denied call, GET %s = %q; want %q as before", kk, v, before[kk])
								}
							} else if d := m.checkStored(t, c, kk, t1); d != "" {
								t.Errorf("after the admitted call: %s", d)
							}
						}
						if t.Failed() {
							t.Logf("replies: %v", showAll(got))
						}
					})
				}
			}
		})
	}
}

// showAll is show for each of ds.
func showAll(ds []spigot.Decision) []string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = show(d)
	}
	return s
}
