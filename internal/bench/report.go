package bench

import "time"

// A Report is what one run of spigot bench measured: every cell, the
// server's own ceiling beside them, and where it ran.
type Report struct {
	// Machine describes the client's machine: GOOS/GOARCH, the CPU and
	// GOMAXPROCS, as in "linux/amd64, 2 CPUs (AMD EPYC …), GOMAXPROCS 2".
	Machine string `json:"machine"`
	// Server describes the server: "redis-server 7.0.15 at 127.0.0.1:41234
	// (started by spigot bench)", "a cluster of 3 primaries at …", or
	// "miniredis (embedded)"; "" when only the memory store ran.
	Server string `json:"server,omitempty"`
	// Miniredis is true when the server is the embedded miniredis: then
	// no figure says anything of a real server, and every output says
	// "miniredis: not representative".
	Miniredis bool `json:"miniredis,omitempty"`
	// Interrupted is true when the run was stopped (Ctrl-C) before every
	// cell ran: the report holds the cells measured so far.
	Interrupted bool `json:"interrupted,omitempty"`
	// Cells are the measurements, in the order they ran: for each store,
	// each concurrency and each key count, the store and then, for a
	// Redis-protocol store, its client sending spigot's script raw.
	Cells []Cell `json:"cells"`
	// Ceilings are redis-benchmark's (or valkey-benchmark's) own
	// throughput of EVALSHA of spigot's script, one per concurrency and
	// pipeline depth; none when no such tool was on PATH.
	Ceilings []Ceiling `json:"ceilings,omitempty"`
}

// A Cell is one measurement: one store (or its raw baseline) at one
// concurrency on one key count.
type Cell struct {
	// Store is the store's name: memory, redis (go-redis), valkey
	// (valkey-go), rueidis or hybrid; for a baseline, the client's store
	// name with " raw" ("redis raw"): the same client sending EVALSHA of
	// spigot's script itself, so that the store's own cost is the
	// difference.
	Store string `json:"store"`
	// Baseline is true for a raw baseline.
	Baseline bool `json:"baseline,omitempty"`
	// Concurrency is the number of goroutines sending requests.
	Concurrency int `json:"concurrency"`
	// Keys is the number of keys the requests spread over (1: one hot
	// key).
	Keys int `json:"keys"`
	// Cost is the tokens each request takes.
	Cost int64 `json:"cost"`
	// Elapsed is how long the cell ran.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Ops is the number of requests sent, Errors those that failed.
	Ops    int64 `json:"ops"`
	Errors int64 `json:"errors"`
	// Throughput is Ops per second of Elapsed.
	Throughput float64 `json:"ops_per_sec"`
	// Latency is the distribution of the requests' latencies.
	Latency Percentiles `json:"latency"`
	// AllocsPerOp is the heap allocations of the whole process per
	// request (the client library's own goroutines included).
	AllocsPerOp float64 `json:"allocs_per_op"`
	// Admitted and Denied count the decisions (a baseline's raw replies
	// are decoded too). MaxAdmitted is the most requests the bucket
	// allowed over the run: the keys' capacity plus what the rate refilled
	// in Elapsed; Admitted above it is a bug, and the cell says so in
	// Note. It is 0 for a baseline.
	Admitted    int64 `json:"admitted"`
	Denied      int64 `json:"denied"`
	MaxAdmitted int64 `json:"max_admitted,omitempty"`
	// CeilingPct is Throughput as a percentage of the ceiling at the same
	// concurrency without pipelining (-P 1), and CeilingPipelinedPct of
	// the pipelined one; 0 when there is no ceiling.
	CeilingPct          float64 `json:"ceiling_pct,omitempty"`
	CeilingPipelinedPct float64 `json:"ceiling_pipelined_pct,omitempty"`
	// Primaries is, on a cluster, each primary's share of the scripts run
	// (in percent, in the order of Report.Server's primaries), and
	// RedirectsPerOp the MOVED or ASK replies per request.
	Primaries      []float64 `json:"primaries_pct,omitempty"`
	RedirectsPerOp float64   `json:"redirects_per_op,omitempty"`
	// Note says what is wrong with the cell, or "" ("miniredis: not
	// representative"; "admitted more than the bucket allows").
	Note string `json:"note,omitempty"`
}

// Percentiles of a latency distribution, from a histogram.
type Percentiles struct {
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
}

// A Ceiling is the server's own throughput of EVALSHA of spigot's script,
// by redis-benchmark or valkey-benchmark, at one concurrency (its -c) and
// pipeline depth (its -P).
type Ceiling struct {
	Tool        string  `json:"tool"`
	Concurrency int     `json:"concurrency"`
	Pipeline    int     `json:"pipeline"`
	Throughput  float64 `json:"ops_per_sec"`
}
