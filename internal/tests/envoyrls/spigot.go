package envoyrls

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/spigot-go/spigot/internal/testserver"
)

// SpigotPackage is the main package of spigot serve.
const SpigotPackage = "github.com/spigot-go/spigot/cmd/spigot"

// spigotBuilt is the spigot binary built for this test process.
var spigotBuilt struct {
	mu   sync.Mutex
	path string
}

// SpigotBinary returns the path of a spigot binary built from this tree
// (the go command in workspace mode, go.work), once per test process.
func SpigotBinary(tb testing.TB) string {
	tb.Helper()
	goCmd := testserver.Binary(tb, "go")
	spigotBuilt.mu.Lock()
	defer spigotBuilt.mu.Unlock()
	if spigotBuilt.path != "" {
		return spigotBuilt.path
	}
	dir, err := os.MkdirTemp("", "spigot-serve-")
	if err != nil {
		tb.Fatalf("envoyrls: %v", err)
	}
	path := filepath.Join(dir, "spigot")
	if out, err := run(goCmd, "", nil, "build", "-o", path, SpigotPackage); err != nil {
		tb.Fatalf("envoyrls: go build %s: %v\n%s", SpigotPackage, err, out)
	}
	spigotBuilt.path = path
	return path
}

// StartSpigot runs spigot serve on configDir, on free loopback ports, with
// a redis-server of its own (-redis) and the flags args, and returns when
// it answers as Start's service does; it stops it (SIGTERM) when tb ends.
func StartSpigot(tb testing.TB, configDir string, args ...string) *Service {
	tb.Helper()
	bin := SpigotBinary(tb)
	redis := testserver.Start(tb, testserver.Redis)
	dir := tb.TempDir()
	conf := filepath.Join(dir, "config")
	if err := copyFiles(configDir, conf); err != nil {
		tb.Fatalf("envoyrls: config: %v", err)
	}
	var err error
	for range 3 { // another process may take a free port before spigot binds it
		var s *Service
		if s, err = startSpigot(bin, dir, conf, redis, args); err == nil {
			tb.Cleanup(func() { s.stop(tb) })
			return s
		}
		if !errors.Is(err, errExited) {
			break
		}
	}
	tb.Fatalf("envoyrls: spigot serve: %v", err)
	return nil
}

func startSpigot(bin, dir, conf string, redis *testserver.Server, args []string) (*Service, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	s := &Service{
		GRPCAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		HTTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		Redis:    redis,
		log:      filepath.Join(dir, "spigot.log"),
		exited:   make(chan struct{}),
	}
	cmd := exec.Command(bin, append([]string{"serve", "-config", conf, "-grpc", s.GRPCAddr, "-http", s.HTTPAddr, "-redis", redis.Addr}, args...)...)
	cmd.Dir = dir
	if err := s.launch(cmd, "its arguments: "+strings.Join(cmd.Args, " ")); err != nil {
		return nil, err
	}
	return s, nil
}
