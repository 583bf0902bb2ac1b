// Spigot is the command-line tool of the spigot rate limiter.
//
// Usage:
//
//	spigot <command> [flags]
//
// The commands are:
//
//	bench      measure the stores against your server, beside the server's own ceiling
//	demo       serve a page that shows a real bucket drain and refill, live
//	simulate   play a traffic pattern against a bucket and print what it admits
//
// # Bench
//
// Bench measures the stores against a Redis or Valkey server (-addr), or a
// cluster (-cluster with seed addresses), for every concurrency (-c
// 1,16,64) and key count (-keys 1,10000: 1 is one hot key): for each cell
// its throughput, latency percentiles (p50, p90, p99, p99.9, max) from an
// HDR histogram, allocations per request (the whole process), errors, and
// the requests admitted and denied, checked against what the bucket
// allows over the run. Beside each Redis-protocol store it runs the same
// client sending spigot's script raw (the store's own cost is the
// difference), and, when redis-benchmark or valkey-benchmark is on PATH,
// the server's own ceiling: EVALSHA of spigot's script at each
// concurrency, unpipelined and 16 deep, each store's throughput shown as a
// percentage of both. On a cluster it adds each primary's share of the
// scripts and the redirects per request. -deny 0.2 chooses each cell's
// bucket, from a first short run, so that about a fifth of the requests
// are denied. Without -addr or -cluster it starts a redis-server or
// valkey-server from PATH on a free loopback port, and says so; with
// neither installed, an embedded miniredis, and every figure says
// "miniredis: not representative". It prints a table, with a progress bar
// on a terminal, or -json; -plot file.svg (or .png) draws throughput and
// p99 latency against concurrency, one line per store. Ctrl-C stops it and
// prints what it measured so far (exit 130).
//
//	go run ./cmd/spigot bench
//	go run ./cmd/spigot bench -addr 127.0.0.1:6379 -stores rueidis,redis -c 1,16,64,256 -keys 1,100000 -plot bench.svg
//
// # Demo
//
// Demo serves, on 127.0.0.1:8080 (-addr), a page that shows one token
// bucket live: a slot per token with the next one filling, the last ten
// seconds of requests, counters, and controls for the capacity, the rate,
// the cost and background traffic, a "Burst ×10" button and the classic
// worked example (10 tokens, 1 a second, 15 requests at once and then 1 a
// second). Every request the page shows went through spigot: the page
// calls a JSON API behind httplimit and draws the bucket from its replies
// and RateLimit headers. The bucket is in the memory store, or, with
// -redis ADDR, in that Redis or Valkey through store/hybrid, so that
// stopping the server while the page runs shows the local fallback and the
// breaker live. It needs no network but the loopback: the page has no
// external script, style or font. /metrics serves the demo's
// OpenTelemetry metrics (package otelspigot) in Prometheus's format.
//
//	go run ./cmd/spigot demo
//	go run ./cmd/spigot demo -addr 127.0.0.1:9000 -redis 127.0.0.1:6379
//
// # Simulate
//
// Simulate helps choose a bucket's capacity and rate before deploying. It
// plays requests against a bucket in the in-process store (store/memory),
// through a spigot.Limiter, on a fake clock, so it runs instantly and shows
// exactly what the library would decide. The pattern is a burst of -burst
// requests at time 0, then -n requests one every -every. It prints one line
// per request (its time, cost, result, the whole tokens left and the
// retry-after of a denial) and a summary: the requests admitted and denied,
// the tokens admitted against the bound capacity + T×rate that no interval
// T exceeds, the longest streak of denials, and the bucket at the end.
//
// The defaults reproduce the classic example, a bucket of 10 tokens
// refilled at 1 per second hit by 15 requests at once and then 1 per
// second for 10 seconds: the first 10 are admitted, the next 5 denied
// (each with a retry-after of 1s), and every later one admitted.
//
//	go run ./cmd/spigot simulate
//	go run ./cmd/spigot simulate -capacity 20 -rate 20/3s -cost 2 -burst 30 -every 500ms -n 40 -quiet
//
// The flags are:
//
//	-capacity int              the most tokens the bucket holds, 0 or more (default 10)
//	-rate tokens/period        how fast the bucket refills, as tokens/period: 1/s, 20/3s, 7/10s (default 1/s)
//	-cost int                  the tokens each request takes, 0 or more (default 1)
//	-burst count               the count of requests made at once at time 0, 0 or more (default 15)
//	-every spacing             the spacing of the steady requests, a positive whole number of µs (default 1s)
//	-n count                   the count of steady requests after the burst, 0 or more (default 10)
//	-quiet                     print only the summary
//
// The pattern must make at least one request and at most 10,000,000
// (-burst plus -n), and the last one must come within the longest
// time.Duration (about 292 years). The rate must refill 1 token or more
// over a period of at least 1µs and a whole number of µs. For spigot's
// exact arithmetic (see spigot.NewBucket), the rate in tokens per µs, as a
// fraction in lowest terms, must have a numerator and a denominator of at
// most 2^53, and -capacity times that denominator must be at most 2^53:
// at -rate 1/h, -capacity 2501999 or less. A -cost above -capacity is
// valid: every request is denied with a retry-after of never, and the
// summary says so.
//
// Exit status: 0 on success, denials included. 2 for a bad command line,
// with a message on standard error: one line and a hint to run -h for an
// unknown command or flag, an extra argument or a flag value that does not
// parse; one line that names the flags to change for a value simulate
// cannot use; the whole usage for spigot with no command. 1 if the library
// returned an error or admitted more than its bound (either is a bug). The
// -h flag, and spigot -h or spigot help, print the usage on standard output
// and exit 0.
package main

