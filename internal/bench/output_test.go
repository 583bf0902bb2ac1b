package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleReport is a run on one machine of the memory store, redis and
// its raw baseline, and a cluster cell, with ceilings.
func sampleReport() *Report {
	return &Report{
		Machine: "linux/amd64, 2 CPUs (AMD EPYC 7B13), GOMAXPROCS 2",
		Server:  "redis-server 7.0.15 at 127.0.0.1:41234 (started by spigot bench)",
		Cells: []Cell{
			{
				Store: "memory", Concurrency: 1, Keys: 1000, Cost: 1,
				Elapsed: 2 * time.Second, Ops: 24_600_000, Throughput: 12_300_000,
				Latency:     Percentiles{P50: 35 * time.Nanosecond, P90: 60 * time.Nanosecond, P99: 210 * time.Nanosecond, P999: 1500 * time.Nanosecond, Max: 812 * time.Microsecond},
				AllocsPerOp: 0, Admitted: 24_000_000, Denied: 600_000, MaxAdmitted: 24_000_100,
			},
			{
				Store: "redis", Concurrency: 64, Keys: 1000, Cost: 1,
				Elapsed: 2 * time.Second, Ops: 96_426, Errors: 2, Throughput: 48_213,
				Latency:     Percentiles{P50: 812 * time.Microsecond, P90: 1200 * time.Microsecond, P99: 3400 * time.Microsecond, P999: 12 * time.Millisecond, Max: 35 * time.Millisecond},
				AllocsPerOp: 9.04, Admitted: 96_000, Denied: 424, MaxAdmitted: 100_000,
				CeilingPct: 41.2, CeilingPipelinedPct: 12.4,
			},
			{
				Store: "redis raw", Baseline: true, Concurrency: 64, Keys: 1000, Cost: 1,
				Elapsed: 2 * time.Second, Ops: 104_200, Throughput: 52_100,
				Latency:     Percentiles{P50: 760 * time.Microsecond, P90: 1100 * time.Microsecond, P99: 3100 * time.Microsecond, P999: 9 * time.Millisecond, Max: 30 * time.Millisecond},
				AllocsPerOp: 6.5, Admitted: 104_000, Denied: 200,
				CeilingPct: 44.6, CeilingPipelinedPct: 13.4,
			},
			{
				Store: "rueidis", Concurrency: 64, Keys: 1000, Cost: 1,
				Elapsed: 2 * time.Second, Ops: 200_000, Throughput: 100_000,
				Latency:     Percentiles{P50: 500 * time.Microsecond, P90: 900 * time.Microsecond, P99: 2 * time.Millisecond, P999: 5 * time.Millisecond, Max: 20 * time.Millisecond},
				AllocsPerOp: 4, Admitted: 150_000, Denied: 50_000, MaxAdmitted: 120_000,
				CeilingPct: 85.3, CeilingPipelinedPct: 25.7,
				Primaries: []float64{34.1, 33.2, 32.7}, RedirectsPerOp: 0.00125,
				Note: "admitted more than the bucket allows",
			},
		},
		Ceilings: []Ceiling{
			{Tool: "redis-benchmark", Concurrency: 50, Threads: 1, Pipeline: 1, Throughput: 117_000, ServerCPUPct: 96.4, Saturated: true, Runs: 1},
			{Tool: "redis-benchmark", Concurrency: 200, Threads: 2, Pipeline: 16, Throughput: 389_000, ServerCPUPct: 99, Saturated: true, Runs: 3},
		},
	}
}

// columns splits a line of a table into its cells, which tabwriter sets
// at least two spaces apart.
func columns(line string) []string {
	return regexp.MustCompile(` {2,}`).Split(strings.TrimSpace(line), -1)
}

func writeTable(t *testing.T, r *Report) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteTable(&buf, r); err != nil {
		t.Fatalf("WriteTable: %v", err)
	}
	out := buf.String()
	t.Logf("table:\n%s", out)
	if !strings.HasSuffix(out, "\n") {
		t.Errorf("table does not end in a newline: %q", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	for i, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Errorf("line %d ends in a space: %q", i, l)
		}
	}
	return lines
}

