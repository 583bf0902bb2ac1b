package main

import (
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"slices"
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
		// 10000 requests of 2^53 tokens, each admitted: 10000×2^53 tokens
		// is more than an int64 holds.
		name: "admitted tokens beyond int64",
		args: []string{"-capacity", "9007199254740992", "-rate", "9007199254740992/us", "-cost", "9007199254740992",
			"-burst", "0", "-every", "1us", "-n", "10000", "-quiet"},
		summary: map[string]string{
			"admitted": "10000 requests, 90071992547409920000 tokens (9.008e+21/s)",
			"bound":    "90071992547409920000 tokens = capacity 9007199254740992 + 90062985348155179008 refilled in 9.999ms at 9007199254740992/us (9.008e+21/s)",
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

// checkRun runs spigot with args and checks its exit status, standard
// output and standard error, each on its own.
func checkRun(t *testing.T, step int, args []string, code int, stdout, stderr string) {
	t.Helper()
	gotOut, gotErr, gotCode := runCmd(t, args...)
	cmd := strings.TrimSpace("spigot " + strings.Join(args, " "))
	if gotCode != code {
		t.Errorf("step %d: %s: exit status: got %d, want %d", step, cmd, gotCode, code)
	}
	if gotOut != stdout {
		t.Errorf("step %d: %s: stdout: got %q, want %q", step, cmd, gotOut, stdout)
	}
	if gotErr != stderr {
		t.Errorf("step %d: %s: stderr: got %q, want %q", step, cmd, gotErr, stderr)
	}
}

// TestSimulateInvalid checks that simulate rejects every flag value, and
// every combination, that cannot be simulated with one line that names the
// flags to change, in the command's terms (never the internal bucket's
// name), and exit status 2.
func TestSimulateInvalid(t *testing.T) {
	tests := []struct {
		args []string
		want string // the line on stderr, after "spigot simulate: "
	}{
		{[]string{"-capacity", "-1"}, "-capacity -1: must be 0 or more"},
		{[]string{"-rate", "1/-1s"}, "-rate 1/-1s: the period must be positive"},
		{[]string{"-rate", "1/-s"}, "-rate 1/-s: the period must be positive"},
		{[]string{"-rate", "1/0s"}, "-rate 1/0s: the period must be positive"},
		{[]string{"-rate", "0/s"}, "-rate 0/s: the token count must be 1 or more"},
		{[]string{"-rate", "-3/s"}, "-rate -3/s: the token count must be 1 or more"},
		{[]string{"-rate", "-3/-1s"}, "-rate -3/-1s: the token count must be 1 or more"},
		{[]string{"-rate", "1/500ns"}, "-rate 1/500ns: the period must be at least 1µs"},
		{[]string{"-rate", "1/1500ns"}, "-rate 1/1500ns: the period must be a whole number of microseconds"},
		// 1 token per 9.216e15 µs: the fraction's denominator is over 2^53
		// (9.007e15), whatever the capacity.
		{[]string{"-capacity", "0", "-rate", "1/2560000h"}, "-rate 1/2560000h: too slow for spigot's exact arithmetic, " +
			"which needs the rate in tokens per µs, 1/9216000000000000, to have a denominator of at most 2^53; use a shorter period"},
		// 1 token per 3.6e15 µs fits, for at most 2 tokens.
		{[]string{"-rate", "1/1000000h"}, "-capacity 10 is too large for -rate 1/1000000h: " +
			"spigot's exact arithmetic needs -capacity × 3600000000000000 (the denominator of the rate in tokens per µs, 1/3600000000000000) " +
			"to be at most 2^53; lower -capacity to at most 2, or use a -rate that is a simpler fraction of tokens per µs"},
		{[]string{"-rate", "9007199254740993/us"}, "-rate 9007199254740993/us: too fast for spigot's exact arithmetic, " +
			"which needs the rate in tokens per µs, 9007199254740993/1, to have a numerator of at most 2^53; use fewer tokens"},
		// 2^53 / 3600000000 = 2501999.79…
		{[]string{"-capacity", "2502000", "-rate", "1/h"}, "-capacity 2502000 is too large for -rate 1/h: " +
			"spigot's exact arithmetic needs -capacity × 3600000000 (the denominator of the rate in tokens per µs, 1/3600000000) " +
			"to be at most 2^53; lower -capacity to at most 2501999, or use a -rate that is a simpler fraction of tokens per µs"},
		{[]string{"-capacity", "100000000000", "-rate", "20/3s"}, "-capacity 100000000000 is too large for -rate 20/3s: " +
			"spigot's exact arithmetic needs -capacity × 150000 (the denominator of the rate in tokens per µs, 1/150000) " +
			"to be at most 2^53; lower -capacity to at most 60047995031, or use a -rate that is a simpler fraction of tokens per µs"},
		{[]string{"-cost", "-1"}, "-cost -1: must be 0 or more"},
		{[]string{"-burst", "-1"}, "-burst -1: must be 0 or more"},
		{[]string{"-every", "0s"}, "-every 0s: must be positive"},
		{[]string{"-every", "-1s"}, "-every -1s: must be positive"},
		{[]string{"-every", "1500ns"}, "-every 1.5µs: must be a whole number of microseconds"},
		{[]string{"-every", "-1s", "-n", "0"}, "-every -1s: must be positive"},
		{[]string{"-n", "-1"}, "-n -1: must be 0 or more"},
		{[]string{"-burst", "0", "-n", "0"}, "-burst 0 and -n 0: no requests; set -burst or -n above 0"},
		{[]string{"-burst", "20000000"}, "-burst 20000000 and -n 10: at most 10000000 requests in all"},
		{[]string{"-burst", "0", "-n", "10000001"}, "-burst 0 and -n 10000001: at most 10000000 requests in all"},
		{[]string{"-n", "1000", "-every", "2000000h"}, "-n 1000 and -every 2000000h0m0s: " +
			"the last request would come after 2562047h47m16.854775807s, the longest time the simulation counts; lower -n or -every"},
	}
	for i, tt := range tests {
		args := append([]string{"simulate"}, tt.args...)
		checkRun(t, i, args, 2, "", "spigot simulate: "+tt.want+"\n")
	}
}

// TestSimulateValidEdges checks values at the edge of what simulate
// accepts.
func TestSimulateValidEdges(t *testing.T) {
	tests := [][]string{
		{"-capacity", "2501999", "-rate", "1/h"},
		{"-capacity", "2", "-rate", "1/1000000h"},
		{"-capacity", "0", "-rate", "1/2500000h"}, // 9e15 µs per token
		{"-capacity", "1", "-rate", "2/2560000h"}, // 1/4.608e15 per µs
		{"-rate", "1/us"},
		{"-rate", "1/+1s"},
		{"-rate", "9007199254740992/us"},
		{"-capacity", "0", "-cost", "0"},
		{"-cost", "11"}, // above the capacity: every request denied
		{"-every", "1us", "-n", "0"},
	}
	for i, args := range tests {
		args = append([]string{"simulate", "-quiet"}, args...)
		out, errOut, code := runCmd(t, args...)
		cmd := "spigot " + strings.Join(args, " ")
		if code != 0 {
			t.Errorf("step %d: %s: exit status: got %d, want 0", i, cmd, code)
		}
		if errOut != "" {
			t.Errorf("step %d: %s: stderr: got %q, want nothing", i, cmd, errOut)
		}
		if !strings.HasPrefix(out, "bucket ") {
			t.Errorf("step %d: %s: stdout: got %q, want the summary", i, cmd, out)
		}
	}
}

// TestUsageErrors checks that a bad command line (an unknown command or
// flag, a value that does not parse, an extra argument) prints one line
// and a hint to run -h, not the whole usage, and exits 2.
func TestUsageErrors(t *testing.T) {
	const (
		hint    = "Run 'spigot -h' for usage.\n"
		simHint = "Run 'spigot simulate -h' for usage.\n"
	)
	tests := []struct {
		args   []string
		stderr string
	}{
		{[]string{"benchmark"}, "spigot: unknown command \"benchmark\"\n" + hint},
		{[]string{"simulat"}, "spigot: unknown command \"simulat\"\n" + hint},
		{[]string{"-x"}, "spigot: flag provided but not defined: -x\n" + hint},
		{[]string{"simulate", "-foo"}, "spigot simulate: flag provided but not defined: -foo\n" + simHint},
		{[]string{"simulate", "-capacity", "x"}, "spigot simulate: invalid value \"x\" for flag -capacity: parse error\n" + simHint},
		{[]string{"simulate", "-cost", "1.5"}, "spigot simulate: invalid value \"1.5\" for flag -cost: parse error\n" + simHint},
		{[]string{"simulate", "-every", "5"}, "spigot simulate: invalid value \"5\" for flag -every: parse error\n" + simHint},
		{[]string{"simulate", "-n"}, "spigot simulate: flag needs an argument: -n\n" + simHint},
		{[]string{"simulate", "-quiet=maybe"}, "spigot simulate: invalid boolean value \"maybe\" for -quiet: parse error\n" + simHint},
		{[]string{"simulate", "-rate", "nonsense"},
			"spigot simulate: invalid value \"nonsense\" for flag -rate: want tokens/period, such as 20/3s\n" + simHint},
		{[]string{"simulate", "-rate", "x/s"},
			"spigot simulate: invalid value \"x/s\" for flag -rate: the token count \"x\" is not a whole number\n" + simHint},
		{[]string{"simulate", "-rate", "99999999999999999999/s"},
			"spigot simulate: invalid value \"99999999999999999999/s\" for flag -rate: the token count \"99999999999999999999\" is out of range\n" + simHint},
		{[]string{"simulate", "-rate", "1/xyz"},
			"spigot simulate: invalid value \"1/xyz\" for flag -rate: the period \"xyz\" is not a duration such as 3s or 1m30s, or a unit alone: h, m, s, ms, us\n" + simHint},
		{[]string{"simulate", "-rate", "1/--1s"},
			"spigot simulate: invalid value \"1/--1s\" for flag -rate: the period \"--1s\" is not a duration such as 3s or 1m30s, or a unit alone: h, m, s, ms, us\n" + simHint},
		{[]string{"simulate", "-rate", "1/3000000h"},
			"spigot simulate: invalid value \"1/3000000h\" for flag -rate: the period \"3000000h\" is too long: at most 2562047h47m16.854775807s\n" + simHint},
		{[]string{"simulate", "extra"}, "spigot simulate: unexpected argument \"extra\"\n" + simHint},
		{[]string{"simulate", "-quiet", "extra", "-n", "2"}, "spigot simulate: unexpected argument \"extra\"\n" + simHint},
	}
	for i, tt := range tests {
		checkRun(t, i, tt.args, 2, "", tt.stderr)
	}
}

// topUsage is what spigot -h prints.
const topUsage = `usage: spigot <command> [flags]

The commands are:

  bench      measure the stores against your server, beside the server's own ceiling
  demo       serve a page that shows each kind of limit live, or all five side by side
  serve      answer Envoy's rate limit service protocol from envoyproxy/ratelimit's configuration
  simulate   play a traffic pattern against each kind of limit and print what it admits
  version    print spigot's version and the Go version that built it

Run 'spigot <command> -h' for a command's flags.
`

func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string // in stdout
	}{
		{[]string{"-h"}, topUsage},
		{[]string{"-help"}, topUsage},
		{[]string{"--help"}, topUsage},
		{[]string{"help"}, topUsage},
		{[]string{"simulate", "-h"}, "-rate tokens/period"},
		{[]string{"simulate", "-help"}, "(default 1/s)"},
		{[]string{"simulate", "--help"}, "usage: spigot simulate [flags]"},
		{[]string{"simulate", "-capacity", "-1", "-h"}, "-capacity int"},
	}
	for i, tt := range tests {
		out, errOut, code := runCmd(t, tt.args...)
		cmd := "spigot " + strings.Join(tt.args, " ")
		if code != 0 {
			t.Errorf("step %d: %s: exit status: got %d, want 0", i, cmd, code)
		}
		if !strings.Contains(out, tt.want) {
			t.Errorf("step %d: %s: stdout: got %q, want it to contain %q", i, cmd, out, tt.want)
		}
		if errOut != "" {
			t.Errorf("step %d: %s: stderr: got %q, want nothing", i, cmd, errOut)
		}
	}
	// With no command, spigot prints the whole usage as an error.
	checkRun(t, len(tests), nil, 2, "", topUsage)
}

