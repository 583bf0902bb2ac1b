// Spigot is the command-line tool of the spigot rate limiter.
//
// Usage:
//
//	spigot <command> [flags]
//
// The commands are:
//
//	simulate   play a traffic pattern against a bucket and print what it admits
//
// More commands (bench, demo) are planned.
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
//	-capacity int              the most tokens the bucket holds (default 10)
//	-rate tokens/period        how fast it refills: 1/s, 20/3s, 7/10s (default 1/s)
//	-cost int                  the tokens each request takes (default 1)
//	-burst count               the requests made at once at time 0 (default 15)
//	-every spacing             the spacing of the steady requests, a whole number of µs (default 1s)
//	-n count                   the count of steady requests (default 10)
//	-quiet                     print only the summary
//
// Exit status: 0 on success; 2 for an unknown command, a bad flag or an
// invalid bucket, with a message on standard error; 1 if the library
// admitted more than its bound (a bug). The -h flag, and spigot -h, print
// the usage on standard output and exit 0.
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
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: spigot <command> [flags]

The commands are:

  simulate   play a traffic pattern against a bucket and print what it admits

Run 'spigot <command> -h' for a command's flags.
`

// run is the whole command: it runs args (without the program name) and
// returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "simulate":
		return simulate(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "spigot: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// rateFlag is a spigot.Rate as a flag.Value, in ParseRate's syntax.
type rateFlag spigot.Rate

func (r *rateFlag) String() string { return spigot.Rate(*r).String() }

func (r *rateFlag) Set(s string) error {
	v, err := spigot.ParseRate(s)
	if err != nil {
		return err
	}
	*r = rateFlag(v)
	return nil
}

// maxRequests bounds the pattern, to keep the timeline in memory.
const maxRequests = 10_000_000

// A step is one simulated request and its admission.
type step struct {
	at time.Duration // since the start
	a  spigot.Admission
}

func simulate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spigot simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below, on stdout for -h
	capacity := fs.Int64("capacity", 10, "the most tokens the bucket holds")
	rate := rateFlag(spigot.PerSecond(1))
	fs.Var(&rate, "rate", "how fast the bucket refills, as `tokens/period`: 1/s, 20/3s, 7/10s")
	cost := fs.Int64("cost", 1, "the tokens each request takes")
	burst := fs.Int("burst", 15, "the `count` of requests made at once at time 0")
	every := fs.Duration("every", time.Second, "the `spacing` of the steady requests after the burst")
	n := fs.Int("n", 10, "the `count` of steady requests")
	quiet := fs.Bool("quiet", false, "print only the summary")
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, "usage: spigot simulate [flags]\n\n"+
			"Simulate plays a burst of requests at time 0, then -n requests one every\n"+
			"-every, against a bucket on a fake clock, and prints what it admits.\n\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return 0
		}
		printUsage(stderr) // the flag package has printed the error
		return 2
	}
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "spigot simulate: "+format+"\n", args...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return fail("unexpected argument %q", fs.Arg(0))
	case *cost < 0:
		return fail("-cost %d: a cost must be 0 or more", *cost)
	case *burst < 0:
		return fail("-burst %d: a count must be 0 or more", *burst)
	case *n < 0:
		return fail("-n %d: a count must be 0 or more", *n)
	case *n > 0 && (*every <= 0 || *every%time.Microsecond != 0):
		return fail("-every %v: the spacing must be a positive whole number of microseconds", *every)
	case *burst+*n == 0:
		return fail("no requests: set -burst or -n")
	case *burst > maxRequests-*n:
		return fail("-burst %d and -n %d: at most %d requests", *burst, *n, maxRequests)
	case *n > 0 && *every > math.MaxInt64/time.Duration(*n):
		return fail("-n %d every %v: too long", *n, *every)
	}
	b, err := spigot.NewBucket("simulate", *capacity, spigot.Rate(rate))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}

	steps, err := play(b, *cost, *burst, *every, *n)
	if err != nil {
		fmt.Fprintf(stderr, "spigot simulate: %v\n", err)
		return 1
	}
	if !*quiet {
		printTimeline(stdout, steps, *cost)
		fmt.Fprintln(stdout)
	}
	return printSummary(stdout, stderr, b, *cost, *burst, *every, *n, steps)
}

// play makes burst requests of cost at time 0 and then n more, one every
// every, against b in a memory store on a fake clock.
func play(b spigot.Bucket, cost int64, burst int, every time.Duration, n int) ([]step, error) {
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
		a, err := lim.Acquire(context.Background(), "sim", cost)
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
		if !s.a.Allowed {
			result, retry = "denied", duration(s.a.RetryAfter)
		}
		fmt.Fprintf(tw, "%d\t%v\t%d\t%s\t%d\t%s\n", i+1, s.at, cost, result, s.a.Remaining, retry)
	}
	tw.Flush()
}

// printSummary prints the totals of steps and returns the exit status: 1
// if the bucket admitted more than its bound, which would be a bug.
func printSummary(w, stderr io.Writer, b spigot.Bucket, cost int64, burst int, every time.Duration, n int, steps []step) int {
	var admitted, tokens, denied, streak, longest int64
	firstDenied := -1
	for i, s := range steps {
		if s.a.Allowed {
			admitted++
			tokens += cost
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
	fmt.Fprintf(tw, "admitted\t%s, %s%s\n", count(admitted, "request"), count(tokens, "token"), perSecond(big.NewInt(tokens), span))
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

	if big.NewInt(tokens).Cmp(bound) > 0 {
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

// count returns "1 token", "2 tokens".
func count(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// duration formats a retry-after or reset-after.
func duration(d time.Duration) string {
	if d == spigot.Never {
		return "never"
	}
	return d.String()
}
