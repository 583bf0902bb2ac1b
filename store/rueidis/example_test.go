package rueidis_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
	spigotrueidis "github.com/spigot-go/spigot/store/rueidis"
)

// Two limits on one request, per user and per tenant, applied all or
// nothing in one run of the script, on the server's clock: a request the
// user's limit denies costs the tenant nothing. TakeUpTo then serves a
// large request in part, and Refund gives back what work that failed
// took.
func Example() {
	user := spigot.MustBucket("user", 2, spigot.PerHour(2))
	tenant := spigot.MustBucket("tenant", 10, spigot.PerHour(10))
	ctx := context.Background()

	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{server}})
	if err != nil {
		fmt.Println("rueidis:", err)
		return
	}
	defer client.Close()
	s := spigotrueidis.New(client)

	group := spigot.NewGroup(s, user, tenant)
	for range 3 {
		d, err := group.Allow(ctx, "bob", "acme")
		fmt.Println("allowed:", d.Allowed(), err)
	}
	tenants := spigot.New(s, tenant)
	d, err := tenants.TakeUpTo(ctx, "acme", 20)
	fmt.Println("took:", d.N, "of 20", err)
	d, err = tenants.Refund(ctx, "acme", 3)
	fmt.Println("gave back:", d.N, "left:", d.Remaining, err)
	// Output:
	// allowed: true <nil>
	// allowed: true <nil>
	// allowed: false <nil>
	// took: 8 of 20 <nil>
	// gave back: 3 left: 3 <nil>
}

// Many goroutines at once on one key: with group commit (on by default)
// the requests that wait for one in flight go together in one run of the
// script, and each is decided as it would be alone, so exactly the
// bucket's capacity is admitted.
func Example_groupCommit() {
	limit := spigot.MustBucket("burst", 50, spigot.PerHour(1))
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{server}})
	if err != nil {
		fmt.Println("rueidis:", err)
		return
	}
	defer client.Close()
	limiter := spigot.New(spigotrueidis.New(client, store.WithGroupCommit(true)), limit)

	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if d, err := limiter.Allow(context.Background(), "hot"); err == nil && d.Allowed() {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Println("admitted:", admitted.Load(), "of 200")
	// Output:
	// admitted: 50 of 200
}
