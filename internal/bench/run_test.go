package bench_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/bench"
	"github.com/spigot-go/spigot/store/memory"
)

func keys(n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = "k" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
	}
	return k
}

// TestRunMemory: a cell on the memory store counts every request, and the
// bucket limited exactly what it allows.
func TestRunMemory(t *testing.T) {
	limit := spigot.MustBucket("cell", 50, spigot.PerHour(1))
	ks := keys(10)
	for i, c := range []struct {
		conc, keys int
		requests   int64
		admitted   int64 // -1: at most 500, as the goroutines share the requests unevenly
	}{
		{1, 1, 100, 50},    // one hot key: its 50
		{1, 10, 1000, 500}, // 10 keys, 100 each: 50 each
		{1, 10, 90, 90},    // 9 each: all admitted
		{4, 10, 1000, -1},
		{16, 10, 1000, -1}, // more goroutines than keys
	} {
		res := bench.Run(t.Context(), bench.Take(memory.New(), limit, 1, ks), bench.Spec{Concurrency: c.conc, Keys: c.keys, Requests: c.requests}, nil)
		want := c.admitted
		if want < 0 {
			want = min(res.Admitted, 500)
		}
		if res.Err != nil || res.Ops != c.requests || res.Admitted != want || res.Denied != c.requests-want || res.Errors != 0 {
			t.Errorf("step %d: got ops %d, admitted %d, denied %d, errors %d, err %v; want %d, %d, %d, 0", i+1, res.Ops, res.Admitted, res.Denied, res.Errors, res.Err, c.requests, want, c.requests-want)
		}
		if most := bench.MaxAdmitted(limit, c.keys, 1, res.Elapsed); res.Admitted > most {
			t.Errorf("step %d: admitted %d, more than the bound %d", i+1, res.Admitted, most)
		}
		l := res.Latency
		if !(0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Errorf("step %d: latency percentiles %+v; want 0 < p50 ≤ p90 ≤ p99 ≤ p99.9 ≤ max", i+1, l)
		}
		if res.Elapsed <= 0 || res.AllocsPerOp < 0 || res.Interrupted {
			t.Errorf("step %d: elapsed %v, allocs/op %v, interrupted %v", i+1, res.Elapsed, res.AllocsPerOp, res.Interrupted)
		}
	}
}

// TestRunDuration: a cell of a duration stops by itself.
func TestRunDuration(t *testing.T) {
	res := bench.Run(t.Context(), bench.Take(memory.New(), bench.Roomy, 1, keys(4)), bench.Spec{Concurrency: 2, Keys: 4, Duration: 20 * time.Millisecond}, nil)
	if res.Ops == 0 || res.Admitted != res.Ops || res.Elapsed < 20*time.Millisecond || res.Err != nil {
		t.Errorf("got %d ops, %d admitted in %v, %v; want some, all admitted, in at least 20ms", res.Ops, res.Admitted, res.Elapsed, res.Err)
	}
	// The runner itself allocates nothing per request: what the memory
	// store allocates on its 4 new keys, over thousands of requests.
	if res.Ops > 10_000 && res.AllocsPerOp > 0.01 {
		t.Errorf("%v allocations per request on the memory store; want about 0", res.AllocsPerOp)
	}
}

// TestRunInterrupted: a cancelled context ends a cell early, with what it
// measured.
func TestRunInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var n atomic.Int64
	call := func(ctx context.Context, i int) (bool, error) {
		if n.Add(1) == 100 {
			cancel()
		}
		return true, nil
	}
	res := bench.Run(ctx, call, bench.Spec{Concurrency: 2, Keys: 1, Duration: time.Hour}, nil)
	if !res.Interrupted || res.Ops < 100 || res.Ops != res.Admitted {
		t.Errorf("got interrupted %v, %d ops, %d admitted; want interrupted after at least 100", res.Interrupted, res.Ops, res.Admitted)
	}
}

// TestRunErrors: failed calls are counted, the first error kept.
func TestRunErrors(t *testing.T) {
	boom := errors.New("boom")
	call := func(ctx context.Context, i int) (bool, error) {
		if i%2 == 1 {
			return false, boom
		}
		return i == 0, nil
	}
	res := bench.Run(t.Context(), call, bench.Spec{Concurrency: 1, Keys: 4, Requests: 8}, nil)
	if res.Ops != 8 || res.Errors != 4 || res.Admitted != 2 || res.Denied != 2 || !errors.Is(res.Err, boom) {
		t.Errorf("got ops %d, errors %d, admitted %d, denied %d, err %v; want 8, 4, 2, 2, boom", res.Ops, res.Errors, res.Admitted, res.Denied, res.Err)
	}
}