// lineIndex returns the index of the first line starting with prefix.
func lineIndex(t *testing.T, lines []string, prefix string) int {
	t.Helper()
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return i
		}
	}
	t.Fatalf("no line starts with %q in\n%s", prefix, strings.Join(lines, "\n"))
	return -1
}

func TestWriteTable(t *testing.T) {
	lines := writeTable(t, sampleReport())

	if got, want := lines[0], "machine: linux/amd64, 2 CPUs (AMD EPYC 7B13), GOMAXPROCS 2"; got != want {
		t.Errorf("line 0: got %q want %q", got, want)
	}
	if got, want := lines[1], "server:  redis-server 7.0.15 at 127.0.0.1:41234 (started by spigot bench)"; got != want {
		t.Errorf("line 1: got %q want %q", got, want)
	}
	if got := lines[2]; got != "" {
		t.Errorf("line 2: got %q want an empty line", got)
	}

	h := lineIndex(t, lines, "store")
	wantHeader := "store        conc  keys  ops/s  p50    p90    p99    p99.9  max    allocs/op  errors  admitted  denied  % ceiling  primaries             redirects/op  note"
	if got := lines[h]; got != wantHeader {
		t.Errorf("header:\ngot  %q\nwant %q", got, wantHeader)
	}

	rows := []struct {
		prefix string
		want   []string
	}{
		{"memory", []string{"memory", "1", "1000", "12.3M", "35ns", "60ns", "210ns", "1.5µs", "812µs", "0.0", "0", "24000000", "600000", "-", "-", "-"}},
		{"redis ", []string{"redis", "64", "1000", "48.2k", "812µs", "1.2ms", "3.4ms", "12ms", "35ms", "9.0", "2", "96000", "424", "41% / 12%", "-", "-"}},
		{"  redis raw", []string{"redis raw", "64", "1000", "52.1k", "760µs", "1.1ms", "3.1ms", "9ms", "30ms", "6.5", "0", "104000", "200", "45% / 13%", "-", "-"}},
		{"rueidis", []string{"rueidis", "64", "1000", "100k", "500µs", "900µs", "2ms", "5ms", "20ms", "4.0", "0", "150000", "50000", "85% / 26%", "p1 34% p2 33% p3 33%", "0.00125", "admitted more than the bucket allows"}},
	}
	for i, row := range rows {
		got := columns(lines[h+1+i])
		if !strings.HasPrefix(lines[h+1+i], row.prefix) {
			t.Errorf("row %d: got %q, want it to start with %q", i, lines[h+1+i], row.prefix)
		}
		if !slices.Equal(got, row.want) {
			t.Errorf("row %d:\ngot  %q\nwant %q", i, got, row.want)
		}
	}

	c := lineIndex(t, lines, "ceilings:")
	if lines[c-1] != "" {
		t.Errorf("line before the ceilings: got %q want an empty line", lines[c-1])
	}
	ceilings := [][]string{
		{"tool", "-c", "--threads", "-P", "ops/s", "server cpu", "saturated"},
		{"redis-benchmark", "50", "1", "1", "117k", "96%", "yes"},
		{"redis-benchmark", "200", "2", "16", "389k", "99%", "yes"},
	}
	if got, want := len(lines)-c-1, len(ceilings); got != want {
		t.Fatalf("ceilings: got %d lines want %d", got, want)
	}
	for i, want := range ceilings {
		if got := columns(lines[c+1+i]); !slices.Equal(got, want) {
			t.Errorf("ceiling line %d: got %q want %q", i, got, want)
		}
	}
}

