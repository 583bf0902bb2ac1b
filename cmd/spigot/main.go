// Spigot is the command-line tool of the spigot rate limiter.
//
// Usage:
//
//	spigot <command> [flags]
//
// The commands are:
//
//	bench      measure the stores against your server, beside the server's own ceiling
//	demo       serve a page that shows each kind of limit live, or all five side by side
//	serve      answer Envoy's rate limit service protocol from envoyproxy/ratelimit's configuration
//	simulate   play a traffic pattern against each kind of limit and print what it admits
//	version    print spigot's version and the Go version that built it
//
// # Bench
//
// Bench measures the stores against a Redis or Valkey server (-addr), or a
// cluster (-cluster with seed addresses), for every concurrency (-c
// 1,16,64) and key count (-keys 1,10000: 1 is one hot key): for each cell
// its throughput, latency percentiles (p50, p90, p99, p99.9, max) from an
// HDR histogram, allocations per request (the whole process), errors, and
// the requests admitted and denied, checked against what the limits
// allow over the run. Beside each Redis-protocol store it runs the same
// client sending spigot's script raw (the store's own cost is the
// difference), and, when redis-benchmark or valkey-benchmark is on PATH,
// the server's own ceiling: EVALSHA of spigot's script, unpipelined and
// 16 deep, each the best of up to three runs (50 connections from one
// thread, then from up to 4 threads, then 200 connections), stopped at the
// first in which the server's main thread used 90% of a core, and saying
// whether one did. Each store's throughput is shown as a percentage of
// both ceilings; its own is the pipelined one for valkey-go and rueidis,
// which pipeline concurrent callers, and the unpipelined one for
// go-redis. On a cluster it adds each primary's share of the scripts and
// the redirects per request. -deny 0.2 sends a fifth of each goroutine's
// requests, spread evenly, to keys whose buckets it emptied first, so
// that a fifth are denied whatever the machine's speed (to within one
// request per goroutine); the table shows the share denied beside the one
// asked for. Without -addr or -cluster it starts a redis-server or
// valkey-server from PATH on a free loopback port, and says so; with
// neither installed, an embedded miniredis, and every figure says
// "miniredis: not representative". It prints a table, with a progress bar
// on a terminal, or -json; -plot file.svg (or .png) draws throughput and
// p99 latency against concurrency, one line per store. Ctrl-C stops it and
// prints what it measured so far (exit 130).
//
// A row whose figures may not be trusted carries a warning: a marker in
// the table's warn column, explained by a footnote under the table, and
// in the JSON an entry of the row's "warnings", {"code", "detail"}, the
// code one of:
//
//	above_ceiling        (C) the row is faster than its own ceiling: that
//	                     ceiling did not measure the server's limit, or the
//	                     load changed between the runs
//	machine_busy         (B) other work took 20% or more of the machine's CPUs
//	                     while the row ran: the CPU time of the whole machine
//	                     (/proc/stat) less spigot bench's own, redis-benchmark's
//	                     and a local server's, judged on Linux for rows of half
//	                     a second or more ("other_cpu_pct")
//	deny_share_off       (D) the share denied ("deny_share") is more than 1
//	                     percentage point from -deny's ("deny_asked")
//	ceiling_unsaturated  (U) a ceiling's server main thread used less than 90%
//	                     of a core ("server_cpu_pct", "saturated"): the client
//	                     set that figure, a floor of the server's ceiling
//
//	go run ./cmd/spigot bench
//	go run ./cmd/spigot bench -addr 127.0.0.1:6379 -stores rueidis,redis -c 1,16,64,256 -keys 1,100000 -plot bench.svg
//
// # Demo
//
// Demo serves, on 127.0.0.1:8080 (-addr), a page that shows spigot's five
// kinds of limit live: pick one, or all five side by side under the same
// requests, as a table. One limit shows a slot per token, place or
// request left (a bucket's next token filling), counters, its state in
// words (a bucket's tokens, a window's count and when the next window
// starts, a sliding window's weighted count, a sliding log's entries and
// when each leaves, a leaky bucket's queue and the turn of each admitted
// request) and the last ten seconds of requests (a burst as one bar, its
// admitted part below its denied part, with their counts). Controls set the
// capacity and the rate (the buckets hold the capacity and refill at the
// rate; the windows admit the capacity in each window of capacity ÷
// rate, so that all five allow the same burst and the same rate on
// average), the cost and background traffic, with a "Burst ×10" button
// and the classic worked example on the token bucket (10 tokens, 1 a
// second, 15 requests at once and then 1 a second). Every request the
// page shows went through spigot: the page calls a JSON API behind
// httplimit and draws each limit from its replies, their RateLimit
// headers and Peeks. A leaky bucket's request is answered at once with
// its turn, which the page shows, rather than held. The limits are in the
// memory store, or, with -redis ADDR, in that Redis or Valkey through
// store/hybrid, so that stopping the server while the page runs shows the
// local fallback and the breaker live. It needs no network but the
// loopback: the page has no external script, style or font. /metrics
// serves the demo's OpenTelemetry metrics (package otelspigot) in
// Prometheus's format.
//
//	go run ./cmd/spigot demo
//	go run ./cmd/spigot demo -addr 127.0.0.1:9000 -redis 127.0.0.1:6379
//
// # Serve
//
// Serve is the rate limit service of Envoy's protocol
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit over gRPC,
// with the gRPC health service, on -grpc, 127.0.0.1:8081), and the same
// decision as envoyproxy/ratelimit's POST /json on -http (127.0.0.1:8080,
// with GET /healthcheck), on envoyproxy/ratelimit's YAML configuration
// (-config dir, read again every second; a file that does not load is
// refused and the last good configuration stays), with spigot's algorithms
// as options and its stores: the memory store, or -redis addr or -cluster
// seeds (-client go-redis, valkey-go or rueidis), with -hybrid, -lease and
// -denycache. -check dir loads a
// configuration and says what it holds or why it is refused. Its guide is
// docs/serve.md.
//
//	go run ./cmd/spigot serve -config ./ratelimit -redis 127.0.0.1:6379
//
// # Simulate
//
// Simulate helps choose a limit before deploying: its algorithm, capacity
// and rate. It plays requests against a limit in the in-process store
// (store/memory), through a spigot.Limiter, on a fake clock, so it runs
// instantly and shows exactly what the library would decide. The pattern
// is a burst of -burst requests at time 0, then -n requests one every
// -every. It prints one line per request (its time, cost, result, the
// whole tokens left and the retry-after of a denial; for a leaky bucket
// also its delay, when it departs and the spacing since the previous
// departure) and a summary: the requests admitted and denied, the bound
// the model promises, the most tokens admitted in any window of the
// rate's period (counted over every such window of the timeline), the
// longest streak of denials, and the limit at the end.
//
// -algo chooses the algorithm: token-bucket (the default), fixed-window,
// sliding-window (the sliding window counter), sliding-log or leaky-bucket
// (a shaper: it delays requests rather than denying them while its queue
// has room). The buckets take -capacity (a leaky bucket's queue) and
// refill at -rate. The windows take -rate as their capacity and window:
// 10/s admits 10 in each window of 1s, and -offset moves the fixed
// window's windows to start that long after each whole period. Time 0 is
// the start of a window of the period. -algo all plays the same requests
// against each algorithm and prints them side by side: one column per
// algorithm, then, per algorithm, the requests admitted and denied, the
// most tokens admitted and the most leaving (after a leaky bucket's
// delays) in any window of the period, the model's bound for that, and the
// longest delay, and a line on what each did differently.
//
// The defaults reproduce the classic example, a bucket of 10 tokens
// refilled at 1 per second hit by 15 requests at once and then 1 per
// second for 10 seconds: the first 10 are admitted, the next 5 denied
// (each with a retry-after of 1s), and every later one admitted.
//
// The fixed window's boundary burst: with windows of 10 a second that
// start 10ms after each second, 10 requests at 0s fill the end of one
// window and 10 of the 20 that follow, one every millisecond, the start of
// the next, so the fixed window admits 20 within 20ms, twice its capacity,
// where the sliding window, the sliding log and the buckets admit 10; the
// leaky bucket lets its 10 leave 100ms apart.
//
//	go run ./cmd/spigot simulate
//	go run ./cmd/spigot simulate -capacity 20 -rate 20/3s -cost 2 -burst 30 -every 500ms -n 40 -quiet
//	go run ./cmd/spigot simulate -algo all -rate 10/s -offset 10ms -burst 10 -every 1ms -n 20
//
// The flags are:
//
//	-algo algorithm            the algorithm: token-bucket, fixed-window, sliding-window, sliding-log, leaky-bucket, or all, side by side (default token-bucket)
//	-capacity int              the most tokens a bucket holds, or a leaky bucket's queue, 0 or more (default 10)
//	-rate tokens/period        a bucket's refill, or a window's capacity and length (10/s: 10 in each 1s window), as tokens/period (default 1/s)
//	-offset duration           where the fixed window's windows start, after each whole period, a whole number of ms
//	-cost int                  the tokens each request takes, 0 or more (default 1)
//	-burst count               the count of requests made at once at time 0, 0 or more (default 15)
//	-every spacing             the spacing of the steady requests, a positive whole number of µs (default 1s)
//	-n count                   the count of steady requests after the burst, 0 or more (default 10)
//	-quiet                     print only the summary
//
// The pattern must make at least one request and at most 10,000,000
// (-burst plus -n), and the last one must come within the longest
// time.Duration (about 292 years), and for a leaky bucket so must its
// departure, up to the time the queue takes to drain after it. The rate
// must refill 1 token or more over a period of at least 1µs and a whole
// number of µs. For spigot's exact arithmetic (see spigot.NewBucket), the
// rate in tokens per µs, as a fraction in lowest terms, must have a
// numerator and a denominator of at most 2^53, and -capacity times that
// denominator must be at most 2^53: at -rate 1/h, -capacity 2501999 or
// less. A window's period is a whole number of milliseconds, and so is
// -offset, which only the fixed window takes; a sliding log holds at most
// spigot.MaxLog tokens a window, and a sliding window's token count times
// its window in milliseconds is at most 2^53. A -cost above the capacity
// (-capacity, or a window's -rate tokens) is valid: every request is
// denied with a retry-after of never, and the summary says so.
//
// # Version
//
// Version prints the version of spigot's module, as go install
// github.com/spigot-go/spigot/cmd/spigot@VERSION recorded it, the Go
// version that built it and the platform:
//
//	$ spigot version
//	spigot v0.1.0 go1.26.8 linux/amd64
//
// A build from a clone is "(devel)", followed by the commit it was built
// from when the go command recorded it (its first 12 digits, +dirty for
// uncommitted changes): spigot (devel) git 0123456789ab+dirty go1.26.8
// linux/amd64.
//
// Exit status: 0 on success, denials included. 2 for a bad command line,
// with a message on standard error: one line and a hint to run -h for an
// unknown command or flag, an extra argument or a flag value that does not
// parse; one line that names the flags to change for a value simulate
// cannot use; the whole usage for spigot with no command. 1 if the library
// returned an error or admitted more than its bound, or a leaky bucket
// let two requests leave closer than its rate (either is a bug). The
// -h flag, and spigot -h or spigot help, print the usage on standard output
// and exit 0.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spigot-go/spigot"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// commands are spigot's commands, in the order of the usage.
var commands = []struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
}{
	{"bench", "measure the stores against your server, beside the server's own ceiling", benchCmd},
	{"demo", "serve a page that shows each kind of limit live, or all five side by side", demo},
	{"serve", "answer Envoy's rate limit service protocol from envoyproxy/ratelimit's configuration", serveCmd},
	{"simulate", "play a traffic pattern against each kind of limit and print what it admits", simulate},
	{"version", "print spigot's version and the Go version that built it", version},
}

