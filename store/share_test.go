package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// The limits of the Share tests: a bucket of 10 that gains a token a
// second (a million units a token, one a microsecond), and a fixed window
// of 10 a second whose windows start at t0.
var (
	shareBucket = spigot.MustBucket("share-bucket", 10, spigot.Per(1, time.Second))
	shareWindow = func() spigot.Limit {
		l, err := spigot.NewFixedWindow("share-window", spigot.Per(10, time.Second), 0)
		if err != nil {
			panic(err)
		}
		return l
	}()
)

// What a step of a Share table does, at its instant.
type shareDo int

const (
	// doTell sends ops to the remote (one op by Do; with batch, all in one
	// all-or-nothing DoMulti, denied whole if other) and tells the Share
	// what it decided; the key's clients made none of them.
	doTell shareDo = iota
	// doPolicy tells the Share that the remote decided ops by policy (the
	// decision policy, which the remote did not reach the key for).
	doPolicy
	// doDecide asks the Share to decide the op; the key applies it when
	// the Share decides it (ok) or denies it.
	doDecide
	// doSpend spends the op, of an admitted batch; the key applies it.
	doSpend
	// doApply applies the op to the Share's key alone (ApplyCentral), and
	// to the key.
	doApply
	// doCentral asks what the op would decide, changing nothing.
	doCentral
	// doOther is another client's op, at the remote: the key applies it,
	// the Share hears nothing of it.
	doOther
	// doReserve sets aside n tokens of what the Share holds.
	doReserve
	// doRelease puts back n tokens that doReserve set aside.
	doRelease
	// doRest asks what to take from the remote for Takes of n, with what
	// doReserve set aside, and checks that the remote admits a Take of it
	// if and only if the key admits n.
	doRest
	// doGiveBack empties the Share and refunds what it returns to the
	// remote.
	doGiveBack
	// doMoved applies the op (a Refund, a Reset) at the remote, or decides
	// it by policy if policy is set, and tells the Share with Moved; the
	// key applies it when Moved reports ok.
	doMoved
	// doRemote checks that the op decides the same at the remote as on the
	// key.
	doRemote
)

// A shareOp is an op on the key of a Share table.
type shareOp struct {
	a spigot.Action
	n int64
}

func one(a spigot.Action, n int64) []shareOp { return []shareOp{{a, n}} }

// A shareStep is one step of a Share table at t0+at. After each step,
// the Share holds held tokens and Dropped reports dropped.
type shareStep struct {
	at      time.Duration
	do      shareDo
	ops     []shareOp
	batch   bool            // doTell: one all-or-nothing DoMulti
	other   bool            // doTell: a batch denied by another key's op
	policy  spigot.Decision // doPolicy, doMoved: the remote's decision by policy
	ok      bool            // what Told, Decide or Moved reports
	n       int64           // tokens: doReserve, doRelease, doRest
	got     int64           // tokens: what Reserve, Rest or GiveBack returns
	iff     bool            // doRest: got is not checked, only what the remote admits
	held    int64           // tokens held after the step
	dropped int64           // what Dropped reports after the step
}

// A shareKey is one key of a limit seen three ways: by the Share under
// test; at the remote, a State to which the ops the Share would have sent
// are applied as a memory store applies them; and as one store would
// hold the key (the model), a State to which every op of the key's
// clients is applied directly.
type shareKey struct {
	l        spigot.Limit
	sh       store.Share
	remote   store.State
	model    store.State
	reserved int64 // units set aside by doReserve
}

// unitOf returns the units of one token of l: a bucket's scale, 1 for a
// window.
func unitOf(l spigot.Limit) int64 {
	if scale, _ := store.Scaled(l); scale > 0 {
		return scale
	}
	return 1
}

func (k *shareKey) op(o shareOp) spigot.Op {
	return spigot.Op{Limit: k.l, Key: "user", Action: o.a, N: o.n}
}

func (k *shareKey) ops(os []shareOp) []spigot.Op {
	ops := make([]spigot.Op, len(os))
	for i, o := range os {
		ops[i] = k.op(o)
	}
	return ops
}

// remoteDo applies ops to the remote at now as a memory store does: each
// by Do, or with batch in one all-or-nothing DoMulti, which changes
// nothing and reports each op's decision in the batch with N 0 when a
// Take or TakeUpTo in it (or, with other, another key's op) is denied. It
// reports whether the remote applied them.
func (k *shareKey) remoteDo(ops []spigot.Op, now time.Time, batch, other bool) ([]spigot.Decision, bool) {
	out := make([]spigot.Decision, len(ops))
	if !batch {
		for i, op := range ops {
			out[i], _ = store.Apply(op, &k.remote, now)
		}
		return out, true
	}
	st, admitted := k.remote, !other // a bucket's or a window's: no Log to copy
	for i, op := range ops {
		out[i], _ = store.Apply(op, &st, now)
		if !out[i].Allowed() && op.Action != spigot.Peek {
			admitted = false
		}
	}
	if !admitted {
		// Denied (by another key's op, when other): each op that did not
		// deny is a Peek on the state the batch found.
		for i, op := range ops {
			if !store.Denies(op, out[i]) {
				found := k.remote
				out[i], _ = store.Apply(store.PeekOf(op), &found, now)
			}
			out[i].N = 0
		}
		return out, false
	}
	k.remote = st
	return out, true
}

