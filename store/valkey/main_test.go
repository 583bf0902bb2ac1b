package valkey_test

import (
	"testing"

	"github.com/spigot-go/spigot/internal/testserver"
)

// addr is the address of the valkey-server that the examples use.
var addr string

// TestMain starts the examples' server and says how many tests were
// skipped for want of a server binary.
func TestMain(m *testing.M) {
	testserver.MainWithServer(m, testserver.Valkey, func(a string) { addr = a })
}