// TestDoc checks the package doc against the command: it lists exactly the
// commands that exist and promises no others, and its list of simulate's
// flags is what simulate -h prints (names, placeholders, descriptions,
// defaults).
func TestDoc(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()

	// The commands: the doc's list, spigot -h's list, and each one runs.
	docCommands := block(doc, "The commands are:\n\n", "\t")
	usageOut, _, _ := runCmd(t, "-h")
	usageCommands := block(usageOut, "The commands are:\n\n", "  ")
	if got, want := strings.Join(docCommands, "\n"), strings.Join(usageCommands, "\n"); got != want {
		t.Errorf("commands: got doc %q, want spigot -h's %q", got, want)
	}
	for i, line := range docCommands {
		name := strings.Fields(line)[0]
		if _, _, code := runCmd(t, name, "-h"); code != 0 {
			t.Errorf("step %d: the doc lists %q, but spigot %s -h: got exit status %d, want 0", i, name, name, code)
		}
	}
	for i, word := range []string{"planned", "coming", "future", "will be", "soon", "TODO"} {
		if strings.Contains(doc, word) {
			sentence := doc[strings.LastIndex(doc[:strings.Index(doc, word)], "\n")+1:]
			sentence, _, _ = strings.Cut(sentence, "\n")
			t.Errorf("step %d: doc: got %q, want no promise of what does not exist (%q)", i, sentence, word)
		}
	}

	// The flags: "-name placeholder  description (default x)" in the doc;
	// "  -name placeholder\n    \tdescription (default x)" from -h.
	simOut, _, _ := runCmd(t, "simulate", "-h")
	var want []string
	for _, line := range strings.Split(simOut, "\n") {
		switch {
		case strings.HasPrefix(line, "  -"):
			want = append(want, strings.TrimSpace(line))
		case strings.HasPrefix(line, "    \t") && len(want) > 0:
			want[len(want)-1] += " | " + strings.TrimSpace(line)
		}
	}
	var got []string
	for _, line := range block(doc, "The flags are:\n\n", "\t") {
		flagPart, desc, _ := strings.Cut(strings.TrimSpace(line), "  ")
		got = append(got, strings.Join(strings.Fields(flagPart), " ")+" | "+strings.TrimSpace(desc))
	}
	slices.Sort(got) // -h sorts the flags by name; the doc, by meaning
	slices.Sort(want)
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("flag %d: got doc %q, want simulate -h's %q", i+1, g, w)
		}
	}
}

// block returns the lines of text that start with indent right after the
// first line that ends with header, without the indent.
func block(text, header, indent string) []string {
	_, rest, ok := strings.Cut(text, header)
	if !ok {
		return nil
	}
	var lines []string
	for line := range strings.Lines(rest) {
		if !strings.HasPrefix(line, indent) {
			break
		}
		lines = append(lines, strings.TrimSuffix(strings.TrimPrefix(line, indent), "\n"))
	}
	return lines
}