// runShare plays steps on a new key of l.
func runShare(t *testing.T, l spigot.Limit, steps []shareStep) *shareKey {
	t.Helper()
	k := &shareKey{l: l}
	k.play(t, steps)
	return k
}

func (k *shareKey) play(t *testing.T, steps []shareStep) {
	t.Helper()
	u := unitOf(k.l)
	for i, st := range steps {
		now := t0.Add(st.at)
		var op spigot.Op
		if len(st.ops) > 0 {
			op = k.op(st.ops[0])
		}
		switch st.do {
		case doTell:
			ops := k.ops(st.ops)
			out, applied := k.remoteDo(ops, now, st.batch, st.other)
			if got := k.sh.Told(ops, out, now, applied); got != st.ok {
				t.Errorf("step %d: Told(%v, %v, applied %v) = %v, want %v", i, ops, out, applied, got, st.ok)
			}
			if st.ok && (!k.sh.Known() || k.sh.Limit() != k.l || !k.sh.ToldAt().Equal(now)) {
				t.Errorf("step %d: after Told: Known %v, Limit %v, ToldAt %v; want true, %v, %v", i, k.sh.Known(), k.sh.Limit(), k.sh.ToldAt(), k.l, now)
			}
		case doPolicy:
			ops := k.ops(st.ops)
			out := make([]spigot.Decision, len(ops))
			for j := range out {
				out[j] = st.policy
			}
			known, at := k.sh.Known(), k.sh.ToldAt()
			if got := k.sh.Told(ops, out, now, true); got != st.ok {
				t.Errorf("step %d: Told(%v, %v) = %v, want %v", i, ops, out, got, st.ok)
			}
			if k.sh.Known() != known || !k.sh.ToldAt().Equal(at) {
				t.Errorf("step %d: after Told by policy: Known %v, ToldAt %v; want %v, %v", i, k.sh.Known(), k.sh.ToldAt(), known, at)
			}
		case doDecide:
			model := k.model
			want, _ := store.Apply(op, &model, now)
			got, ok := k.sh.Decide(op, now)
			if got != want || ok != st.ok {
				t.Errorf("step %d: Decide(%v) = %+v, %v; want %+v, %v", i, op, got, ok, want, st.ok)
			}
			if ok || !want.Allowed() {
				k.model = model
			}
		case doSpend:
			want, _ := store.Apply(op, &k.model, now)
			if got := k.sh.Spend(op, now); got != want {
				t.Errorf("step %d: Spend(%v) = %+v, want %+v", i, op, got, want)
			}
		case doApply:
			want, _ := store.Apply(op, &k.model, now)
			if got := k.sh.ApplyCentral(op, now); got != want {
				t.Errorf("step %d: ApplyCentral(%v) = %+v, want %+v", i, op, got, want)
			}
		case doCentral:
			model := k.model
			want, _ := store.Apply(op, &model, now)
			if got := k.sh.Central(op, now); got != want {
				t.Errorf("step %d: Central(%v) = %+v, want %+v", i, op, got, want)
			}
		case doOther:
			store.Apply(op, &k.remote, now)
			store.Apply(op, &k.model, now)
		case doReserve:
			got := k.sh.Reserve(now, st.n*u)
			if got != st.got*u {
				t.Errorf("step %d: Reserve(%d tokens) = %d units, want %d tokens", i, st.n, got, st.got)
			}
			k.reserved = got
		case doRelease:
			k.sh.Release(now, st.n*u)
			k.reserved = 0
		case doRest:
			got := k.sh.Rest(st.n, k.reserved, now)
			if !st.iff && got != st.got {
				t.Errorf("step %d: Rest(%d, %d) = %d, want %d", i, st.n, k.reserved, got, st.got)
			}
			remote, model := k.remote, k.model
			r, _ := store.Apply(spigot.Op{Limit: k.l, Key: "user", Action: spigot.Take, N: got}, &remote, now)
			m, _ := store.Apply(spigot.Op{Limit: k.l, Key: "user", Action: spigot.Take, N: st.n}, &model, now)
			if r.Allowed() != m.Allowed() {
				t.Errorf("step %d: Rest(%d, %d) = %d: the remote admits a Take of it: %v; the key admits %d: %v", i, st.n, k.reserved, got, r.Allowed(), st.n, m.Allowed())
			}
		case doGiveBack:
			got := k.sh.GiveBack(now)
			if got != st.got {
				t.Errorf("step %d: GiveBack = %d, want %d", i, got, st.got)
			}
			if got > 0 {
				store.Apply(spigot.Op{Limit: k.l, Key: "user", Action: spigot.Refund, N: got}, &k.remote, now)
			}
		case doMoved:
			d := st.policy
			if d == (spigot.Decision{}) {
				d, _ = store.Apply(op, &k.remote, now)
			}
			got, ok := k.sh.Moved(op, d, now)
			want := d
			if ok {
				want, _ = store.Apply(op, &k.model, now)
			}
			if got != want || ok != st.ok {
				t.Errorf("step %d: Moved(%v, %+v) = %+v, %v; want %+v, %v", i, op, d, got, ok, want, st.ok)
			}
			if ok && !k.sh.ToldAt().Equal(now) {
				t.Errorf("step %d: after Moved: ToldAt %v, want %v", i, k.sh.ToldAt(), now)
			}
		case doRemote:
			remote, model := k.remote, k.model
			got, _ := store.Apply(op, &remote, now)
			want, _ := store.Apply(op, &model, now)
			if got != want {
				t.Errorf("step %d: %v at the remote = %+v, on the key %+v", i, op, got, want)
			}
		}
		if got := k.sh.Held(now); got != st.held*u {
			t.Errorf("step %d: Held = %d units, want %d tokens (%d)", i, got, st.held, st.held*u)
		}
		if got := k.sh.Dropped(); got != st.dropped {
			t.Errorf("step %d: Dropped = %d, want %d", i, got, st.dropped)
		}
	}
}

