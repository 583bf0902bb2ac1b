package envoyrls

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/spigot-go/spigot/internal/testserver"
)

// Module and Version name the envoyproxy/ratelimit release the harness
// runs, and MainPackage its server's main package. The repository has no
// tags: Version is the pseudo-version of the commit the module proxy
// serves.
const (
	Module      = "github.com/envoyproxy/ratelimit"
	Version     = "v1.4.1-0.20260122083618-3fb702589d36"
	MainPackage = Module + "/src/service_cmd"
)

// BinaryEnv is the environment variable that names a prebuilt
// envoyproxy/ratelimit server binary to run instead of building one.
const BinaryEnv = "SPIGOT_ENVOY_RATELIMIT"

// The built binary, once per test process.
var built struct {
	mu   sync.Mutex
	path string
}

// Binary returns the path of an envoyproxy/ratelimit server binary at
// Version, building it the first time (see the package doc), or fails tb
// naming the step that failed. When the go command is not installed it
// skips tb, or fails it when SPIGOT_REQUIRE_SERVERS=1. It is safe for
// concurrent use, and safe to call from test binaries that run in
// parallel: they share one cached binary, built once under a file lock.
func Binary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv(BinaryEnv); p != "" {
		return p
	}
	goCmd := testserver.Binary(tb, "go")
	built.mu.Lock()
	defer built.mu.Unlock()
	if built.path != "" {
		return built.path
	}
	path, err := build(tb, goCmd)
	if err != nil {
		tb.Fatalf("envoyrls: build %s@%s: %v", MainPackage, Version, err)
	}
	built.path = path
	return path
}

// build returns the cached binary, building it into the cache first when
// it is not there. The cache holds one binary per Version, go version and
// target platform, under os.UserCacheDir (or os.TempDir when there is
// none).
func build(tb testing.TB, goCmd string) (string, error) {
	goVersion, err := run(goCmd, "", nil, "env", "GOVERSION", "GOOS", "GOARCH")
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	sum := sha256.Sum256([]byte(Module + "@" + Version + "\n" + goVersion))
	key := Version + "-" + hex.EncodeToString(sum[:6])
	root, err := os.UserCacheDir()
	if err != nil {
		root = os.TempDir()
	}
	dir := filepath.Join(root, "spigot-envoyrls", key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cache directory: %w", err)
	}
	bin := filepath.Join(dir, "ratelimit")
	if isExecutable(bin) { // built by an earlier run: no lock needed to read it
		return bin, nil
	}

	// Another test binary may be building it: wait for its lock.
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if isExecutable(bin) {
		return bin, nil
	}

	// A throwaway module outside any workspace, whose only requirement is
	// the version to build.
	mod, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("build directory: %w", err)
	}
	defer os.RemoveAll(mod)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	tb.Logf("envoyrls: building %s@%s into %s (once; later runs reuse it)", MainPackage, Version, bin)
	steps := [][]string{
		{"mod", "init", "envoyrls.build"},
		{"get", Module + "@" + Version},
		{"build", "-o", filepath.Join(mod, "ratelimit"), MainPackage},
	}
	for _, args := range steps {
		if _, err := run(goCmd, mod, env, args...); err != nil {
			return "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
		}
	}
	// Rename, so that no reader ever sees half a binary.
	if err := os.Rename(filepath.Join(mod, "ratelimit"), bin); err != nil {
		return "", fmt.Errorf("install into the cache: %w", err)
	}
	return bin, nil
}

// run runs the go command with args in dir and returns its standard
// output, trimmed, or an error that holds its standard error.
func run(goCmd, dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command(goCmd, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w\n%s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