// usage returns spigot's usage.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: spigot <command> [flags]\n\nThe commands are:\n\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'spigot <command> -h' for a command's flags.\n")
	return b.String()
}

// run is the whole command: it runs args (without the program name) and
// returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	switch name := args[0]; {
	case name == "-h" || name == "-help" || name == "--help" || name == "help":
		fmt.Fprint(stdout, usage())
		return 0
	case strings.HasPrefix(name, "-"):
		return usageError(stderr, "spigot", "flag provided but not defined: %s", name)
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	return usageError(stderr, "spigot", "unknown command %q", args[0])
}

// rateFlag is a spigot.Rate as a flag.Value, in ParseRate's syntax
// except that the period may have a sign, so that a negative period is
// reported as such. It keeps the text as given, for messages.
type rateFlag struct {
	text string
	rate spigot.Rate
}

func (f *rateFlag) String() string { return f.text }

func (f *rateFlag) Set(s string) error {
	r, err := parseRate(s)
	if err != nil {
		return err
	}
	f.text, f.rate = s, r
	return nil
}

// parseRate parses tokens/period like spigot.ParseRate, with messages for
// the command line (the flag package prefixes them with the flag and the
// value), and accepts a sign before the period.
func parseRate(s string) (spigot.Rate, error) {
	num, per, ok := strings.Cut(s, "/")
	if !ok {
		return spigot.Rate{}, errors.New("want tokens/period, such as 20/3s")
	}
	num, per = strings.TrimSpace(num), strings.TrimSpace(per)
	if _, err := strconv.ParseInt(num, 10, 64); err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return spigot.Rate{}, fmt.Errorf("the token count %q is out of range", num)
		}
		return spigot.Rate{}, fmt.Errorf("the token count %q is not a whole number", num)
	}
	unsigned, negative := strings.CutPrefix(per, "-")
	if !negative {
		unsigned = strings.TrimPrefix(per, "+")
	}
	r, err := spigot.ParseRate(num + "/" + unsigned)
	if err != nil {
		if durationSyntax.MatchString(unsigned) { // too long for a time.Duration
			return spigot.Rate{}, fmt.Errorf("the period %q is too long: at most %v", per, time.Duration(math.MaxInt64))
		}
		return spigot.Rate{}, fmt.Errorf("the period %q is not a duration such as 3s or 1m30s, or a unit alone: h, m, s, ms, us", per)
	}
	if negative {
		r.Period = -r.Period
	}
	return r, nil
}

