package spigot_test

import (
	"testing"

	"github.com/spigot-go/spigot/internal/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
)

// TestMain keeps go-redis from logging the dials its clients retry while a
// test's server is down, and says how many tests were skipped for want of
// a server binary.
func TestMain(m *testing.M) {
	testclient.Quiet()
	testserver.Main(m)
}