// TestPercentilesOf: the percentiles of a known distribution, within the
// histogram's three significant digits.
func TestPercentilesOf(t *testing.T) {
	h := hdrhistogram.New(100, int64(100*time.Second), 3)
	for v := int64(1); v <= 10_000; v++ {
		h.RecordValue(v * int64(time.Microsecond)) // 1 µs to 10 ms, evenly
	}
	p := bench.PercentilesOf(h)
	for i, c := range []struct {
		got, want time.Duration
	}{
		{p.P50, 5 * time.Millisecond},
		{p.P90, 9 * time.Millisecond},
		{p.P99, 9900 * time.Microsecond},
		{p.P999, 9990 * time.Microsecond},
		{p.Max, 10 * time.Millisecond},
	} {
		if diff := math.Abs(float64(c.got-c.want)) / float64(c.want); diff > 0.002 {
			t.Errorf("step %d: got %v; want %v within 0.2%%", i+1, c.got, c.want)
		}
	}
}

// TestRunDenyShare: with -deny, the share of requests sent to the
// emptied buckets is exact by construction: to the request with one
// goroutine, within one request a goroutine with more, and every one of
// them denied.
func TestRunDenyShare(t *testing.T) {
	for i, c := range []struct {
		conc, keys int
		requests   int64
		share      float64
		denied     int64 // with one goroutine: exactly
	}{
		{1, 1, 1000, 0.2, 200},
		{1, 10, 1000, 0.5, 500},
		{1, 7, 999, 0.9, 899}, // floor(999×0.9)
		{1, 3, 10, 0.05, 0},   // not yet a whole request
		{4, 10, 1000, 0.2, -1},
		{16, 5, 2000, 0.35, -1}, // more goroutines than keys
		{64, 100, 100, 0.5, -1}, // about one request a goroutine: the staggered starts
	} {
		s := memory.New()
		ex, err := bench.Exhausted(2)
		if err != nil {
			t.Fatal(err)
		}
		denyKeys := keys(c.keys)
		for k := range denyKeys {
			denyKeys[k] = "deny-" + denyKeys[k]
		}
		if err := bench.Drain(t.Context(), bench.Take(s, ex, 2, denyKeys), c.keys, 8); err != nil {
			t.Fatalf("step %d: Drain: %v", i+1, err)
		}
		spec := bench.Spec{Concurrency: c.conc, Keys: c.keys, Requests: c.requests, Denied: bench.Take(s, ex, 2, denyKeys), DenyShare: c.share}
		res := bench.Run(t.Context(), bench.Take(s, bench.Roomy, 2, keys(c.keys)), spec, nil)
		if res.Err != nil || res.Ops != c.requests || res.Admitted+res.Denied != res.Ops || res.DeniedAdmitted != 0 {
			t.Fatalf("step %d: got ops %d, admitted %d, denied %d, admitted on emptied keys %d, err %v; want %d ops, all decided, none admitted on emptied keys",
				i+1, res.Ops, res.Admitted, res.Denied, res.DeniedAdmitted, res.Err, c.requests)
		}
		if c.denied >= 0 {
			if res.Denied != c.denied {
				t.Errorf("step %d: got %d denied; want exactly %d", i+1, res.Denied, c.denied)
			}
			continue
		}
		// Each goroutine is within one request of its share.
		if want := c.share * float64(c.requests); math.Abs(float64(res.Denied)-want) >= float64(c.conc) {
			t.Errorf("step %d: got %d denied; want %v give or take fewer than %d", i+1, res.Denied, want, c.conc)
		}
	}
}

// TestRunDeniedAdmitted: a request sent to an emptied bucket that is
// admitted is counted apart, as the bug it is.
func TestRunDeniedAdmitted(t *testing.T) {
	admit := func(ctx context.Context, i int) (bool, error) { return true, nil }
	res := bench.Run(t.Context(), admit, bench.Spec{Concurrency: 1, Keys: 1, Requests: 10, Denied: admit, DenyShare: 0.3}, nil)
	if res.Admitted != 10 || res.DeniedAdmitted != 3 {
		t.Errorf("got %d admitted, %d of them on emptied keys; want 10 and 3", res.Admitted, res.DeniedAdmitted)
	}
}

