package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	spigotredis "github.com/spigot-go/spigot/store/redis"
	spigotrueidis "github.com/spigot-go/spigot/store/rueidis"
	spigotvalkey "github.com/spigot-go/spigot/store/valkey"
)

func TestCheckPrefix(t *testing.T) {
	tests := []struct {
		prefix string
		want   string // "" for valid, else a part of the error
	}{
		{"spigot:", ""},
		{"app:", ""},
		{"my-app_2:", ""},
		{"", "must end in ':'"},
		{"app", "must end in ':'"},
		{":", "must have a word before"},
		{"a:b:", "only one ':'"},
		{"a::", "only one ':'"},
		{":a:", "only one ':'"},
		{"{spigot}:", "'{' or '}'"},
		{"app}:", "'{' or '}'"},
	}
	for i, tt := range tests {
		err := store.CheckPrefix(tt.prefix)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("step %d: CheckPrefix(%q) = %v, want nil", i, tt.prefix, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "spigot: ")):
			t.Errorf("step %d: CheckPrefix(%q) = %v, want an error about %q", i, tt.prefix, err, tt.want)
		}
	}
}

// TestPrefixesNeverCollide: the collisions of the issue that made
// prefixes strict are rejected, and the valid prefixes name distinct keys.
func TestPrefixesNeverCollide(t *testing.T) {
	login := spigot.MustBucket("login", 1, spigot.PerSecond(1))
	spig := spigot.MustBucket("spigot", 1, spigot.PerSecond(1))
	b := spigot.MustBucket("b", 1, spigot.PerSecond(1))
	c := spigot.MustBucket("c", 1, spigot.PerSecond(1))
	// The collisions: "" + spigot + "login:u" = "spigot:" + login + "u",
	// and "a:" + b + "c:x" = "a:b:" + c + "x".
	if store.Key("", spig, "login:u") != store.Key("spigot:", login, "u") ||
		store.Key("a:", b, "c:x") != store.Key("a:b:", c, "x") {
		t.Fatal("the collisions this test guards against no longer collide: update the test")
	}
	for _, p := range []string{"", "a:b:"} {
		if store.CheckPrefix(p) == nil {
			t.Errorf("CheckPrefix(%q) = nil: a store with it could share state with another", p)
		}
	}
	// Valid prefixes, buckets and keys with ':' in them: every name splits
	// back into one triple.
	seen := map[string]string{}
	for _, p := range []string{"spigot:", "a:", "app:", "b:"} {
		for _, bk := range []spigot.Limit{login, spig, b, c} {
			for _, k := range []string{"u", "login:u", "c:x", "x", ":", ""} {
				name := store.Key(p, bk, k)
				triple := fmt.Sprintf("%q %q %q", p, bk.Name(), k)
				if other, ok := seen[name]; ok {
					t.Errorf("%s and %s both name %q", other, triple, name)
				}
				seen[name] = triple
			}
		}
	}
}

