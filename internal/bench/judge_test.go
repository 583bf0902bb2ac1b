package bench

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func ptr(v float64) *float64 { return &v }

func codes(ws []Warning) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Code)
	}
	return out
}

// TestJudgeCells: each rule of a cell's warnings, from its figures alone.
func TestJudgeCells(t *testing.T) {
	ceilings := []Ceiling{
		{Tool: "redis-benchmark", Concurrency: 50, Threads: 1, Pipeline: 1, Throughput: 40_000, ServerCPUPct: 95, Saturated: true},
		{Tool: "redis-benchmark", Concurrency: 50, Threads: 2, Pipeline: 16, Throughput: 120_000, ServerCPUPct: 97, Saturated: true},
	}
	for i, c := range []struct {
		cell Cell
		want []string
	}{
		{Cell{Store: "memory", Throughput: 5e6}, nil},
		{Cell{Store: "redis", Throughput: 30_000, CeilingPct: 75, CeilingPipelinedPct: 25}, nil},
		{Cell{Store: "redis", Throughput: 40_000, CeilingPct: 100, CeilingPipelinedPct: 33.3}, nil}, // at the ceiling is not above it
		{Cell{Store: "redis", Throughput: 40_400, CeilingPct: 101, CeilingPipelinedPct: 33.7}, []string{AboveCeiling}},
		{Cell{Store: "valkey", Pipelines: true, Throughput: 60_000, CeilingPct: 150, CeilingPipelinedPct: 50}, nil}, // a pipelining client passes the unpipelined ceiling
		{Cell{Store: "valkey", Pipelines: true, Throughput: 132_000, CeilingPct: 330, CeilingPipelinedPct: 110}, []string{AboveCeiling}},
		{Cell{Store: "valkey", Pipelines: true, GroupCommit: true, Throughput: 132_000, CeilingPct: 330, CeilingPipelinedPct: 110}, nil}, // group commit passes both: not its limit
		{Cell{Store: "redis", GroupCommit: true, Throughput: 62_000, CeilingPct: 200, CeilingPipelinedPct: 62}, nil},
		{Cell{Store: "redis", OtherCPUPct: ptr(19.9)}, nil},
		{Cell{Store: "redis", OtherCPUPct: ptr(20)}, []string{MachineBusy}},
		{Cell{Store: "redis", OtherCPUPct: ptr(0)}, nil},
		{Cell{Store: "redis", DenyAsked: 0.2, DenyShare: 0.21}, nil},
		{Cell{Store: "redis", DenyAsked: 0.2, DenyShare: 0.19}, nil},
		{Cell{Store: "redis", DenyAsked: 0.2, DenyShare: 0.2101}, []string{DenyShareOff}},
		{Cell{Store: "redis", DenyAsked: 0.2, DenyShare: 0}, []string{DenyShareOff}},
		{Cell{Store: "redis", DenyAsked: 0, DenyShare: 0}, nil},
		{Cell{Store: "redis", Throughput: 48_000, CeilingPct: 120, OtherCPUPct: ptr(55), DenyAsked: 0.5, DenyShare: 0.3, Warnings: []Warning{{Code: "stale"}}},
			[]string{AboveCeiling, MachineBusy, DenyShareOff}},
	} {
		r := &Report{Cells: []Cell{c.cell}, Ceilings: slices.Clone(ceilings)}
		Judge(r)
		if got := codes(r.Cells[0].Warnings); !slices.Equal(got, c.want) {
			t.Errorf("step %d: got warnings %q; want %q", i+1, got, c.want)
		}
		for _, w := range r.Cells[0].Warnings {
			if w.Detail == "" {
				t.Errorf("step %d: warning %s has no detail", i+1, w.Code)
			}
		}
	}
	// Without a ceiling, a percentage says nothing.
	r := &Report{Cells: []Cell{{Store: "redis", CeilingPct: 300}}}
	Judge(r)
	if len(r.Cells[0].Warnings) != 0 {
		t.Errorf("no ceiling: got warnings %q; want none", codes(r.Cells[0].Warnings))
	}
}

