package bench

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/spigot-go/spigot"
)

// A Spec is what one cell runs: how many goroutines send requests, over
// how many keys, for how long or how many requests.
type Spec struct {
	Concurrency int
	// Keys is the number of keys: with 1, every goroutine sends key 0;
	// with more, goroutine g walks keys g, g+Concurrency, g+2×Concurrency…
	// (modulo Keys), so that all are used and two goroutines share a key
	// only when there are fewer keys than goroutines.
	Keys int
	// Duration is how long the cell runs, when above 0; otherwise it runs
	// Requests requests in all.
	Duration time.Duration
	Requests int64
}

// A Result is what Run measured.
type Result struct {
	Elapsed                       time.Duration
	Ops, Errors, Admitted, Denied int64
	Latency                       Percentiles
	AllocsPerOp                   float64
	Costs                         Costs
	// Err is the first error a call returned, or the meter's.
	Err error
	// Interrupted is true when ctx ended the run early.
	Interrupted bool
}

// The range of the latency histogram: 100 ns to 100 s, 3 significant
// digits.
const (
	minLatency = 100
	maxLatency = int64(100 * time.Second)
)

// Run sends call as spec says and measures it: throughput, the latency of
// every request in a histogram, the process's allocations per request,
// the admitted and denied counts, and, with m, the CPU time per request of
// the client and the servers. It stops early, with what it measured, when
// ctx is done.
func Run(ctx context.Context, call Call, spec Spec, m *Meter) Result {
	if m == nil {
		m = &Meter{}
	}
	conc, keys := max(spec.Concurrency, 1), max(spec.Keys, 1)
	var (
		stop      atomic.Bool
		remaining atomic.Int64
		ops       atomic.Int64
		errs      atomic.Int64
		admitted  atomic.Int64
		first     atomic.Pointer[error]
		wg        sync.WaitGroup
	)
	remaining.Store(spec.Requests)
	hists := make([]*hdrhistogram.Histogram, conc)
	for g := range hists {
		hists[g] = hdrhistogram.New(minLatency, maxLatency, 3)
	}
	var res Result
	startReading, err := m.Read()
	if err != nil {
		return Result{Err: err}
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	if spec.Duration > 0 {
		t := time.AfterFunc(spec.Duration, func() { stop.Store(true) })
		defer t.Stop()
	}
	done := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer done()
	for g := range conc {
		wg.Go(func() {
			h := hists[g]
			i := g % keys
			var n, nerr, nok int64
			for !stop.Load() {
				if spec.Duration <= 0 && remaining.Add(-1) < 0 {
					break
				}
				t0 := time.Now()
				ok, err := call(ctx, i)
				h.RecordValue(int64(time.Since(t0)))
				n++
				switch {
				case err != nil:
					nerr++
					if first.Load() == nil {
						e := err // its own variable, so that err does not escape on every request
						first.CompareAndSwap(nil, &e)
					}
				case ok:
					nok++
				}
				if keys > 1 {
					i = (i + conc) % keys
				}
			}
			ops.Add(n)
			errs.Add(nerr)
			admitted.Add(nok)
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	res.Ops, res.Errors, res.Admitted = ops.Load(), errs.Load(), admitted.Load()
	res.Denied = res.Ops - res.Errors - res.Admitted
	if e := first.Load(); e != nil {
		res.Err = *e
	}
	res.Interrupted = ctx.Err() != nil
	all := hdrhistogram.New(minLatency, maxLatency, 3)
	for _, h := range hists {
		all.Merge(h)
	}
	res.Latency = PercentilesOf(all)
	if res.Ops > 0 {
		res.AllocsPerOp = float64(after.Mallocs-before.Mallocs) / float64(res.Ops)
	}
	endReading, err := m.Read()
	if err != nil && res.Err == nil {
		res.Err = err
	}
	res.Costs = Per(startReading, endReading, res.Ops)
	return res
}

// PercentilesOf returns the p50, p90, p99, p99.9 and max of h, in
// nanoseconds.
func PercentilesOf(h *hdrhistogram.Histogram) Percentiles {
	q := func(p float64) time.Duration { return time.Duration(h.ValueAtQuantile(p)) }
	return Percentiles{P50: q(50), P90: q(90), P99: q(99), P999: q(99.9), Max: time.Duration(h.Max())}
}

// Throughput returns n requests over elapsed, per second.
func Throughput(n int64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(n) / elapsed.Seconds()
}

// Pct returns x as a percentage of of, or 0 when of is 0.
func Pct(x, of float64) float64 {
	if of <= 0 {
		return 0
	}
	return 100 * x / of
}

// Roomy is the limit of a cell whose requests must all be admitted: a
// billion tokens, refilled a million a second.
var Roomy = spigot.MustBucket("bench", 1_000_000_000, spigot.PerSecond(1_000_000))

// DenyingLimit returns a limit under which a key sent perKey requests a
// second for run, each of cost tokens, sees about share of them denied:
// it refills (1-share)×perKey×cost tokens a second, and holds a twentieth
// of what it refills over run (at least cost), so that its first burst
// changes the share little. It fails for a share outside (0, 1) or a rate
// spigot cannot hold exactly.
func DenyingLimit(perKey, share float64, cost int64, run time.Duration) (spigot.Limit, error) {
	if share <= 0 || share >= 1 || math.IsNaN(share) {
		return spigot.Limit{}, fmt.Errorf("spigot: bench: a share of denials of %v: want above 0 and below 1", share)
	}
	if perKey <= 0 || math.IsInf(perKey, 0) || math.IsNaN(perKey) {
		return spigot.Limit{}, fmt.Errorf("spigot: bench: %v requests a second on each key: want above 0", perKey)
	}
	perSecond := (1 - share) * perKey * float64(max(cost, 1))
	// Tokens per 1000 s, so that slow rates stay exact to a thousandth.
	tokens := max(int64(math.Round(perSecond*1000)), 1)
	capacity := max(int64(math.Ceil(perSecond*run.Seconds()/20)), max(cost, 1))
	return spigot.NewBucket("bench", capacity, spigot.Per(tokens, 1000*time.Second))
}

// MaxAdmitted returns the most requests of cost tokens that l admits on
// keys keys over elapsed: on each key its capacity plus what its rate
// refilled, rounded down, divided by cost. No interval admits more (the
// model's bound), so a cell that admitted more found a bug.
func MaxAdmitted(l spigot.Limit, keys int, cost int64, elapsed time.Duration) int64 {
	if cost <= 0 {
		return math.MaxInt64
	}
	r := l.Rate()
	refilled := new(big.Int).Mul(big.NewInt(r.Tokens), big.NewInt(int64(elapsed)))
	refilled.Quo(refilled, big.NewInt(int64(r.Period)))
	perKey := new(big.Int).Add(refilled, big.NewInt(l.Capacity()))
	perKey.Quo(perKey, big.NewInt(cost))
	total := perKey.Mul(perKey, big.NewInt(int64(keys)))
	if !total.IsInt64() {
		return math.MaxInt64
	}
	return total.Int64()
}
