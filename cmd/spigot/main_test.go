package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// runCmd runs the command with args and returns its output and exit status.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// parseOutput splits simulate's output into the timeline rows, each as
// "t result left retry-after" (the # and cost columns are checked here),
// and the summary lines by label. It fails the test if the timeline's
// columns are not aligned under the header.
func parseOutput(t *testing.T, out string, cost string) (rows []string, summary map[string]string) {
	t.Helper()
	timeline, rest, ok := strings.Cut(out, "\n\n")
	if !ok { // -quiet: the summary only
		timeline, rest = "", out
	}
	if timeline != "" {
		lines := strings.Split(timeline, "\n")
		header := lines[0]
		if f := strings.Fields(header); strings.Join(f, " ") != "# t cost result left retry-after" {
			t.Fatalf("timeline header %q", header)
		}
		col := strings.Index(header, "result")
		for i, line := range lines[1:] {
			f := strings.Fields(line)
			if len(f) != 6 {
				t.Fatalf("row %d: %q: want 6 fields", i+1, line)
			}
			if f[0] != fmt.Sprint(i+1) || f[2] != cost {
				t.Errorf("row %d: %q: want # %d and cost %s", i+1, line, i+1, cost)
			}
			if !strings.HasPrefix(line[col:], f[3]) {
				t.Errorf("row %d: %q: result not aligned under the header %q", i+1, line, header)
			}
			rows = append(rows, f[1]+" "+strings.Join(f[3:], " "))
		}
	}
	summary = make(map[string]string)
	for line := range strings.Lines(rest) {
		label, text, _ := strings.Cut(strings.TrimSpace(line), " ")
		summary[label] = strings.TrimSpace(text)
	}
	return rows, summary
}

// repeat returns n copies of row.
func repeat(n int, row string) []string {
	rows := make([]string, n)
	for i := range rows {
		rows[i] = row
	}
	return rows
}

// defaultRows is the example worked out by hand: capacity 10 at
// 1/s, 15 requests at 0s then 1 every second for 10 s. The burst takes the
// 10 tokens (9…0 left); the next 5 find the bucket empty and need one
// token, 1 s away; each later request finds the one token refilled since
// the previous one.
func defaultRows() []string {
	var rows []string
	for left := 9; left >= 0; left-- {
		rows = append(rows, fmt.Sprintf("0s admitted %d -", left))
	}
	rows = append(rows, repeat(5, "0s denied 0 1s")...)
	for s := 1; s <= 10; s++ {
		rows = append(rows, fmt.Sprintf("%ds admitted 0 -", s))
	}
	return rows
}

