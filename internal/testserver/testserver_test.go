package testserver_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot/internal/testserver"
)

// recorder is a testing.TB that records Skipf and Fatalf instead of
// acting on the test that runs it. Like the real ones, they end the
// goroutine that calls them, so run the code under test with record.
// Any other method of testing.TB panics.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// record runs f with a recorder on a goroutine of its own and returns the
// recorder once f has returned or called Skipf or Fatalf.
func record(f func(tb testing.TB)) *recorder {
	r := new(recorder)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

// A missing binary skips the test, or fails it when SPIGOT_REQUIRE_SERVERS
// is 1; each skip, and only a skip, is counted.
func TestBinaryMissing(t *testing.T) {
	const kind = testserver.Kind("spigot-no-such-server")
	testserver.ForgetSkips(kind)
	t.Cleanup(func() { testserver.ForgetSkips(kind) })
	for _, c := range []struct {
		env              string
		skipped, failed  bool
		msgHas1, msgHas2 string
	}{
		{"", true, false, "spigot-no-such-server is not installed", "set SPIGOT_REQUIRE_SERVERS=1 to fail instead"},
		{"0", true, false, "spigot-no-such-server is not installed", "set SPIGOT_REQUIRE_SERVERS=1 to fail instead"},
		{"yes", true, false, "spigot-no-such-server is not installed", "set SPIGOT_REQUIRE_SERVERS=1 to fail instead"},
		{"1", false, true, "spigot-no-such-server is not installed", "SPIGOT_REQUIRE_SERVERS=1"},
	} {
		t.Run("env="+c.env, func(t *testing.T) {
			t.Setenv(testserver.RequireEnv, c.env)
			var path string
			before := testserver.SkipCount(kind)
			r := record(func(tb testing.TB) { path = testserver.Binary(tb, kind) })
			want := 0
			if c.skipped {
				want = 1
			}
			if got := testserver.SkipCount(kind) - before; got != want {
				t.Errorf("Binary(%q) with %s=%q counted %d skips; want %d", kind, testserver.RequireEnv, c.env, got, want)
			}
			if r.skipped != c.skipped || r.failed != c.failed {
				t.Errorf("Binary(%q) with %s=%q: skipped %v, failed %v; want skipped %v, failed %v",
					kind, testserver.RequireEnv, c.env, r.skipped, r.failed, c.skipped, c.failed)
			}
			if !strings.Contains(r.msg, c.msgHas1) || !strings.Contains(r.msg, c.msgHas2) {
				t.Errorf("Binary(%q) with %s=%q said %q; want it to say %q and %q",
					kind, testserver.RequireEnv, c.env, r.msg, c.msgHas1, c.msgHas2)
			}
			if path != "" {
				t.Errorf("Binary(%q) returned %q after skipping or failing", kind, path)
			}
		})
	}
}

// An installed binary is found on PATH, whatever the environment says,
// and no skip is counted.
func TestBinaryFound(t *testing.T) {
	for _, env := range []string{"", "1"} {
		t.Run("env="+env, func(t *testing.T) {
			t.Setenv(testserver.RequireEnv, env)
			var path string
			r := record(func(tb testing.TB) { path = testserver.Binary(tb, "sh") })
			if r.skipped || r.failed || !strings.HasSuffix(path, "/sh") {
				t.Errorf("Binary(sh) = %q, skipped %v, failed %v (%s); want the path of sh", path, r.skipped, r.failed, r.msg)
			}
			if n := testserver.SkipCount("sh"); n != 0 {
				t.Errorf("Binary(sh) counted %d skips; want 0", n)
			}
		})
	}
}

// Skips are counted per missing kind, from concurrent tests too, and Main
// reports one line per kind, in the order of the kinds' names.
func TestSkipSummary(t *testing.T) {
	t.Setenv(testserver.RequireEnv, "")
	const (
		a = testserver.Kind("spigot-no-such-server-a")
		b = testserver.Kind("spigot-no-such-server-b")
	)
	for _, kind := range []testserver.Kind{a, b} {
		testserver.ForgetSkips(kind)
		t.Cleanup(func() { testserver.ForgetSkips(kind) })
	}
	mine := func() []string { // Summary's lines about a and b, not about real kinds skipped by other tests
		var lines []string
		for _, line := range testserver.Summary("pkg: ") {
			if strings.Contains(line, "spigot-no-such-server-") {
				lines = append(lines, line)
			}
		}
		return lines
	}
	if lines := mine(); len(lines) != 0 {
		t.Fatalf("step 0: before any skip, Summary = %q; want no lines", lines)
	}

	var wg sync.WaitGroup
	for i := range 12 { // 5 skips for a, 7 for b, at once
		kind := b
		if i < 5 {
			kind = a
		}
		wg.Go(func() {
			if r := record(func(tb testing.TB) { testserver.Binary(tb, kind) }); !r.skipped {
				t.Errorf("Binary(%q) did not skip", kind)
			}
		})
	}
	wg.Wait()
	want := []string{
		"pkg: spigot-no-such-server-a not found: 5 server tests skipped; install it or set SPIGOT_REQUIRE_SERVERS=1",
		"pkg: spigot-no-such-server-b not found: 7 server tests skipped; install it or set SPIGOT_REQUIRE_SERVERS=1",
	}
	if got := mine(); !slices.Equal(got, want) {
		t.Errorf("step 1: after 5 and 7 skips, Summary =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	testserver.ForgetSkips(a)
	testserver.ForgetSkips(b)
	record(func(tb testing.TB) { testserver.Binary(tb, b) })
	want = []string{"pkg: spigot-no-such-server-b not found: 1 server test skipped; install it or set SPIGOT_REQUIRE_SERVERS=1"}
	if got := mine(); !slices.Equal(got, want) {
		t.Errorf("step 2: after one skip, Summary = %q; want %q", got, want)
	}
}

// pingWithin sends PING on a new connection and waits at most d for PONG.
func pingWithin(addr string, d time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func do(t *testing.T, srv *testserver.Server, args ...string) string {
	t.Helper()
	reply, err := srv.Do(args...)
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), srv.Addr, err)
	}
	return reply
}

func TestServer(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			if srv.Kind != kind || !strings.HasPrefix(srv.Addr, "127.0.0.1:") {
				t.Fatalf("Start(%s) = Kind %s, Addr %s; want Kind %s on 127.0.0.1", kind, srv.Kind, srv.Addr, kind)
			}
			addr := srv.Addr

			// Start answers, and Do returns replies without their type byte.
			if info, err := srv.Info("server"); err != nil || info["tcp_port"] != addr[strings.LastIndexByte(addr, ':')+1:] {
				t.Errorf("Info(server) = tcp_port %q, %v; want the port of %s", info["tcp_port"], err, addr)
			}
			if err := testserver.Ping(addr); err != nil {
				t.Fatalf("step 0: PING after Start: %v", err)
			}
			for i, c := range []struct {
				args []string
				want string
			}{
				{[]string{"SET", "k", "v"}, "OK"},
				{[]string{"DBSIZE"}, "1"},
				{[]string{"EXISTS", "k", "k", "nope"}, "2"},
				{[]string{"GET", "k"}, "v"},              // a bulk string: its text
				{[]string{"GET", "nope"}, ""},            // the nil bulk string, "$-1"
				{[]string{"CONFIG", "GET", "save"}, "2"}, // an array of 2: its first line
			} {
				if got := do(t, srv, c.args...); got != c.want {
					t.Errorf("step %d: %s = %q; want %q", i, strings.Join(c.args, " "), got, c.want)
				}
			}
			if _, err := srv.Do("NOSUCHCOMMAND"); err == nil || !strings.Contains(err.Error(), "unknown command") {
				t.Errorf("Do(NOSUCHCOMMAND): error %v; want the server's error reply", err)
			}

			// Pause: the server holds connections but answers nothing.
			srv.Pause()
			if err := pingWithin(addr, 100*time.Millisecond); !isTimeout(err) {
				t.Errorf("PING with a 100ms deadline while paused: %v; want a timeout", err)
			}
			srv.Resume()
			if err := testserver.Ping(addr); err != nil {
				t.Errorf("PING after Resume: %v", err)
			}
			if got := do(t, srv, "DBSIZE"); got != "1" {
				t.Errorf("DBSIZE after Pause and Resume = %q; want the data kept, 1", got)
			}

			// Kill: the server is gone; a second Kill does nothing.
			srv.Kill()
			if err := testserver.Ping(addr); err == nil {
				t.Errorf("PING after Kill succeeded; want it to fail")
			}
			srv.Kill()

			// Restart: a new, empty server on the same port.
			srv.Restart()
			if srv.Addr != addr {
				t.Errorf("Addr after Restart = %s; want %s", srv.Addr, addr)
			}
			if err := testserver.Ping(addr); err != nil {
				t.Fatalf("PING after Restart: %v", err)
			}
			if got := do(t, srv, "DBSIZE"); got != "0" {
				t.Errorf("DBSIZE after Restart = %q; want an empty server, 0", got)
			}

			// A paused server can be restarted too.
			srv.Pause()
			srv.Restart()
			if err := pingWithin(addr, 5*time.Second); err != nil {
				t.Errorf("PING after Pause and Restart: %v", err)
			}
		})
	}
}

// Start passes extra arguments to the server, gives each server a port of
// its own, and stops the server when the test that started it ends.
func TestStartExtraAndCleanup(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			var addrs []string
			t.Run("servers", func(t *testing.T) {
				a := testserver.Start(t, kind, "--databases", "2")
				b := testserver.Start(t, kind)
				if a.Addr == b.Addr {
					t.Fatalf("two servers on one address, %s", a.Addr)
				}
				addrs = []string{a.Addr, b.Addr}
				if _, err := a.Do("SELECT", "1"); err != nil {
					t.Errorf("SELECT 1 with --databases 2: %v", err)
				}
				if _, err := a.Do("SELECT", "2"); err == nil {
					t.Errorf("SELECT 2 with --databases 2 succeeded; want the extra argument to hold")
				}
				if _, err := b.Do("SELECT", "2"); err != nil {
					t.Errorf("SELECT 2 on a server without extra arguments: %v", err)
				}
			})
			for _, addr := range addrs {
				if err := testserver.Ping(addr); err == nil {
					t.Errorf("the server on %s answers PING after its test ended", addr)
				}
			}
		})
	}
}