// TestJudgeCeilings: a ceiling that did not saturate the server, or ran
// on a busy machine, says so.
func TestJudgeCeilings(t *testing.T) {
	for i, c := range []struct {
		ceiling Ceiling
		want    []string
	}{
		{Ceiling{Pipeline: 1, Throughput: 48_000, ServerCPUPct: 95, Saturated: true, OtherCPUPct: ptr(3)}, nil},
		{Ceiling{Pipeline: 1, Throughput: 6_500, ServerCPUPct: 26}, []string{CeilingUnsaturated}},
		{Ceiling{Pipeline: 16, Throughput: 80_000, ServerCPUPct: 77, OtherCPUPct: ptr(45)}, []string{CeilingUnsaturated, MachineBusy}},
		{Ceiling{Pipeline: 16, Throughput: 80_000, ServerCPUPct: 92, Saturated: true, OtherCPUPct: ptr(21)}, []string{MachineBusy}},
	} {
		r := &Report{Ceilings: []Ceiling{c.ceiling}}
		Judge(r)
		if got := codes(r.Ceilings[0].Warnings); !slices.Equal(got, c.want) {
			t.Errorf("step %d: got warnings %q; want %q", i+1, got, c.want)
		}
	}
	r := &Report{Ceilings: []Ceiling{{Pipeline: 1, Throughput: 6_500, ServerCPUPct: 26}}}
	Judge(r)
	if got, want := r.Ceilings[0].Warnings[0].Detail, "the server's main thread used 26% of a core (saturated from 90%): the client set 6.5k ops/s, a floor of the server's ceiling"; got != want {
		t.Errorf("detail:\ngot  %q\nwant %q", got, want)
	}
}

func TestParseProcStat(t *testing.T) {
	const stat = `cpu  3118724 5329 1117976 1319067 6754 0 92835 100 0 0
cpu0 1562902 2478 553531 663805 1991 0 46151 50 0 0
cpu1 1555822 2850 564444 655262 4763 0 46684 50 0 0
intr 92756000 0 0 0
ctxt 290877394
procs_running 3
`
	m, err := parseProcStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	busy := int64(3118724 + 5329 + 1117976 + 100)
	if want := (MachineCPU{Busy: busy, Total: busy + 1319067 + 6754 + 0 + 92835, CPUs: 2}); m != want {
		t.Errorf("got %+v; want %+v", m, want)
	}
	for i, bad := range []string{
		"",
		"intr 1 2 3\n",
		"cpu  1 2 3\ncpu0 1 2 3\n",
		"cpu  1 2 3 4 5 6 x 8\ncpu0 1 2 3 4 5 6 7 8\n",
		"cpu  1 2 3 4 5 6 7 8\n", // no cpuN line
	} {
		if m, err := parseProcStat(bad); err == nil || !strings.HasPrefix(err.Error(), "spigot: bench: /proc/stat: ") {
			t.Errorf("step %d: parseProcStat(%q) = %+v, %v; want an error", i+1, bad, m, err)
		}
	}
}

// TestOtherPct: the share of the machine that went to other work, by
// the rule of OtherPct, at fixed readings.
func TestOtherPct(t *testing.T) {
	at := func(busy, total int64) MachineCPU { return MachineCPU{Busy: busy, Total: total, CPUs: 2} }
	for i, c := range []struct {
		start, end MachineCPU
		own, wall  time.Duration
		want       float64
		known      bool
	}{
		// 2 CPUs for 1s: 200 ticks, 150 busy (75%); ours 0.5s of 2s (25%).
		{at(1000, 2000), at(1150, 2200), 500 * time.Millisecond, time.Second, 50, true},
		{at(1000, 2000), at(1050, 2200), 500 * time.Millisecond, time.Second, 0, true}, // all ours
		{at(1000, 2000), at(1040, 2200), 500 * time.Millisecond, time.Second, 0, true}, // ours counted more finely: at least 0
		{at(1000, 2000), at(1200, 2200), 0, time.Second, 100, true},                    // none ours, all busy
		{at(1000, 2000), at(1100, 2100), 0, 500 * time.Millisecond, 100, true},         // 100 ticks: just enough
		{at(1000, 2000), at(1099, 2099), 0, 500 * time.Millisecond, 0, false},          // 99 ticks: too short to judge
		{MachineCPU{}, at(1150, 2200), 0, time.Second, 0, false},                       // unknown
		{at(1000, 2000), MachineCPU{}, 0, time.Second, 0, false},                       // unknown
		{at(1000, 2000), at(1150, 2200), 0, 0, 0, false},                               // no wall time
		{at(1000, 2000), at(900, 2200), 0, time.Second, 0, false},                      // the counters went back
	} {
		got, known := OtherPct(c.start, c.end, c.own, c.wall)
		if known != c.known || (known && (got < c.want-1e-9 || got > c.want+1e-9)) {
			t.Errorf("step %d: got %v, %v; want %v, %v", i+1, got, known, c.want, c.known)
		}
	}
}

