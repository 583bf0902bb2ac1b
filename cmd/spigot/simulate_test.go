package main

import (
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// boundaryBurst is the package doc's example of the fixed window's
// boundary burst, worked out by hand: windows of 10 a second, the fixed
// window's starting 10ms after each second. The 10 requests at 0s fill
// every limit. From 1ms on, one request a millisecond: the token bucket and
// the leaky bucket get a token back only at 100ms, the sliding window and
// the sliding log only a second after the burst; the fixed window starts
// a new window at 10ms and admits 10 more, until 19ms. The leaky bucket
// lets its 10 leave one every 100ms.
const boundaryBurst = `#   t     cost  token-bucket  fixed-window  sliding-window  sliding-log   leaky-bucket
1   0s    1     admitted      admitted      admitted        admitted      departs 0s
2   0s    1     admitted      admitted      admitted        admitted      departs 100ms
3   0s    1     admitted      admitted      admitted        admitted      departs 200ms
4   0s    1     admitted      admitted      admitted        admitted      departs 300ms
5   0s    1     admitted      admitted      admitted        admitted      departs 400ms
6   0s    1     admitted      admitted      admitted        admitted      departs 500ms
7   0s    1     admitted      admitted      admitted        admitted      departs 600ms
8   0s    1     admitted      admitted      admitted        admitted      departs 700ms
9   0s    1     admitted      admitted      admitted        admitted      departs 800ms
10  0s    1     admitted      admitted      admitted        admitted      departs 900ms
11  1ms   1     denied 99ms   denied 9ms    denied 1.099s   denied 999ms  denied 99ms
12  2ms   1     denied 98ms   denied 8ms    denied 1.098s   denied 998ms  denied 98ms
13  3ms   1     denied 97ms   denied 7ms    denied 1.097s   denied 997ms  denied 97ms
14  4ms   1     denied 96ms   denied 6ms    denied 1.096s   denied 996ms  denied 96ms
15  5ms   1     denied 95ms   denied 5ms    denied 1.095s   denied 995ms  denied 95ms
16  6ms   1     denied 94ms   denied 4ms    denied 1.094s   denied 994ms  denied 94ms
17  7ms   1     denied 93ms   denied 3ms    denied 1.093s   denied 993ms  denied 93ms
18  8ms   1     denied 92ms   denied 2ms    denied 1.092s   denied 992ms  denied 92ms
19  9ms   1     denied 91ms   denied 1ms    denied 1.091s   denied 991ms  denied 91ms
20  10ms  1     denied 90ms   admitted      denied 1.09s    denied 990ms  denied 90ms
21  11ms  1     denied 89ms   admitted      denied 1.089s   denied 989ms  denied 89ms
22  12ms  1     denied 88ms   admitted      denied 1.088s   denied 988ms  denied 88ms
23  13ms  1     denied 87ms   admitted      denied 1.087s   denied 987ms  denied 87ms
24  14ms  1     denied 86ms   admitted      denied 1.086s   denied 986ms  denied 86ms
25  15ms  1     denied 85ms   admitted      denied 1.085s   denied 985ms  denied 85ms
26  16ms  1     denied 84ms   admitted      denied 1.084s   denied 984ms  denied 84ms
27  17ms  1     denied 83ms   admitted      denied 1.083s   denied 983ms  denied 83ms
28  18ms  1     denied 82ms   admitted      denied 1.082s   denied 982ms  denied 82ms
29  19ms  1     denied 81ms   admitted      denied 1.081s   denied 981ms  denied 81ms
30  20ms  1     denied 80ms   denied 990ms  denied 1.08s    denied 980ms  denied 80ms

requests  30 (10 at once, then 20 every 1ms) over 20ms, cost 1
token-bucket    capacity 10, rate 10/s
fixed-window    fixed window, 10 tokens in each window of 1s, the windows starting 10ms after each whole 1s
sliding-window  sliding window counter, 10 tokens in each window of 1s, weighing the previous one's
sliding-log     sliding log, 10 tokens in any window of 1s
leaky-bucket    leaky, a queue of 10 leaving at 10/s

                                token-bucket  fixed-window  sliding-window  sliding-log  leaky-bucket
admitted                        10            20            10              10           10
denied                          20            10            20              20           20
most tokens admitted in any 1s  10            20            10              10           10
most tokens leaving in any 1s   10            20            10              10           10
the model's bound in any 1s     20            20            20              10           20
longest delay                   0s            0s            0s              0s           900ms

token-bucket admitted at most 10 in any 1s: up to its capacity of 10 at once, then 10/s.
fixed-window admitted 20 in the 1s from 0s, twice its capacity of 10: 10 before the window boundary at 10ms, 10 after.
sliding-window admitted at most 10 in any 1s, against its capacity of 10.
sliding-log admitted at most 10 in any 1s, never more than its capacity of 10: it is exact.
leaky-bucket delayed its 10 requests by up to 900ms: they left from 0s to 900ms, at least 100ms apart, at most 10 in any 1s.
`

// TestSimulateAll plays the same traffic against every algorithm.
func TestSimulateAll(t *testing.T) {
	args := []string{"simulate", "-algo", "all", "-rate", "10/s", "-offset", "10ms", "-burst", "10", "-every", "1ms", "-n", "20"}
	out, errOut, code := runCmd(t, args...)
	if code != 0 || errOut != "" {
		t.Fatalf("spigot %s: exit %d, stderr %q; want 0 and nothing", strings.Join(args, " "), code, errOut)
	}
	got, want := strings.Split(out, "\n"), strings.Split(boundaryBurst, "\n")
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("line %d: got %q, want %q", i+1, g, w)
		}
	}
	// The package doc, -h and the README show this command.
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	help, _, _ := runCmd(t, "simulate", "-h")
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	shown := strings.Join(args[1:], " ")
	for name, text := range map[string]string{"the package doc": f.Doc.Text(), "simulate -h": help, "README.md": string(readme)} {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), shown) {
			t.Errorf("%s does not show %q", name, shown)
		}
	}
	// -quiet leaves out the timeline, and nothing else.
	quiet, _, _ := runCmd(t, append(args, "-quiet")...)
	if _, summary, _ := strings.Cut(boundaryBurst, "\n\n"); quiet != summary {
		t.Errorf("-quiet: got %q, want the summary %q", quiet, summary)
	}
}

