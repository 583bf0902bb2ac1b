package peers

import (
	"testing"

	"github.com/spigot-go/spigot/internal/testserver"
)

// TestMain says how many benchmarks were skipped for want of a server
// binary.
func TestMain(m *testing.M) { testserver.Main(m) }