// durationSyntax matches what time.ParseDuration parses when the value
// fits in a time.Duration.
var durationSyntax = regexp.MustCompile(`^((\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)

// usageError prints msg, prefixed by prog, and a hint to run prog -h, and
// returns the exit status 2.
func usageError(stderr io.Writer, prog, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n", prog, fmt.Sprintf(format, args...))
	fmt.Fprintf(stderr, "Run '%s -h' for usage.\n", prog)
	return 2
}

// newFlagSet returns the flags of the command prog, which print nothing
// themselves: parseFlags prints the usage for -h, and the command an error
// on one line.
func newFlagSet(prog string) *flag.FlagSet {
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs. For -h it prints about and the flags'
// defaults on stdout and returns flag.ErrHelp; for a bad flag or an
// argument left over it returns an error to print on one line.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer, about string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, about)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// perSecond returns " (x/s)" for tokens over span, or "" for an empty span.
func perSecond(tokens *big.Int, span time.Duration) string {
	if span <= 0 {
		return ""
	}
	r := new(big.Rat).SetFrac(tokens, big.NewInt(int64(span)))
	r.Mul(r, big.NewRat(int64(time.Second), 1))
	f, _ := r.Float64()
	return " (" + strconv.FormatFloat(f, 'g', 4, 64) + "/s)"
}

// count returns "1 token", "2 tokens" for an int64 or a *big.Int n.
func count(n any, noun string) string {
	s := fmt.Sprint(n)
	if s == "1" {
		return "1 " + noun
	}
	return s + " " + noun + "s"
}

// duration formats a retry-after or reset-after.
func duration(d time.Duration) string {
	if d == spigot.Never {
		return "never"
	}
	return d.String()
}