// TestNewPanics: a nil client or a bad prefix panics in New, with a
// message that names the argument, not at the first request.
func TestNewPanics(t *testing.T) {
	var nilGoRedis *goredis.Client
	mustPanic := func(t *testing.T, want string, f func()) {
		t.Helper()
		defer func() {
			t.Helper()
			got, _ := recover().(string)
			if !strings.HasPrefix(got, want) {
				t.Errorf("panicked with %q, want %q…", got, want)
			}
		}()
		f()
	}
	mustPanic(t, "spigot: redis: New: nil client", func() { spigotredis.New(nil) })
	mustPanic(t, "spigot: redis: New: nil client", func() { spigotredis.New(nilGoRedis) })
	mustPanic(t, "spigot: valkey: New: nil client", func() { spigotvalkey.New(nil) })
	mustPanic(t, "spigot: rueidis: New: nil client", func() { spigotrueidis.New(nil) })

	srv := miniredis.RunT(t).Addr()
	rdb := testclient.GoRedis(t, srv)
	vk := testclient.Valkey(t, srv)
	rc := testclient.Rueidis(t, srv)
	for _, p := range []string{"", "app", "a:b:", "{spigot}:"} {
		want := fmt.Sprintf("spigot: %%s: WithPrefix: prefix %q", p)
		mustPanic(t, fmt.Sprintf(want, "redis"), func() { spigotredis.New(rdb, store.WithPrefix(p)) })
		mustPanic(t, fmt.Sprintf(want, "valkey"), func() { spigotvalkey.New(vk, store.WithPrefix(p)) })
		mustPanic(t, fmt.Sprintf(want, "rueidis"), func() { spigotrueidis.New(rc, store.WithPrefix(p)) })
	}

	local := memory.New()
	remote := spigotredis.New(rdb)
	var nilMemory *memory.Store
	mustPanic(t, "spigot: hybrid: New: nil remote store", func() { hybrid.New(nil, local) })
	mustPanic(t, "spigot: hybrid: New: nil local store", func() { hybrid.New(remote, nil) })
	mustPanic(t, "spigot: hybrid: New: nil local store", func() { hybrid.New(remote, nilMemory) })
}

// TestWrongTypeIsPerRequest: on a real server, a key that holds a list
// fails its own operations, every action alike, with an error matching
// ErrRequestFailed, and a hybrid store returns that error without
// counting it against its breaker: other keys stay on the remote, and a
// Reset reaches it.
func TestWrongTypeIsPerRequest(t *testing.T) {
	b := spigot.MustBucket("login", 3, spigot.PerHour(1))
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			for _, ps := range protoStores {
				t.Run(ps.name, func(t *testing.T) {
					prefix := ps.name + ":"
					if _, err := srv.Do("RPUSH", prefix+"login:bad", "x"); err != nil {
						t.Fatal(err)
					}
					remote := ps.new(t, []string{srv.Addr}, storeOpts{prefix: prefix})
					for _, a := range allActions {
						op := spigot.Op{Limit: b, Key: "bad", Action: a, N: 1}
						if d, err := remote.Do(context.Background(), op); !errors.Is(err, spigot.ErrRequestFailed) || !strings.Contains(err.Error(), "WRONGTYPE") || d != (spigot.Decision{}) {
							t.Fatalf("Do(%v) on a list = %s, %v; want the zero Decision and WRONGTYPE matching ErrRequestFailed", op, show(d), err)
						}
					}
					if got, err := srv.Do("LLEN", prefix+"login:bad"); err != nil || got != "1" {
						t.Errorf("LLEN of the list after the operations = %q, %v; want 1, untouched", got, err)
					}
					checkBatchFailsAlone(t, srv, remote, b, prefix)

					paths := &pathCounter{}
					// A long timeout: the test is about replies, not about a loaded
					// machine.
					h := hybrid.New(remote, memory.New(), hybrid.WithBreaker(2, time.Hour), hybrid.WithTimeout(time.Minute), hybrid.WithObserver(paths.observer()))
					ctx := context.Background()
					for i := range 10 {
						if _, err := h.Do(ctx, takeOp(b, "bad", 1)); !errors.Is(err, spigot.ErrRequestFailed) {
							t.Fatalf("step %d: hybrid Take on a list = %v, want an error matching ErrRequestFailed", i, err)
						}
						if _, err := h.Do(ctx, resetOp(b, "bad")); !errors.Is(err, spigot.ErrRequestFailed) || errors.Is(err, hybrid.ErrUnavailable) {
							t.Fatalf("step %d: hybrid Reset on a list = %v, want ErrRequestFailed, not ErrUnavailable", i, err)
						}
					}
					if got := h.Circuit(); got != hybrid.CircuitClosed {
						t.Errorf("breaker after 20 errors on one key: got %v, want closed", got)
					}
					for i := range 4 {
						d, err := h.Do(ctx, takeOp(b, "good", 1))
						if err != nil || d.Allowed() != (i < 3) || d.N != b2i(i < 3) {
							t.Errorf("step %d: Take(good) = %s, %v; want allowed %v", i, show(d), err, i < 3)
						}
					}
					if got := paths.get(hybrid.PathRemote); got != 4 {
						t.Errorf("decisions by the remote: got %d, want 4 (%v)", got, paths)
					}
					// The remote was not full: it lacked the 3 tokens taken.
					if d, err := h.Do(ctx, resetOp(b, "good")); err != nil || d != (spigot.Decision{N: 3, Remaining: 3, RefillAfter: time.Hour}) {
						t.Errorf("Reset(good) = %s, %v; want %s, nil", show(d), err, show(spigot.Decision{N: 3, Remaining: 3, RefillAfter: time.Hour}))
					}
				})
			}
		})
	}
}