func TestSimulate(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		cost    string
		rows    []string
		summary map[string]string
	}{{
		name: "defaults",
		args: nil,
		cost: "1",
		rows: defaultRows(),
		summary: map[string]string{
			"bucket":   "capacity 10, rate 1/s, cost 1",
			"requests": "25 (15 at once, then 10 every 1s) over 10s",
			"admitted": "20 requests, 20 tokens (2/s)",
			"bound":    "20 tokens = capacity 10 + 10 refilled in 10s at 1/s (2/s)",
			"denied":   "5 requests, first #11 at 0s, longest streak 5",
			"end":      "0 tokens left, full again after 10s",
		},
	}, {
		// 0.7 token/s. After the burst the bucket is empty: 1 token is
		// 10/7 s = 1428.57… ms away, rounded up. At 1s it holds 0.7 (0.3
		// short: 428.57… ms); at 2s 1.4; at 3s 0.4+0.7 = 1.1.
		name: "7 per 10s",
		args: []string{"-capacity", "3", "-rate", "7/10s", "-burst", "4", "-n", "3"},
		cost: "1",
		rows: []string{
			"0s admitted 2 -",
			"0s admitted 1 -",
			"0s admitted 0 -",
			"0s denied 0 1.429s",
			"1s denied 0 429ms",
			"2s admitted 0 -",
			"3s admitted 0 -",
		},
		summary: map[string]string{
			"admitted": "5 requests, 5 tokens (1.667/s)",
			"bound":    "5 tokens = capacity 3 + 2 refilled in 3s at 7/10s (1.667/s)",
			"denied":   "2 requests, first #4 at 0s, longest streak 2",
			// 0.1 token left at 3s: 2.9 tokens at 0.7/s is 4142.86… ms.
			"end": "0 tokens left, full again after 4.143s",
		},
	}, {
		name: "retry at exactly retry-after",
		args: []string{"-capacity", "1", "-rate", "1/3s", "-burst", "2", "-every", "3s", "-n", "2"},
		cost: "1",
		rows: []string{
			"0s admitted 0 -",
			"0s denied 0 3s",
			"3s admitted 0 -",
			"6s admitted 0 -",
		},
		summary: map[string]string{
			"bound": "3 tokens = capacity 1 + 2 refilled in 6s at 1/3s (0.5/s)",
		},
	}, {
		// 2 tokens/s: the burst leaves 1 token, and a cost of 2 needs one
		// more, 500 ms away; at 0.5s it holds 2, at 1s 1 again.
		name: "weighted cost",
		args: []string{"-capacity", "5", "-rate", "2/s", "-cost", "2", "-burst", "4", "-every", "500ms", "-n", "2"},
		cost: "2",
		rows: []string{
			"0s admitted 3 -",
			"0s admitted 1 -",
			"0s denied 1 500ms",
			"0s denied 1 500ms",
			"500ms admitted 0 -",
			"1s denied 1 500ms",
		},
		summary: map[string]string{
			"admitted": "3 requests, 6 tokens (6/s)",
			"denied":   "3 requests, first #3 at 0s, longest streak 2",
			"end":      "1 token left, full again after 2s",
		},
	}, {
		name: "cost over capacity",
		args: []string{"-capacity", "2", "-cost", "3", "-burst", "2", "-n", "1"},
		cost: "3",
		rows: []string{
			"0s denied 2 never",
			"0s denied 2 never",
			"1s denied 2 never",
		},
		summary: map[string]string{
			"admitted": "0 requests, 0 tokens (0/s)",
			"denied":   "3 requests, first #1 at 0s, longest streak 3; cost 3 > capacity 2 is never admitted",
			"end":      "2 tokens left, full",
		},
	}, {
		name: "capacity 0 admits cost 0",
		args: []string{"-capacity", "0", "-cost", "0", "-burst", "2", "-n", "0"},
		cost: "0",
		rows: []string{
			"0s admitted 0 -",
			"0s admitted 0 -",
		},
		summary: map[string]string{
			"requests": "2 (2 at once) over 0s",
			"admitted": "2 requests, 0 tokens",
			"bound":    "0 tokens = capacity 0 + 0 refilled in 0s at 1/s",
			"denied":   "0 requests",
		},
	}, {
		name: "steady only",
		args: []string{"-capacity", "1", "-rate", "1/2s", "-burst", "0", "-every", "1s", "-n", "4"},
		cost: "1",
		rows: []string{
			"1s admitted 0 -",
			"2s denied 0 1s",
			"3s admitted 0 -",
			"4s denied 0 1s",
		},
		summary: map[string]string{
			"requests": "4 (0 at once, then 4 every 1s) over 3s",
			"bound":    "2 tokens = capacity 1 + 1 refilled in 3s at 1/2s (0.6667/s)",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"simulate"}, tt.args...)
			out, errOut, code := runCmd(t, args...)
			if code != 0 || errOut != "" {
				t.Fatalf("spigot %s: exit %d, stderr %q; want 0 and nothing", strings.Join(args, " "), code, errOut)
			}
			rows, summary := parseOutput(t, out, tt.cost)
			for i := range max(len(rows), len(tt.rows)) {
				var got, want string
				if i < len(rows) {
					got = rows[i]
				}
				if i < len(tt.rows) {
					want = tt.rows[i]
				}
				if got != want {
					t.Errorf("step %d: got %q, want %q", i+1, got, want)
				}
			}
			for label, want := range tt.summary {
				if got := summary[label]; got != want {
					t.Errorf("summary %s: got %q, want %q", label, got, want)
				}
			}
		})
	}
}

