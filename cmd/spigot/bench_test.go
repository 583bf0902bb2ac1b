package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot/internal/bench"
	"github.com/spigot-go/spigot/internal/testserver"
)

// TestBenchFlags: spigot bench's flags, parsed and checked; a bad one is a
// usage error (exit 2) in one line that names it.
func TestBenchFlags(t *testing.T) {
	for i, c := range []struct {
		args []string
		want string // the parsed flags, or the error
	}{
		{nil, "stores [memory redis redis-nogc valkey valkey-nogc rueidis rueidis-nogc hybrid] c [1 16 64] keys [1 10000] cost 1 deny 0 duration 2s n 0"},
		{[]string{"-stores", "memory,rueidis,memory", "-c", "1, 256", "-keys", "1000", "-cost", "3", "-deny", "0.2", "-n", "5000"},
			"stores [memory rueidis] c [1 256] keys [1000] cost 3 deny 0.2 duration 0s n 5000"},
		{[]string{"-cluster", "127.0.0.1:7000,127.0.0.1:7001", "-duration", "500ms"},
			"stores [memory redis redis-nogc valkey valkey-nogc rueidis rueidis-nogc hybrid] c [1 16 64] keys [1 10000] cost 1 deny 0 duration 500ms n 0 cluster [127.0.0.1:7000 127.0.0.1:7001]"},
		{[]string{"-stores", "mongo"}, `-stores: unknown store "mongo"`},
		{[]string{"-c", "0"}, `-c "0": want whole numbers from 1 to 100000`},
		{[]string{"-c", "1,x"}, `-c "1,x": want whole numbers`},
		{[]string{"-keys", ""}, `-keys "": want whole numbers`},
		{[]string{"-cost", "0"}, "-cost 0: want 1 or more"},
		{[]string{"-deny", "1"}, "-deny 1: want a share from 0 to below 1"},
		{[]string{"-deny", "-0.1"}, "-deny -0.1: want a share"},
		{[]string{"-deny", "0.2", "-cost", "2501999"}, "stores [memory redis redis-nogc valkey valkey-nogc rueidis rueidis-nogc hybrid] c [1 16 64] keys [1 10000] cost 2501999 deny 0.2"},
		{[]string{"-deny", "0.2", "-cost", "2502000"}, "-cost 2502000: too large for -deny, whose empty buckets hold one request's cost; want at most 2501999"},
		{[]string{"-cost", "2502000"}, "stores [memory redis redis-nogc valkey valkey-nogc rueidis rueidis-nogc hybrid] c [1 16 64] keys [1 10000] cost 2502000 deny 0"},
		{[]string{"-n", "-5"}, "-n -5: want 1 or more requests"},
		{[]string{"-duration", "0s"}, "-duration 0s: want a positive duration, or -n"},
		{[]string{"-plot", "out.pdf"}, `-plot "out.pdf": want a file ending in .svg or .png`},
		{[]string{"-addr", "a:1", "-cluster", "b:2"}, "-addr and -cluster: give one or the other"},
		{[]string{"-port", "1"}, "flag provided but not defined: -port"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		f, err := parseBench(c.args, io.Discard)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = fmt.Sprintf("stores %v c %v keys %v cost %d deny %v duration %v n %d", f.stores, f.concurrency, f.keys, f.cost, f.deny, f.duration, f.requests)
			if len(f.cluster) > 0 {
				got += fmt.Sprintf(" cluster %v", f.cluster)
			}
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("step %d: spigot bench %q: got %s; want %s", i+1, c.args, got, c.want)
		}
	}
	var stderr bytes.Buffer
	if status := run([]string{"bench", "-c", "zero"}, io.Discard, &stderr); status != 2 || !strings.HasPrefix(stderr.String(), `spigot bench: -c "zero"`) {
		t.Errorf("a bad flag: exit %d, %q; want 2 and one line that names it", status, stderr.String())
	}
}

// TestBenchUnreachable: a server that is not there is one clear line.
func TestBenchUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for i, args := range [][]string{
		{"-addr", addr, "-stores", "redis"},
		{"-cluster", addr, "-stores", "rueidis"},
	} {
		var stdout, stderr bytes.Buffer
		status := run(append([]string{"bench"}, args...), &stdout, &stderr)
		msg := strings.TrimSpace(stderr.String())
		if status != 1 || !strings.HasPrefix(msg, "spigot bench: cannot reach") || strings.Contains(msg, "\n") || !strings.Contains(msg, addr) {
			t.Errorf("step %d: spigot bench %v: exit %d, stderr %q; want 1 and one line naming %s", i+1, args, status, msg, addr)
		}
	}
}