// checkBatchFailsAlone: in a batch, the ops on a key that holds a list
// (prefix+"login:bad") or a value the script cannot read fail alone, with
// errors matching ErrRequestFailed, and the others are applied, in a
// batch of more ops than one call of the script takes.
func checkBatchFailsAlone(t *testing.T, srv *testserver.Server, s spigot.Store, b spigot.Limit, prefix string) {
	t.Helper()
	if _, err := srv.Do("SET", prefix+"login:garbled", "tb/1 garbage"); err != nil {
		t.Fatal(err)
	}
	n := 2*wire.BatchSize + 3
	ops := make([]spigot.Op, n)
	for i := range ops {
		ops[i] = spigot.Op{Limit: b, Key: fmt.Sprintf("batch-%d", i%(n/2)), N: 1} // each key twice
	}
	bad := map[int]string{7: "bad", wire.BatchSize + 1: "garbled", n - 1: "bad"}
	for i, key := range bad {
		ops[i].Key = key
	}
	out := make([]spigot.Decision, n)
	err := s.DoMulti(t.Context(), spigot.Independent, ops, out)
	if !errors.Is(err, spigot.ErrRequestFailed) || !strings.Contains(err.Error(), fmt.Sprintf("%d of %d ops failed", len(bad), n)) {
		t.Errorf("a batch with %d bad keys of %d: error %v; want one matching ErrRequestFailed that counts them", len(bad), n, err)
	}
	for i, d := range out {
		want := spigot.Decision{N: 1, Remaining: 2, ResetAfter: time.Hour, RefillAfter: time.Hour}
		if i >= n/2 && bad[i-n/2] == "" { // the key's second op
			want = spigot.Decision{N: 1, Remaining: 1, ResetAfter: 2 * time.Hour, RefillAfter: time.Hour}
		}
		if bad[i] != "" {
			want = spigot.Decision{Remaining: -1, RetryAfter: spigot.Never}
		}
		// The server's clock runs between the calls of the batch.
		if got := d.ResetAfter; got <= want.ResetAfter && got > want.ResetAfter-time.Second {
			d.ResetAfter = want.ResetAfter
		}
		if got := d.RefillAfter; got <= want.RefillAfter && got > want.RefillAfter-time.Second {
			d.RefillAfter = want.RefillAfter
		}
		if d != want {
			t.Errorf("batch op %d (%v) = %s; want %s", i, ops[i], show(d), show(want))
		}
	}
	for _, key := range []string{"login:bad", "login:garbled"} {
		if typ, err := srv.Do("TYPE", prefix+key); err != nil || typ == "none" {
			t.Errorf("TYPE %s after the batch = %q, %v; want it kept", key, typ, err)
		}
	}
	srv.Do("DEL", prefix+"login:garbled")
	keys := make([]string, n/2)
	for i := range keys {
		keys[i] = fmt.Sprintf("%slogin:batch-%d", prefix, i)
	}
	srv.Do(append([]string{"DEL"}, keys...)...)
}

