// Package lease_test proves store/lease on real servers: the global limit
// holds across replicas while one is killed or the server paused, uneven
// traffic is served about as a central bucket would, and what leases save
// against the central and hybrid stores.
package lease_test

import (
	"testing"

	"github.com/spigot-go/spigot/internal/tests/testclient"
)

// TestMain turns off go-redis's logging and says how many tests were
// skipped for want of a server binary.
func TestMain(m *testing.M) { testclient.Main(m) }
