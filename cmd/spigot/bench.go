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
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	spigotredis "github.com/spigot-go/spigot/store/redis"
)

// A benchStore is a store spigot bench knows: its name, the client
// library of a Redis-protocol one, whether that client pipelines
// concurrent requests (so that its ceiling, and its raw baseline's, is the
// pipelined one), and whether the store runs without group commit (a
// store with it, the default, sends several requests to a script run, so
// no ceiling of one script per request bounds it).
type benchStore struct {
	name, client string
	pipelines    bool
	ungrouped    bool
}

// benchStores are the stores spigot bench knows, in the order it runs
// them.
var benchStores = []benchStore{
	{"memory", "", false, false},
	{"redis", "go-redis", false, false},
	{"redis-nogc", "go-redis", false, true},
	{"valkey", "valkey-go", true, false},
	{"valkey-nogc", "valkey-go", true, true},
	{"rueidis", "rueidis", true, false},
	{"rueidis-nogc", "rueidis", true, true},
	{"hybrid", "go-redis", false, false},
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
	stores := fs.String("stores", "all", "the `stores` to measure, comma-separated: memory, redis (go-redis), valkey (valkey-go), rueidis, each of these three with -nogc (without group commit: redis-nogc), hybrid (go-redis in front of memory), or all")
	addr := fs.String("addr", "", "the Redis or Valkey server's `address`; without one, spigot bench starts a redis-server or valkey-server from PATH (or an embedded miniredis)")
	cluster := fs.String("cluster", "", "a Redis or Valkey Cluster's seed `addresses`, comma-separated, instead of -addr")
	conc := fs.String("c", "1,16,64", "the concurrency `levels`: goroutines sending requests, comma-separated")
	keys := fs.String("keys", "1,10000", "the key `counts`, comma-separated: 1 is one hot key")
	cost := fs.Int64("cost", 1, "the tokens each request takes, 1 or more")
	deny := fs.Float64("deny", 0, "the `share` of requests to be denied, from 0 to below 1: that share of each goroutine's requests goes to keys whose bucket is empty")
	duration := fs.Duration("duration", 2*time.Second, "how long each cell runs")
	requests := fs.Int64("n", 0, "the `requests` each cell sends, instead of -duration")
	jsonOut := fs.Bool("json", false, "print the report as JSON instead of a table")
	plot := fs.String("plot", "", "draw throughput and p99 latency against concurrency into `file`.svg or file.png")
	if err := parseFlags(fs, args, stdout, "usage: spigot bench [flags]\n\n"+
		"Bench measures each store against a Redis or Valkey server (or cluster),\n"+
		"beside its client sending spigot's script raw and the server's own\n"+
		"ceiling (redis-benchmark), for every concurrency and key count.\n\n"+
		benchWarningsHelp+"\n"); err != nil {
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
	case f.deny > 0 && !exhaustible(f.cost):
		return nil, fmt.Errorf("-cost %d: too large for -deny, whose empty buckets hold one request's cost; want at most %d", f.cost, maxDenyCost)
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

// benchWarningsHelp is what spigot bench -h says of the warnings.
const benchWarningsHelp = `A row whose figures may not be trusted carries a warning: a
marker in the table's warn column, explained in a footnote, and in the
JSON a "warnings" list of {"code", "detail"} on the cell or ceiling:

  C above_ceiling        the row is faster than its own ceiling (unpipelined
                         for go-redis, pipelined for valkey-go and rueidis;
                         none for a store with group commit, which sends
                         several requests to a script run): that ceiling
                         did not measure the server's limit
  B machine_busy         other work took 20% or more of the machine's CPUs
                         while the row ran (Linux, rows of 0.5s or more;
                         "other_cpu_pct"): its figures are unreliable
  D deny_share_off       the share denied is more than 1 point from -deny's
                         ("deny_share" beside "deny_asked")
  U ceiling_unsaturated  in the ceiling's best run the server's main thread
                         used less than 90% of a core: the client set it,
                         and it is a floor of the server's ceiling

The ceiling is the best of up to three redis-benchmark runs at each depth
(50 connections from one thread, then from up to 4 threads, then 200),
stopped at the first that saturates the server.
`

// maxDenyCost is the largest -cost that -deny takes: an empty bucket of
// that many tokens, refilled one an hour, holds exactly.
const maxDenyCost = store.MaxExact / int64(time.Hour/time.Microsecond)

func exhaustible(cost int64) bool {
	_, err := bench.Exhausted(cost)
	return err == nil
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
		if !slices.ContainsFunc(benchStores, func(st benchStore) bool { return st.name == name }) {
			return nil, fmt.Errorf("-stores: unknown store %q; want memory, redis, valkey, rueidis (each with -nogc for no group commit), hybrid or all", name)
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

// target is one store to measure, and its raw baseline (nil for none).
type target struct {
	name      string
	store     spigot.Store
	raw       func(sha string, limit spigot.Limit, cost int64, keys []string) bench.Call
	pipelines bool // the client pipelines concurrent requests
	grouped   bool // the store has group commit on
}

// runBench measures what f says, and returns the report, judged (see
// bench.Judge), with what it measured so far when it fails or is
// interrupted.
func runBench(ctx context.Context, f *benchFlags, stderr io.Writer) (*bench.Report, error) {
	report, err := measure(ctx, f, stderr)
	if report != nil {
		bench.Judge(report)
	}
	return report, err
}

// measure is runBench before the report is judged.
func measure(ctx context.Context, f *benchFlags, stderr io.Writer) (*bench.Report, error) {
	report := &bench.Report{Machine: machine()}
	needServer := slices.ContainsFunc(f.stores, func(s string) bool { return s != "memory" })
	var addrs []string
	var meter bench.Meter
	var ceilingTool string
	switch {
	case !needServer:
	case len(f.cluster) > 0:
		primaries, replicas, err := clusterNodes(f.cluster)
		if err != nil {
			return nil, err
		}
		addrs, meter.Serving, meter.Replicas = f.cluster, primaries, replicas
		meter.Local = !slices.ContainsFunc(slices.Concat(primaries, replicas), func(a string) bool { return !bench.IsLocal(a) })
		report.Server = fmt.Sprintf("a cluster of %d primaries (%s), seeds %s", len(primaries), strings.Join(primaries, ", "), strings.Join(f.cluster, ","))
	case f.addr != "":
		if err := resp.Ping(f.addr); err != nil {
			return nil, fmt.Errorf("cannot reach a server at %s: %v", f.addr, err)
		}
		addrs, meter.Serving, meter.Local = []string{f.addr}, []string{f.addr}, bench.IsLocal(f.addr)
		report.Server = bench.Describe(f.addr)
		ceilingTool = findBenchmarkTool(report.Server)
	default:
		srv, err := bench.StartLocal()
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		addrs, meter.Serving, meter.Local = []string{srv.Addr}, []string{srv.Addr}, true
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
		cells += len(ceilingDepths) * len(bench.CeilingPlan(1, runtime.NumCPU())) // the ceilings' runs, at most
	}
	progress := bench.NewProgress(stderr, cells)
	defer progress.Finish()
	seq := 0
	for _, t := range targets {
		for _, conc := range f.concurrency {
			for _, nkeys := range f.keys {
				serving := meter
				if t.name == "memory" {
					serving = bench.Meter{Local: meter.Local}
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
		report.Ceilings, err = ceilings(ctx, f, ceilingTool, addrs[0], meter.Local, progress)
		if ctx.Err() != nil {
			report.Interrupted = true
		}
		for i := range report.Cells {
			c := &report.Cells[i]
			if c.Store == "memory" {
				continue
			}
			for _, ce := range report.Ceilings {
				if ce.Pipeline == 1 {
					c.CeilingPct = bench.Pct(c.Throughput, ce.Throughput)
				} else {
					c.CeilingPipelinedPct = bench.Pct(c.Throughput, ce.Throughput)
				}
			}
		}
	}
	return report, err
}

// runCell measures one cell on fresh keys of its own (seq names them).
// With -deny, the share of requests it asks for goes to keys of their
// own whose buckets are emptied first (bench.Exhausted, bench.Drain), so
// that the share denied is exact whatever the machine's speed.
func runCell(ctx context.Context, f *benchFlags, t target, raw bool, conc, nkeys, seq int, m *bench.Meter) (bench.Cell, error) {
	name := t.name
	if raw {
		name += " raw"
	}
	cell := bench.Cell{Store: name, Baseline: raw, Concurrency: conc, Keys: nkeys, Cost: f.cost, Pipelines: t.pipelines, GroupCommit: t.grouped && !raw}
	spec := bench.Spec{Concurrency: conc, Keys: nkeys, Duration: f.duration, Requests: f.requests}
	call := func(limit spigot.Limit, keys []string) bench.Call {
		if raw {
			return t.raw(wire.SHA1(), limit, f.cost, keys)
		}
		return bench.Take(t.store, limit, f.cost, keys)
	}
	var exhausted spigot.Limit
	var drained time.Time
	if f.deny > 0 {
		var err error
		if exhausted, err = bench.Exhausted(f.cost); err != nil {
			return cell, err
		}
		keys := cellKeys(seq, "deny", nkeys)
		drained = time.Now()
		if err := bench.Drain(ctx, bench.Take(t.store, exhausted, f.cost, keys), nkeys, max(conc, 16)); err != nil {
			if ctx.Err() != nil {
				return cell, nil
			}
			return cell, fmt.Errorf("%s: %w", name, err)
		}
		spec.Denied, spec.DenyShare = call(exhausted, keys), f.deny
		cell.DenyAsked = f.deny
	}
	res := bench.Run(ctx, call(bench.Roomy, cellKeys(seq, "run", nkeys)), spec, m)
	cell.Elapsed, cell.Ops, cell.Errors, cell.Throughput = res.Elapsed, res.Ops, res.Errors, bench.Throughput(res.Ops, res.Elapsed)
	cell.Latency, cell.AllocsPerOp, cell.Admitted, cell.Denied = res.Latency, res.AllocsPerOp, res.Admitted, res.Denied
	cell.Primaries, cell.RedirectsPerOp, cell.OtherCPUPct = res.Costs.Shares, res.Costs.RedirectsPerOp, res.OtherCPUPct
	if decided := res.Admitted + res.Denied; f.deny > 0 && decided > 0 {
		cell.DenyShare = float64(res.Denied) / float64(decided)
	}
	if !raw || f.deny > 0 {
		cell.MaxAdmitted = bench.MaxAdmitted(bench.Roomy, nkeys, f.cost, res.Elapsed)
		if f.deny > 0 {
			// What the emptied buckets refilled since they were drained.
			refilled := bench.MaxAdmitted(exhausted, nkeys, f.cost, time.Since(drained)) - int64(nkeys)
			cell.MaxAdmitted += refilled
			if res.DeniedAdmitted > refilled {
				cell.Note = fmt.Sprintf("admitted %d on emptied buckets, more than they refilled (%d): a bug", res.DeniedAdmitted, refilled)
			}
		}
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
			targets = append(targets, target{name: "hybrid", store: hybrid.New(remote, memory.New(), hybrid.WithTimeout(time.Second)), grouped: true}) // remote: with group commit
		default:
			st := benchStores[slices.IndexFunc(benchStores, func(st benchStore) bool { return st.name == name })]
			c := client(st.client)
			t := target{name: name, store: c.Grouped, raw: c.Raw, pipelines: st.pipelines, grouped: true}
			if st.ungrouped { // its raw baseline is the row of its grouped twin
				t.store, t.raw, t.grouped = c.Ungrouped, nil, false
			}
			targets = append(targets, t)
		}
	}
	return targets, closeAll, nil
}

// ceilingDepths are the pipeline depths of the ceilings: none, and 16.
var ceilingDepths = []int{1, 16}

// ceilings searches, at each depth of ceilingDepths, for the server's
// ceiling with redis-benchmark (or valkey-benchmark) at tool, by the runs
// of bench.CeilingPlan on the first key count: it stops at the first run
// that saturates the server, and keeps the best.
func ceilings(ctx context.Context, f *benchFlags, tool, addr string, local bool, progress bench.Progress) ([]bench.Ceiling, error) {
	var out []bench.Ceiling
	for _, p := range ceilingDepths {
		var best bench.Ceiling
		plan := bench.CeilingPlan(p, runtime.NumCPU())
		for i, spec := range plan {
			if ctx.Err() != nil {
				break
			}
			if best.Saturated {
				progress.Done() // a run not needed
				continue
			}
			spec.Requests = ceilingRequests(f, p, best.Throughput)
			args, err := bench.CeilingArgs(addr, wire.SHA1(), bench.Roomy, f.cost, spec, f.keys[0])
			if err != nil {
				return out, err
			}
			progress.Start(fmt.Sprintf("%s -c %d --threads %d -P %d", filepath.Base(tool), spec.Concurrency, spec.Threads, p))
			c, err := bench.MeasureCeiling(tool, addr, spec, args, local)
			progress.Done()
			if err != nil {
				return out, err
			}
			c.Runs = i + 1
			if c.Throughput > best.Throughput || best.Runs == 0 {
				best = c
			}
			best.Runs = i + 1
		}
		if best.Runs > 0 {
			out = append(out, best)
		}
	}
	return out, nil
}

// ceilingRequests returns the requests of a ceiling's run at depth p: -n
// (at least 10,000), or about -duration's worth at the best throughput
// seen so far at that depth, or a guess for the first run.
func ceilingRequests(f *benchFlags, p int, best float64) int64 {
	if f.requests > 0 {
		return max(f.requests, 10_000)
	}
	if best > 0 {
		return max(int64(best*f.duration.Seconds()), 10_000)
	}
	return max(int64(f.duration.Seconds()*20_000*float64(min(p, 4))), 10_000)
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

// clusterNodes returns the addresses of a cluster's primaries and
// replicas, from CLUSTER NODES on the first seed that answers.
func clusterNodes(seeds []string) (primaries, replicas []string, err error) {
	var lastErr error
	for _, seed := range seeds {
		nodes, err := resp.Do(seed, "CLUSTER", "NODES")
		if err != nil {
			lastErr = err
			continue
		}
		for line := range strings.SplitSeq(strings.TrimSpace(nodes), "\n") {
			fields := strings.Fields(line)
			if len(fields) < 3 {
				continue
			}
			flags := strings.Split(fields[2], ",")
			if slices.Contains(flags, "fail") || slices.Contains(flags, "fail?") {
				continue
			}
			addr, _, _ := strings.Cut(fields[1], "@")
			switch {
			case slices.Contains(flags, "master"):
				primaries = append(primaries, addr)
			case slices.Contains(flags, "slave") || slices.Contains(flags, "replica"):
				replicas = append(replicas, addr)
			}
		}
		if len(primaries) == 0 {
			return nil, nil, fmt.Errorf("the cluster at %s has no primary", seed)
		}
		slices.Sort(primaries)
		slices.Sort(replicas)
		return primaries, replicas, nil
	}
	return nil, nil, fmt.Errorf("cannot reach a cluster at %s: %v", strings.Join(seeds, ","), lastErr)
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