// TestShareNewKey: a key new to the Share, told of a remote Take, holds
// what it took, decides Takes from it as the key does, and leaves
// what it does not hold (a Take of more, a denial) to the key.
func TestShareNewKey(t *testing.T) {
	// The first steps, the same for both kinds: a lease of 6, 3 of them
	// spent, and what leaves it as it is.
	first := []shareStep{
		{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},           // the remote holds 4 (a bucket), counts 6 (a window)
		{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},             // the key 9 (counts 1)
		{at: 100 * ms, do: doDecide, ops: one(spigot.TakeUpTo, 2), ok: true, held: 3},  // 7.1 (3)
		{at: 200 * ms, do: doDecide, ops: one(spigot.Take, 4), ok: false, held: 3},     // admitted with the remote's tokens: unchanged
		{at: 200 * ms, do: doDecide, ops: one(spigot.TakeUpTo, 5), ok: false, held: 3}, // the same
		{at: 200 * ms, do: doCentral, ops: one(spigot.Peek, 7), held: 3},               // nothing moved
		{at: 200 * ms, do: doTell, ops: one(spigot.Peek, 7), ok: true, held: 3},        // told nothing taken
		{at: 200 * ms, do: doTell, ops: one(spigot.Take, 0), ok: true, held: 3},
		{at: 200 * ms, do: doTell, ops: one(spigot.Take, 11), ok: true, held: 3}, // denied for ever
		{at: 200 * ms, do: doApply, ops: one(spigot.Take, 0), held: 3},
		{at: 200 * ms, do: doApply, ops: one(spigot.Take, 11), held: 3},
		{at: 200 * ms, do: doCentral, ops: one(spigot.Peek, 7), held: 3},
	}
	t.Run("bucket", func(t *testing.T) {
		runShare(t, shareBucket, append(slices.Clone(first), []shareStep{
			{at: s, do: doDecide, ops: one(spigot.Take, 10), ok: false, held: 3},            // 8.0: denied, restamped at t0+1s
			{at: 900 * ms, do: doCentral, ops: one(spigot.Peek, 8), held: 3},                // the clock back: 8.0 from t0+1s, not 7.9
			{at: 900 * ms, do: doDecide, ops: one(spigot.Take, 3), ok: true, held: 0},       // 5.0 at t0+1s
			{at: 2 * s, do: doCentral, ops: one(spigot.Peek, 6), held: 0},                   // 6.0
			{at: 2 * s, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 0},         // nothing held
			{at: 2 * s, do: doRemote, ops: one(spigot.Peek, 1), held: 0, dropped: 0},        // 6.0 there too
			{at: 3 * s, do: doCentral, ops: one(spigot.Take, 0), held: 0},                   // a Take of 0
			{at: 3 * s, do: doDecide, ops: one(spigot.Take, 11), ok: false, held: 0},        // above the capacity: Never
			{at: 10 * s, do: doCentral, ops: one(spigot.Peek, 10), held: 0, dropped: 0},     // full again
			{at: 10 * s, do: doRemote, ops: one(spigot.Peek, 10), held: 0},                  // at the remote too
			{at: 10 * s, do: doTell, ops: one(spigot.TakeUpTo, 2), ok: true, held: 2},       // a lease again
			{at: 10 * s, do: doDecide, ops: one(spigot.Take, 2), ok: true, held: 0},         // 8
			{at: 10 * s, do: doRemote, ops: one(spigot.Peek, 1), held: 0},                   // 8 at the remote
			{at: 10*s + 500*ms, do: doCentral, ops: one(spigot.Peek, 8), held: 0},           // 8.5
			{at: 10*s + 500*ms, do: doDecide, ops: one(spigot.Take, 9), ok: false, held: 0}, // denied
		}...))
	})
	t.Run("window", func(t *testing.T) {
		runShare(t, shareWindow, append(slices.Clone(first), []shareStep{
			{at: 300 * ms, do: doDecide, ops: one(spigot.Take, 8), ok: false, held: 3},  // denied, restamped at t0+300ms
			{at: 250 * ms, do: doDecide, ops: one(spigot.Take, 2), ok: true, held: 1},   // the clock back: 5
			{at: 400 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 0},   // 6
			{at: 400 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 0},  // nothing held
			{at: 400 * ms, do: doCentral, ops: one(spigot.Peek, 4), held: 0},            // 6
			{at: 500 * ms, do: doTell, ops: one(spigot.TakeUpTo, 3), ok: true, held: 3}, // the remote counts 9
			{at: 500 * ms, do: doDecide, ops: one(spigot.Take, 3), ok: true, held: 0},   // 9
			{at: 500 * ms, do: doRemote, ops: one(spigot.Peek, 1), held: 0},             // 9 at the remote
			{at: 600 * ms, do: doDecide, ops: one(spigot.Take, 2), ok: false, held: 0},  // denied
			{at: s, do: doCentral, ops: one(spigot.Peek, 10), held: 0},                  // the next window
		}...))
	})
}

