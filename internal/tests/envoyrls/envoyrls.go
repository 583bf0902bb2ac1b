// Package envoyrls runs the real envoyproxy/ratelimit service in tests,
// beside spigot's own rate limit service, so that a test can send both the
// same ShouldRateLimit requests and compare their answers field by field
// (Compare, Diff).
//
// Binary builds envoyproxy/ratelimit at Version from the module proxy, once:
// in a throwaway module outside the workspace (go mod init, go get
// Module@Version, go build MainPackage, with GOFLAGS=-mod=mod and the go
// command from PATH), into os.UserCacheDir()/spigot-envoyrls, keyed by
// Version and the go command's version and platform, under a file lock so
// that test binaries running in parallel build it once. Later runs reuse
// the cached binary and need no network. SPIGOT_ENVOY_RATELIMIT, when set,
// names a binary to run instead.
//
// Start runs that binary on free loopback ports with its Redis backend, a
// redis-server that testserver starts for it, and stops both when the test
// ends. When redis-server or the go command is not installed the test is
// skipped, or fails when SPIGOT_REQUIRE_SERVERS=1, as testserver does.
package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spigot-go/spigot/internal/testserver"
)

// Service is one running envoyproxy/ratelimit process. Its methods are
// safe for concurrent use.
type Service struct {
	GRPCAddr  string // 127.0.0.1:port of RateLimitService and grpc.health.v1
	HTTPAddr  string // 127.0.0.1:port of the HTTP endpoints: POST /json (a RateLimitRequest in protojson), /healthcheck
	DebugAddr string // 127.0.0.1:port of the debug endpoints (/rlconfig)

	// Client is connected to GRPCAddr until the test ends.
	Client pb.RateLimitServiceClient

	// Redis is the service's own backend, empty at Start.
	Redis *testserver.Server

	conn *grpc.ClientConn
	log  string // the file of the process's standard output and error

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// An Option sets how Start runs the service.
type Option func(*settings)

type settings struct {
	env map[string]string
}

// LocalCacheSize sets LOCAL_CACHE_SIZE_IN_BYTES, the size of the cache of
// keys over their limit that the service keeps in memory: 0, the default,
// turns it off.
func LocalCacheSize(bytes int) Option {
	return Env("LOCAL_CACHE_SIZE_IN_BYTES", strconv.Itoa(bytes))
}

// StopIncrementWhenOverLimit sets STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT:
// when true, in a request some of whose descriptors go over their limits
// only those are counted, and none when one is already over in the local
// cache. Off by default: every descriptor is counted.
func StopIncrementWhenOverLimit(on bool) Option {
	return Env("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", strconv.FormatBool(on))
}

// ResponseHeaders sets LIMIT_RESPONSE_HEADERS_ENABLED: when true, a
// response carries RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset for the descriptor closest to its limit. Off by default.
func ResponseHeaders(on bool) Option {
	return Env("LIMIT_RESPONSE_HEADERS_ENABLED", strconv.FormatBool(on))
}

// LogLevel sets LOG_LEVEL (debug, info, warn, error): what the process
// writes to the log that a failed test shows. Warn by default.
func LogLevel(level string) Option { return Env("LOG_LEVEL", level) }

// Env sets any other environment variable of the service's settings
// (src/settings/settings.go of envoyproxy/ratelimit), such as
// NEAR_LIMIT_RATIO or SHADOW_MODE, or overrides one that Start sets.
func Env(key, value string) Option {
	return func(s *settings) { s.env[key] = value }
}

// Start starts envoyproxy/ratelimit with the rate limit configuration in
// configDir (its YAML files, copied, so that later changes to configDir
// reach the service only through a new Start), on free loopback ports,
// with a redis-server of its own. It returns when the service answers its
// gRPC health check and a first ShouldRateLimit, and stops it (SIGTERM,
// then SIGKILL) when tb ends. It fails tb, showing the process's log, if
// the service does not start, exits, or does not load the configuration.
func Start(tb testing.TB, configDir string, opts ...Option) *Service {
	tb.Helper()
	bin := Binary(tb)
	redis := testserver.Start(tb, testserver.Redis)

	dir := tb.TempDir()
	// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY/*.yaml, as the
	// project's docker-compose example lays it out.
	appDir := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := copyFiles(configDir, appDir); err != nil {
		tb.Fatalf("envoyrls: config: %v", err)
	}
	st := settings{env: map[string]string{
		"RUNTIME_ROOT":         filepath.Join(dir, "runtime"),
		"RUNTIME_SUBDIRECTORY": "ratelimit",
		"RUNTIME_APPDIRECTORY": "config",
		"RUNTIME_WATCH_ROOT":   "false",
		"USE_STATSD":           "false",
		"DISABLE_STATS":        "true", // else stats go to the log every 10 s
		"REDIS_SOCKET_TYPE":    "tcp",
		"REDIS_TYPE":           "SINGLE",
		"REDIS_URL":            redis.Addr,
		"HOST":                 "127.0.0.1",
		"GRPC_HOST":            "127.0.0.1",
		"DEBUG_HOST":           "127.0.0.1",
		"LOG_LEVEL":            "warn",
	}}
	for _, o := range opts {
		o(&st)
	}

	var err error
	for range 3 { // another process may take a free port before the service binds it
		var s *Service
		if s, err = start(bin, dir, redis, st); err == nil {
			tb.Cleanup(func() { s.stop(tb) })
			return s
		}
		if !errors.Is(err, errExited) {
			break
		}
	}
	tb.Fatalf("envoyrls: %v", err)
	return nil
}

// errExited is the error of a service that exited before it answered, as
// it does when it cannot bind its ports.
var errExited = errors.New("envoyproxy/ratelimit exited before it answered")

func start(bin, dir string, redis *testserver.Server, st settings) (*Service, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	s := &Service{
		GRPCAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		HTTPAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		DebugAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2])),
		Redis:     redis,
		log:       filepath.Join(dir, "ratelimit.log"),
		exited:    make(chan struct{}),
	}
	env := map[string]string{
		"GRPC_PORT":  strconv.Itoa(ports[0]),
		"PORT":       strconv.Itoa(ports[1]),
		"DEBUG_PORT": strconv.Itoa(ports[2]),
	}
	for k, v := range st.env {
		env[k] = v
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	// Only the settings: nothing of the test's environment (PORT, HOST,
	// LOG_LEVEL, …) reaches the service.
	cmd.Env = []string{}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	if err := s.launch(cmd, "its environment: "+strings.Join(cmd.Env, " ")); err != nil {
		return nil, err
	}
	return s, nil
}

