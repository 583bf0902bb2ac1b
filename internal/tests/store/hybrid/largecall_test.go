package hybrid_test

import (
	"testing"

	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store/hybrid"
)

// TestLargeCallIsBatchSize: the most ops of a call whose timeout counts
// against hybrid's breaker, by default, is what a Redis-protocol store
// sends in one script run, as WithLargeCall says.
func TestLargeCallIsBatchSize(t *testing.T) {
	if hybrid.DefaultLargeCall != wire.BatchSize {
		t.Errorf("hybrid.DefaultLargeCall is %d, wire.BatchSize %d: want them equal", hybrid.DefaultLargeCall, wire.BatchSize)
	}
}