// TestShareRefill: a bucket's remote, refilling, comes to lack fewer
// tokens than the Share holds: the Share then holds what it lacks,
// rounded up to a whole token, reports the rest dropped once, and still
// decides as the key does, a token it holds only a share of included.
func TestShareRefill(t *testing.T) {
	runShare(t, shareBucket, []shareStep{
		{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},           // the remote 4
		{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},             // the key 9
		{at: s, do: doCentral, ops: one(spigot.Peek, 10), held: 5},                     // the key full, the remote 5: a share of 5
		{at: 1500 * ms, do: doCentral, ops: one(spigot.Peek, 10), held: 5},             // a share of 4.5
		{at: 2500 * ms, do: doCentral, ops: one(spigot.Peek, 10), held: 4, dropped: 1}, // 3.5
		{at: 2600 * ms, do: doCentral, ops: one(spigot.Peek, 10), held: 4},             // 3.4: dropped once
		{at: 2600 * ms, do: doDecide, ops: one(spigot.Take, 4), ok: true, held: 0},     // the share's 3.4 and the remote's 0.6: the key 6.0
		{at: 3 * s, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 0},        // 6.4: the remote's tokens
		{at: 3 * s, do: doReserve, n: 1, got: 0, held: 0},
		{at: 3 * s, do: doRelease, n: 0, held: 0},
		{at: 3 * s, do: doTell, ops: one(spigot.TakeUpTo, 3), ok: true, held: 3}, // the remote 7.0, then 4.0
		{at: 3 * s, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 2},   // 5.4
		{at: 3 * s, do: doDecide, ops: one(spigot.Take, 2), ok: true, held: 0},   // 3.4, the remote 4.0
		{at: 5 * s, do: doDecide, ops: one(spigot.Take, 5), ok: false, held: 0},  // 5.4
		{at: 5 * s, do: doCentral, ops: one(spigot.Peek, 5), held: 0},
		{at: 9 * s, do: doCentral, ops: one(spigot.Peek, 9), held: 0},      // 9.4, the remote full
		{at: 9600 * ms, do: doCentral, ops: one(spigot.Peek, 10), held: 0}, // full
		{at: 9600 * ms, do: doRemote, ops: one(spigot.Peek, 10), held: 0},  // both full
		{at: 9600 * ms, do: doTell, ops: one(spigot.TakeUpTo, 4), ok: true, held: 4},
		{at: 9600 * ms, do: doDecide, ops: one(spigot.Take, 4), ok: true, held: 0},
		{at: 9600 * ms, do: doRemote, ops: one(spigot.Peek, 6), held: 0}, // 6 each
	})
}

// TestShareReserve: what Reserve sets aside is not held until Release
// puts it back; Reserve sets aside at most what is held.
func TestShareReserve(t *testing.T) {
	for _, l := range []spigot.Limit{shareBucket, shareWindow} {
		t.Run(l.Kind().String(), func(t *testing.T) {
			runShare(t, l, []shareStep{
				{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},
				{at: 0, do: doReserve, n: 2, got: 2, held: 4},
				{at: 0, do: doRelease, n: 2, held: 6},
				{at: 0, do: doReserve, n: 8, got: 6, held: 0},
				{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 0}, // set aside: not held
				{at: 0, do: doRelease, n: 6, held: 6},
				{at: 0, do: doDecide, ops: one(spigot.Take, 6), ok: true, held: 0},
				{at: 0, do: doCentral, ops: one(spigot.Peek, 4), held: 0},
			})
		})
	}
	// Released later, but for what the remote has again meanwhile.
	t.Run("bucket later", func(t *testing.T) {
		runShare(t, shareBucket, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},       // the remote 4
			{at: s, do: doReserve, n: 6, got: 5, held: 0, dropped: 1},                  // the remote 5: a share of 5
			{at: 2500 * ms, do: doRelease, n: 5, held: 4, dropped: 1},                  // the remote 6.5: a share of 3.5
			{at: 2500 * ms, do: doDecide, ops: one(spigot.Take, 4), ok: true, held: 0}, // 6
		})
	})
	t.Run("window later", func(t *testing.T) {
		runShare(t, shareWindow, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},
			{at: 500 * ms, do: doReserve, n: 2, got: 2, held: 4},
			{at: s, do: doRelease, n: 2, held: 0, dropped: 6}, // the window ended
			{at: s, do: doCentral, ops: one(spigot.Peek, 10), held: 0},
		})
	})
}

