package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	spigotredis "github.com/spigot-go/spigot/store/redis"
	spigotrueidis "github.com/spigot-go/spigot/store/rueidis"
	spigotvalkey "github.com/spigot-go/spigot/store/valkey"
)

// TestErr: an error reply matches spigot.ErrRequestFailed unless its code
// says the server cannot serve any request; a failure to reach the server
// never does.
func TestErr(t *testing.T) {
	tests := []struct {
		err         string
		reply       bool
		perRequest  bool
		wantMessage string
	}{
		{"WRONGTYPE Operation against a key holding the wrong kind of value script: d3c2, on @user_script:1.", true, true, ""},
		{"ERR user_script:1: attempt to perform arithmetic on a nil value script: d13b, on @user_script:1.", true, true, ""},
		{"NOPERM this user has no permissions to access one of the keys used as arguments", true, true, ""},
		{"ERR unknown command 'evalsha'", true, true, ""},
		{"LOADING Redis is loading the dataset in memory", true, false, ""},
		{"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", true, false, ""},
		{"CLUSTERDOWN Hash slot not served", true, false, ""},
		{"CLUSTERDOWN The cluster is down", true, false, ""},
		{"TRYAGAIN Multiple keys request during rehashing of slot", true, false, ""},
		{"MOVED 3999 127.0.0.1:6381", true, false, ""},
		{"ASK 3999 127.0.0.1:6381", true, false, ""},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", true, false, ""},
		{"READONLY You can't write against a read only replica. script: 51ab, on @user_script:1.", true, false, ""},
		{"NOREPLICAS Not enough good replicas to write.", true, false, ""},
		{"OOM command not allowed when used memory > 'maxmemory'. script: 51ab, on @user_script:1.", true, false, ""},
		{"MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", true, false, ""},
		{"NOAUTH Authentication required.", true, false, ""},
		{"WRONGPASS invalid username-password pair or user is disabled.", true, false, ""},
		{"ERR max number of clients reached", true, false, ""},
		{"dial tcp 127.0.0.1:1: connect: connection refused", false, false, ""},
		{"i/o timeout", false, false, ""},
		{"WRONGTYPE looks like a reply but came from elsewhere", false, false, ""},
	}
	for i, tt := range tests {
		cause := errors.New(tt.err)
		err := store.Err("redis", cause, tt.reply)
		if got := errors.Is(err, spigot.ErrRequestFailed); got != tt.perRequest {
			t.Errorf("step %d: Err(%q, reply %v) matches ErrRequestFailed: got %v, want %v", i, tt.err, tt.reply, got, tt.perRequest)
		}
		if !errors.Is(err, cause) {
			t.Errorf("step %d: Err(%q) does not wrap the client's error", i, tt.err)
		}
		if got, want := err.Error(), "spigot: redis: "+tt.err; got != want {
			t.Errorf("step %d: Err(%q) = %q, want %q", i, tt.err, got, want)
		}
	}
}

// TestMalformedIsPerRequest: a reply that is not the script's concerns
// that request.
func TestMalformedIsPerRequest(t *testing.T) {
	if _, err := store.DecodeAcquire("QUEUED"); !errors.Is(err, spigot.ErrRequestFailed) {
		t.Errorf("DecodeAcquire(QUEUED) = %v, want an error matching ErrRequestFailed", err)
	}
	if _, err := store.DecodeReset("OK"); !errors.Is(err, spigot.ErrRequestFailed) {
		t.Errorf("DecodeReset(OK) = %v, want an error matching ErrRequestFailed", err)
	}
}

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
		mustPanic(t, fmt.Sprintf(want, "redis"), func() { spigotredis.New(rdb, spigotredis.WithPrefix(p)) })
		mustPanic(t, fmt.Sprintf(want, "valkey"), func() { spigotvalkey.New(vk, spigotvalkey.WithPrefix(p)) })
		mustPanic(t, fmt.Sprintf(want, "rueidis"), func() { spigotrueidis.New(rc, spigotrueidis.WithPrefix(p)) })
	}

	local := memory.New()
	remote := spigotredis.New(rdb)
	var nilMemory *memory.Store
	mustPanic(t, "spigot: hybrid: New: nil remote store", func() { hybrid.New(nil, local) })
	mustPanic(t, "spigot: hybrid: New: nil local store", func() { hybrid.New(remote, nil) })
	mustPanic(t, "spigot: hybrid: New: nil local store", func() { hybrid.New(remote, nilMemory) })
}

