package testserver

import "testing"

// SkipShort skips tb under go test -short, saying why. -short is for a
// quick local loop: it leaves out the tests that start a cluster
// (StartCluster and StartClusterNode call SkipShort themselves) and the
// fault-injection tests, which kill, pause or restart servers and wait for
// them to recover. CI runs everything, without -short.
func SkipShort(tb testing.TB, why string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("testserver: skipped under -short: %s", why)
	}
}