// launch runs cmd as s's process, its output in s.log, and returns once s
// answers (see wait), or kills it and returns why not, with what (how cmd
// was run) and the process's log.
func (s *Service) launch(cmd *exec.Cmd, what string) error {
	logFile, err := os.Create(s.log)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	s.cmd = cmd
	go func() { // reap, so that stop and kill can wait for the exit
		cmd.Wait()
		close(s.exited)
	}()
	if err := s.wait(); err != nil {
		s.kill()
		return fmt.Errorf("%w\n%s\nits log:\n%s", err, what, s.Log())
	}
	return nil
}

// startTimeout bounds how long Start waits for the service to answer.
const startTimeout = 30 * time.Second

// wait connects to the service and polls it, with a short backoff, until
// its gRPC health check says SERVING and its HTTP health check answers
// 200; then one ShouldRateLimit for a domain of no configuration must
// answer OK, which it does only once the configuration is loaded.
func (s *Service) wait() error {
	conn, err := grpc.NewClient(s.GRPCAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Not gRPC's default reconnect backoff of a second and more:
		// the first attempts find the port closed.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 5 * time.Millisecond, Multiplier: 2, MaxDelay: 200 * time.Millisecond,
		}, MinConnectTimeout: time.Second}))
	if err != nil {
		return fmt.Errorf("grpc client: %w", err)
	}
	health := healthpb.NewHealthClient(conn)
	httpc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(startTimeout)
	backoff := 5 * time.Millisecond
	var last error
	for {
		if last = s.ready(health, httpc); last == nil {
			break
		}
		select {
		case <-s.exited:
			conn.Close()
			return fmt.Errorf("%w: %v (%v)", errExited, s.cmd.ProcessState, last)
		case <-time.After(backoff):
		}
		if time.Now().After(deadline) {
			conn.Close()
			return fmt.Errorf("envoyproxy/ratelimit did not answer within %v: %v", startTimeout, last)
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
	s.conn = conn
	s.Client = pb.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	probe := &pb.RateLimitRequest{
		Domain:      "envoyrls-probe-no-such-domain",
		Descriptors: []*rlpb.RateLimitDescriptor{Descriptor("probe", "1")},
	}
	resp, err := s.Client.ShouldRateLimit(ctx, probe)
	if err != nil {
		conn.Close()
		return fmt.Errorf("envoyproxy/ratelimit answers its health check but not ShouldRateLimit (did it load the configuration?): %w", err)
	}
	if resp.GetOverallCode() != pb.RateLimitResponse_OK {
		conn.Close()
		return fmt.Errorf("ShouldRateLimit for an unknown domain: got %v, want OK", resp.GetOverallCode())
	}
	return nil
}

// ready reports why the service is not yet ready, or nil.
func (s *Service) ready(health healthpb.HealthClient, httpc *http.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		return fmt.Errorf("grpc health check: %w", err)
	}
	if h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("grpc health check: %v", h.GetStatus())
	}
	resp, err := httpc.Get("http://" + s.HTTPAddr + "/healthcheck")
	if err != nil {
		return fmt.Errorf("http health check: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("http health check: %s", resp.Status)
	}
	return nil
}

// Log returns what the process has written to its standard output and
// error so far.
func (s *Service) Log() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// stop closes the client and stops the process: SIGTERM, which it answers
// with a graceful stop, then SIGKILL if it has not exited within 10 s.
// When tb has failed, it logs the process's log.
func (s *Service) stop(tb testing.TB) {
	if s.conn != nil {
		s.conn.Close()
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		tb.Errorf("envoyrls: envoyproxy/ratelimit on %s did not exit within 10s of SIGTERM; killing it", s.GRPCAddr)
		s.kill()
	}
	if tb.Failed() {
		tb.Logf("envoyrls: the log of envoyproxy/ratelimit on %s:\n%s", s.GRPCAddr, s.Log())
	}
}

// kill stops the process with SIGKILL and waits for it to exit.
func (s *Service) kill() {
	s.cmd.Process.Kill()
	<-s.exited
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	return ports, nil
}

// copyFiles copies the regular files of dir src into dir dst, which it
// creates.
func copyFiles(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	n := 0
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s holds no configuration file", src)
	}
	return nil
}