func TestCeilingPlan(t *testing.T) {
	for i, c := range []struct {
		pipeline, cpus int
		want           []CeilingSpec
	}{
		{1, 2, []CeilingSpec{{50, 1, 1, 0}, {50, 2, 1, 0}, {200, 2, 1, 0}}},
		{16, 1, []CeilingSpec{{50, 1, 16, 0}, {200, 1, 16, 0}}},
		{16, 64, []CeilingSpec{{50, 1, 16, 0}, {50, 4, 16, 0}, {200, 4, 16, 0}}},
		{1, 0, []CeilingSpec{{50, 1, 1, 0}, {200, 1, 1, 0}}},
	} {
		if got := CeilingPlan(c.pipeline, c.cpus); !slices.Equal(got, c.want) {
			t.Errorf("step %d: CeilingPlan(%d, %d) = %v; want %v", i+1, c.pipeline, c.cpus, got, c.want)
		}
	}
}

func TestCeilingArgs(t *testing.T) {
	for i, c := range []struct {
		spec CeilingSpec
		keys int
		want string // the arguments before EVALSHA
	}{
		{CeilingSpec{Concurrency: 50, Threads: 1, Pipeline: 1, Requests: 40_000}, 1, "-h 127.0.0.1 -p 6379 -c 50 -P 1 -n 40000 --csv"},
		{CeilingSpec{Concurrency: 200, Threads: 2, Pipeline: 16, Requests: 10}, 1000, "-h 127.0.0.1 -p 6379 -c 200 -P 16 -n 10 --threads 2 --csv -r 1000"},
		{CeilingSpec{}, 1, "-h 127.0.0.1 -p 6379 -c 1 -P 1 -n 1 --csv"},
	} {
		args, err := CeilingArgs("127.0.0.1:6379", "abc", Roomy, 1, c.spec, c.keys)
		if err != nil {
			t.Fatal(err)
		}
		e := slices.Index(args, "EVALSHA")
		if got := strings.Join(args[:e], " "); got != c.want {
			t.Errorf("step %d: got %q; want %q", i+1, got, c.want)
		}
		key := "spigot:bench:ceiling:0"
		if c.keys > 1 {
			key = "spigot:bench:ceiling:__rand_int__"
		}
		if got := args[e+1 : e+4]; !slices.Equal(got, []string{"abc", "1", key}) {
			t.Errorf("step %d: EVALSHA %q; want abc 1 %s", i+1, got, key)
		}
	}
	if _, err := CeilingArgs("no-port", "abc", Roomy, 1, CeilingSpec{}, 1); err == nil || !strings.HasPrefix(err.Error(), "spigot: bench: address") {
		t.Errorf("an address without a port: got %v", err)
	}
}

func TestIsLocal(t *testing.T) {
	for i, c := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:6379", true},
		{"[::1]:6379", true},
		{"localhost:6379", true},
		{"127.0.0.2:6379", true},
		{"192.0.2.1:6379", false}, // TEST-NET-1: no machine's
		{"redis.example:6379", false},
	} {
		if got := IsLocal(c.addr); got != c.want {
			t.Errorf("step %d: IsLocal(%q) = %v; want %v", i+1, c.addr, got, c.want)
		}
	}
}

// warnedReport is a report of a busy run: a cell above its ceiling, one
// on a busy machine, one off its share, and an unsaturated ceiling.
func warnedReport() *Report {
	r := &Report{
		Machine: "linux/amd64, 2 CPUs, GOMAXPROCS 2",
		Cells: []Cell{
			{Store: "redis", Concurrency: 16, Keys: 1000, Cost: 1, Throughput: 36_000, Admitted: 800, Denied: 200, DenyAsked: 0.2, DenyShare: 0.2,
				CeilingPct: 150, CeilingPipelinedPct: 40},
			{Store: "valkey", Pipelines: true, Concurrency: 16, Keys: 1000, Cost: 1, Throughput: 56_000, Admitted: 800, Denied: 200, DenyAsked: 0.2, DenyShare: 0.2,
				CeilingPct: 233, CeilingPipelinedPct: 62, OtherCPUPct: ptr(63)},
			{Store: "rueidis", Pipelines: true, Concurrency: 16, Keys: 1000, Cost: 1, Throughput: 50_000, Admitted: 880, Denied: 120, DenyAsked: 0.2, DenyShare: 0.12,
				CeilingPct: 208, CeilingPipelinedPct: 56, OtherCPUPct: ptr(4)},
		},
		Ceilings: []Ceiling{
			{Tool: "redis-benchmark", Concurrency: 50, Threads: 1, Pipeline: 1, Throughput: 24_000, ServerCPUPct: 52, Runs: 3},
			{Tool: "redis-benchmark", Concurrency: 50, Threads: 2, Pipeline: 16, Throughput: 90_000, ServerCPUPct: 94, Saturated: true, Runs: 2},
		},
	}
	Judge(r)
	return r
}

