package bench_test

import (
	"context"
	"fmt"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/bench"
	"github.com/spigot-go/spigot/store/memory"
)

// A cell on the memory store: 20 requests on 2 keys of a bucket of 5,
// from one goroutine; the bucket admits 5 on each key, and never more
// than its bound.
func Example() {
	limit := spigot.MustBucket("cell", 5, spigot.PerHour(1))
	call := bench.Take(memory.New(), limit, 1, []string{"a", "b"})
	res := bench.Run(context.Background(), call, bench.Spec{Concurrency: 1, Keys: 2, Requests: 20}, nil)
	fmt.Println(res.Ops, res.Admitted, res.Denied, res.Admitted <= bench.MaxAdmitted(limit, 2, 1, res.Elapsed))
	fmt.Println(bench.FormatDuration(812*time.Microsecond), bench.FormatDuration(1234*time.Microsecond))
	// Output:
	// 20 10 10 true
	// 812µs 1.2ms
}
