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
	// Ceilings are the server's own throughput of EVALSHA of spigot's
	// script, by redis-benchmark (or valkey-benchmark): one unpipelined
	// and one pipelined 16 deep, each the best of a few runs; none when no
	// such tool was on PATH, or on a cluster.
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
	// are decoded too). MaxAdmitted is the most requests the limits
	// allowed over the run: the keys' capacity plus what their rate
	// refilled in Elapsed; Admitted above it is a bug, and the cell says
	// so in Note. It is 0 for a baseline run without -deny.
	Admitted    int64 `json:"admitted"`
	Denied      int64 `json:"denied"`
	MaxAdmitted int64 `json:"max_admitted,omitempty"`
	// DenyAsked is the share of requests -deny asked to be denied (0 to
	// below 1), and DenyShare the share that was: Denied over Admitted
	// plus Denied. Both are 0 without -deny. A DenyShare more than
	// DenyTolerance from DenyAsked has the warning "deny_share_off".
	DenyAsked float64 `json:"deny_asked,omitempty"`
	DenyShare float64 `json:"deny_share,omitempty"`
	// Pipelines is true for a client that pipelines concurrent requests
	// on shared connections (valkey-go, rueidis): its ceiling is the
	// pipelined one. Otherwise (go-redis, one request per pooled
	// connection) its ceiling is the unpipelined one.
	Pipelines bool `json:"pipelines,omitempty"`
	// GroupCommit is true for a store with group commit, which sends the
	// requests that queue behind one in flight together, several to a
	// script run: no ceiling of one script per request bounds it, so it
	// has no own ceiling, and never the warning "above_ceiling".
	GroupCommit bool `json:"group_commit,omitempty"`
	// CeilingPct is Throughput as a percentage of the unpipelined ceiling
	// (-P 1), and CeilingPipelinedPct of the pipelined one; 0 when there
	// is no ceiling. Above 100 on its own ceiling (see Pipelines), the
	// cell has the warning "above_ceiling".
	CeilingPct          float64 `json:"ceiling_pct,omitempty"`
	CeilingPipelinedPct float64 `json:"ceiling_pipelined_pct,omitempty"`
	// OtherCPUPct is the CPU time that neither spigot bench nor a server
	// on this machine used while the cell ran (other processes, a
	// hypervisor's steal; not interrupts, which the kernel does not
	// attribute), as a percentage of all the machine's CPUs over the
	// cell's wall time, from /proc/stat. It is
	// absent where it cannot be known: off Linux, and for a cell too short
	// to judge (see MinJudgedTicks). At BusyPct or more, the cell has the
	// warning "machine_busy".
	OtherCPUPct *float64 `json:"other_cpu_pct,omitempty"`
	// Warnings say why the cell's figures may not be trusted; none when
	// nothing is known against them. See Warning.
	Warnings []Warning `json:"warnings,omitempty"`
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
// by redis-benchmark or valkey-benchmark, at one pipeline depth (its -P):
// the best of a few runs with more connections (-c) and client threads
// (--threads), stopped at the first that saturates the server.
type Ceiling struct {
	Tool string `json:"tool"`
	// Concurrency is the connections (-c), Threads the client's threads
	// (--threads; 1 without), Pipeline the requests per round trip (-P)
	// of the best run.
	Concurrency int     `json:"concurrency"`
	Threads     int     `json:"threads"`
	Pipeline    int     `json:"pipeline"`
	Throughput  float64 `json:"ops_per_sec"`
	// ServerCPUPct is the CPU time of the server's main thread (the one
	// that runs scripts) over the run's wall time, in percent of one
	// core, from INFO cpu; Saturated is true when it reached SaturatedPct:
	// then the server, not the client, set the ceiling. A ceiling that
	// is not saturated is a floor of what the server can do, and has the
	// warning "ceiling_unsaturated".
	ServerCPUPct float64 `json:"server_cpu_pct"`
	Saturated    bool    `json:"saturated"`
	// OtherCPUPct is as a Cell's, over the best run: redis-benchmark
	// counts as spigot bench's own.
	OtherCPUPct *float64 `json:"other_cpu_pct,omitempty"`
	// Runs is how many runs the search made at this depth.
	Runs     int       `json:"runs"`
	Warnings []Warning `json:"warnings,omitempty"`
}

// A Warning says why a figure of a report may not be trusted: a stable
// Code, for machines, and a Detail in words, with the figures.
//
// The codes are:
//
//   - "above_ceiling" (a cell): its throughput is above its own ceiling
//     (see Cell.Pipelines). A client cannot pass what the server does,
//     so that ceiling did not measure the server's limit, or the
//     machine's load changed between the cell and the ceiling.
//   - "machine_busy" (a cell or a ceiling): other work took BusyPct or
//     more of the machine's CPUs while it ran (see Cell.OtherCPUPct): on
//     a machine the client and the server share, its throughput and
//     latency say as much of that work as of spigot.
//   - "deny_share_off" (a cell): the share of requests denied is more
//     than DenyTolerance from what -deny asked (see Cell.DenyShare).
//   - "ceiling_unsaturated" (a ceiling): the server's main thread used
//     less than SaturatedPct of a core in its best run, so the client
//     (redis-benchmark, or the CPU it shares with the server) set that
//     figure, not the server; it is a floor of the server's ceiling.
type Warning struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// The warnings' codes.
const (
	AboveCeiling       = "above_ceiling"
	MachineBusy        = "machine_busy"
	DenyShareOff       = "deny_share_off"
	CeilingUnsaturated = "ceiling_unsaturated"
)