// TestREADMECommand runs the README's "go run ./cmd/spigot simulate" and
// checks the statement of it: of 15 requests at once and then 1
// per second, the first 10 are admitted, the next 5 denied, every later
// one admitted.
func TestREADMECommand(t *testing.T) {
	out, errOut, code := runCmd(t, "simulate")
	if code != 0 || errOut != "" {
		t.Fatalf("spigot simulate: exit %d, stderr %q; want 0 and nothing", code, errOut)
	}
	rows, _ := parseOutput(t, out, "1")
	var runs []string // run-length encoding of the results
	for _, r := range rows {
		result := strings.Fields(r)[1]
		if n := len(runs); n > 0 && strings.HasSuffix(runs[n-1], " "+result) {
			var k int
			fmt.Sscan(runs[n-1], &k)
			runs[n-1] = fmt.Sprintf("%d %s", k+1, result)
			continue
		}
		runs = append(runs, "1 "+result)
	}
	if got, want := strings.Join(runs, ", "), "10 admitted, 5 denied, 10 admitted"; got != want {
		t.Errorf("results: got %s, want %s", got, want)
	}
}

func TestQuiet(t *testing.T) {
	out, _, code := runCmd(t, "simulate", "-quiet")
	if code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if strings.Contains(out, "retry-after") || strings.Contains(out, "\n\n") {
		t.Errorf("-quiet printed a timeline:\n%s", out)
	}
	_, summary := parseOutput(t, out, "1")
	if got, want := summary["denied"], "5 requests, first #11 at 0s, longest streak 5"; got != want {
		t.Errorf("summary denied: got %q, want %q", got, want)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string // in stderr
	}{
		{nil, "usage: spigot <command>"},
		{[]string{"bench"}, `unknown command "bench"`},
		{[]string{"-x"}, `unknown command "-x"`},
		{[]string{"simulate", "-rate", "nonsense"}, `invalid value "nonsense" for flag -rate`},
		{[]string{"simulate", "-rate", "0/s"}, "a rate must refill at least one token"},
		{[]string{"simulate", "-rate", "1/500ns"}, "the period must be at least 1µs"},
		{[]string{"simulate", "-capacity", "-1"}, "capacity -1 is negative"},
		{[]string{"simulate", "-capacity", "x"}, `invalid value "x" for flag -capacity`},
		{[]string{"simulate", "-cost", "-1"}, "-cost -1: a cost must be 0 or more"},
		{[]string{"simulate", "-burst", "-1"}, "-burst -1"},
		{[]string{"simulate", "-n", "-1"}, "-n -1"},
		{[]string{"simulate", "-every", "0s"}, "-every 0s"},
		{[]string{"simulate", "-every", "1500ns"}, "whole number of microseconds"},
		{[]string{"simulate", "-burst", "0", "-n", "0"}, "no requests"},
		{[]string{"simulate", "-burst", "20000000"}, "at most 10000000 requests"},
		{[]string{"simulate", "-n", "1000", "-every", "2000000h"}, "too long"},
		{[]string{"simulate", "-nope"}, "flag provided but not defined: -nope"},
		{[]string{"simulate", "extra"}, `unexpected argument "extra"`},
	}
	for i, tt := range tests {
		out, errOut, code := runCmd(t, tt.args...)
		if code != 2 || !strings.Contains(errOut, tt.want) || out != "" {
			t.Errorf("step %d: spigot %s: got exit %d, stdout %q, stderr %q; want exit 2, no stdout, stderr with %q",
				i, strings.Join(tt.args, " "), code, out, errOut, tt.want)
		}
	}
}

func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string // in stdout
	}{
		{[]string{"-h"}, "simulate   play a traffic pattern"},
		{[]string{"help"}, "simulate   play a traffic pattern"},
		{[]string{"simulate", "-h"}, "-rate tokens/period"},
		{[]string{"simulate", "-help"}, "(default 1/s)"},
	}
	for i, tt := range tests {
		out, errOut, code := runCmd(t, tt.args...)
		if code != 0 || !strings.Contains(out, tt.want) || errOut != "" {
			t.Errorf("step %d: spigot %s: got exit %d, stdout %q, stderr %q; want exit 0, stdout with %q, no stderr",
				i, strings.Join(tt.args, " "), code, out, errOut, tt.want)
		}
	}
}