// TestWriteTableGolden pins the whole output of a small report: no
// server, no cluster, no note, no ceiling.
func TestWriteTableGolden(t *testing.T) {
	r := &Report{
		Machine: "linux/amd64, 2 CPUs, GOMAXPROCS 2",
		Cells: []Cell{
			{Store: "memory", Concurrency: 1, Keys: 1, Throughput: 9_870_000,
				Latency:     Percentiles{P50: 90 * time.Nanosecond, P90: 110 * time.Nanosecond, P99: 400 * time.Nanosecond, P999: 2 * time.Microsecond, Max: 1200 * time.Microsecond},
				AllocsPerOp: 0.01, Admitted: 100, Denied: 19_739_900},
			{Store: "memory", Concurrency: 64, Keys: 1, Throughput: 3_450_000,
				Latency:     Percentiles{P50: 4 * time.Microsecond, P90: 19 * time.Microsecond, P99: 95 * time.Microsecond, P999: 1 * time.Millisecond, Max: 12 * time.Millisecond},
				AllocsPerOp: 0, Admitted: 100, Denied: 6_899_900},
		},
	}
	want := `machine: linux/amd64, 2 CPUs, GOMAXPROCS 2

store   conc  keys  ops/s  p50   p90    p99    p99.9  max    allocs/op  errors  admitted  denied    % ceiling
memory  1     1     9.87M  90ns  110ns  400ns  2µs    1.2ms  0.0        0       100       19739900  -
memory  64    1     3.45M  4µs   19µs   95µs   1ms    12ms   0.0        0       100       6899900   -
`
	if got := strings.Join(writeTable(t, r), "\n") + "\n"; got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteTableMiniredis(t *testing.T) {
	r := sampleReport()
	r.Server = "miniredis (embedded)"
	r.Miniredis = true
	r.Ceilings = nil
	lines := writeTable(t, r)

	m := lineIndex(t, lines, "miniredis: not representative")
	if s := lineIndex(t, lines, "server:"); m != s+1 {
		t.Errorf("the miniredis line is line %d, want it right under the server's (%d)", m, s)
	}
	h := lineIndex(t, lines, "store")
	if !strings.HasSuffix(lines[h], "  note") {
		t.Errorf("header: got %q, want a note column", lines[h])
	}
	wantNotes := []string{
		"miniredis: not representative",
		"miniredis: not representative",
		"miniredis: not representative",
		"miniredis: not representative; admitted more than the bucket allows",
	}
	rows := lines[h+1:]
	if len(rows) != len(wantNotes) {
		t.Fatalf("got %d rows want %d", len(rows), len(wantNotes))
	}
	for i, row := range rows {
		cols := columns(row)
		if got := cols[len(cols)-1]; got != wantNotes[i] {
			t.Errorf("row %d: note got %q want %q", i, got, wantNotes[i])
		}
	}

	// A cell whose note already says it does not say it twice.
	r.Cells = r.Cells[:1]
	r.Cells[0].Note = "miniredis: not representative"
	lines = writeTable(t, r)
	cols := columns(lines[len(lines)-1])
	if got, want := cols[len(cols)-1], "miniredis: not representative"; got != want {
		t.Errorf("note got %q want %q", got, want)
	}
}

func TestWriteTableInterrupted(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		r := sampleReport()
		r.Interrupted = true
		r.Cells = r.Cells[:n]
		lines := writeTable(t, r)
		want := map[int]string{
			0: "interrupted: the run was stopped before every cell ran; the table holds the 0 cells measured so far",
			1: "interrupted: the run was stopped before every cell ran; the table holds the 1 cell measured so far",
			3: "interrupted: the run was stopped before every cell ran; the table holds the 3 cells measured so far",
		}[n]
		if got := lines[lineIndex(t, lines, "interrupted:")]; got != want {
			t.Errorf("%d cells: got %q want %q", n, got, want)
		}
		h := lineIndex(t, lines, "store")
		if got := lineIndex(t, lines, "ceilings:") - h - 2; got != n {
			t.Errorf("%d cells: got %d rows", n, got)
		}
	}
}