// TestWrongTypeIsPerRequest: on a real server, a key that holds a list
// fails its own requests, with an error matching ErrRequestFailed, and a
// hybrid store returns that error without counting it against its
// breaker: other keys stay on the remote, and Reset reaches it.
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
					if _, err := remote.Acquire(context.Background(), b, "bad", 1); !errors.Is(err, spigot.ErrRequestFailed) || !strings.Contains(err.Error(), "WRONGTYPE") {
						t.Fatalf("Acquire on a list = %v, want WRONGTYPE matching ErrRequestFailed", err)
					}

					paths := &pathCounter{}
					// A long timeout: the test is about replies, not about a loaded
					// machine.
					h := hybrid.New(remote, memory.New(), hybrid.WithBreaker(2, time.Hour), hybrid.WithTimeout(time.Minute), hybrid.WithObserver(paths.observer()))
					ctx := context.Background()
					for i := range 10 {
						if _, err := h.Acquire(ctx, b, "bad", 1); !errors.Is(err, spigot.ErrRequestFailed) {
							t.Fatalf("step %d: hybrid Acquire on a list = %v, want an error matching ErrRequestFailed", i, err)
						}
						if _, err := h.Reset(ctx, b, "bad"); !errors.Is(err, spigot.ErrRequestFailed) || errors.Is(err, hybrid.ErrUnavailable) {
							t.Fatalf("step %d: hybrid Reset on a list = %v, want ErrRequestFailed, not ErrUnavailable", i, err)
						}
					}
					if got := h.Circuit(); got != hybrid.CircuitClosed {
						t.Errorf("breaker after 20 errors on one key: got %v, want closed", got)
					}
					for i := range 4 {
						a, err := h.Acquire(ctx, b, "good", 1)
						if err != nil || a.Allowed != (i < 3) {
							t.Errorf("step %d: Acquire(good) = %+v, %v; want allowed %v", i, a, err, i < 3)
						}
					}
					if got := paths.get(hybrid.PathRemote); got != 4 {
						t.Errorf("decisions by the remote: got %d, want 4 (%v)", got, paths)
					}
					if was, err := h.Reset(ctx, b, "good"); err != nil || !was {
						t.Errorf("Reset(good) = %v, %v; want true, nil", was, err)
					}
				})
			}
		})
	}
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
}

var outages = []outage{
	{"refused", nil, func(t *testing.T, srv *testserver.Server) (string, func()) {
		srv.Kill()
		return "", func() {}
	}},
	{"busy", nil, startBusy},
	{"readonly", nil, func(t *testing.T, srv *testserver.Server) (string, func()) {
		primary := testserver.Start(t, srv.Kind)
		host, port, _ := net.SplitHostPort(primary.Addr)
		mustDo(t, srv, "REPLICAOF", host, port)
		return "READONLY", func() { mustDo(t, srv, "REPLICAOF", "NO", "ONE") }
	}},
	{"masterdown", nil, func(t *testing.T, srv *testserver.Server) (string, func()) {
		// A replica of a primary that is not there, told not to serve
		// stale data.
		mustDo(t, srv, "CONFIG", "SET", "replica-serve-stale-data", "no")
		mustDo(t, srv, "REPLICAOF", "127.0.0.1", "1")
		return "MASTERDOWN", func() { mustDo(t, srv, "REPLICAOF", "NO", "ONE") }
	}},
	{"oom", nil, func(t *testing.T, srv *testserver.Server) (string, func()) {
		mustDo(t, srv, "CONFIG", "SET", "maxmemory", "1")
		return "OOM", func() { mustDo(t, srv, "CONFIG", "SET", "maxmemory", "0") }
	}},
	{"clusterdown", []string{"--cluster-enabled", "yes"}, func(t *testing.T, srv *testserver.Server) (string, func()) {
		// A cluster node that serves no slot.
		return "CLUSTERDOWN", func() {}
	}},
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
// means unavailable, so a hybrid store falls back and opens its breaker.
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
						_, err := remotes[i].Acquire(context.Background(), b, "k", 1)
						switch {
						case err == nil:
							t.Fatal("Acquire succeeded on a server that serves no request")
						case errors.Is(err, spigot.ErrRequestFailed):
							t.Errorf("Acquire = %v: matches ErrRequestFailed, want unavailable", err)
						case code != "" && !strings.Contains(err.Error(), code):
							t.Errorf("Acquire = %v, want a %s reply", err, code)
						}
						paths := &pathCounter{}
						h := hybrid.New(remotes[i], memory.New(), hybrid.WithBreaker(2, time.Hour),
							hybrid.WithTimeout(time.Minute), hybrid.WithObserver(paths.observer()))
						for j := range 4 {
							a, err := h.Acquire(context.Background(), b, "k", 1)
							if err != nil || a.Allowed != (j < 3) {
								t.Errorf("step %d: hybrid Acquire = %+v, %v; want the local store's allowed %v", j, a, err, j < 3)
							}
						}
						if got := h.Circuit(); got != hybrid.CircuitOpen {
							t.Errorf("breaker after 4 requests: got %v, want open", got)
						}
						if got := paths.get(hybrid.PathLocal); got != 4 {
							t.Errorf("local decisions: got %d, want 4 (%v)", got, paths)
						}
						if _, err := h.Reset(context.Background(), b, "k"); !errors.Is(err, hybrid.ErrUnavailable) {
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
	return hybrid.Observer{Decision: func(_ spigot.Limit, path hybrid.Path, _ spigot.Decision) {
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