// singleStores are the three stores on clients of one node, told not to
// look for a cluster (so that a cluster node with no slots is one server).
var singleStores = []protoStore{
	{"go-redis", func(t *testing.T, addrs []string, _ storeOpts) spigot.Store {
		c := goredis.NewClient(&goredis.Options{Addr: addrs[0], ContextTimeoutEnabled: true, DialerRetries: 1})
		t.Cleanup(func() { c.Close() })
		return spigotredis.New(c)
	}},
	{"valkey-go", func(t *testing.T, addrs []string, _ storeOpts) spigot.Store {
		c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return spigotvalkey.New(c)
	}},
	{"rueidis", func(t *testing.T, addrs []string, _ storeOpts) spigot.Store {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return spigotrueidis.New(c)
	}},
}

// An outage puts srv in a state where it serves no request, and returns
// what its error replies start with ("" when the server does not answer)
// and a function that ends it.
type outage struct {
	name  string
	extra []string // the server's command line
	start func(t *testing.T, srv *testserver.Server) (code string, end func())
	// answers are the actions the server still runs on a key with no
	// state, since the script then writes nothing it refuses: a replica
	// runs a script that only reads, and a server out of memory one that
	// only reads or deletes.
	answers []spigot.Action
}

var outages = []outage{
	{"refused", nil, func(t *testing.T, srv *testserver.Server) (string, func()) {
		srv.Kill()
		return "", func() {}
	}, nil},
	{"busy", nil, startBusy, nil},
	{"readonly", nil, func(t *testing.T, srv *testserver.Server) (string, func()) {
		primary := testserver.Start(t, srv.Kind)
		host, port, _ := net.SplitHostPort(primary.Addr)
		mustDo(t, srv, "REPLICAOF", host, port)
		return "READONLY", func() { mustDo(t, srv, "REPLICAOF", "NO", "ONE") }
	}, []spigot.Action{spigot.Peek}},
	{"masterdown", nil, func(t *testing.T, srv *testserver.Server) (string, func()) {
		// A replica of a primary that is not there, told not to serve
		// stale data.
		mustDo(t, srv, "CONFIG", "SET", "replica-serve-stale-data", "no")
		mustDo(t, srv, "REPLICAOF", "127.0.0.1", "1")
		return "MASTERDOWN", func() { mustDo(t, srv, "REPLICAOF", "NO", "ONE") }
	}, nil},
	{"oom", nil, func(t *testing.T, srv *testserver.Server) (string, func()) {
		mustDo(t, srv, "CONFIG", "SET", "maxmemory", "1")
		return "OOM", func() { mustDo(t, srv, "CONFIG", "SET", "maxmemory", "0") }
	}, []spigot.Action{spigot.Refund, spigot.Reset, spigot.Peek}},
	{"clusterdown", []string{"--cluster-enabled", "yes"}, func(t *testing.T, srv *testserver.Server) (string, func()) {
		// A cluster node that serves no slot.
		return "CLUSTERDOWN", func() {}
	}, nil},
}

// startBusy runs a script that never ends on a connection of its own,
// once the server answers BUSY to others after 10 ms of it, and returns a
// function that kills it.
func startBusy(t *testing.T, srv *testserver.Server) (string, func()) {
	mustDo(t, srv, "CONFIG", "SET", "busy-reply-threshold", "10")
	c, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	script := "while true do end"
	fmt.Fprintf(c, "*3\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n0\r\n", len(script), script)
	done := make(chan struct{})
	go func() {
		defer close(done)
		bufio.NewReader(c).ReadString('\n') // the script's end: killed
		c.Close()
	}()
	for {
		err := testserver.Ping(srv.Addr)
		if err != nil && strings.HasPrefix(err.Error(), "BUSY") {
			break
		}
		if err != nil {
			t.Fatalf("waiting for BUSY: %v", err)
		}
	}
	return "BUSY", func() {
		for testserver.Ping(srv.Addr) != nil {
			srv.Do("SCRIPT", "KILL")
		}
		<-done
	}
}

func mustDo(t *testing.T, srv *testserver.Server, args ...string) {
	t.Helper()
	if _, err := srv.Do(args...); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
}