// TestWriteTableBaselineOrder shows that a baseline sits under its
// store's row, matched by concurrency and key count, whatever order the
// cells came in.
func TestWriteTableBaselineOrder(t *testing.T) {
	cell := func(store string, baseline bool, conc int) Cell {
		return Cell{Store: store, Baseline: baseline, Concurrency: conc, Keys: 10}
	}
	r := &Report{Cells: []Cell{
		cell("redis raw", true, 8), // before its store
		cell("redis", false, 1),
		cell("redis", false, 8),
		cell("redis raw", true, 1),
		cell("valkey raw", true, 1), // no store cell: stays where it is
		cell("valkey", false, 8),
	}}
	lines := writeTable(t, r)
	var got []string
	for _, l := range lines[1:] {
		cols := columns(l)
		got = append(got, l[:len(l)-len(strings.TrimLeft(l, " "))]+cols[0]+" "+cols[1])
	}
	want := []string{"redis 1", "  redis raw 1", "redis 8", "  redis raw 8", "  valkey raw 1", "valkey 8"}
	if !slices.Equal(got, want) {
		t.Errorf("rows:\ngot  %q\nwant %q", got, want)
	}
}

type failingWriter struct{}

var errWrite = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errWrite }

func TestWriteErrors(t *testing.T) {
	for name, write := range map[string]func(io.Writer, *Report) error{"WriteTable": WriteTable, "WriteJSON": WriteJSON} {
		err := write(failingWriter{}, sampleReport())
		if !errors.Is(err, errWrite) || !strings.HasPrefix(err.Error(), "spigot: bench: ") {
			t.Errorf("%s: got %v, want an error starting \"spigot: bench: \" wrapping %v", name, err, errWrite)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1, "1ns"},
		{35 * time.Nanosecond, "35ns"},
		{999 * time.Nanosecond, "999ns"},
		{1000 * time.Nanosecond, "1µs"},
		{1049 * time.Nanosecond, "1µs"},
		{1050 * time.Nanosecond, "1.1µs"},
		{1500 * time.Nanosecond, "1.5µs"},
		{9949 * time.Nanosecond, "9.9µs"},
		{9950 * time.Nanosecond, "10µs"},
		{12_300 * time.Nanosecond, "12µs"},
		{812 * time.Microsecond, "812µs"},
		{999_499 * time.Nanosecond, "999µs"},
		{999_500 * time.Nanosecond, "1ms"},
		{1200 * time.Microsecond, "1.2ms"},
		{1250 * time.Microsecond, "1.2ms"}, // 1.25 is a hair under in binary
		{35 * time.Millisecond, "35ms"},
		{999_600 * time.Microsecond, "1s"},
		{1500 * time.Millisecond, "1.5s"},
		{75 * time.Second, "75s"},
		{time.Hour, "3600s"},
		{-812 * time.Microsecond, "-812µs"},
	}
	for i, tt := range tests {
		if got := FormatDuration(tt.d); got != tt.want {
			t.Errorf("step %d: FormatDuration(%d) got %q want %q", i, int64(tt.d), got, tt.want)
		}
	}
}

func TestFormatRate(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0, "0"},
		{0.5, "0.5"},
		{1.234, "1.23"},
		{812, "812"},
		{999.4, "999"},
		{999.5, "1k"},
		{48_213, "48.2k"},
		{48_000, "48k"},
		{123_456, "123k"},
		{1_234_567, "1.23M"},
		{999_600_000, "1G"},
		{12_300_000_000, "12.3G"},
	}
	for i, tt := range tests {
		if got := formatRate(tt.v); got != tt.want {
			t.Errorf("step %d: formatRate(%v) got %q want %q", i, tt.v, got, tt.want)
		}
	}
}