import (
	"context"
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
	"text/tabwriter"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
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
	{"demo", "serve a page that shows a real bucket drain and refill, live", demo},
	{"simulate", "play a traffic pattern against a bucket and print what it admits", simulate},
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

// maxRequests bounds the pattern, to keep the timeline in memory.
const maxRequests = 10_000_000

// A step is one simulated request and its admission.
type step struct {
	at time.Duration // since the start
	a  spigot.Decision
}

// simFlags are simulate's flags.
type simFlags struct {
	capacity int64
	rate     rateFlag
	cost     int64
	burst    int
	every    time.Duration
	n        int
	quiet    bool
}

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

func simulate(args []string, stdout, stderr io.Writer) int {
	const prog = "spigot simulate"
	fs := newFlagSet(prog)
	f := simFlags{rate: rateFlag{"1/s", spigot.PerSecond(1)}}
	fs.Int64Var(&f.capacity, "capacity", 10, "the most tokens the bucket holds, 0 or more")
	fs.Var(&f.rate, "rate", "how fast the bucket refills, as `tokens/period`: 1/s, 20/3s, 7/10s")
	fs.Int64Var(&f.cost, "cost", 1, "the tokens each request takes, 0 or more")
	fs.IntVar(&f.burst, "burst", 15, "the `count` of requests made at once at time 0, 0 or more")
	fs.DurationVar(&f.every, "every", time.Second, "the `spacing` of the steady requests, a positive whole number of µs")
	fs.IntVar(&f.n, "n", 10, "the `count` of steady requests after the burst, 0 or more")
	fs.BoolVar(&f.quiet, "quiet", false, "print only the summary")
	if err := parseFlags(fs, args, stdout, "usage: spigot simulate [flags]\n\n"+
		"Simulate plays a burst of requests at time 0, then -n requests one every\n"+
		"-every, against a bucket on a fake clock, and prints what it admits.\n\n"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return usageError(stderr, prog, "%v", err)
	}
	b, err := f.bucket()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 2
	}

	steps, err := play(b, f.cost, f.burst, f.every, f.n)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	if !f.quiet {
		printTimeline(stdout, steps, f.cost)
		fmt.Fprintln(stdout)
	}
	return printSummary(stdout, stderr, b, f.cost, f.burst, f.every, f.n, steps)
}

