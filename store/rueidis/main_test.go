package rueidis_test

import (
	"testing"

	"github.com/spigot-go/spigot/internal/testserver"
)

// server is the address of the redis-server of the examples.
var server string

// TestMain starts the examples' server and says how many tests were
// skipped for want of a server binary.
func TestMain(m *testing.M) {
	testserver.MainWithServer(m, testserver.Redis, func(addr string) { server = addr })
}