func TestFormatCeilingPct(t *testing.T) {
	tests := []struct {
		plain, pipelined float64
		want             string
	}{
		{0, 0, "-"},
		{41.2, 12.4, "41% / 12%"},
		{41.2, 0, "41% / -"},
		{0, 12.4, "- / 12%"},
		{0.2, 99.6, "<1% / 100%"},
	}
	for i, tt := range tests {
		if got := formatCeilingPct(tt.plain, tt.pipelined); got != tt.want {
			t.Errorf("step %d: formatCeilingPct(%v, %v) got %q want %q", i, tt.plain, tt.pipelined, got, tt.want)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	r := sampleReport()
	r.Miniredis = true
	r.Interrupted = true
	c3 := &r.Cells[3]
	c3.DenyAsked, c3.DenyShare, c3.Pipelines, c3.OtherCPUPct = 0.25, 0.25, true, ptr(7.5)
	c3.Warnings = []Warning{{Code: AboveCeiling, Detail: "…"}}
	r.Ceilings[0].OtherCPUPct = ptr(2)
	r.Ceilings[0].Warnings = []Warning{{Code: MachineBusy, Detail: "…"}}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, r); err != nil {
		t.Fatalf("WriteJSON: %v", err)
	}
	out := buf.String()
	if !strings.HasPrefix(out, "{\n  \"machine\": ") || !strings.HasSuffix(out, "}\n") {
		t.Errorf("not indented JSON ending in a newline:\n%s", out)
	}

	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("decoding: %v", err)
	}
	if !reflect.DeepEqual(&back, r) {
		t.Errorf("round trip:\ngot  %+v\nwant %+v", back, *r)
	}

	// The field names are those of the struct tags.
	var raw struct {
		Report   map[string]json.RawMessage
		Cells    []map[string]json.RawMessage
		Latency  map[string]json.RawMessage
		Ceilings []map[string]json.RawMessage
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(json.Unmarshal(buf.Bytes(), &raw.Report))
	must(json.Unmarshal(raw.Report["cells"], &raw.Cells))
	must(json.Unmarshal(raw.Cells[3]["latency"], &raw.Latency))
	must(json.Unmarshal(raw.Report["ceilings"], &raw.Ceilings))
	keys := func(m map[string]json.RawMessage) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	checks := []struct {
		what string
		got  []string
		want []string
	}{
		{"report", keys(raw.Report), []string{"ceilings", "cells", "interrupted", "machine", "miniredis", "server"}},
		// The cluster cell, all fields set but baseline.
		{"cell", keys(raw.Cells[3]), []string{"admitted", "allocs_per_op", "ceiling_pct", "ceiling_pipelined_pct", "concurrency", "cost", "denied", "deny_asked", "deny_share", "elapsed_ns", "errors", "keys", "latency", "max_admitted", "note", "ops", "ops_per_sec", "other_cpu_pct", "pipelines", "primaries_pct", "redirects_per_op", "store", "warnings"}},
		// The baseline, without the fields it leaves at 0.
		{"baseline cell", keys(raw.Cells[2]), []string{"admitted", "allocs_per_op", "baseline", "ceiling_pct", "ceiling_pipelined_pct", "concurrency", "cost", "denied", "elapsed_ns", "errors", "keys", "latency", "ops", "ops_per_sec", "store"}},
		{"latency", keys(raw.Latency), []string{"max_ns", "p50_ns", "p90_ns", "p999_ns", "p99_ns"}},
		{"ceiling", keys(raw.Ceilings[0]), []string{"concurrency", "ops_per_sec", "other_cpu_pct", "pipeline", "runs", "saturated", "server_cpu_pct", "threads", "tool", "warnings"}},
		{"unwarned ceiling", keys(raw.Ceilings[1]), []string{"concurrency", "ops_per_sec", "pipeline", "runs", "saturated", "server_cpu_pct", "threads", "tool"}},
	}
	for _, c := range checks {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s keys:\ngot  %q\nwant %q", c.what, c.got, c.want)
		}
	}
	if got, want := string(raw.Cells[3]["elapsed_ns"]), "2000000000"; got != want {
		t.Errorf("elapsed_ns: got %s want %s", got, want)
	}
	if got, want := string(raw.Latency["p50_ns"]), "500000"; got != want {
		t.Errorf("p50_ns: got %s want %s", got, want)
	}
}

func TestWriteJSONEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, &Report{Machine: "m", Interrupted: true}); err != nil {
		t.Fatalf("WriteJSON: %v", err)
	}
	want := "{\n  \"machine\": \"m\",\n  \"interrupted\": true,\n  \"cells\": []\n}\n"
	if got := buf.String(); got != want {
		t.Errorf("got %q want %q", got, want)
	}
}