// bucket checks the flags and returns the bucket to simulate, or an error
// that names the flags to change.
func (f *simFlags) bucket() (spigot.Limit, error) {
	bad := func(format string, args ...any) (spigot.Limit, error) {
		return spigot.Limit{}, fmt.Errorf(format, args...)
	}
	r := f.rate.rate
	switch {
	case f.capacity < 0:
		return bad("-capacity %d: must be 0 or more", f.capacity)
	case r.Tokens < 1:
		return bad("-rate %s: the token count must be 1 or more", f.rate.text)
	case r.Period <= 0:
		return bad("-rate %s: the period must be positive", f.rate.text)
	case r.Period < time.Microsecond:
		return bad("-rate %s: the period must be at least 1µs", f.rate.text)
	case r.Period%time.Microsecond != 0:
		return bad("-rate %s: the period must be a whole number of microseconds", f.rate.text)
	case f.cost < 0:
		return bad("-cost %d: must be 0 or more", f.cost)
	case f.burst < 0:
		return bad("-burst %d: must be 0 or more", f.burst)
	case f.every <= 0:
		return bad("-every %v: must be positive", f.every)
	case f.every%time.Microsecond != 0:
		return bad("-every %v: must be a whole number of microseconds", f.every)
	case f.n < 0:
		return bad("-n %d: must be 0 or more", f.n)
	case f.burst+f.n == 0:
		return bad("-burst 0 and -n 0: no requests; set -burst or -n above 0")
	case f.burst > maxRequests-f.n:
		return bad("-burst %d and -n %d: at most %d requests in all", f.burst, f.n, maxRequests)
	case f.n > 0 && f.every > math.MaxInt64/time.Duration(f.n):
		return bad("-n %d and -every %v: the last request would come after %v, the longest time the simulation counts; lower -n or -every",
			f.n, f.every, time.Duration(math.MaxInt64))
	}
	// NewBucket's limits for exact arithmetic, in the command's terms: the
	// rate in tokens per µs in lowest terms is Refill/Scale.
	perMicro := big.NewRat(r.Tokens, int64(r.Period/time.Microsecond))
	const maxExact = spigot.MaxExact
	switch num, den := perMicro.Num(), perMicro.Denom(); {
	case den.Cmp(big.NewInt(maxExact)) > 0:
		return bad("-rate %s: too slow for spigot's exact arithmetic, which needs the rate in tokens per µs, %v, "+
			"to have a denominator of at most 2^53; use a shorter period", f.rate.text, perMicro)
	case num.Cmp(big.NewInt(maxExact)) > 0:
		return bad("-rate %s: too fast for spigot's exact arithmetic, which needs the rate in tokens per µs, %v, "+
			"to have a numerator of at most 2^53; use fewer tokens", f.rate.text, perMicro)
	case f.capacity > maxExact/den.Int64():
		return bad("-capacity %d is too large for -rate %s: spigot's exact arithmetic needs -capacity × %v "+
			"(the denominator of the rate in tokens per µs, %v) to be at most 2^53; "+
			"lower -capacity to at most %d, or use a -rate that is a simpler fraction of tokens per µs",
			f.capacity, f.rate.text, den, perMicro, maxExact/den.Int64())
	}
	b, err := spigot.NewBucket("simulate", f.capacity, r)
	if err != nil { // not expected after the checks above
		return bad("-capacity %d and -rate %s: %v", f.capacity, f.rate.text, err)
	}
	return b, nil
}