// timeline returns simulate's timeline rows with their fields joined by
// one space, and the summary lines by label.
func timeline(t *testing.T, args ...string) (rows []string, summary map[string]string) {
	t.Helper()
	out, errOut, code := runCmd(t, append([]string{"simulate"}, args...)...)
	if code != 0 || errOut != "" {
		t.Fatalf("spigot simulate %s: exit %d, stderr %q; want 0 and nothing", strings.Join(args, " "), code, errOut)
	}
	head, rest, ok := strings.Cut(out, "\n\n")
	if !ok { // -quiet
		head, rest = "", out
	}
	for line := range strings.Lines(head) {
		rows = append(rows, strings.Join(strings.Fields(line), " "))
	}
	summary = make(map[string]string)
	for line := range strings.Lines(rest) {
		label, text, _ := strings.Cut(strings.TrimSpace(line), " ")
		summary[label] = strings.TrimSpace(text)
	}
	return rows, summary
}

// TestSimulateAlgorithms: each algorithm alone, at fixed instants.
func TestSimulateAlgorithms(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		rows    []string // with the header
		summary map[string]string
	}{{
		// A queue of 3 leaving at 0.7 a second: one every 10/7 s =
		// 1428571.43 µs, each delay rounded up to the µs. The queue is
		// full after 3; at 1s 0.7 of a place is free (429 ms short); at
		// 2s 1.4, and the request departs 10/7 s after the third; at 3s
		// 0.4 + 0.7 = 1.1; at 4s 0.1 + 0.7.
		name: "leaky bucket",
		args: []string{"-algo", "leaky-bucket", "-capacity", "3", "-rate", "7/10s", "-burst", "5", "-n", "4"},
		rows: []string{
			"# t cost result left retry-after delay departs spacing",
			"1 0s 1 admitted 2 - 0s 0s -",
			"2 0s 1 admitted 1 - 1.428572s 1.428572s 1.428572s",
			"3 0s 1 admitted 0 - 2.857143s 2.857143s 1.428571s",
			"4 0s 1 denied 0 1.429s - - -",
			"5 0s 1 denied 0 1.429s - - -",
			"6 1s 1 denied 0 429ms - - -",
			"7 2s 1 admitted 0 - 2.285715s 4.285715s 1.428572s",
			"8 3s 1 admitted 0 - 2.714286s 5.714286s 1.428571s",
			"9 4s 1 denied 0 286ms - - -",
		},
		summary: map[string]string{
			"bucket":  "leaky, a queue of 3 leaving at 7/10s, cost 1",
			"bound":   "5 tokens = size 3 + 2 refilled in 4s at 7/10s (1.25/s)",
			"departs": "5 requests from 0s to 5.714286s, at least 1.428571s apart; 5 in the busiest 10s; longest delay 2.857143s",
			"end":     "0 places free in the queue, empty after 3.143s",
		},
	}, {
		// 3 a second, the windows from 800ms (-200ms) after each second:
		// the burst fills the window [-200ms, 800ms); the next starts at
		// 800ms. The busiest second, from 0s, holds 3 + 1.
		name: "fixed window with an offset",
		args: []string{"-algo", "fixed-window", "-rate", "3/s", "-offset", "-200ms", "-burst", "3", "-every", "200ms", "-n", "6"},
		rows: []string{
			"# t cost result left retry-after",
			"1 0s 1 admitted 2 -",
			"2 0s 1 admitted 1 -",
			"3 0s 1 admitted 0 -",
			"4 200ms 1 denied 0 600ms",
			"5 400ms 1 denied 0 400ms",
			"6 600ms 1 denied 0 200ms",
			"7 800ms 1 admitted 2 -",
			"8 1s 1 admitted 1 -",
			"9 1.2s 1 admitted 0 -",
		},
		summary: map[string]string{
			"limit":   "fixed window, 3 tokens in each window of 1s, the windows starting 800ms after each whole 1s, cost 1",
			"bound":   "3 tokens in each of its windows of 1s, so 6 in any window of 1s",
			"busiest": "4 tokens in the 1s from 0s: the most admitted in any window of 1s",
			"end":     "0 tokens left, whole again after 600ms",
		},
	}, {
		// 10 in [0s, 1s): the 11th waits for the window's end and the
		// previous one's weight to fall by one token, 100ms later. At
		// 1.2s the weight is 10 × 0.8 = 8 and 1 was taken: 1 left.
		name: "sliding window",
		args: []string{"-algo", "sliding-window", "-rate", "10/s", "-burst", "12", "-every", "300ms", "-n", "5"},
		rows: []string{
			"# t cost result left retry-after",
			"1 0s 1 admitted 9 -", "2 0s 1 admitted 8 -", "3 0s 1 admitted 7 -", "4 0s 1 admitted 6 -", "5 0s 1 admitted 5 -",
			"6 0s 1 admitted 4 -", "7 0s 1 admitted 3 -", "8 0s 1 admitted 2 -", "9 0s 1 admitted 1 -", "10 0s 1 admitted 0 -",
			"11 0s 1 denied 0 1.1s",
			"12 0s 1 denied 0 1.1s",
			"13 300ms 1 denied 0 800ms",
			"14 600ms 1 denied 0 500ms",
			"15 900ms 1 denied 0 200ms",
			"16 1.2s 1 admitted 1 -",
			"17 1.5s 1 admitted 3 -",
		},
		summary: map[string]string{
			"limit":   "sliding window counter, 10 tokens in each window of 1s, weighing the previous one's, cost 1",
			"busiest": "10 tokens in the 1s from 0s: the most admitted in any window of 1s",
			"end":     "3 tokens left, whole again after 1.5s",
		},
	}, {
		// The log admits the 11th a whole second after the burst.
		name: "sliding log",
		args: []string{"-algo", "sliding-log", "-rate", "10/s", "-burst", "12", "-every", "300ms", "-n", "5"},
		rows: []string{
			"# t cost result left retry-after",
			"1 0s 1 admitted 9 -", "2 0s 1 admitted 8 -", "3 0s 1 admitted 7 -", "4 0s 1 admitted 6 -", "5 0s 1 admitted 5 -",
			"6 0s 1 admitted 4 -", "7 0s 1 admitted 3 -", "8 0s 1 admitted 2 -", "9 0s 1 admitted 1 -", "10 0s 1 admitted 0 -",
			"11 0s 1 denied 0 1s",
			"12 0s 1 denied 0 1s",
			"13 300ms 1 denied 0 700ms",
			"14 600ms 1 denied 0 400ms",
			"15 900ms 1 denied 0 100ms",
			"16 1.2s 1 admitted 9 -",
			"17 1.5s 1 admitted 8 -",
		},
		summary: map[string]string{
			"limit":   "sliding log, 10 tokens in any window of 1s, cost 1",
			"bound":   "10 tokens in any window of 1s, exactly",
			"busiest": "10 tokens in the 1s from 0s: the most admitted in any window of 1s",
		},
	}, {
		name: "token bucket's busiest second",
		args: []string{"-algo", "token-bucket", "-quiet"},
		summary: map[string]string{
			"bucket":  "capacity 10, rate 1/s, cost 1",
			"busiest": "10 tokens in the 1s from 0s: the most admitted in any window of 1s",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, summary := timeline(t, tt.args...)
			if tt.rows == nil {
				rows = nil
			}
			for i := range max(len(rows), len(tt.rows)) {
				var got, want string
				if i < len(rows) {
					got = rows[i]
				}
				if i < len(tt.rows) {
					want = tt.rows[i]
				}
				if got != want {
					t.Errorf("step %d: got %q, want %q", i, got, want)
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

// TestSimulateAlgoInvalid: the flags of the other algorithms, rejected
// as the token bucket's are.
func TestSimulateAlgoInvalid(t *testing.T) {
	const hint = "Run 'spigot simulate -h' for usage.\n"
	tests := []struct {
		args   []string
		stderr string
	}{
		{[]string{"-algo", "gcra"}, "spigot simulate: invalid value \"gcra\" for flag -algo: " +
			"want token-bucket, fixed-window, sliding-window, sliding-log, leaky-bucket, or all\n" + hint},
		{[]string{"-algo", ""}, "spigot simulate: invalid value \"\" for flag -algo: " +
			"want token-bucket, fixed-window, sliding-window, sliding-log, leaky-bucket, or all\n" + hint},
		{[]string{"-offset", "1"}, "spigot simulate: invalid value \"1\" for flag -offset: parse error\n" + hint},
		{[]string{"-offset", "10ms"}, "spigot simulate: -offset 10ms: only the fixed window has an offset; add -algo fixed-window or -algo all\n"},
		{[]string{"-algo", "sliding-log", "-offset", "10ms"}, "spigot simulate: -offset 10ms: only the fixed window has an offset; add -algo fixed-window or -algo all\n"},
		{[]string{"-algo", "fixed-window", "-offset", "1500us"}, "spigot simulate: -offset 1.5ms: must be a whole number of milliseconds\n"},
		{[]string{"-algo", "all", "-rate", "1/1500us"}, "spigot simulate: -rate 1/1500us: the period is a window's length, and must be a whole number of milliseconds\n"},
		{[]string{"-algo", "fixed-window", "-rate", "0/s"}, "spigot simulate: -rate 0/s: the token count must be 1 or more\n"},
		{[]string{"-algo", "sliding-log", "-rate", "1001/s"}, "spigot simulate: -rate 1001/s: a sliding log holds at most 1000 tokens a window (spigot.MaxLog); lower the token count\n"},
		{[]string{"-algo", "sliding-window", "-rate", "1000000000000/24h"}, "spigot simulate: -rate 1000000000000/24h: " +
			"a sliding window's exact arithmetic needs the token count × the window in ms to be at most 2^53; lower the token count to at most 104249991, or shorten the period\n"},
		{[]string{"-algo", "fixed-window", "-rate", "9007199254740993/s"}, "spigot simulate: -rate 9007199254740993/s: a window's capacity must be at most 2^53\n"},
		{[]string{"-algo", "leaky-bucket", "-capacity", "-1"}, "spigot simulate: -capacity -1: must be 0 or more\n"},
		// The fourth request comes at 9.2e18 ns, and the queue drains in
		// 9e18 ns: a departure beyond the longest time.Duration.
		{[]string{"-algo", "leaky-bucket", "-capacity", "3", "-rate", "1/3000000000000000us", "-burst", "0", "-n", "4", "-every", "2300000000000000us"},
			"spigot simulate: -n 4, -every 638888h53m20s and -capacity 3: the leaky bucket's last request could leave after 2562047h47m16.854775807s, " +
				"the longest time the simulation counts; lower -n, -every or -capacity\n"},
		{[]string{"-algo", "all", "-capacity", "2502000", "-rate", "1/h"}, "spigot simulate: -capacity 2502000 is too large for -rate 1/h: " +
			"spigot's exact arithmetic needs -capacity × 3600000000 (the denominator of the rate in tokens per µs, 1/3600000000) " +
			"to be at most 2^53; lower -capacity to at most 2501999, or use a -rate that is a simpler fraction of tokens per µs\n"},
	}
	for i, tt := range tests {
		checkRun(t, i, append([]string{"simulate"}, tt.args...), 2, "", tt.stderr)
	}
	// A window takes no capacity: the limit is the rate's.
	if _, _, code := runCmd(t, "simulate", "-algo", "fixed-window", "-capacity", "99999999999", "-rate", "1/h", "-quiet"); code != 0 {
		t.Errorf("a fixed window with a capacity too large for a bucket: exit %d, want 0", code)
	}
}

// bruteBusiest is busiest by brute force: every window [s, s+w) for s
// at each instant, and just after each (a window can always be moved to
// start at an instant without losing one).
func bruteBusiest(at []time.Duration, w time.Duration) int64 {
	var most int64
	for _, s := range at {
		for _, from := range []time.Duration{s, s + 1, s - w + 1} {
			var k int64
			for _, t := range at {
				if t >= from && t < from+w {
					k++
				}
			}
			most = max(most, k)
		}
	}
	return most
}

func FuzzBusiest(f *testing.F) {
	f.Add(uint64(1), uint8(20), int64(1000))
	f.Add(uint64(7), uint8(200), int64(3))
	f.Fuzz(func(t *testing.T, seed uint64, n uint8, w int64) {
		if w <= 0 {
			return
		}
		r := rand.New(rand.NewPCG(seed, 0))
		at := make([]time.Duration, n)
		var now time.Duration
		for i := range at {
			now += time.Duration(r.Int64N(2 * w))
			at[i] = now
		}
		got, from := busiest(at, time.Duration(w))
		if want := bruteBusiest(at, time.Duration(w)); got != want {
			t.Fatalf("busiest(%v, %d) = %d, want %d", at, w, got, want)
		}
		var k int64
		for _, t := range at {
			if t >= from && t < from+time.Duration(w) {
				k++
			}
		}
		if k != got && n > 0 {
			t.Fatalf("busiest(%v, %d): %d in the window from %v, not %d", at, w, k, from, got)
		}
	})
}

// FuzzSimulateFlags: whatever the algorithm, rate, offset, capacity and
// spacing, simulate either runs (exit 0) and prints no negative time, or
// rejects the command line with one line that starts with its name (exit
// 2); it never finds the model beyond its bounds (exit 1) nor panics.
func FuzzSimulateFlags(f *testing.F) {
	for _, s := range []struct{ algo, rate, offset, capacity, every string }{
		{"all", "10/s", "10ms", "10", "1ms"},
		{"fixed-window", "3/s", "-200ms", "0", "200ms"},
		{"leaky-bucket", "7/10s", "0", "3", "1s"},
		{"sliding-log", "1000/ms", "0", "1", "7ms"},
		{"sliding-window", "5/1500ms", "0", "1", "7ms"},
		{"all", "1/us", "0", "10", "7ms"},
		{"token-bucket", "x/s", "1h", "-1", "7ms"},
		{"leaky-bucket", "1/3000000000000000us", "0", "3", "2300000000000000us"},
	} {
		f.Add(s.algo, s.rate, s.offset, s.capacity, s.every, uint8(5), uint8(5))
	}
	negative := regexp.MustCompile(`(^|\s)-[0-9]`)
	f.Fuzz(func(t *testing.T, algo, rate, offset, capacity, every string, burst, n uint8) {
		args := []string{"simulate", "-algo", algo, "-rate", rate, "-offset", offset, "-capacity", capacity,
			"-burst", strconv.Itoa(int(burst)), "-n", strconv.Itoa(int(n)), "-every", every}
		out, errOut, code := runCmd(t, args...)
		switch {
		case code == 0 && errOut == "":
			if m := negative.FindString(out); m != "" {
				t.Fatalf("spigot %q: a negative time in the output: %q", args, out)
			}
		case code == 2 && strings.HasPrefix(errOut, "spigot simulate: ") && strings.Count(errOut, "\n") <= 2:
		default:
			t.Fatalf("spigot %q: exit %d, stderr %q", args, code, errOut)
		}
	})
}

// TestSimulateAllAsTheDemo: side by side, the windows admit -capacity in
// each window of capacity ÷ rate, as the demo's do, so that every
// algorithm admits the same burst: 10 of 15 at once.
func TestSimulateAllAsTheDemo(t *testing.T) {
	out, _, code := runCmd(t, "simulate", "-algo", "all", "-capacity", "10", "-rate", "1/s", "-burst", "15", "-every", "1s", "-n", "10", "-quiet")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"fixed-window    fixed window, 10 tokens in each window of 10s",
		"sliding-window  sliding window counter, 10 tokens in each window of 10s",
		"sliding-log     sliding log, 10 tokens in any window of 10s",
		"most tokens admitted in any 1s  10            10            10              10           10",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("simulate -algo all: no line %q in\n%s", want, out)
		}
	}
	// One window alone keeps -rate as its window's capacity.
	out, _, code = runCmd(t, "simulate", "-algo", "fixed-window", "-capacity", "10", "-rate", "1/s", "-quiet")
	if code != 0 || !strings.Contains(out, "fixed window, 1 token in each window of 1s") && !strings.Contains(out, "fixed window, 1 tokens in each window of 1s") {
		t.Errorf("simulate -algo fixed-window -rate 1/s: exit %d,\n%s\nwant 1 in each window of 1s", code, out)
	}
}
