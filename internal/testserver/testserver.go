// Package testserver runs real redis-server and valkey-server processes for
// tests: each on a free loopback port, without persistence, stopped when
// the test ends. A test can also kill, pause, resume and restart a server
// to see how a store behaves when its server fails.
//
// When the server's binary is not installed the test is skipped, unless the
// environment sets SPIGOT_REQUIRE_SERVERS=1 (CI does), which makes it fail.
// Such skips are counted, and a package whose TestMain is
//
//	func TestMain(m *testing.M) { testserver.Main(m) }
//
// ends its run with one line per missing binary, such as
//
//	github.com/spigot-go/spigot/store/redis: redis-server not found: 12 server tests skipped; install it or set SPIGOT_REQUIRE_SERVERS=1
//
// so that "ok" alone does not hide that its server tests did not run.
package testserver

import (
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spigot-go/spigot/internal/resp"
)

// A Kind names a server binary.
type Kind string

const (
	Redis  Kind = "redis-server"
	Valkey Kind = "valkey-server"
)

// Kinds lists every kind, for tests that run on each.
var Kinds = []Kind{Redis, Valkey}

// RequireEnv is the environment variable that turns a missing server binary
// from a skip into a failure.
const RequireEnv = "SPIGOT_REQUIRE_SERVERS"

// Server is one running server process. Its methods are safe for
// concurrent use.
type Server struct {
	Kind Kind
	Addr string // 127.0.0.1:port

	tb    testing.TB
	dir   string
	port  int
	extra []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Binary returns the path of kind's binary, or skips tb (fails it when
// SPIGOT_REQUIRE_SERVERS=1) when it is not installed. Each skip is counted
// for Main. It is safe for concurrent use.
func Binary(tb testing.TB, kind Kind) string {
	tb.Helper()
	path, err := exec.LookPath(string(kind))
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			tb.Fatalf("testserver: %s is not installed and %s=1", kind, RequireEnv)
		}
		skipped.add(kind)
		tb.Skipf("testserver: %s is not installed (set %s=1 to fail instead)", kind, RequireEnv)
	}
	return path
}

// skipped counts the tests Binary skipped, by the kind that was missing.
var skipped skipCounts

type skipCounts struct {
	mu sync.Mutex
	n  map[Kind]int
}

func (s *skipCounts) add(kind Kind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = make(map[Kind]int)
	}
	s.n[kind]++
}

func (s *skipCounts) get(kind Kind) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[kind]
}

func (s *skipCounts) forget(kind Kind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.n, kind)
}

// summary returns one line per kind whose binary was missing, in the
// order of the kinds' names, each starting with prefix.
func (s *skipCounts) summary(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lines []string
	for _, kind := range slices.Sorted(maps.Keys(s.n)) {
		tests := "tests"
		if s.n[kind] == 1 {
			tests = "test"
		}
		lines = append(lines, fmt.Sprintf("%s%s not found: %d server %s skipped; install it or set %s=1",
			prefix, kind, s.n[kind], tests, RequireEnv))
	}
	return lines
}

// Main runs m's tests and then, for each server binary whose absence made
// Binary skip tests, prints how many it skipped, as the package doc shows.
// A package's TestMain calls it last: when TestMain returns, the test
// binary exits with m.Run's code.
//
// go test ./... shows nothing that a passing package printed unless -v or
// -json is given. So under -v and -json the lines go to standard output,
// like the tests' own; without them they go to the terminal (/dev/tty)
// when there is one, and to standard output otherwise, where a failure's
// output shows them. A result that go test takes from its cache shows no
// lines: go test -count=1 runs the tests again.
func Main(m *testing.M) {
	m.Run()
	report(skipped.summary(pkgPrefix()))
}

// pkgPrefix returns the import path of the package under test and ": ",
// or "" when the build does not say it.
func pkgPrefix() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" { // "…/store/redis.test"
		return strings.TrimSuffix(bi.Path, ".test") + ": "
	}
	return ""
}