// play makes burst requests of cost at time 0 and then n more, one every
// every, against b in a memory store on a fake clock.
func play(b spigot.Limit, cost int64, burst int, every time.Duration, n int) ([]step, error) {
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktest.New(start)
	lim := spigot.New(memory.New(memory.WithClock(clk)), b, spigot.WithClock(clk))
	steps := make([]step, 0, burst+n)
	for i := range burst + n {
		var at time.Duration
		if i >= burst {
			at = time.Duration(i-burst+1) * every
		}
		clk.Set(start.Add(at))
		a, err := lim.AllowN(context.Background(), "sim", cost)
		if err != nil {
			return nil, err
		}
		steps = append(steps, step{at, a})
	}
	return steps, nil
}

func printTimeline(w io.Writer, steps []step, cost int64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tt\tcost\tresult\tleft\tretry-after")
	for i, s := range steps {
		result, retry := "admitted", "-"
		if !s.a.Allowed() {
			result, retry = "denied", duration(s.a.RetryAfter)
		}
		fmt.Fprintf(tw, "%d\t%v\t%d\t%s\t%d\t%s\n", i+1, s.at, cost, result, s.a.Remaining, retry)
	}
	tw.Flush()
}

// printSummary prints the totals of steps and returns the exit status: 1
// if the bucket admitted more than its bound, which would be a bug.
func printSummary(w, stderr io.Writer, b spigot.Limit, cost int64, burst int, every time.Duration, n int, steps []step) int {
	var admitted, denied, streak, longest int64
	firstDenied := -1
	for i, s := range steps {
		if s.a.Allowed() {
			admitted++
			streak = 0
			continue
		}
		if firstDenied < 0 {
			firstDenied = i
		}
		denied++
		streak++
		longest = max(longest, streak)
	}
	// Up to 10^7 requests of up to 2^53 tokens: more than an int64 holds.
	tokens := new(big.Int).Mul(big.NewInt(admitted), big.NewInt(cost))
	first, last := steps[0], steps[len(steps)-1]
	span := last.at - first.at
	// The model counts whole microseconds; the start is a whole second.
	us := int64(last.at/time.Microsecond) - int64(first.at/time.Microsecond)
	refilled := new(big.Int).Mul(big.NewInt(us), big.NewInt(b.Rate().Tokens))
	refilled.Quo(refilled, big.NewInt(int64(b.Rate().Period/time.Microsecond)))
	bound := new(big.Int).Add(refilled, big.NewInt(b.Capacity()))

	pattern := fmt.Sprintf("%d at once", burst)
	if n > 0 {
		pattern += fmt.Sprintf(", then %d every %v", n, every)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "bucket\tcapacity %d, rate %v, cost %d\n", b.Capacity(), b.Rate(), cost)
	fmt.Fprintf(tw, "requests\t%d (%s) over %v\n", len(steps), pattern, span)
	fmt.Fprintf(tw, "admitted\t%s, %s%s\n", count(admitted, "request"), count(tokens, "token"), perSecond(tokens, span))
	fmt.Fprintf(tw, "bound\t%v tokens = capacity %d + %v refilled in %v at %v%s\n",
		bound, b.Capacity(), refilled, span, b.Rate(), perSecond(bound, span))
	fmt.Fprintf(tw, "denied\t%s", count(denied, "request"))
	if firstDenied >= 0 {
		fmt.Fprintf(tw, ", first #%d at %v, longest streak %d", firstDenied+1, steps[firstDenied].at, longest)
	}
	if cost > b.Capacity() {
		fmt.Fprintf(tw, "; cost %d > capacity %d is never admitted", cost, b.Capacity())
	}
	fmt.Fprintln(tw)
	full := "full"
	if last.a.ResetAfter > 0 {
		full = "full again after " + duration(last.a.ResetAfter)
	}
	fmt.Fprintf(tw, "end\t%s left, %s\n", count(last.a.Remaining, "token"), full)
	tw.Flush()

	if tokens.Cmp(bound) > 0 {
		fmt.Fprintf(stderr, "spigot simulate: admitted %d tokens in %v, more than the bound %v: a bug in spigot\n", tokens, span, bound)
		return 1
	}
	return 0
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