// TestBenchEndToEnd runs spigot bench, short, against a real redis-server
// started by the test: every store and its raw baseline in every cell,
// the ceiling from redis-benchmark when it is installed, with whether it
// saturated the server, the share of denials asked for exactly, warnings
// by their rules, JSON that parses, and a plot. It asserts nothing of
// the machine's speed or load.
func TestBenchEndToEnd(t *testing.T) {
	srv := testserver.Start(t, testserver.Redis)
	dir := t.TempDir()
	plot := filepath.Join(dir, "bench.svg")
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "-addr", srv.Addr, "-c", "1,4", "-keys", "1,20", "-n", "400", "-deny", "0.5", "-json", "-plot", plot}
	if status := run(args, &stdout, &stderr); status != 0 {
		t.Fatalf("spigot %v: exit %d\n%s", args, status, stderr.String())
	}
	var r bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("the JSON does not parse: %v\n%s", err, stdout.String())
	}
	if !strings.Contains(r.Server, "redis-server") || !strings.Contains(r.Server, srv.Addr) || r.Miniredis || r.Interrupted {
		t.Errorf("report: server %q, miniredis %v, interrupted %v", r.Server, r.Miniredis, r.Interrupted)
	}
	// memory, hybrid, redis-nogc, valkey-nogc, rueidis-nogc: 4 cells
	// each; redis, valkey, rueidis: 4 and 4 raw.
	if want := 5*4 + 3*8; len(r.Cells) != want {
		t.Fatalf("%d cells; want %d", len(r.Cells), want)
	}
	var names []string
	known := []string{bench.AboveCeiling, bench.MachineBusy, bench.DenyShareOff, bench.CeilingUnsaturated}
	for _, c := range r.Cells {
		if !slices.Contains(names, c.Store) {
			names = append(names, c.Store)
		}
		if c.Ops != 400 || c.Errors != 0 || c.Admitted+c.Denied != c.Ops || c.Note != "" {
			t.Errorf("%s c=%d keys=%d: %d ops, %d errors, %d admitted, %d denied, note %q; want 400 ops, none failed", c.Store, c.Concurrency, c.Keys, c.Ops, c.Errors, c.Admitted, c.Denied, c.Note)
		}
		if c.MaxAdmitted == 0 || c.Admitted > c.MaxAdmitted {
			t.Errorf("%s c=%d keys=%d: admitted %d, bound %d; want a bound, kept", c.Store, c.Concurrency, c.Keys, c.Admitted, c.MaxAdmitted)
		}
		// Half of each goroutine's requests, give or take one: at most 4
		// of 400 off, within the tolerance.
		if c.DenyAsked != 0.5 || c.Denied < 200-int64(c.Concurrency) || c.Denied > 200+int64(c.Concurrency) || c.DenyShare != float64(c.Denied)/400 {
			t.Errorf("%s c=%d keys=%d: denied %d (share %v, asked %v); want 200 give or take %d", c.Store, c.Concurrency, c.Keys, c.Denied, c.DenyShare, c.DenyAsked, c.Concurrency)
		}
		if c.Throughput <= 0 || c.Latency.P50 <= 0 || c.Latency.Max < c.Latency.P99 {
			t.Errorf("%s c=%d keys=%d: throughput %v, latency %+v", c.Store, c.Concurrency, c.Keys, c.Throughput, c.Latency)
		}
		if wantPipelines := strings.HasPrefix(c.Store, "valkey") || strings.HasPrefix(c.Store, "rueidis"); c.Pipelines != wantPipelines {
			t.Errorf("%s: pipelines %v; want %v", c.Store, c.Pipelines, wantPipelines)
		}
		if wantGroup := slices.Contains([]string{"redis", "valkey", "rueidis", "hybrid"}, c.Store); c.GroupCommit != wantGroup {
			t.Errorf("%s: group commit %v; want %v", c.Store, c.GroupCommit, wantGroup)
		}
		for _, w := range c.Warnings {
			if !slices.Contains(known, w.Code) || w.Code == bench.DenyShareOff || w.Code == bench.CeilingUnsaturated || w.Detail == "" {
				t.Errorf("%s c=%d keys=%d: warning %+v", c.Store, c.Concurrency, c.Keys, w)
			}
		}
		// A cell long enough to judge says what other work took, on Linux.
		if runtime.GOOS == "linux" && c.Elapsed > time.Second && c.OtherCPUPct == nil {
			t.Errorf("%s c=%d keys=%d: ran %v and says nothing of the machine's load", c.Store, c.Concurrency, c.Keys, c.Elapsed)
		}
		if c.OtherCPUPct != nil && (*c.OtherCPUPct < 0 || *c.OtherCPUPct > 100) {
			t.Errorf("%s c=%d keys=%d: other work took %v%% of the machine", c.Store, c.Concurrency, c.Keys, *c.OtherCPUPct)
		}
	}
	want := []string{"memory", "redis", "redis raw", "redis-nogc", "valkey", "valkey raw", "valkey-nogc", "rueidis", "rueidis raw", "rueidis-nogc", "hybrid"}
	if !slices.Equal(names, want) {
		t.Errorf("stores %v; want %v", names, want)
	}
	if _, err := exec.LookPath("redis-benchmark"); err == nil {
		if len(r.Ceilings) != 2 || r.Ceilings[0].Pipeline != 1 || r.Ceilings[1].Pipeline != 16 {
			t.Errorf("ceilings %+v; want 2, -P 1 and 16", r.Ceilings)
		}
		for _, c := range r.Ceilings {
			// The search stops at the first run that saturates the server.
			unsaturated := slices.ContainsFunc(c.Warnings, func(w bench.Warning) bool { return w.Code == bench.CeilingUnsaturated })
			if c.Runs < 1 || c.Runs > 3 || c.Threads < 1 || c.Concurrency < 50 || c.ServerCPUPct <= 0 ||
				c.Saturated != (c.ServerCPUPct >= bench.SaturatedPct) || unsaturated == c.Saturated {
				t.Errorf("ceiling %+v: want 1 to 3 runs, 50 connections or more, the server's CPU, saturated from %v%% and a warning when not", c, bench.SaturatedPct)
			}
		}
		for _, c := range r.Cells {
			if c.Store != "memory" && (c.CeilingPct <= 0 || c.CeilingPipelinedPct <= 0) {
				t.Errorf("%s c=%d: %% of the ceiling %v and %v; want both", c.Store, c.Concurrency, c.CeilingPct, c.CeilingPipelinedPct)
			}
			own := c.CeilingPct
			if c.Pipelines {
				own = c.CeilingPipelinedPct
			}
			above := slices.ContainsFunc(c.Warnings, func(w bench.Warning) bool { return w.Code == bench.AboveCeiling })
			if above != (own > 100 && !c.GroupCommit) { // group commit has no own ceiling
				t.Errorf("%s c=%d: %v%% of its own ceiling, warnings %+v", c.Store, c.Concurrency, own, c.Warnings)
			}
		}
	}
	// The JSON names the fields of the deny share and the ceilings' saturation.
	var raw struct {
		Cells    []map[string]json.RawMessage `json:"cells"`
		Ceilings []map[string]json.RawMessage `json:"ceilings"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, c := range raw.Cells {
		for _, k := range []string{"deny_asked", "deny_share"} {
			if _, ok := c[k]; !ok {
				t.Errorf("a cell has no %q: %s", k, c["store"])
			}
		}
	}
	for _, c := range raw.Ceilings {
		for _, k := range []string{"threads", "server_cpu_pct", "saturated", "runs"} {
			if _, ok := c[k]; !ok {
				t.Errorf("a ceiling has no %q", k)
			}
		}
	}
	if st, err := os.Stat(plot); err != nil || st.Size() == 0 {
		t.Errorf("the plot %s: %v", plot, err)
	}
	if !strings.Contains(stderr.String(), "plot written to "+plot) {
		t.Errorf("stderr %q does not say where the plot went", stderr.String())
	}

	// The table, on the memory store alone, names every column.
	stdout.Reset()
	if status := run([]string{"bench", "-stores", "memory", "-c", "2", "-keys", "5", "-duration", "50ms"}, &stdout, &stderr); status != 0 {
		t.Fatalf("spigot bench -stores memory: exit %d\n%s", status, stderr.String())
	}
	for _, col := range []string{"store", "ops/s", "p50", "p99", "allocs/op", "admitted", "denied"} {
		if !strings.Contains(stdout.String(), col) {
			t.Errorf("the table has no %q column:\n%s", col, stdout.String())
		}
	}
}

// TestBenchCluster: on a real cluster, each primary's share of the
// scripts, and the redirects per request.
func TestBenchCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := testserver.StartCluster(t, testserver.Redis)
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "-cluster", strings.Join(cl.Addrs()[:2], ","), "-stores", "rueidis,redis", "-c", "4", "-keys", "300", "-n", "600", "-json"}
	if status := run(args, &stdout, &stderr); status != 0 {
		t.Fatalf("spigot %v: exit %d\n%s", args, status, stderr.String())
	}
	var r bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Server, "a cluster of 3 primaries") || len(r.Cells) != 4 || len(r.Ceilings) != 0 {
		t.Fatalf("server %q, %d cells, %d ceilings; want 3 primaries, 4 cells, no ceiling on a cluster", r.Server, len(r.Cells), len(r.Ceilings))
	}
	for _, c := range r.Cells {
		sum := 0.0
		for _, s := range c.Primaries {
			sum += s
			if s < 15 { // 300 keys spread over 3 primaries: a third each, give or take
				t.Errorf("%s: a primary ran %.1f%% of the scripts; want about a third", c.Store, s)
			}
		}
		if len(c.Primaries) != 3 || sum < 99.9 || sum > 100.1 || c.Ops != 600 || c.Errors != 0 {
			t.Errorf("%s: primaries %v, %d ops, %d errors; want 3 shares of 100%%, 600 ops, none failed", c.Store, c.Primaries, c.Ops, c.Errors)
		}
	}
}

// TestBenchMiniredis: with neither server on PATH, spigot bench measures
// an embedded miniredis and says, on every figure, that it is not
// representative.
func TestBenchMiniredis(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server, valkey-server or their benchmarks
	var stdout, stderr bytes.Buffer
	if status := run([]string{"bench", "-stores", "redis,rueidis", "-c", "2", "-keys", "10", "-n", "100"}, &stdout, &stderr); status != 0 {
		t.Fatalf("exit %d\n%s", status, stderr.String())
	}
	if !strings.Contains(stderr.String(), "embedded miniredis, which is not representative") {
		t.Errorf("stderr %q does not say it measures miniredis", stderr.String())
	}
	rows := 0
	for line := range strings.SplitSeq(stdout.String(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "redis") || strings.HasPrefix(strings.TrimSpace(line), "rueidis") {
			rows++
			if !strings.Contains(line, "miniredis: not representative") {
				t.Errorf("a row without the label: %q", line)
			}
		}
	}
	if rows != 4 || !strings.Contains(stdout.String(), "miniredis: not representative") {
		t.Errorf("%d rows; want 4, each labelled:\n%s", rows, stdout.String())
	}
}

// TestBenchInterrupted: a stop (Ctrl-C) returns what was measured so far.
func TestBenchInterrupted(t *testing.T) {
	f, err := parseBench([]string{"-stores", "memory", "-c", "1,2", "-keys", "1", "-duration", "1h"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // before the first cell ends
	r, err := runBench(ctx, f, io.Discard)
	if err != nil || r == nil || !r.Interrupted || len(r.Cells) != 1 {
		t.Fatalf("got %+v, %v; want an interrupted report of the first cell", r, err)
	}
}

// TestBenchWarningsHelp: spigot bench -h and the package doc name every
// warning, with the thresholds the rules use.
func TestBenchWarningsHelp(t *testing.T) {
	var help bytes.Buffer
	if status := run([]string{"bench", "-h"}, &help, io.Discard); status != 0 {
		t.Fatalf("spigot bench -h: exit %d", status)
	}
	doc, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{
		bench.AboveCeiling, bench.MachineBusy, bench.DenyShareOff, bench.CeilingUnsaturated,
		fmt.Sprintf("%g%% or more of the machine's CPUs", bench.BusyPct),
		fmt.Sprintf("less than %g%% of a core", bench.SaturatedPct),
		fmt.Sprintf("more than %g", 100*bench.DenyTolerance),
		`"other_cpu_pct"`, `"deny_share"`, `"deny_asked"`,
	} {
		comments := regexp.MustCompile(`(?m)^//`).ReplaceAllString(string(doc), "")
		for _, text := range []struct{ name, s string }{{"spigot bench -h", help.String()}, {"the package doc", comments}} {
			if !strings.Contains(strings.Join(strings.Fields(text.s), " "), want) {
				t.Errorf("step %d: %s does not say %q", i+1, text.name, want)
			}
		}
	}
}
