package testserver_test

import (
	"testing"

	"github.com/spigot-go/spigot/internal/tests/testclient"
)

// TestMain turns off go-redis's logging and says how many tests were
// skipped for want of a server binary.
func TestMain(m *testing.M) { testclient.Main(m) }
