package hybrid_test

// The keys a Store remembers: the local store starts a key from what the
// remote last said of it, and the remote is charged with what the local
// store took (they use hybrid_test.go's and ops_test.go's helpers).

import (
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store/hybrid"
)

// TestMemory: under the Local policy, the first local decision on a key
// since the remote last decided it starts from the remote's bucket as it
// said it was, refilled since and scaled to the local bucket (a key never
// seen starts full); the first remote call on the key afterwards first
// takes from the remote what the local store took (in the same call), so
// that neither the outage nor the recovery adds a burst.
func TestMemory(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  []hybrid.Option
		steps []step
	}{{
		name: "same bucket",
		opts: []hybrid.Option{hybrid.WithBreaker(2, 10*sec)},
		steps: []step{
			{at: 0, action: take, cost: 3, want: allow(3, 1, 3*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			// The remote said 1 at t0; a second later it would hold 2.
			{at: sec, mode: fail, action: take, cost: 1, want: allow(1, 1, 3*sec), path: hybrid.PathLocal, calls: 1, state: closed},
			{at: sec, mode: fail, action: take, cost: 1, want: allow(1, 0, 4*sec), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
			{at: sec, action: take, cost: 1, want: deny(0, sec, 4*sec), path: hybrid.PathLocal, state: open},
			{at: 2 * sec, action: take, cost: 1, want: allow(1, 0, 4*sec), path: hybrid.PathLocal, state: open},
			// The probe: the remote's bucket is full again, less the 3 the
			// local store took, charged in the same call.
			{at: 12 * sec, action: take, cost: 1, want: allow(1, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
			{at: 12 * sec, action: take, cost: 1, want: deny(0, sec, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			// Another outage starts from what the remote said last (0 at
			// t0+12s, 1 a second later), or less if the local store has less.
			{at: 13 * sec, mode: fail, action: take, cost: 1, want: allow(1, 0, 4*sec), path: hybrid.PathLocal, calls: 1, state: closed},
			{at: 13 * sec, action: take, cost: 1, want: deny(0, sec, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			// A Refund gives back to the local store and to the debt.
			{at: 14 * sec, mode: fail, action: take, cost: 1, want: allow(1, 0, 4*sec), path: hybrid.PathLocal, calls: 1, state: closed},
			{at: 14 * sec, mode: fail, action: refund, cost: 1, want: allow(1, 1, 3*sec), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
			{at: 24 * sec, action: peek, cost: 1, want: allow(0, 4, 0), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
		},
	}, {
		// The local bucket holds 2 tokens: the remote's 3 of 4 are 1.
		name: "half",
		opts: []hybrid.Option{hybrid.WithLocalLimit(half), hybrid.WithBreaker(1, 10*sec)},
		steps: []step{
			{at: 0, action: take, cost: 1, want: allow(1, 3, sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, mode: fail, action: take, cost: 1, want: allow(1, 0, 2*sec), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
			{at: 0, action: take, cost: 1, want: deny(0, sec, 2*sec), path: hybrid.PathLocal, state: open},
			// The remote is full again, less the 1 the local store took.
			{at: 10 * sec, action: take, cost: 4, want: deny(3, sec, sec), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
		},
	}, {
		name: "never seen",
		opts: []hybrid.Option{hybrid.WithBreaker(1, 10*sec)},
		steps: []step{
			{at: 0, mode: fail, action: take, cost: 1, want: allow(1, 3, sec), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
			{at: 0, action: takeUpTo, cost: 2, want: allow(2, 1, 3*sec), path: hybrid.PathLocal, state: open},
			{at: 10 * sec, action: take, cost: 1, want: allow(1, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
		},
	}, {
		name: "reset",
		opts: []hybrid.Option{hybrid.WithBreaker(1, 10*sec)},
		steps: []step{
			{at: 0, action: take, cost: 4, want: allow(4, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			// A Reset forgets the key, whether or not it reaches the remote.
			{at: 0, mode: fail, action: reset, errs: []error{hybrid.ErrUnavailable, errDown}, calls: 1, state: open, trans: toOpen},
			{at: 0, action: take, cost: 4, want: allow(4, 0, 4*sec), path: hybrid.PathLocal, state: open},
		},
	}, {
		name: "memory 0",
		opts: []hybrid.Option{hybrid.WithMaxKeys(0), hybrid.WithBreaker(1, 10*sec)},
		steps: []step{
			{at: 0, action: take, cost: 4, want: allow(4, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, mode: fail, action: take, cost: 4, want: allow(4, 0, 4*sec), path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
			{at: 10 * sec, action: take, cost: 4, want: allow(4, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
		},
	}, {
		// FailOpen remembers nothing: it has no local bucket to start.
		name: "fail-open",
		opts: []hybrid.Option{hybrid.WithPolicy(hybrid.FailOpen), hybrid.WithBreaker(1, 10*sec)},
		steps: []step{
			{at: 0, action: take, cost: 4, want: allow(4, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed},
			{at: 0, mode: fail, action: take, cost: 4, want: admitted(4), path: hybrid.PathFailOpen, calls: 1, state: open, trans: toOpen},
			{at: 10 * sec, action: take, cost: 4, want: allow(4, 0, 4*sec), path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			newFixture(t, append([]hybrid.Option{hybrid.WithMaxKeys(hybrid.DefaultMaxKeys)}, c.opts...)...).play(t, cap4, c.steps)
		})
	}
}

// TestMemoryMulti: DoMulti seeds each key's local bucket, and, in
// Independent mode, charges the remote with what the local store took in
// front of the ops, in the same call.
func TestMemoryMulti(t *testing.T) {
	a, b := spigot.Op{Limit: cap4, Key: "a", N: 1}, spigot.Op{Limit: cap4, Key: "b", N: 1}
	a3 := a
	a3.N = 3
	f := newFixture(t, hybrid.WithMaxKeys(hybrid.DefaultMaxKeys), hybrid.WithBreaker(1, 10*sec))
	f.playMulti(t, []opsStep{
		{at: 0, ops: []spigot.Op{a3, b}, want: []spigot.Decision{allow(3, 1, 3*sec), allow(1, 3, sec)}, path: hybrid.PathRemote, calls: 1, state: closed},
		{at: 0, mode: fail, ops: []spigot.Op{a, b}, want: []spigot.Decision{allow(1, 0, 4*sec), allow(1, 2, 2*sec)}, path: hybrid.PathLocal, calls: 1, state: open, trans: toOpen},
		{at: 0, ops: []spigot.Op{a, b}, want: []spigot.Decision{deny(0, sec, 4*sec), allow(1, 1, 3*sec)}, path: hybrid.PathLocal, state: open},
		// The probe: full again, less 1 for a and 2 for b.
		{at: 10 * sec, ops: []spigot.Op{a, b}, want: []spigot.Decision{allow(1, 2, 2*sec), allow(1, 1, 3*sec)}, path: hybrid.PathRemote, calls: 1, state: closed, trans: probeOK},
	})
}

// TestMemoryBound: a Store remembers WithMaxKeys's number of keys, the most
// recently used; a key it forgot starts full.
func TestMemoryBound(t *testing.T) {
	f := newFixture(t, hybrid.WithMaxKeys(2), hybrid.WithBreaker(1, 10*sec))
	for _, key := range []string{"a", "b", "c"} {
		if d, err := takeN(t.Context(), f.s, cap4, key, 3); err != nil || !sameDecision(d, allow(3, 1, 3*sec)) {
			t.Fatalf("remote Take 3 of %q: got %s, %v; want %s", key, show(d), err, show(allow(3, 1, 3*sec)))
		}
	}
	f.remote.set(fail)
	for i, c := range []struct {
		key  string
		want spigot.Decision
	}{
		{"c", allow(1, 0, 4*sec)}, // remembered: 1 left
		{"b", allow(1, 0, 4*sec)}, // remembered: 1 left
		{"a", allow(1, 3, sec)},   // forgotten: full
	} {
		if d, err := takeN(t.Context(), f.s, cap4, c.key, 1); err != nil || !sameDecision(d, c.want) {
			t.Errorf("step %d: local Take 1 of %q: got %s, %v; want %s", i+1, c.key, show(d), err, show(c.want))
		}
	}
}