// TestShareBatch: a batch the remote denies (for the key's own Take or
// another key's op) adds nothing held and leaves the remote's state as it
// was; one it admits adds what it took, and Spend spends it as the key
// decides.
func TestShareBatch(t *testing.T) {
	// A key new to the Share, in a denied batch: the remote is whole.
	for _, l := range []spigot.Limit{shareBucket, shareWindow} {
		t.Run("new "+l.Kind().String(), func(t *testing.T) {
			runShare(t, l, []shareStep{
				{at: 0, do: doTell, ops: []shareOp{{spigot.TakeUpTo, 3}, {spigot.Take, 2}}, batch: true, other: true, ok: true, held: 0},
				{at: 0, do: doCentral, ops: one(spigot.Peek, 10), held: 0},
				{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},
				{at: 0, do: doDecide, ops: one(spigot.Take, 6), ok: true, held: 0},
				{at: 0, do: doRemote, ops: one(spigot.Peek, 4), held: 0},
			})
		})
	}
	t.Run("bucket", func(t *testing.T) {
		const at = 100*ms + 500*time.Microsecond // between two milliseconds
		runShare(t, shareBucket, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6}, // the remote 4
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},   // the key 9
			// A Take of 7, in a batch that another key's op denies.
			{at: at, do: doReserve, n: 7, got: 5, held: 0},
			{at: at, do: doRest, n: 7, got: 2, held: 0},
			{at: at, do: doRelease, n: 5, held: 5},
			{at: at, do: doTell, ops: []shareOp{{spigot.Take, 2}, {spigot.TakeUpTo, 2}}, batch: true, other: true, ok: true, held: 5},
			{at: at, do: doCentral, ops: one(spigot.Take, 7), held: 5},                 // 9.1005: as it was
			{at: 2 * s, do: doCentral, ops: one(spigot.Peek, 10), held: 4, dropped: 1}, // the remote 6.0, as if untouched: a share of 4
			{at: 2500 * ms, do: doCentral, ops: one(spigot.Peek, 10), held: 4},         // 3.5
			// Takes of 2 and 5, in a batch the remote admits.
			{at: 2500 * ms, do: doReserve, n: 7, got: 4, held: 0},
			{at: 2500 * ms, do: doRest, n: 7, got: 3, held: 0},
			{at: 2500 * ms, do: doRelease, n: 4, held: 4},
			{at: 2500 * ms, do: doTell, ops: []shareOp{{spigot.Take, 3}, {spigot.TakeUpTo, 2}}, batch: true, ok: true, held: 9}, // the remote 1.5
			{at: 2500 * ms, do: doSpend, ops: one(spigot.Take, 2), held: 7},                                                     // 8
			{at: 2500 * ms, do: doSpend, ops: one(spigot.Take, 5), held: 2},                                                     // 3
			{at: 2500 * ms, do: doCentral, ops: one(spigot.Peek, 3), held: 2},                                                   // a share of 1.5
			{at: 3 * s, do: doDecide, ops: one(spigot.Take, 2), ok: true, held: 0},                                              // 1.5, the remote 2.0
			// A Take of 5, which the key denies: the remote denies what
			// Rest asks for too, in a batch of it alone.
			{at: 3 * s, do: doRest, n: 5, iff: true, held: 0},
			{at: 3 * s, do: doTell, ops: one(spigot.Take, 6), batch: true, ok: true, held: 0},
			{at: 3 * s, do: doCentral, ops: one(spigot.Take, 5), held: 0},
			{at: 3500 * ms, do: doCentral, ops: one(spigot.Peek, 2), held: 0}, // 2.0
			{at: 3500 * ms, do: doTell, ops: one(spigot.TakeUpTo, 2), ok: true, held: 2},
			{at: 3500 * ms, do: doDecide, ops: one(spigot.Take, 2), ok: true, held: 0}, // 0.0
			{at: 3500 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 0},
		})
	})
	t.Run("window", func(t *testing.T) {
		runShare(t, shareWindow, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6}, // the remote counts 6
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},   // the key 1
			{at: 100 * ms, do: doReserve, n: 7, got: 5, held: 0},
			{at: 100 * ms, do: doRest, n: 7, got: 2, held: 0},
			{at: 100 * ms, do: doRelease, n: 5, held: 5},
			{at: 100 * ms, do: doTell, ops: []shareOp{{spigot.Take, 2}, {spigot.TakeUpTo, 2}}, batch: true, other: true, ok: true, held: 5},
			{at: 100 * ms, do: doCentral, ops: one(spigot.Take, 7), held: 5},
			{at: 200 * ms, do: doReserve, n: 7, got: 5, held: 0},
			{at: 200 * ms, do: doRest, n: 7, got: 2, held: 0},
			{at: 200 * ms, do: doRelease, n: 5, held: 5},
			{at: 200 * ms, do: doTell, ops: []shareOp{{spigot.Take, 2}, {spigot.TakeUpTo, 2}}, batch: true, ok: true, held: 9}, // the remote 10
			{at: 200 * ms, do: doSpend, ops: one(spigot.Take, 2), held: 7},                                                     // 3
			{at: 200 * ms, do: doSpend, ops: one(spigot.Take, 5), held: 2},                                                     // 8
			{at: 300 * ms, do: doDecide, ops: one(spigot.Take, 2), ok: true, held: 0},
			{at: 300 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 0}, // denied
			{at: 300 * ms, do: doRest, n: 1, iff: true, held: 0},
			{at: 300 * ms, do: doTell, ops: one(spigot.Take, 1), batch: true, ok: true, held: 0},
			{at: 300 * ms, do: doRemote, ops: one(spigot.Peek, 1), held: 0},
		})
	})
}

