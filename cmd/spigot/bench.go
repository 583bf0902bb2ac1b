package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/bench"
	"github.com/spigot-go/spigot/internal/resp"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	spigotredis "github.com/spigot-go/spigot/store/redis"
)

// benchStores are the stores spigot bench knows, in the order it runs
// them, with the client library of each Redis-protocol one.
var benchStores = []struct{ name, client string }{
	{"memory", ""},
	{"redis", "go-redis"},
	{"valkey", "valkey-go"},
	{"rueidis", "rueidis"},
	{"hybrid", "go-redis"},
}

// benchFlags are spigot bench's flags, parsed and checked.
type benchFlags struct {
	stores      []string
	addr        string
	cluster     []string
	concurrency []int
	keys        []int
	cost        int64
	deny        float64
	duration    time.Duration
	requests    int64
	json        bool
	plot        string
}

// parseBench parses spigot bench's command line. It returns flag.ErrHelp
// for -h, and otherwise an error that names the flag to change.
func parseBench(args []string, stdout io.Writer) (*benchFlags, error) {
	const prog = "spigot bench"
	fs := newFlagSet(prog)
	stores := fs.String("stores", "all", "the `stores` to measure, comma-separated: memory, redis (go-redis), valkey (valkey-go), rueidis, hybrid (go-redis in front of memory), or all")
	addr := fs.String("addr", "", "the Redis or Valkey server's `address`; without one, spigot bench starts a redis-server or valkey-server from PATH (or an embedded miniredis)")
	cluster := fs.String("cluster", "", "a Redis or Valkey Cluster's seed `addresses`, comma-separated, instead of -addr")
	conc := fs.String("c", "1,16,64", "the concurrency `levels`: goroutines sending requests, comma-separated")
	keys := fs.String("keys", "1,10000", "the key `counts`, comma-separated: 1 is one hot key")
	cost := fs.Int64("cost", 1, "the tokens each request takes, 1 or more")
	deny := fs.Float64("deny", 0, "the `share` of requests the bucket should deny, from 0 to below 1 (by choosing its rate from a first short run)")
	duration := fs.Duration("duration", 2*time.Second, "how long each cell runs")
	requests := fs.Int64("n", 0, "the `requests` each cell sends, instead of -duration")
	jsonOut := fs.Bool("json", false, "print the report as JSON instead of a table")
	plot := fs.String("plot", "", "draw throughput and p99 latency against concurrency into `file`.svg or file.png")
	if err := parseFlags(fs, args, stdout, "usage: spigot bench [flags]\n\n"+
		"Bench measures each store against a Redis or Valkey server (or cluster),\n"+
		"beside its client sending spigot's script raw and the server's own\n"+
		"ceiling (redis-benchmark), for every concurrency and key count.\n\n"); err != nil {
		return nil, err
	}
	f := &benchFlags{addr: *addr, cost: *cost, deny: *deny, duration: *duration, requests: *requests, json: *jsonOut, plot: *plot}
	var err error
	if f.stores, err = parseStores(*stores); err != nil {
		return nil, err
	}
	if *cluster != "" {
		if f.addr != "" {
			return nil, errors.New("-addr and -cluster: give one or the other")
		}
		f.cluster = strings.Split(*cluster, ",")
	}
	if f.concurrency, err = parseInts("-c", *conc, 1, 100_000); err != nil {
		return nil, err
	}
	if f.keys, err = parseInts("-keys", *keys, 1, 100_000_000); err != nil {
		return nil, err
	}
	switch {
	case f.cost < 1:
		return nil, fmt.Errorf("-cost %d: want 1 or more", f.cost)
	case !(f.deny >= 0 && f.deny < 1):
		return nil, fmt.Errorf("-deny %v: want a share from 0 to below 1, such as 0.2", f.deny)
	case f.requests < 0:
		return nil, fmt.Errorf("-n %d: want 1 or more requests", f.requests)
	case f.requests == 0 && f.duration <= 0:
		return nil, fmt.Errorf("-duration %v: want a positive duration, or -n", f.duration)
	case f.plot != "" && !strings.HasSuffix(f.plot, ".svg") && !strings.HasSuffix(f.plot, ".png"):
		return nil, fmt.Errorf("-plot %q: want a file ending in .svg or .png", f.plot)
	}
	if f.requests > 0 {
		f.duration = 0
	}
	return f, nil
}

