package valkey_test

import (
	"context"
	"fmt"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store"
	spigotvalkey "github.com/spigot-go/spigot/store/valkey"
)

// A login limiter shared by every replica of a service that uses the same
// Valkey server: 3 attempts per address, then one more every 20 seconds.
// The client has valkey-go's default options; the store uses no
// client-side caching, and a real server needs no DisableCache.
//
// WithClock makes the example's output fixed. In production leave it out:
// the store then reads the server's TIME, one clock for every replica.
func Example() {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		panic(err)
	}
	defer client.Close() // the store never closes it

	start := time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC)
	clk := clocktest.New(start)
	limiter := spigot.New(spigotvalkey.New(client, store.WithClock(clk)),
		spigot.MustBucket("login", 3, spigot.Per(1, 20*time.Second)))
	ctx := context.Background()

	for _, wait := range []time.Duration{0, 0, 0, 0, 5 * time.Second, 15 * time.Second} {
		clk.Advance(wait)
		d, err := limiter.Allow(ctx, "203.0.113.7")
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("+%v allowed=%v left=%d retry=%v\n", clk.Now().Sub(start), d.Allowed(), d.Remaining, d.RetryAfter)
	}
	n, err := client.Do(ctx, client.B().Exists().Key("spigot:login:203.0.113.7").Build()).AsInt64()
	fmt.Println("keys kept:", n, err)
	// Output:
	// +0s allowed=true left=2 retry=0s
	// +0s allowed=true left=1 retry=0s
	// +0s allowed=true left=0 retry=0s
	// +0s allowed=false left=0 retry=20s
	// +5s allowed=false left=0 retry=15s
	// +20s allowed=true left=0 retry=0s
	// keys kept: 1 <nil>
}

// Reset fills a bucket at once, in one round trip, and deletes its key:
// after a successful login, say, the address starts afresh. The Decision's
// N is the tokens it gave back, 0 for a bucket that was full. WithPrefix
// names the keys.
func Example_reset() {
	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	clk := clocktest.New(time.Date(2025, 1, 2, 9, 0, 0, 0, time.UTC))
	s := spigotvalkey.New(client, store.WithClock(clk), store.WithPrefix("app:"))
	signIn := spigot.New(s, spigot.MustBucket("signin", 3, spigot.Per(1, 20*time.Second)))
	ctx := context.Background()
	exists := func() int64 {
		n, _ := client.Do(ctx, client.B().Exists().Key("app:signin:alice").Build()).AsInt64()
		return n
	}

	d, err := signIn.AllowN(ctx, "alice", 2)
	fmt.Println("taken:", d.N, err, "key exists:", exists())
	d, err = signIn.Reset(ctx, "alice")
	fmt.Println("reset gave back:", d.N, err, "key exists:", exists())
	d, err = signIn.Allow(ctx, "alice")
	fmt.Println("allowed:", d.Allowed(), "remaining:", d.Remaining, err)
	// Output:
	// taken: 2 <nil> key exists: 1
	// reset gave back: 2 <nil> key exists: 0
	// allowed: true remaining: 2 <nil>
}

// A Peek, which changes nothing, is an EVALSHA_RO, which valkey-go sends
// to a replica when SendToReplicas says so of a read-only command: here a
// standalone primary and its replica. A Peek then sees what the replica
// has received of the primary's writes; every other operation goes to the
// primary.
func Example_replicas() {
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:    []string{"primary.example:6379"},
		Standalone:     valkey.StandaloneOption{ReplicaAddress: []string{"replica.example:6379"}},
		SendToReplicas: func(cmd valkey.Completed) bool { return cmd.IsReadOnly() },
	})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	quota := spigot.New(spigotvalkey.New(client), spigot.MustBucket("quota", 100, spigot.PerMinute(100)))
	d, err := quota.Peek(context.Background(), "acme", 1) // on the replica
	fmt.Println(d.Remaining, err)
}
