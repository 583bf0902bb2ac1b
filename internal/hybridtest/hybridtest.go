// Package hybridtest holds what the tests of store/hybrid share across
// the modules they live in: the root module's, which need no server, and
// internal/tests', which run real servers.
package hybridtest

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store/hybrid"
)

// CheckGoroutines fails t unless, when t ends (after the cleanups
// registered after this call: releasing remotes, closing clients, stopping
// servers), the number of goroutines comes back to what it is now within
// patience.
func CheckGoroutines(t testing.TB, patience time.Duration) {
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
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// Healthy is an observer that fails t on any decision not by the remote and
// any remote error but one matching errors.ErrUnsupported (the remote's
// answer to what it cannot do, such as several ops in one DoMulti): with a
// healthy remote, the remote decides everything.
func Healthy(t testing.TB) hybrid.Observer {
	return hybrid.Observer{
		Decision: func(_ context.Context, op spigot.Op, p hybrid.Path, _ spigot.Decision) {
			if p != hybrid.PathRemote {
				t.Errorf("%v: a decision by %v with a healthy remote", op, p)
			}
		},
		RemoteError: func(_ context.Context, op spigot.Op, err error, latency time.Duration) {
			if !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("%v: remote error after %v with a healthy remote: %v", op, latency, err)
			}
		},
	}
}