// plotReport is sampleReport with a second concurrency for each store.
func plotReport() *Report {
	r := sampleReport()
	var more []Cell
	for _, c := range r.Cells {
		c.Concurrency = 4
		c.Throughput /= 3
		c.Latency.P99 /= 4
		more = append(more, c)
	}
	r.Cells = append(more, r.Cells...)
	return r
}

// svgTexts returns the text of every element of the SVG document b,
// failing if b is not well-formed XML.
func svgTexts(t *testing.T, b []byte) []string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return texts
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		if cd, ok := tok.(xml.CharData); ok {
			if s := strings.TrimSpace(string(cd)); s != "" {
				texts = append(texts, s)
			}
		}
	}
}

func count(texts []string, s string) int {
	n := 0
	for _, t := range texts {
		if t == s {
			n++
		}
	}
	return n
}

func TestWritePlotSVG(t *testing.T) {
	r := plotReport()
	path := filepath.Join(t.TempDir(), "bench.svg")
	if err := WritePlot(path, r); err != nil {
		t.Fatalf("WritePlot: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, b)
	// Each series once in the legend.
	for _, label := range []string{"memory", "redis", "redis raw", "rueidis"} {
		if got := count(texts, label); got != 1 {
			t.Errorf("legend %q: got %d times want 1", label, got)
		}
	}
	for _, want := range []string{
		"spigot bench on " + r.Machine,
		"server: " + r.Server,
		"throughput", "p99 latency", "concurrency (goroutines)",
		"4", "64", // the concurrency ticks
		"1ms", "100k", // a decade tick of each Y axis
	} {
		if count(texts, want) == 0 {
			t.Errorf("no text %q in the SVG; texts: %q", want, texts)
		}
	}
	if count(texts, notRepresentative) != 0 {
		t.Errorf("the SVG says %q of a real server", notRepresentative)
	}
	// The baseline is dashed.
	if !bytes.Contains(b, []byte("stroke-dasharray:6,3")) {
		t.Errorf("no dashed line in the SVG")
	}
}

func TestWritePlotSVGKeysAndMiniredis(t *testing.T) {
	r := plotReport()
	r.Miniredis = true
	r.Interrupted = true
	r.Server = "miniredis (embedded)"
	for _, c := range slices.Clone(r.Cells) {
		c.Keys = 1
		r.Cells = append(r.Cells, c)
	}
	path := filepath.Join(t.TempDir(), "bench.SVG")
	if err := WritePlot(path, r); err != nil {
		t.Fatalf("WritePlot: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, b)
	for _, label := range []string{
		"memory keys=1", "memory keys=1000", "redis keys=1", "redis keys=1000",
		"redis raw keys=1", "redis raw keys=1000", "rueidis keys=1", "rueidis keys=1000",
	} {
		if got := count(texts, label); got != 1 {
			t.Errorf("legend %q: got %d times want 1", label, got)
		}
	}
	for _, want := range []string{notRepresentative, "interrupted: the cells measured so far"} {
		if count(texts, want) != 1 {
			t.Errorf("no title line %q in the SVG", want)
		}
	}
}

func TestWritePlotPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.png")
	if err := WritePlot(path, plotReport()); err != nil {
		t.Fatalf("WritePlot: %v", err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decoding the PNG: %v", err)
	}
	b := img.Bounds()
	if b.Dx() < 800 || b.Dy() < 400 {
		t.Errorf("got %d×%d pixels, want at least 800×400", b.Dx(), b.Dy())
	}
	// Something was drawn: many colours, not a blank page.
	colours := map[[4]uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, bl, a}] = true
		}
	}
	if len(colours) < 20 {
		t.Errorf("got %d colours, want a drawn plot", len(colours))
	}
}

func TestWritePlotErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		r    *Report
		want string
	}{
		{"bench.pdf", plotReport(), `spigot: bench: plot: want a .svg or .png file, got "` + filepath.Join(dir, "bench.pdf") + `"`},
		{"bench", plotReport(), `spigot: bench: plot: want a .svg or .png file, got "` + filepath.Join(dir, "bench") + `"`},
		{"empty.svg", &Report{Interrupted: true}, "spigot: bench: plot: no cell has a throughput or a latency to plot"},
		{"zero.png", &Report{Cells: []Cell{{Store: "redis", Concurrency: 1, Keys: 1}}}, "spigot: bench: plot: no cell has a throughput or a latency to plot"},
	}
	for i, tt := range tests {
		path := filepath.Join(dir, tt.name)
		err := WritePlot(path, tt.r)
		if err == nil || err.Error() != tt.want {
			t.Errorf("step %d: got %v want %q", i, err, tt.want)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("step %d: %s was created (%v)", i, tt.name, err)
		}
	}

	// A directory that does not exist.
	err := WritePlot(filepath.Join(dir, "no", "such", "bench.svg"), plotReport())
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "spigot: bench: plot: ") {
		t.Errorf("missing directory: got %v", err)
	}
}

