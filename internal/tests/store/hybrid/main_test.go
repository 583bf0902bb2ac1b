package hybrid_test

import (
	"testing"
	"time"

	"github.com/spigot-go/spigot/internal/tests/testclient"
)

// TestMain turns off go-redis's logging and says how many tests were
// skipped for want of a server binary.
func TestMain(m *testing.M) { testclient.Main(m) }

// t0 is the instant every fake clock starts at.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	ms  = time.Millisecond
	sec = time.Second

	// patience bounds a wait in real time for something that should
	// happen within milliseconds: it only fails a hang.
	patience = time.Minute
)
