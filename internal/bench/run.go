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
	// Denied, with DenyShare above 0, is the call of the requests that
	// must be denied (on keys whose limit is exhausted, by Drain): of
	// each goroutine's requests, a share DenyShare, spread evenly, goes
	// to Denied rather than to the call, on the same key index. The share
	// is exact by construction, not by timing: after n requests a
	// goroutine has sent DenyShare×n of them to Denied, give or take
	// one, and the goroutines start at staggered points so that their
	// roundings do not add up.
	Denied    Call
	DenyShare float64
}

// A Result is what Run measured.
type Result struct {
	Elapsed                       time.Duration
	Ops, Errors, Admitted, Denied int64
	Latency                       Percentiles
	AllocsPerOp                   float64
	Costs                         Costs
	// DeniedAdmitted counts the requests sent to Spec.Denied that were
	// admitted (they are counted in Admitted too).
	DeniedAdmitted int64
	// OtherCPUPct is the share of the machine's CPUs that work other
	// than the run's own took while it ran (see OtherPct and
	// Meter.Local), or nil when it cannot be known.
	OtherCPUPct *float64
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
		wrongful  atomic.Int64 // admitted by Denied
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
	// The share of Denied's requests in millionths, and each goroutine's
	// running sum of it: a request goes to Denied when the sum passes a
	// million.
	var share int64
	if spec.Denied != nil && spec.DenyShare > 0 {
		share = min(int64(math.Round(spec.DenyShare*denyScale)), denyScale)
	}
	for g := range conc {
		wg.Go(func() {
			h := hists[g]
			i := g % keys
			var n, nerr, nok, nwrong int64
			sum := int64(g) * denyScale / int64(conc) // staggered
			for !stop.Load() {
				if spec.Duration <= 0 && remaining.Add(-1) < 0 {
					break
				}
				c, deny := call, false
				if share > 0 {
					if sum += share; sum >= denyScale {
						sum -= denyScale
						c, deny = spec.Denied, true
					}
				}
				t0 := time.Now()
				ok, err := c(ctx, i)
				h.RecordValue(int64(time.Since(t0)))
				if ok && err == nil && deny {
					nwrong++
				}
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
			wrongful.Add(nwrong)
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	res.Ops, res.Errors, res.Admitted, res.DeniedAdmitted = ops.Load(), errs.Load(), admitted.Load(), wrongful.Load()
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
	if other, ok := OtherPct(startReading.Machine, endReading.Machine, m.Own(startReading, endReading), endReading.At.Sub(startReading.At)); ok {
		res.OtherCPUPct = &other
	}
	return res
}

// denyScale is the unit of Run's running sums of DenyShare: a million.
const denyScale = 1_000_000

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

// Exhausted returns the limit of the keys that -deny sends requests to: a
// bucket of cost tokens that refills one an hour. Once Drain has taken
// each key's cost, every request of cost on it is denied, as a request
// over a real limit is (the script reads the key, refills it and
// denies), for an hour a token. It fails for a cost too large for a
// bucket refilled one token an hour (more than 2^53 scaled units).
func Exhausted(cost int64) (spigot.Limit, error) {
	return spigot.NewBucket("bench-exhausted", max(cost, 1), spigot.PerHour(1))
}

// Drain sends call once on each of keys key indexes, from up to
// concurrency goroutines, and fails unless every request was admitted:
// with call a Take of cost on Exhausted(cost) keys, it empties them. It
// stops at the first failure, and when ctx is done.
func Drain(ctx context.Context, call Call, keys, concurrency int) error {
	var (
		next  atomic.Int64
		first atomic.Pointer[error]
		wg    sync.WaitGroup
	)
	for range max(1, min(concurrency, keys)) {
		wg.Go(func() {
			for first.Load() == nil && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= keys {
					return
				}
				ok, err := call(ctx, i)
				if err == nil && !ok {
					err = fmt.Errorf("spigot: bench: draining key %d: denied; want a full bucket", i)
				}
				if err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return *e
	}
	return ctx.Err()
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