// TestShareOtherClient: when another client took tokens at the remote,
// the remote's decisions are not what the Share replays: it reads the
// remote's state from their fields, keeps what it held, and the key is
// the remote's state with what is held back in it.
func TestShareOtherClient(t *testing.T) {
	t.Run("bucket", func(t *testing.T) {
		runShare(t, shareBucket, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6}, // the remote 4
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},   // the key 9
			{at: 100 * ms, do: doOther, ops: one(spigot.Take, 3), held: 5},       // the remote 1.1, the key 6.1
			// A Take of 6: 5 held, 1 and a lease of 2 asked for.
			{at: 200 * ms, do: doReserve, n: 6, got: 5, held: 0},
			{at: 200 * ms, do: doRelease, n: 5, held: 5},
			{at: 200 * ms, do: doTell, ops: one(spigot.TakeUpTo, 3), ok: true, held: 6}, // the remote 1.2 gives 1
			{at: 200 * ms, do: doCentral, ops: one(spigot.Peek, 6), held: 6},            // 6.2
			{at: 200 * ms, do: doDecide, ops: one(spigot.Take, 6), ok: true, held: 0},   // 0.2
			{at: 200 * ms, do: doRemote, ops: one(spigot.Peek, 1), held: 0},             // 0.2 at the remote
			{at: s, do: doCentral, ops: one(spigot.Peek, 1), held: 0},                   // 1.0
			{at: s, do: doTell, ops: one(spigot.Take, 1), ok: true, held: 1},
			{at: s, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 0},
			{at: s, do: doRemote, ops: one(spigot.Peek, 1), held: 0},
		})
	})
	t.Run("window", func(t *testing.T) {
		runShare(t, shareWindow, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6}, // the remote counts 6
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},   // the key 1
			{at: 100 * ms, do: doOther, ops: one(spigot.Take, 3), held: 5},       // the remote 9, the key 4
			{at: 200 * ms, do: doReserve, n: 6, got: 5, held: 0},
			{at: 200 * ms, do: doRelease, n: 5, held: 5},
			{at: 200 * ms, do: doTell, ops: one(spigot.TakeUpTo, 3), ok: true, held: 6}, // the remote gives 1
			{at: 200 * ms, do: doCentral, ops: one(spigot.Peek, 6), held: 6},            // 4
			{at: 200 * ms, do: doDecide, ops: one(spigot.Take, 6), ok: true, held: 0},   // 10
			{at: 200 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 0},  // denied
			{at: 200 * ms, do: doRemote, ops: one(spigot.Peek, 1), held: 0},
			{at: s, do: doCentral, ops: one(spigot.Peek, 10), held: 0},
		})
	})
}

// TestShareWindowEnd: a fixed window's tokens are spent from the Share
// only before the last millisecond of the window as told, or at the
// instant of the last Told; they are held no longer once the window ends,
// and GiveBack refunds nothing of them.
func TestShareWindowEnd(t *testing.T) {
	runShare(t, shareWindow, []shareStep{
		{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},
		{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},
		{at: 998 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 4},
		{at: 999 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 4}, // the last millisecond
		{at: 999*ms + 500*time.Microsecond, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 4},
		// The remote tells again in the last millisecond.
		{at: 999*ms + 700*time.Microsecond, do: doReserve, n: 1, got: 1, held: 3},
		{at: 999*ms + 700*time.Microsecond, do: doRelease, n: 1, held: 4},
		{at: 999*ms + 700*time.Microsecond, do: doTell, ops: one(spigot.Take, 0), ok: true, held: 4},
		{at: 999*ms + 700*time.Microsecond, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 3}, // at the Told's instant
		{at: 999*ms + 800*time.Microsecond, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 3},
		{at: s, do: doCentral, ops: one(spigot.Peek, 10), held: 0, dropped: 3}, // the window ended
		{at: s, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 0},
		{at: s, do: doTell, ops: one(spigot.TakeUpTo, 4), ok: true, held: 4},
		{at: s, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 3},
		{at: 1500 * ms, do: doGiveBack, got: 0, held: 0},
	})
	// A window told between two milliseconds: as told, it ends a
	// millisecond after that, rounded up.
	runShare(t, shareWindow, []shareStep{
		{at: 500 * time.Microsecond, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6}, // ResetAfter 1s
		{at: 999*ms + 200*time.Microsecond, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},
		{at: 999*ms + 500*time.Microsecond, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 5},
		{at: s, do: doCentral, ops: one(spigot.Peek, 10), held: 0, dropped: 5},
	})
	// A window told at its start.
	runShare(t, shareWindow, []shareStep{
		{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},
		{at: 999 * ms, do: doCentral, ops: one(spigot.Peek, 10), held: 6},
		{at: 999 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 6},
		{at: s - time.Microsecond, do: doCentral, ops: one(spigot.Peek, 10), held: 6},
		{at: s, do: doCentral, ops: one(spigot.Peek, 10), held: 0, dropped: 6},
		{at: s, do: doCentral, ops: one(spigot.Peek, 10), held: 0},
		{at: 2 * s, do: doGiveBack, got: 0, held: 0},
	})
}

