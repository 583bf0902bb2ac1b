package httplimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
)

// BenchmarkSetHeaders measures the fields of one response, admitted, on
// one limit and on two, with the default headers. Compare with
// BenchmarkMiddleware's op=hand for the middleware's whole cost.
func BenchmarkSetHeaders(b *testing.B) {
	api := spigot.MustBucket("api", 100, spigot.PerSecond(10))
	user := spigot.MustBucket("per-user", 5, spigot.PerMinute(1))
	for _, limits := range [][]spigot.Limit{{api}, {api, user}} {
		var opts []Option
		rules := make([]int, len(limits))
		out := make([]spigot.Decision, len(limits))
		for i, l := range limits {
			opts = append(opts, By(l, nil))
			rules[i] = i
			out[i] = spigot.Decision{N: 1, Remaining: 3, ResetAfter: 9 * time.Second, RefillAfter: 1500 * time.Millisecond}
		}
		m := New(memoryless{}, opts...)
		h := make(map[string][]string)
		b.Run("limits="+strconv.Itoa(len(limits)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				clear(h)
				m.setHeaders(h, rules, limits, out, 0, out[0])
			}
		})
	}
}

// memoryless is a store that is never called.
type memoryless struct{}

func (memoryless) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	return spigot.Decision{}, nil
}

func (memoryless) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return nil
}
