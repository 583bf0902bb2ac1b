package hybrid_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/spigot-go/spigot/internal/tests/testclient"
)

// TestMain turns off go-redis's logging and says how many tests were
// skipped for want of a server binary.
func TestMain(m *testing.M) { testclient.Main(m) }

// t0 is the instant every fake clock starts at.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	ms  = time.Millisecond
	sec = time.Second

	// patience bounds a wait in real time for something that should
	// happen within milliseconds: it only fails a hang.
	patience = time.Minute
)

// checkGoroutines fails t unless, when t ends (after the cleanups
// registered after this call: releasing remotes, closing clients, stopping
// servers), the number of goroutines comes back to what it is now within
// patience.
func checkGoroutines(t testing.TB) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(patience)
		for {
			n := runtime.NumGoroutine()
			if n <= base {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("%d goroutines are running, %d before the test; leaked:\n%s", n, base, buf)
				return
			}
			time.Sleep(5 * ms)
		}
	})
}