// report prints lines as Main does.
func report(lines []string) {
	if len(lines) == 0 {
		return
	}
	var w io.Writer = os.Stdout
	if !testing.Verbose() {
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			defer tty.Close()
			w = tty
		}
	}
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

// Start starts a server of kind on a free loopback port, waits until it
// answers PING, and stops it when tb ends.
func Start(tb testing.TB, kind Kind, extra ...string) *Server {
	tb.Helper()
	Binary(tb, kind)
	s, err := startIn(kind, tb.TempDir(), extra)
	if err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	s.tb = tb
	tb.Cleanup(s.stop)
	return s
}

// startIn starts a server of kind on a free loopback port, with dir as its
// working directory.
func startIn(kind Kind, dir string, extra []string) (*Server, error) {
	s := &Server{Kind: kind, dir: dir, extra: extra}
	var err error
	for range 5 { // another process may take the free port before we bind it
		if s.port, err = freePort(); err != nil {
			break
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if err = s.start(); err == nil {
			break
		}
	}
	return s, err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
		"--logfile", "server.log",
	}
	cmd := exec.Command(string(s.Kind), append(args, s.extra...)...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.Kind, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if Ping(s.Addr) == nil {
			break
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(s.dir + "/server.log")
			return fmt.Errorf("%s on %s exited: %v\n%s", s.Kind, s.Addr, err, log)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return fmt.Errorf("%s on %s did not answer PING within 10s", s.Kind, s.Addr)
		}
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	go func() { // reap, so that Kill and stop can wait for the exit
		<-exited
		s.mu.Lock()
		if s.cmd == cmd {
			s.cmd = nil
		}
		s.mu.Unlock()
	}()
	return nil
}

// Ping sends PING to the server at addr and checks for PONG.
func Ping(addr string) error { return resp.Ping(addr) }

// Do sends one command to addr on a new connection and returns its reply,
// as resp.Do does. It is for test set-up (SCRIPT FLUSH, PTTL, INFO), not
// for traffic.
func Do(addr string, args ...string) (string, error) { return resp.Do(addr, args...) }

// Info returns the fields of INFO section from the server at addr
// ("used_cpu_user" → "0.123").
func Info(addr, section string) (map[string]string, error) { return resp.Info(addr, section) }

func (s *Server) Info(section string) (map[string]string, error) { return Info(s.Addr, section) }

// Do sends one command to the server; see the function Do.
func (s *Server) Do(args ...string) (string, error) { return Do(s.Addr, args...) }

// Micros returns the server's clock (TIME), in microseconds since the
// epoch, as the stores' scripts read it; it fails tb if the server does
// not answer.
func (s *Server) Micros(tb testing.TB) int64 {
	tb.Helper()
	r, err := s.Do("EVAL", "local t = redis.call('TIME') return t[1] * 1000000 + t[2]", "0")
	if err != nil {
		tb.Fatal(err)
	}
	us, err := strconv.ParseInt(r, 10, 64)
	if err != nil {
		tb.Fatalf("TIME in µs: %q: %v", r, err)
	}
	return us
}

// Kill stops the server at once with SIGKILL (it loses its data) and waits
// for the process to end.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT) // a paused process must run to die
	cmd.Process.Kill()
	for range 1000 {
		s.mu.Lock()
		gone := s.cmd != cmd
		s.mu.Unlock()
		if gone {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s.tb != nil { // nil for the server of MainWithServer
		s.tb.Errorf("testserver: %s on %s did not exit after SIGKILL", s.Kind, s.Addr)
	}
}

// Pause stops the server process with SIGSTOP: it keeps its connections
// but answers nothing until Resume.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Errorf("testserver: %s on %s is not running", s.Kind, s.Addr)
		return
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Errorf("testserver: signal %v: %v", sig, err)
	}
}

// Restart kills the server if it runs and starts a fresh one, empty, on the
// same port.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	var err error
	for range 50 { // the port may linger briefly after the kill
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.tb.Fatalf("testserver: restart: %v", err)
}

func (s *Server) stop() { s.Kill() }