// TestShareNewLimit: told of a limit other than the one it was told of
// before (a limit's configuration changed), a Share starts again, holding
// what that Told took alone.
func TestShareNewLimit(t *testing.T) {
	faster := spigot.MustBucket(shareBucket.Name(), 20, spigot.Per(2, time.Second))
	t.Run("given back", func(t *testing.T) {
		k := runShare(t, shareBucket, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6}, // the remote 4
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},   // the key 9
			{at: 0, do: doGiveBack, got: 5, held: 0},                             // the remote 9
		})
		k.l = faster
		k.play(t, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6}, // the remote 3
			{at: 0, do: doCentral, ops: one(spigot.Peek, 9), held: 6},            // the key 9
			{at: 0, do: doDecide, ops: one(spigot.Take, 6), ok: true, held: 0},   // 3
			{at: 0, do: doRemote, ops: one(spigot.Peek, 3), held: 0},
			{at: s, do: doCentral, ops: one(spigot.Peek, 5), held: 0}, // 5
		})
	})
	t.Run("kept", func(t *testing.T) {
		k := runShare(t, shareBucket, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6}, // the remote 4
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},
		})
		k.l = faster
		k.play(t, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 4}, // the remote gives its 4: the 5 held before are not
		})
	})
}

// TestShareGiveBack: GiveBack returns a bucket's share rounded down, or
// up when the key is full with it.
func TestShareGiveBack(t *testing.T) {
	t.Run("whole", func(t *testing.T) {
		runShare(t, shareBucket, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6}, // the remote 4
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},   // the key 9
			{at: 500 * ms, do: doGiveBack, got: 5, held: 0},                      // the remote 9.5
			{at: 500 * ms, do: doRemote, ops: one(spigot.Peek, 9), held: 0},
			{at: 500 * ms, do: doGiveBack, got: 0, held: 0},
		})
	})
	t.Run("full", func(t *testing.T) {
		runShare(t, shareBucket, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6}, // the remote 4
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},   // the key 9
			{at: 1500 * ms, do: doGiveBack, got: 5, held: 0},                     // a share of 4.5, the key full
			{at: 1500 * ms, do: doRemote, ops: one(spigot.Peek, 10), held: 0},    // full
		})
	})
	t.Run("fraction", func(t *testing.T) {
		runShare(t, shareBucket, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},       // the remote 4
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},         // the key 9
			{at: 1500 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 4}, // 9, the remote 5.5: a share of 3.5
			{at: 1500 * ms, do: doGiveBack, got: 3, held: 0},                           // the remote 8.5
			{at: 3 * s, do: doRemote, ops: one(spigot.Peek, 10), held: 0},              // both full
		})
	})
}

// TestShareAfterGiveBack: a Share that is its remote's only client
// decides exactly what the remote alone would, after GiveBack too: the
// remote then has what GiveBack returned, refunded (as store/lease does
// when it gives an old lease back and keeps the key), and the next
// decisions, Moved's included, are the key's.
func TestShareAfterGiveBack(t *testing.T) {
	t.Run("Moved", func(t *testing.T) {
		runShare(t, shareBucket, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},       // the remote 4
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},         // the key 9
			{at: 500 * ms, do: doGiveBack, got: 5, held: 0},                            // the remote 9.5, as the key
			{at: 500 * ms, do: doMoved, ops: one(spigot.Refund, 1), ok: true, held: 0}, // both full
			{at: 500 * ms, do: doCentral, ops: one(spigot.Peek, 10), held: 0},
			{at: 600 * ms, do: doTell, ops: one(spigot.Take, 1), ok: true, held: 1},
			{at: 600 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 0}, // 9
			{at: 600 * ms, do: doRemote, ops: one(spigot.Peek, 9), held: 0},
		})
	})
	t.Run("Decide", func(t *testing.T) {
		runShare(t, shareBucket, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6}, // the remote 4
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},   // the key 9
			{at: 500 * ms, do: doGiveBack, got: 5, held: 0},                      // the remote 9.5, as the key
			{at: 500 * ms, do: doCentral, ops: one(spigot.Peek, 9), held: 0},
			{at: 500 * ms, do: doDecide, ops: one(spigot.Take, 9), ok: false, held: 0}, // admitted, with the remote's tokens
		})
	})
}