// TestUnavailableOpensBreaker: on a real server that cannot serve any
// request (not running, busy in a script, a replica, a replica without its
// primary, out of memory, a cluster node without slots) every store's error
// means unavailable, whatever the action (but those a replica or a server
// out of memory still runs: outage.answers), so a hybrid store falls back
// and opens its breaker.
func TestUnavailableOpensBreaker(t *testing.T) {
	testserver.SkipShort(t, "fault injection")
	b := spigot.MustBucket("login", 3, spigot.PerHour(1))
	for _, kind := range testserver.Kinds {
		for _, o := range outages {
			t.Run(string(kind)+"/"+o.name, func(t *testing.T) {
				srv := testserver.Start(t, kind, o.extra...)
				remotes := make([]spigot.Store, len(singleStores))
				for i, ps := range singleStores {
					remotes[i] = ps.new(t, []string{srv.Addr}, storeOpts{})
				}
				code, end := o.start(t, srv)
				defer end()
				for i, ps := range singleStores {
					t.Run(ps.name, func(t *testing.T) {
						for _, a := range allActions {
							op := spigot.Op{Limit: b, Key: "k", Action: a, N: 1}
							// valkey-go and rueidis resend a read-only
							// command (a Peek) after a network error until
							// its context ends.
							ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
							d, err := remotes[i].Do(ctx, op)
							cancel()
							if slices.Contains(o.answers, a) {
								// On a full bucket, as the key holds no state.
								if want := (spigot.Decision{Remaining: 3, RefillAfter: time.Hour}); err != nil || d != want {
									t.Errorf("Do(%v) = %s, %v; want %s: the script writes nothing the server refuses", op, show(d), err, show(want))
								}
								continue
							}
							switch {
							case err == nil:
								t.Fatalf("Do(%v) succeeded on a server that serves no request", op)
							case errors.Is(err, spigot.ErrRequestFailed):
								t.Errorf("Do(%v) = %v: matches ErrRequestFailed, want unavailable", op, err)
							case code != "" && !strings.Contains(err.Error(), code):
								t.Errorf("Do(%v) = %v, want a %s reply", op, err, code)
							}
						}
						paths := &pathCounter{}
						h := hybrid.New(remotes[i], memory.New(), hybrid.WithBreaker(2, time.Hour),
							hybrid.WithTimeout(time.Minute), hybrid.WithObserver(paths.observer()))
						for j := range 4 {
							d, err := h.Do(context.Background(), takeOp(b, "k", 1))
							if err != nil || d.Allowed() != (j < 3) || d.N != b2i(j < 3) || d.Degraded() {
								t.Errorf("step %d: hybrid Take = %s, %v; want the local store's allowed %v", j, show(d), err, j < 3)
							}
						}
						if got := h.Circuit(); got != hybrid.CircuitOpen {
							t.Errorf("breaker after 4 requests: got %v, want open", got)
						}
						if got := paths.get(hybrid.PathLocal); got != 4 {
							t.Errorf("local decisions: got %d, want 4 (%v)", got, paths)
						}
						if _, err := h.Do(context.Background(), resetOp(b, "k")); !errors.Is(err, hybrid.ErrUnavailable) {
							t.Errorf("hybrid Reset = %v, want ErrUnavailable", err)
						}
					})
				}
			})
		}
	}
}

// pathCounter counts a hybrid store's decisions by path.
type pathCounter struct {
	mu sync.Mutex
	n  map[hybrid.Path]int
}

func (p *pathCounter) observer() hybrid.Observer {
	return hybrid.Observer{Decision: func(_ context.Context, _ spigot.Op, path hybrid.Path, _ spigot.Decision) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.n == nil {
			p.n = map[hybrid.Path]int{}
		}
		p.n[path]++
	}}
}

func (p *pathCounter) get(path hybrid.Path) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[path]
}

func (p *pathCounter) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprint(p.n)
}
