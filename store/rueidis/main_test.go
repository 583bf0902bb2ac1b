package rueidis_test

import (
	"testing"

	"github.com/spigot-go/spigot/internal/testserver"
)

// TestMain says how many tests were skipped for want of a server binary.
func TestMain(m *testing.M) { testserver.Main(m) }