func TestWriteTableWarnings(t *testing.T) {
	lines := writeTable(t, warnedReport())
	h := lineIndex(t, lines, "store")
	if want := []string{"store", "conc", "keys", "ops/s", "p50", "p90", "p99", "p99.9", "max", "allocs/op", "errors", "admitted", "denied", "denied/asked", "% ceiling", "warn"}; !slices.Equal(columns(lines[h]), want) {
		t.Errorf("header:\ngot  %q\nwant %q", columns(lines[h]), want)
	}
	for i, want := range [][2]string{
		{"20%/20%", "C"},
		{"20%/20%", "B"},
		{"12%/20%", "D"},
	} {
		cols := columns(lines[h+1+i])
		if got := [2]string{cols[13], cols[15]}; got != want {
			t.Errorf("row %d: denied/asked and warn %q; want %q", i, got, want)
		}
	}
	c := lineIndex(t, lines, "ceilings:")
	for i, want := range [][]string{
		{"tool", "-c", "--threads", "-P", "ops/s", "server cpu", "saturated", "warn"},
		{"redis-benchmark", "50", "1", "1", "24k", "52%", "no", "U"},
		{"redis-benchmark", "50", "2", "16", "90k", "94%", "yes", "-"},
	} {
		if got := columns(lines[c+1+i]); !slices.Equal(got, want) {
			t.Errorf("ceiling line %d: got %q want %q", i, got, want)
		}
	}
	w := lineIndex(t, lines, "warnings:")
	want := []string{
		"  C  above_ceiling: above its own ceiling (unpipelined for go-redis, pipelined for valkey-go and rueidis; up to 150%): that ceiling is not the server's limit, or the load changed between the runs",
		"  B  machine_busy: other work took 20% or more of the machine's CPUs while it ran (up to 63%): its figures say as much of that work as of spigot",
		"  D  deny_share_off: the share denied is more than 1% from -deny's (up to 8.0 points off; see denied/asked)",
		"  U  ceiling_unsaturated: the server's main thread used less than 90% of a core (as little as 52%): the client set that ceiling, a floor of the server's",
	}
	if got := lines[w+1:]; !slices.Equal(got, want) {
		t.Errorf("footnotes:\ngot  %q\nwant %q", got, want)
	}
}

// TestWarningsJSON: warnings and the figures they come from are fields
// of the JSON, by stable names.
func TestWarningsJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, warnedReport()); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Cells    []map[string]json.RawMessage `json:"cells"`
		Ceilings []map[string]json.RawMessage `json:"ceilings"`
	}
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for i, c := range raw.Cells {
		for _, k := range []string{"deny_asked", "deny_share", "warnings"} {
			if _, ok := c[k]; !ok {
				t.Errorf("cell %d has no %q:\n%s", i, k, buf.String())
			}
		}
	}
	var ws []map[string]string
	if err := json.Unmarshal(raw.Cells[1]["warnings"], &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0]["code"] != "machine_busy" || !strings.Contains(ws[0]["detail"], "63%") {
		t.Errorf("cell 1's warnings: got %v; want machine_busy, with its figure", ws)
	}
	if got := string(raw.Cells[1]["other_cpu_pct"]); got != "63" {
		t.Errorf("cell 1's other_cpu_pct: got %s; want 63", got)
	}
	if _, ok := raw.Cells[0]["other_cpu_pct"]; ok {
		t.Errorf("cell 0 has an other_cpu_pct, unknown")
	}
	for i, c := range raw.Ceilings {
		for _, k := range []string{"tool", "concurrency", "threads", "pipeline", "ops_per_sec", "server_cpu_pct", "saturated", "runs"} {
			if _, ok := c[k]; !ok {
				t.Errorf("ceiling %d has no %q", i, k)
			}
		}
	}
	if got := string(raw.Ceilings[0]["warnings"]); !strings.Contains(got, `"code": "ceiling_unsaturated"`) {
		t.Errorf("ceiling 0's warnings: %s", got)
	}
}

func TestMarkers(t *testing.T) {
	for i, c := range []struct {
		ws   []Warning
		want string
	}{
		{nil, "-"},
		{[]Warning{{Code: DenyShareOff}, {Code: AboveCeiling}}, "C D"},
		{[]Warning{{Code: "new_rule"}, {Code: MachineBusy}}, "B ?"},
	} {
		if got := markers(c.ws); got != c.want {
			t.Errorf("step %d: got %q; want %q", i+1, got, c.want)
		}
	}
}