// TestDrain: Drain empties every key once, and fails on a key that was
// not full, on an error, and when its context is done.
func TestDrain(t *testing.T) {
	s := memory.New()
	ex, err := bench.Exhausted(3)
	if err != nil {
		t.Fatal(err)
	}
	ks := keys(50)
	if err := bench.Drain(t.Context(), bench.Take(s, ex, 3, ks), len(ks), 8); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	for i, k := range ks {
		d, err := s.Do(t.Context(), spigot.Op{Limit: ex, Key: k, Action: spigot.Take, N: 1})
		if err != nil || d.Allowed() {
			t.Errorf("step %d: key %s after Drain: allowed %v, %v; want denied", i+1, k, d.Allowed(), err)
		}
	}
	if err := bench.Drain(t.Context(), bench.Take(s, ex, 3, ks), len(ks), 8); err == nil || !strings.HasPrefix(err.Error(), "spigot: bench: draining key ") {
		t.Errorf("Drain of drained keys: got %v; want an error naming a key", err)
	}
	boom := errors.New("boom")
	if err := bench.Drain(t.Context(), func(context.Context, int) (bool, error) { return false, boom }, 5, 2); !errors.Is(err, boom) {
		t.Errorf("Drain with a failing call: got %v; want boom", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := bench.Drain(ctx, bench.Take(s, ex, 3, keys(5)), 5, 2); !errors.Is(err, context.Canceled) {
		t.Errorf("Drain on a done context: got %v; want context.Canceled", err)
	}
}

// TestExhausted: the emptied buckets' limit, and the costs it cannot
// hold.
func TestExhausted(t *testing.T) {
	for i, c := range []struct {
		cost int64
		want string
	}{
		{1, "bench-exhausted(cap 1, 1/h)"},
		{0, "bench-exhausted(cap 1, 1/h)"},
		{2_501_999, "bench-exhausted(cap 2501999, 1/h)"},
		{2_502_000, "spigot: invalid limit"},
	} {
		l, err := bench.Exhausted(c.cost)
		got := l.String()
		if err != nil {
			got = err.Error()
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("step %d: Exhausted(%d) = %s; want %s…", i+1, c.cost, got, c.want)
		}
	}
}

// TestMaxAdmitted: the model's bound over a run.
func TestMaxAdmitted(t *testing.T) {
	for i, c := range []struct {
		limit   spigot.Limit
		keys    int
		cost    int64
		elapsed time.Duration
		want    int64
	}{
		{spigot.MustBucket("a", 10, spigot.PerSecond(1)), 1, 1, 0, 10},
		{spigot.MustBucket("a", 10, spigot.PerSecond(1)), 1, 1, 2500 * time.Millisecond, 12},
		{spigot.MustBucket("a", 10, spigot.PerSecond(1)), 3, 1, 2500 * time.Millisecond, 36},
		{spigot.MustBucket("a", 10, spigot.PerSecond(1)), 3, 4, 2500 * time.Millisecond, 9}, // 12 tokens: 3 requests of 4, on each key
		{spigot.MustBucket("a", 5, spigot.Per(7, 10*time.Second)), 2, 1, time.Minute, 2 * (5 + 42)},
		{bench.Roomy, 100_000, 1, time.Hour, 100_000 * (1_000_000_000 + 3_600_000_000)},
	} {
		if got := bench.MaxAdmitted(c.limit, c.keys, c.cost, c.elapsed); got != c.want {
			t.Errorf("step %d: MaxAdmitted(%v, %d keys, cost %d, %v) = %d; want %d", i+1, c.limit, c.keys, c.cost, c.elapsed, got, c.want)
		}
	}
}

// TestRatios: throughput and percentages of a ceiling.
func TestRatios(t *testing.T) {
	if got := bench.Throughput(500, 250*time.Millisecond); got != 2000 {
		t.Errorf("Throughput(500, 250ms) = %v; want 2000", got)
	}
	if got := bench.Throughput(5, 0); got != 0 {
		t.Errorf("Throughput(5, 0) = %v; want 0", got)
	}
	if got := bench.Pct(30_000, 120_000); got != 25 {
		t.Errorf("Pct(30000, 120000) = %v; want 25", got)
	}
	if got := bench.Pct(1, 0); got != 0 {
		t.Errorf("Pct(1, 0) = %v; want 0", got)
	}
}

// TestPer: the costs per request between two readings, and how the
// scripts spread over three primaries.
func TestPer(t *testing.T) {
	start := bench.Reading{Client: time.Second, Server: 2 * time.Second, ScriptTime: time.Second,
		Scripts: []int64{10, 20, 30}, Rejected: []int64{0, 1, 2}}
	end := bench.Reading{Client: time.Second + 100*time.Millisecond, Server: 2*time.Second + 300*time.Millisecond, ScriptTime: time.Second + 50*time.Millisecond,
		Scripts: []int64{10 + 500, 20 + 300, 30 + 200}, Rejected: []int64{0, 1 + 10, 2}}
	c := bench.Per(start, end, 1000)
	if c.ClientCPU != 100*time.Microsecond || c.ServerCPU != 300*time.Microsecond || c.ScriptTime != 50*time.Microsecond {
		t.Errorf("per request: client %v, server %v, script %v; want 100µs, 300µs, 50µs", c.ClientCPU, c.ServerCPU, c.ScriptTime)
	}
	if len(c.Shares) != 3 || c.Shares[0] != 50 || c.Shares[1] != 30 || c.Shares[2] != 20 || math.Abs(c.MaxShareDev-(50-100.0/3)) > 1e-9 {
		t.Errorf("shares %v, max dev %v; want 50, 30, 20 and 16.67", c.Shares, c.MaxShareDev)
	}
	if c.ScriptsPerOp != 1 || c.RedirectsPerOp != 0.01 {
		t.Errorf("scripts/op %v, redirects/op %v; want 1 and 0.01", c.ScriptsPerOp, c.RedirectsPerOp)
	}
}