// TestWritePlotOnePoint draws a single cell: the axes must not collapse
// on a log scale.
func TestWritePlotOnePoint(t *testing.T) {
	r := &Report{Cells: []Cell{{Store: "memory", Concurrency: 1, Keys: 1, Throughput: 1e7,
		Latency: Percentiles{P99: 100 * time.Nanosecond}}}}
	if err := WritePlot(filepath.Join(t.TempDir(), "one.svg"), r); err != nil {
		t.Fatalf("WritePlot: %v", err)
	}
}

func TestProgressQuiet(t *testing.T) {
	file, err := os.Create(filepath.Join(t.TempDir(), "progress"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var buf bytes.Buffer
	for name, w := range map[string]io.Writer{"bytes.Buffer": &buf, "file": file} {
		p := NewProgress(w, 3)
		p.Start(CellLabel("redis", 64, 1000))
		p.Done()
		p.Finish()
		p.Finish()
		if _, ok := p.(quiet); !ok {
			t.Errorf("%s: got a %T, want the quiet Progress", name, p)
		}
	}
	if buf.Len() != 0 {
		t.Errorf("bytes.Buffer: wrote %q", buf.String())
	}
	if fi, err := file.Stat(); err != nil || fi.Size() != 0 {
		t.Errorf("file: wrote %d bytes (%v)", fi.Size(), err)
	}
}

func TestCellLabel(t *testing.T) {
	if got, want := CellLabel("redis", 64, 1000), "redis c=64 keys=1000"; got != want {
		t.Errorf("got %q want %q", got, want)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

// TestProgressBar runs the terminal's bar on a buffer: it shows the
// running cell and the count, and erases itself on Finish.
func TestProgressBar(t *testing.T) {
	out := &syncBuffer{mu: make(chan struct{}, 1)}
	p := newBar(out, 3, time.Millisecond)
	p.Start(CellLabel("memory", 1, 1000))
	p.Done()
	p.Start(CellLabel("redis", 64, 1000))
	p.Finish()
	p.Done() // after Finish: nothing
	p.Start("after")
	p.Finish()

	s := out.buf.String()
	for _, want := range []string{"memory c=1 keys=1000", "redis c=64 keys=1000", "0/3", "1/3"} {
		if !strings.Contains(s, want) {
			t.Errorf("the bar never showed %q: %q", want, s)
		}
	}
	if strings.Contains(s, "2/3") || strings.Contains(s, "after") {
		t.Errorf("the bar moved after Finish: %q", s)
	}
	// It ends erased: the last line is blank, back at its start.
	last := s[strings.LastIndex(s, "\r")+1:]
	tail := s[strings.LastIndex(s[:len(s)-len(last)-1], "\r")+1 : len(s)-len(last)-1]
	if last != "" || strings.TrimSpace(tail) != "" {
		t.Errorf("the bar was not erased: ends %q", s[max(0, len(s)-80):])
	}
}