// TestShareMoved: a Refund or a Reset at the remote decides on the key as
// it would on one store, and the Share then holds what the key has beyond
// the remote's state: nothing after a Reset.
func TestShareMoved(t *testing.T) {
	t.Run("bucket", func(t *testing.T) {
		runShare(t, shareBucket, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},                   // the remote 4
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},                     // the key 9
			{at: 100 * ms, do: doMoved, ops: one(spigot.Refund, 2), ok: true, held: 4, dropped: 1}, // the key full, the remote 6.1
			{at: 100 * ms, do: doDecide, ops: one(spigot.Take, 4), ok: true, held: 0},              // 6.0
			{at: 200 * ms, do: doTell, ops: one(spigot.TakeUpTo, 3), ok: true, held: 3},            // the remote 3.2
			{at: 200 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 2},              // 5.1
			{at: 300 * ms, do: doMoved, ops: one(spigot.Reset, 0), ok: true, held: 0, dropped: 2},
			{at: 300 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 0},
			{at: 300 * ms, do: doCentral, ops: one(spigot.Peek, 10), held: 0},
			{at: 300 * ms, do: doTell, ops: one(spigot.TakeUpTo, 4), ok: true, held: 4},
			{at: 300 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 3}, // 9
			{at: 400 * ms, do: doCentral, ops: one(spigot.Peek, 9), held: 3},
		})
	})
	t.Run("window", func(t *testing.T) {
		runShare(t, shareWindow, []shareStep{
			{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},                   // the remote counts 6
			{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},                     // the key 1
			{at: 100 * ms, do: doMoved, ops: one(spigot.Refund, 2), ok: true, held: 4, dropped: 1}, // the key 0, the remote 4
			{at: 100 * ms, do: doDecide, ops: one(spigot.Take, 4), ok: true, held: 0},              // 4
			{at: 200 * ms, do: doTell, ops: one(spigot.TakeUpTo, 3), ok: true, held: 3},            // the remote 7
			{at: 200 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 2},              // 5
			{at: 300 * ms, do: doMoved, ops: one(spigot.Reset, 0), ok: true, held: 0, dropped: 2},
			{at: 300 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: false, held: 0},
			{at: 400 * ms, do: doTell, ops: one(spigot.TakeUpTo, 4), ok: true, held: 4},
			{at: 400 * ms, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 3}, // 1
			{at: 500 * ms, do: doDecide, ops: one(spigot.Take, 3), ok: true, held: 0}, // 4
			{at: 500 * ms, do: doRemote, ops: one(spigot.Peek, 6), held: 0},
		})
	})
}

// TestSharePolicy: a decision by policy tells nothing of the remote's
// state: Told and Moved report false and change nothing.
func TestSharePolicy(t *testing.T) {
	open := spigot.Decision{Remaining: -1}
	for _, l := range []spigot.Limit{shareBucket, shareWindow} {
		t.Run(l.Kind().String(), func(t *testing.T) {
			runShare(t, l, []shareStep{
				{at: 0, do: doPolicy, ops: one(spigot.TakeUpTo, 6), policy: open, ok: false, held: 0},
				{at: 0, do: doTell, ops: one(spigot.TakeUpTo, 6), ok: true, held: 6},
				{at: 0, do: doDecide, ops: one(spigot.Take, 1), ok: true, held: 5},
				{at: 100 * ms, do: doPolicy, ops: one(spigot.TakeUpTo, 3), policy: open, ok: false, held: 5},
				{at: 100 * ms, do: doPolicy, ops: []shareOp{{spigot.Take, 2}, {spigot.TakeUpTo, 3}}, policy: spigot.Undecided(), ok: false, held: 5},
				{at: 200 * ms, do: doMoved, ops: one(spigot.Refund, 2), policy: open, ok: false, held: 5},
				{at: 200 * ms, do: doMoved, ops: one(spigot.Reset, 0), policy: spigot.Undecided(), ok: false, held: 5},
				{at: 300 * ms, do: doDecide, ops: one(spigot.Take, 5), ok: true, held: 0},
				{at: 300 * ms, do: doRemote, ops: one(spigot.Peek, 4), held: 0},
			})
		})
	}
}

// TestShareZero: the zero Share knows nothing and holds nothing.
func TestShareZero(t *testing.T) {
	var sh store.Share
	op := spigot.Op{Limit: shareBucket, Key: "user", Action: spigot.Take, N: 1}
	if sh.Known() {
		t.Errorf("Known = true, want false")
	}
	if got := sh.Held(t0); got != 0 {
		t.Errorf("Held = %d, want 0", got)
	}
	if got := sh.Unit(); got != 0 {
		t.Errorf("Unit = %d, want 0", got)
	}
	if got := sh.ToldAt(); !got.IsZero() {
		t.Errorf("ToldAt = %v, want the zero Time", got)
	}
	if d, ok := sh.Decide(op, t0); ok || d != (spigot.Decision{}) {
		t.Errorf("Decide = %+v, %v; want %+v, false", d, ok, spigot.Decision{})
	}
	if got := sh.Reserve(t0, 1); got != 0 {
		t.Errorf("Reserve = %d, want 0", got)
	}
	if got := sh.Rest(3, 0, t0); got != 3 {
		t.Errorf("Rest(3, 0) = %d, want 3", got)
	}
	if got := sh.GiveBack(t0); got != 0 {
		t.Errorf("GiveBack = %d, want 0", got)
	}
	if got := sh.Dropped(); got != 0 {
		t.Errorf("Dropped = %d, want 0", got)
	}
	refund := spigot.Op{Limit: shareBucket, Key: "user", Action: spigot.Refund, N: 1}
	if d, ok := sh.Moved(refund, spigot.Decision{N: 1, Remaining: 10}, t0); ok || d != (spigot.Decision{N: 1, Remaining: 10}) {
		t.Errorf("Moved = %+v, %v; want its decision, false", d, ok)
	}
	if sh.Known() {
		t.Errorf("after the calls: Known = true, want false")
	}
}
