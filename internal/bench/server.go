package bench

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/spigot-go/spigot/internal/resp"
)

// A LocalServer is a server that spigot bench started for itself: a
// redis-server or valkey-server from PATH on a free loopback port, or,
// when neither is installed, an embedded miniredis.
type LocalServer struct {
	Addr string
	// Name describes it: "redis-server 7.0.15" or "miniredis (embedded)".
	Name string
	// Binary is the server's path, and Benchmark its redis-benchmark or
	// valkey-benchmark beside it on PATH, or "".
	Binary, Benchmark string
	// Miniredis is true for the embedded miniredis.
	Miniredis bool

	cmd  *exec.Cmd
	mini *miniredis.Miniredis
	dir  string
}

// StartLocal starts a redis-server, else a valkey-server, from PATH on a
// free port of 127.0.0.1, without persistence, in a temporary directory;
// with neither on PATH it starts an embedded miniredis. Close stops it.
func StartLocal() (*LocalServer, error) {
	for _, name := range []string{"redis-server", "valkey-server"} {
		path, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		return startBinary(path, strings.TrimSuffix(name, "-server"))
	}
	m, err := miniredis.Run()
	if err != nil {
		return nil, fmt.Errorf("spigot: bench: starting miniredis: %w", err)
	}
	return &LocalServer{Addr: m.Addr(), Name: "miniredis (embedded)", Miniredis: true, mini: m}, nil
}

func startBinary(path, family string) (*LocalServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("spigot: bench: finding a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "spigot-bench-")
	if err != nil {
		return nil, fmt.Errorf("spigot: bench: %w", err)
	}
	s := &LocalServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Binary: path, dir: dir}
	if bench, err := exec.LookPath(family + "-benchmark"); err == nil {
		s.Benchmark = bench
	}
	s.cmd = exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("spigot: bench: starting %s: %w", path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); resp.Ping(s.Addr) != nil; {
		select {
		case err := <-exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("spigot: bench: %s on %s exited: %v", path, s.Addr, err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("spigot: bench: %s on %s did not answer PING within 10s", path, s.Addr)
		}
	}
	s.Name = filepath.Base(path)
	if info, err := resp.Info(s.Addr, "server"); err == nil {
		if v := info["valkey_version"]; v != "" {
			s.Name += " " + v
		} else if v := info["redis_version"]; v != "" {
			s.Name += " " + v
		}
	}
	return s, nil
}

// Close stops the server and removes its directory.
func (s *LocalServer) Close() {
	if s.mini != nil {
		s.mini.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// Describe returns how a report names the server at addr, from its INFO:
// "redis-server 7.0.15 at 127.0.0.1:6379", or the address alone.
func Describe(addr string) string {
	info, err := resp.Info(addr, "server")
	if err != nil {
		return addr
	}
	switch {
	case info["valkey_version"] != "":
		return "valkey-server " + info["valkey_version"] + " at " + addr
	case info["redis_version"] != "":
		return "redis-server " + info["redis_version"] + " at " + addr
	}
	return addr
}

// IsLocal reports whether addr names this machine: a loopback address,
// "localhost", or an address of one of its network interfaces.
func IsLocal(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range ifaddrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