func parseStores(s string) ([]string, error) {
	if s == "all" {
		var all []string
		for _, st := range benchStores {
			all = append(all, st.name)
		}
		return all, nil
	}
	var out []string
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		if !slices.ContainsFunc(benchStores, func(st struct{ name, client string }) bool { return st.name == name }) {
			return nil, fmt.Errorf("-stores: unknown store %q; want memory, redis, valkey, rueidis, hybrid or all", name)
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

func parseInts(flagName, s string, lo, hi int) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%s %q: want whole numbers from %d to %d, comma-separated, such as 1,16,64", flagName, s, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

func benchCmd(args []string, stdout, stderr io.Writer) int {
	const prog = "spigot bench"
	f, err := parseBench(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return usageError(stderr, prog, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	report, err := runBench(ctx, f, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, strings.TrimPrefix(err.Error(), "spigot: bench: "))
		if report == nil {
			return 1
		}
	}
	if f.json {
		err = bench.WriteJSON(stdout, report)
	} else {
		err = bench.WriteTable(stdout, report)
	}
	if err == nil && f.plot != "" {
		if err = bench.WritePlot(f.plot, report); err == nil {
			fmt.Fprintf(stderr, "%s: plot written to %s\n", prog, f.plot)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	if report.Interrupted {
		return 130
	}
	return 0
}

// target is one store to measure, and its raw baseline.
type target struct {
	name  string
	store spigot.Store
	raw   func(sha string, limit spigot.Limit, cost int64, keys []string) bench.Call
}

// runBench measures what f says, and returns the report, with what it
// measured so far when it fails or is interrupted.
func runBench(ctx context.Context, f *benchFlags, stderr io.Writer) (*bench.Report, error) {
	report := &bench.Report{Machine: machine()}
	needServer := slices.ContainsFunc(f.stores, func(s string) bool { return s != "memory" })
	var addrs []string
	var meter bench.Meter
	var ceilingTool string
	switch {
	case !needServer:
	case len(f.cluster) > 0:
		primaries, err := clusterPrimaries(f.cluster)
		if err != nil {
			return nil, err
		}
		addrs, meter.Serving = f.cluster, primaries
		report.Server = fmt.Sprintf("a cluster of %d primaries (%s), seeds %s", len(primaries), strings.Join(primaries, ", "), strings.Join(f.cluster, ","))
	case f.addr != "":
		if err := resp.Ping(f.addr); err != nil {
			return nil, fmt.Errorf("cannot reach a server at %s: %v", f.addr, err)
		}
		addrs, meter.Serving = []string{f.addr}, []string{f.addr}
		report.Server = bench.Describe(f.addr)
		ceilingTool = findBenchmarkTool(report.Server)
	default:
		srv, err := bench.StartLocal()
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		addrs, meter.Serving = []string{srv.Addr}, []string{srv.Addr}
		report.Server = srv.Name + " at " + srv.Addr + " (started by spigot bench)"
		report.Miniredis = srv.Miniredis
		ceilingTool = srv.Benchmark
		fmt.Fprintf(stderr, "spigot bench: no -addr: started %s on %s\n", srv.Name, srv.Addr)
		if srv.Miniredis {
			fmt.Fprintln(stderr, "spigot bench: neither redis-server nor valkey-server is on PATH: measuring an embedded miniredis, which is not representative")
			meter.Serving = nil // miniredis has no INFO cpu
		}
	}
	if needServer && len(f.cluster) == 0 {
		for _, a := range addrs {
			if err := bench.LoadScripts(a); err != nil {
				return nil, err
			}
		}
	}

	targets, closeClients, err := benchTargets(f.stores, addrs, len(f.cluster) > 0)
	if err != nil {
		return nil, err
	}
	defer closeClients()

	cells := 0
	for _, t := range targets {
		n := 1
		if t.raw != nil {
			n = 2
		}
		cells += n * len(f.concurrency) * len(f.keys)
	}
	withCeiling := ceilingTool != "" && len(addrs) == 1 // not on a cluster
	if withCeiling {
		cells += 2 * len(f.concurrency) // the ceilings, unpipelined and 16 deep
	}
	progress := bench.NewProgress(stderr, cells)
	defer progress.Finish()
	seq := 0
	for _, t := range targets {
		for _, conc := range f.concurrency {
			for _, nkeys := range f.keys {
				serving := meter
				if t.name == "memory" {
					serving = bench.Meter{}
				}
				for _, raw := range []bool{false, true} {
					if raw && t.raw == nil {
						continue
					}
					seq++
					name := t.name
					if raw {
						name += " raw"
					}
					progress.Start(bench.CellLabel(name, conc, nkeys))
					cell, err := runCell(ctx, f, t, raw, conc, nkeys, seq, &serving)
					progress.Done()
					if report.Miniredis {
						cell.Note = "miniredis: not representative"
					}
					report.Cells = append(report.Cells, cell)
					if ctx.Err() != nil {
						report.Interrupted = true
						return report, nil
					}
					if err != nil {
						return report, err
					}
				}
			}
		}
	}
	if withCeiling {
		report.Ceilings, err = ceilings(ctx, f, ceilingTool, addrs[0], progress)
		if ctx.Err() != nil {
			report.Interrupted = true
		}
		for i := range report.Cells {
			c := &report.Cells[i]
			if c.Store == "memory" {
				continue
			}
			for _, ce := range report.Ceilings {
				if ce.Concurrency == c.Concurrency && ce.Pipeline == 1 {
					c.CeilingPct = bench.Pct(c.Throughput, ce.Throughput)
				}
				if ce.Concurrency == c.Concurrency && ce.Pipeline > 1 {
					c.CeilingPipelinedPct = bench.Pct(c.Throughput, ce.Throughput)
				}
			}
		}
	}
	return report, err
}

// runCell measures one cell: on fresh keys of its own (seq names them),
// with the bucket of f.deny chosen from a first short run.
func runCell(ctx context.Context, f *benchFlags, t target, raw bool, conc, nkeys, seq int, m *bench.Meter) (bench.Cell, error) {
	spec := bench.Spec{Concurrency: conc, Keys: nkeys, Duration: f.duration, Requests: f.requests}
	limit := bench.Roomy
	call := func(limit spigot.Limit, keys []string) bench.Call {
		if raw {
			return t.raw(wire.SHA1(), limit, f.cost, keys)
		}
		return bench.Take(t.store, limit, f.cost, keys)
	}
	if f.deny > 0 {
		calib := spec
		calib.Duration, calib.Requests = max(f.duration/10, 200*time.Millisecond), 0
		if f.requests > 0 {
			calib.Duration, calib.Requests = 0, max(f.requests/10, int64(conc))
		}
		r := bench.Run(ctx, call(bench.Roomy, cellKeys(seq, "calib", nkeys)), calib, nil)
		if r.Err != nil {
			return bench.Cell{Store: t.name}, fmt.Errorf("%s: %w", t.name, r.Err)
		}
		throughput := bench.Throughput(r.Ops, r.Elapsed)
		run := f.duration
		if run == 0 && throughput > 0 { // -n: the time the cell should take
			run = time.Duration(float64(f.requests) / throughput * float64(time.Second))
		}
		var err error
		if limit, err = bench.DenyingLimit(throughput/float64(nkeys), f.deny, f.cost, run); err != nil {
			return bench.Cell{Store: t.name}, err
		}
	}
	res := bench.Run(ctx, call(limit, cellKeys(seq, "run", nkeys)), spec, m)
	cell := bench.Cell{
		Store: t.name, Baseline: raw, Concurrency: conc, Keys: nkeys, Cost: f.cost,
		Elapsed: res.Elapsed, Ops: res.Ops, Errors: res.Errors, Throughput: bench.Throughput(res.Ops, res.Elapsed),
		Latency: res.Latency, AllocsPerOp: res.AllocsPerOp, Admitted: res.Admitted, Denied: res.Denied,
		Primaries: res.Costs.Shares, RedirectsPerOp: res.Costs.RedirectsPerOp,
	}
	if raw {
		cell.Store += " raw"
	}
	if !raw || f.deny > 0 {
		cell.MaxAdmitted = bench.MaxAdmitted(limit, nkeys, f.cost, res.Elapsed)
		if cell.Admitted > cell.MaxAdmitted {
			cell.Note = fmt.Sprintf("admitted %d, more than the bucket allows (%d): a bug", cell.Admitted, cell.MaxAdmitted)
		}
	}
	if res.Err != nil && !res.Interrupted {
		if cell.Note == "" {
			cell.Note = "errors: " + res.Err.Error()
		}
		if res.Errors == res.Ops {
			return cell, fmt.Errorf("%s: every request failed: %w", cell.Store, res.Err)
		}
	}
	return cell, nil
}

// cellKeys returns the keys of a cell: fresh ones, so that each cell
// starts on full buckets.
func cellKeys(seq int, phase string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d-%d", phase, seq, i)
	}
	return keys
}

// benchTargets builds the stores to measure on the server at addrs.
func benchTargets(names, addrs []string, cluster bool) ([]target, func(), error) {
	var targets []target
	closeAll := func() {}
	var clients []bench.Client
	if len(addrs) > 0 {
		goredis.SetLogger(&logging.VoidLogger{}) // errors are counted, not logged
		var err error
		if clients, closeAll, err = bench.Clients(addrs, cluster); err != nil {
			return nil, nil, err
		}
	}
	client := func(name string) bench.Client {
		for _, c := range clients {
			if c.Name == name {
				return c
			}
		}
		return bench.Client{}
	}
	for _, name := range names {
		switch name {
		case "memory":
			targets = append(targets, target{name: "memory", store: memory.New()})
		case "hybrid":
			remote := client("go-redis").Store.(*spigotredis.Store)
			targets = append(targets, target{name: "hybrid", store: hybrid.New(remote, memory.New(), hybrid.WithTimeout(time.Second))})
		default:
			i := slices.IndexFunc(benchStores, func(st struct{ name, client string }) bool { return st.name == name })
			c := client(benchStores[i].client)
			targets = append(targets, target{name: name, store: c.Store, raw: c.Raw})
		}
	}
	return targets, closeAll, nil
}

// ceilings runs redis-benchmark (or valkey-benchmark) at every
// concurrency, unpipelined and pipelined 16 deep, on the first key count.
func ceilings(ctx context.Context, f *benchFlags, tool, addr string, progress bench.Progress) ([]bench.Ceiling, error) {
	var out []bench.Ceiling
	for _, conc := range f.concurrency {
		for _, p := range []int{1, 16} {
			if ctx.Err() != nil {
				return out, nil
			}
			n := f.requests
			if n == 0 {
				n = int64(f.duration.Seconds() * 20_000 * float64(p)) // about the cell's duration
			}
			args, err := bench.CeilingArgs(addr, wire.SHA1(), bench.Roomy, f.cost, conc, p, f.keys[0], max(n, 10_000))
			if err != nil {
				return out, err
			}
			progress.Start(fmt.Sprintf("%s -c %d -P %d", filepath.Base(tool), conc, p))
			rps, err := bench.RedisBenchmark(tool, args)
			progress.Done()
			if err != nil {
				return out, err
			}
			out = append(out, bench.Ceiling{Tool: filepath.Base(tool), Concurrency: conc, Pipeline: p, Throughput: rps})
		}
	}
	return out, nil
}

// findBenchmarkTool returns the path of the benchmark tool of the server
// that server describes (valkey-benchmark for valkey-server), or any of
// the two on PATH, or "".
func findBenchmarkTool(server string) string {
	order := []string{"redis-benchmark", "valkey-benchmark"}
	if strings.HasPrefix(server, "valkey") {
		order = []string{"valkey-benchmark", "redis-benchmark"}
	}
	for _, name := range order {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// clusterPrimaries returns the addresses of a cluster's primaries, from
// CLUSTER NODES on the first seed that answers.
func clusterPrimaries(seeds []string) ([]string, error) {
	var lastErr error
	for _, seed := range seeds {
		nodes, err := resp.Do(seed, "CLUSTER", "NODES")
		if err != nil {
			lastErr = err
			continue
		}
		var primaries []string
		for line := range strings.SplitSeq(strings.TrimSpace(nodes), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 3 {
				continue
			}
			flags := strings.Split(fields[2], ",")
			if !slices.Contains(flags, "master") || slices.Contains(flags, "fail") || slices.Contains(flags, "fail?") {
				continue
			}
			addr, _, _ := strings.Cut(fields[1], "@")
			primaries = append(primaries, addr)
		}
		if len(primaries) == 0 {
			return nil, fmt.Errorf("the cluster at %s has no primary", seed)
		}
		slices.Sort(primaries)
		return primaries, nil
	}
	return nil, fmt.Errorf("cannot reach a cluster at %s: %v", strings.Join(seeds, ","), lastErr)
}

// machine describes this machine for a report.
func machine() string {
	return fmt.Sprintf("%s/%s, %d CPUs (%s), GOMAXPROCS %d", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(), runtime.GOMAXPROCS(0))
}

// cpuModel returns the CPU's model name from /proc/cpuinfo, or "unknown".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
