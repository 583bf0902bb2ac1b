package testserver

import "testing"

// TestMain says how many tests were skipped for want of a server binary.
func TestMain(m *testing.M) { Main(m) }

// For the tests of package testserver_test: SkipCount reports how many
// tests Binary has skipped because kind is missing; ForgetSkips forgets
// them, so that a test of Binary with a made-up kind leaves nothing for
// Main to report; Summary returns the lines Main would print.
var (
	SkipCount   = skipped.get
	ForgetSkips = skipped.forget
	Summary     = skipped.summary
)
