package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
)

// A lease Store in front of a shared store (here a memory store, in place
// of Redis): a busy key's requests are decided from leases, and Close
// gives the unspent tokens back.
func Example() {
	shared := memory.New()
	s := lease.New(shared)
	limiter := spigot.New(s, spigot.MustBucket("api", 100, spigot.Per(100, time.Hour)))
	ctx := context.Background()

	admitted := 0
	for range 120 {
		if d, err := limiter.Allow(ctx, "tenant-7"); err == nil && d.Allowed() {
			admitted++
		}
	}
	if err := s.Close(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println("admitted:", admitted)
	// Output: admitted: 100
}
