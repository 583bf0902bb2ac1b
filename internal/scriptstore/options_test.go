package scriptstore

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store"
)

// recorder is a Client that keeps a copy of the keys and ARGV of the last
// call it was sent (whose own are the store's again once Send returns),
// and answers every call with a timeout.
type recorder struct {
	keys []string
	argv []string
}

func (r *recorder) Send(_ context.Context, calls []Call) {
	for k := range calls {
		r.keys, r.argv = slices.Clone(calls[k].Keys), slices.Clone(calls[k].Argv)
		calls[k].Reply = Reply{Err: context.DeadlineExceeded}
	}
}

// TestOptions: each of package store's options reaches the store, a later
// option wins over an earlier one, and a Ring has no group commit
// whatever the options say.
func TestOptions(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC)
	clk := clocktest.New(t0)
	login := spigot.MustBucket("login", 5, spigot.PerSecond(5))
	op := spigot.Op{Limit: login, Key: "{u}", N: 1}
	now := strconv.FormatInt(t0.UnixMicro(), 10)
	for i, st := range []struct {
		topo  Topology
		opts  []store.Option
		key   string // the name of op's state
		now   string // ARGV[1]: "" for the server's TIME
		group bool
	}{
		{Topology{}, nil, store.Key(store.DefaultPrefix, login, op.Key), "", true},
		{Topology{}, []store.Option{store.WithPrefix("app:")}, store.Key("app:", login, op.Key), "", true},
		{Topology{}, []store.Option{store.WithPrefix("a:"), store.WithPrefix("b:")}, store.Key("b:", login, op.Key), "", true},
		{Topology{}, []store.Option{store.WithKeyHashTags()}, store.TaggedKey(store.DefaultPrefix, login, op.Key), "", true},
		{Topology{}, []store.Option{store.WithClock(clk)}, store.Key(store.DefaultPrefix, login, op.Key), now, true},
		{Topology{}, []store.Option{store.WithClock(clk), store.WithClock(nil)}, store.Key(store.DefaultPrefix, login, op.Key), "", true},
		{Topology{}, []store.Option{store.WithGroupCommit(false)}, store.Key(store.DefaultPrefix, login, op.Key), "", false},
		{Topology{}, []store.Option{store.WithGroupCommit(false), store.WithGroupCommit(true)}, store.Key(store.DefaultPrefix, login, op.Key), "", true},
		{Topology{Cluster: true}, nil, store.Key(store.DefaultPrefix, login, op.Key), "", true},
		{Topology{Ring: true}, []store.Option{store.WithGroupCommit(true)}, store.Key(store.DefaultPrefix, login, op.Key), "", false},
	} {
		r := &recorder{}
		s := New("test", r, st.topo, st.opts)
		if _, err := s.Do(t.Context(), op); err == nil {
			t.Errorf("step %d: Do on a client that fails: no error", i)
		}
		if len(r.keys) != 1 || r.keys[0] != st.key {
			t.Errorf("step %d: keys %q; want [%q]", i, r.keys, st.key)
		}
		if len(r.argv) == 0 || r.argv[0] != st.now {
			t.Errorf("step %d: ARGV %q; want it to start with %q", i, r.argv, st.now)
		}
		if got := s.group != nil; got != st.group {
			t.Errorf("step %d: group commit %v; want %v", i, got, st.group)
		}
	}
}

// TestOptionsPanic: New panics on a prefix that store.CheckPrefix rejects
// and on a nil option, with a message that names the store and the
// option.
func TestOptionsPanic(t *testing.T) {
	bad := func(p string) string {
		return "spigot: test: WithPrefix: " + store.CheckPrefix(p).Error()[len("spigot: "):]
	}
	for i, st := range []struct {
		opts []store.Option
		want string
	}{
		{[]store.Option{store.WithPrefix("")}, bad("")},
		{[]store.Option{store.WithPrefix("app")}, bad("app")},
		{[]store.Option{store.WithPrefix("a:b:")}, bad("a:b:")},
		{[]store.Option{store.WithPrefix("{app}:")}, bad("{app}:")},
		{[]store.Option{store.WithPrefix("{app}:"), store.WithPrefix("app:")}, ""},
		{[]store.Option{store.WithClock(nil), nil}, "spigot: test: New: option 1 is nil"},
	} {
		func() {
			defer func() {
				if msg, _ := recover().(string); msg != st.want {
					t.Errorf("step %d: New panicked with %q; want %q", i, msg, st.want)
				}
			}()
			New("test", &recorder{}, Topology{}, st.opts)
		}()
	}
}
