package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/memory"
)

// maxRequests bounds the pattern, to keep the timeline in memory.
const maxRequests = 10_000_000

// A step is one simulated request and its admission.
type step struct {
	at time.Duration // since the start
	a  spigot.Decision
}

// algoFlag is -algo: one algorithm, or all of them.
type algoFlag struct{ name string }

func (f *algoFlag) String() string { return f.name }

func (f *algoFlag) Set(s string) error {
	if _, ok := findAlgorithm(s); !ok && s != "all" {
		return fmt.Errorf("want %s, or all", algorithmNames())
	}
	f.name = s
	return nil
}

// leaky reports whether -algo names the leaky bucket, alone or among all.
func (f *algoFlag) leaky() bool { return f.name == "leaky-bucket" || f.name == "all" }

// chosen returns the algorithms -algo names.
func (f *algoFlag) chosen() []algorithm {
	if f.name == "all" {
		return algorithms
	}
	a, _ := findAlgorithm(f.name)
	return []algorithm{a}
}

// simFlags are simulate's flags.
type simFlags struct {
	algo     algoFlag
	capacity int64
	rate     rateFlag
	offset   time.Duration
	cost     int64
	burst    int
	every    time.Duration
	n        int
	quiet    bool
}

// A sim is one algorithm's limit, and what it decided.
type sim struct {
	algorithm
	limit spigot.Limit
	steps []step
}

func simulate(args []string, stdout, stderr io.Writer) int {
	const prog = "spigot simulate"
	fs := newFlagSet(prog)
	f := simFlags{algo: algoFlag{"token-bucket"}, rate: rateFlag{"1/s", spigot.PerSecond(1)}}
	fs.Var(&f.algo, "algo", "the `algorithm`: token-bucket, fixed-window, sliding-window, sliding-log, leaky-bucket, or all, side by side")
	fs.Int64Var(&f.capacity, "capacity", 10, "the most tokens a bucket holds, or a leaky bucket's queue, 0 or more")
	fs.Var(&f.rate, "rate", "a bucket's refill, or a window's capacity and length (10/s: 10 in each 1s window), as `tokens/period`")
	fs.DurationVar(&f.offset, "offset", 0, "where the fixed window's windows start, after each whole period, a whole number of ms")
	fs.Int64Var(&f.cost, "cost", 1, "the tokens each request takes, 0 or more")
	fs.IntVar(&f.burst, "burst", 15, "the `count` of requests made at once at time 0, 0 or more")
	fs.DurationVar(&f.every, "every", time.Second, "the `spacing` of the steady requests, a positive whole number of µs")
	fs.IntVar(&f.n, "n", 10, "the `count` of steady requests after the burst, 0 or more")
	fs.BoolVar(&f.quiet, "quiet", false, "print only the summary")
	if err := parseFlags(fs, args, stdout, "usage: spigot simulate [flags]\n\n"+
		"Simulate plays a burst of requests at time 0, then -n requests one every\n"+
		"-every, against a limit on a fake clock, and prints what it admits. For\n"+
		"one window algorithm, -rate is the capacity of each window: 10/s admits\n"+
		"10 in each window of 1s. -algo all plays the same traffic against each\n"+
		"algorithm, side by side, as the demo shows them: each window admits\n"+
		"-capacity in each window of capacity ÷ rate (the time the bucket takes\n"+
		"to refill from empty, rounded up to the millisecond), so that all five\n"+
		"admit the same burst and, on average, the same rate. Time 0 starts a\n"+
		"window; the fixed window's boundaries come -offset later. The fixed\n"+
		"window's boundary burst:\n\n"+
		"  spigot simulate -algo all -rate 10/s -offset 10ms -burst 10 -every 1ms -n 20\n\n"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return usageError(stderr, prog, "%v", err)
	}
	sims, err := f.limits()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 2
	}
	start := simStart(sims[0].limit)
	for i := range sims {
		if sims[i].steps, err = play(sims[i].limit, f.cost, f.burst, f.every, f.n, start); err != nil {
			fmt.Fprintf(stderr, "%s: %s: %v\n", prog, sims[i].name, err)
			return 1
		}
	}
	if len(sims) > 1 {
		if !f.quiet {
			printTimelines(stdout, sims, f.cost)
			fmt.Fprintln(stdout)
		}
		return printComparison(stdout, stderr, sims, &f)
	}
	s := &sims[0]
	if !f.quiet {
		printTimeline(stdout, s, f.cost)
		fmt.Fprintln(stdout)
	}
	return printSummary(stdout, stderr, s, &f)
}

// limits checks the flags and returns the limits to simulate, or an
// error that names the flags to change.
func (f *simFlags) limits() ([]sim, error) {
	bad := func(format string, args ...any) ([]sim, error) {
		return nil, fmt.Errorf(format, args...)
	}
	algos := f.algo.chosen()
	var buckets, windows, log, slidingCounter, fixed bool
	for _, a := range algos {
		buckets = buckets || a.bucket()
		windows = windows || !a.bucket()
		log = log || a.kind == spigot.SlidingLog
		slidingCounter = slidingCounter || a.kind == spigot.SlidingWindow
		fixed = fixed || a.kind == spigot.FixedWindow
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
	case windows && r.Period%time.Millisecond != 0:
		return bad("-rate %s: the period is a window's length, and must be a whole number of milliseconds", f.rate.text)
	case log && r.Tokens > spigot.MaxLog:
		return bad("-rate %s: a sliding log holds at most %d tokens a window (spigot.MaxLog); lower the token count", f.rate.text, spigot.MaxLog)
	case windows && r.Tokens > store.MaxExact:
		return bad("-rate %s: a window's capacity must be at most 2^53", f.rate.text)
	case slidingCounter && r.Tokens > store.MaxExact/r.Period.Milliseconds():
		return bad("-rate %s: a sliding window's exact arithmetic needs the token count × the window in ms to be at most 2^53; "+
			"lower the token count to at most %d, or shorten the period", f.rate.text, store.MaxExact/r.Period.Milliseconds())
	case f.offset != 0 && !fixed:
		return bad("-offset %v: only the fixed window has an offset; add -algo fixed-window or -algo all", f.offset)
	case f.offset%time.Millisecond != 0:
		return bad("-offset %v: must be a whole number of milliseconds", f.offset)
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
	if buckets {
		if err := f.exact(); err != nil {
			return nil, err
		}
	}
	if f.algo.leaky() {
		// The last request waits at most the time the queue takes to
		// drain: capacity × period ÷ tokens.
		last := new(big.Int).Mul(big.NewInt(int64(f.n)), big.NewInt(int64(f.every)))
		drain := new(big.Int).Mul(big.NewInt(f.capacity), big.NewInt(int64(r.Period)))
		drain.Quo(drain, big.NewInt(r.Tokens))
		if last.Add(last, drain).Cmp(big.NewInt(math.MaxInt64)) > 0 {
			return bad("-n %d, -every %v and -capacity %d: the leaky bucket's last request could leave after %v, the longest time the simulation counts; lower -n, -every or -capacity",
				f.n, f.every, f.capacity, time.Duration(math.MaxInt64))
		}
	}
	sims := make([]sim, len(algos))
	for i, a := range algos {
		newLimit := a.newLimit
		if f.algo.name == "all" {
			newLimit = a.limitOf // side by side, as the demo shows them
		}
		l, err := newLimit("simulate", f.capacity, r, f.offset)
		if err != nil { // not expected after the checks above
			return bad("-algo %s, -capacity %d and -rate %s: %v", a.name, f.capacity, f.rate.text, err)
		}
		sims[i] = sim{algorithm: a, limit: l}
	}
	return sims, nil
}

// exact checks NewBucket's limits for exact arithmetic, in the command's
// terms: the rate in tokens per µs in lowest terms is Refill/Scale.
func (f *simFlags) exact() error {
	r := f.rate.rate
	perMicro := big.NewRat(r.Tokens, int64(r.Period/time.Microsecond))
	const maxExact = store.MaxExact
	switch num, den := perMicro.Num(), perMicro.Denom(); {
	case den.Cmp(big.NewInt(maxExact)) > 0:
		return fmt.Errorf("-rate %s: too slow for spigot's exact arithmetic, which needs the rate in tokens per µs, %v, "+
			"to have a denominator of at most 2^53; use a shorter period", f.rate.text, perMicro)
	case num.Cmp(big.NewInt(maxExact)) > 0:
		return fmt.Errorf("-rate %s: too fast for spigot's exact arithmetic, which needs the rate in tokens per µs, %v, "+
			"to have a numerator of at most 2^53; use fewer tokens", f.rate.text, perMicro)
	case f.capacity > maxExact/den.Int64():
		return fmt.Errorf("-capacity %d is too large for -rate %s: spigot's exact arithmetic needs -capacity × %v "+
			"(the denominator of the rate in tokens per µs, %v) to be at most 2^53; "+
			"lower -capacity to at most %d, or use a -rate that is a simpler fraction of tokens per µs",
			f.capacity, f.rate.text, den, perMicro, maxExact/den.Int64())
	}
	return nil
}

// simStart returns the instant of time 0: 2000-01-01 00:00 UTC, or the
// first start of a window of l's period after it, so that time 0 starts a
// window of every algorithm but the fixed window with an offset.
func simStart(l spigot.Limit) time.Time {
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	w := l.Rate().Period.Microseconds()
	if l.Rate().Period%time.Millisecond != 0 {
		return start
	}
	us := start.UnixMicro()
	return time.UnixMicro((us + w - 1) / w * w).UTC()
}

// play makes burst requests of cost at time 0 (the instant start) and
// then n more, one every every, against l in a memory store on a fake
// clock.
func play(l spigot.Limit, cost int64, burst int, every time.Duration, n int, start time.Time) ([]step, error) {
	clk := clocktest.New(start)
	lim := spigot.New(memory.New(memory.WithClock(clk)), l, spigot.WithClock(clk))
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

// admittedAt returns the instants of s's admitted requests.
func (s *sim) admittedAt() []time.Duration {
	var at []time.Duration
	for _, st := range s.steps {
		if st.a.Allowed() {
			at = append(at, st.at)
		}
	}
	return at
}

// departures returns when s's admitted requests go ahead: at once, or a
// leaky bucket's after their Delay.
func (s *sim) departures() []time.Duration {
	var at []time.Duration
	for _, st := range s.steps {
		if st.a.Allowed() {
			at = append(at, st.at+st.a.Delay)
		}
	}
	return at
}

// busiest returns the most instants of at (in order) that fall in one
// window [from, from+w), and the earliest such from: it counts every
// window that starts at an instant of at, as the busiest window can be
// moved to start at one.
func busiest(at []time.Duration, w time.Duration) (most int64, from time.Duration) {
	j := 0
	for i := range at {
		for j < len(at) && at[j]-at[i] < w {
			j++
		}
		if k := int64(j - i); k > most {
			most, from = k, at[i]
		}
	}
	return most, from
}

// perWindow returns the most instants of at in one window of the fixed
// windows of length w laid from the Unix epoch plus offset, with time 0
// at start.
func perWindow(at []time.Duration, start time.Time, w, offset time.Duration) int64 {
	var most, k, last int64
	last = math.MinInt64
	wu, off := w.Microseconds(), offset.Microseconds()
	for _, t := range at {
		us := start.UnixMicro() + t.Microseconds() - off
		i := us / wu
		if us%wu < 0 {
			i--
		}
		if i != last {
			last, k = i, 0
		}
		k++
		most = max(most, k)
	}
	return most
}

// allowed returns the most tokens the model lets s admit in any window of
// its period: a bucket's capacity and one period's refill, twice a fixed
// or sliding window's capacity (each fixed window holds the capacity), and
// a sliding log's capacity.
func (s *sim) allowed() *big.Int {
	c, r := s.limit.Capacity(), s.limit.Rate().Tokens
	switch s.kind {
	case spigot.FixedWindow, spigot.SlidingWindow:
		return big.NewInt(0).Mul(big.NewInt(c), big.NewInt(2))
	case spigot.SlidingLog:
		return big.NewInt(c)
	}
	return big.NewInt(0).Add(big.NewInt(c), big.NewInt(r))
}

// tokens returns k requests of cost, in tokens.
func tokens(k, cost int64) *big.Int { return new(big.Int).Mul(big.NewInt(k), big.NewInt(cost)) }

// check returns what s admitted beyond the model's bounds, "" when
// nothing: the most in any window of the period, and a fixed or sliding
// window's capacity in each of its fixed windows.
func (s *sim) check(start time.Time, cost int64) string {
	w := s.limit.Rate().Period
	at := s.admittedAt()
	most, from := busiest(at, w)
	if got, bound := tokens(most, cost), s.allowed(); got.Cmp(bound) > 0 {
		return fmt.Sprintf("%s admitted %v tokens in the %v from %v, more than the bound %v", s.name, got, w, from, bound)
	}
	if s.kind == spigot.FixedWindow || s.kind == spigot.SlidingWindow {
		if got := tokens(perWindow(at, start, w, s.limit.Offset()), cost); got.Cmp(big.NewInt(s.limit.Capacity())) > 0 {
			return fmt.Sprintf("%s admitted %v tokens in one of its windows, more than its limit %d", s.name, got, s.limit.Capacity())
		}
	}
	if out := s.departures(); s.kind == spigot.LeakyBucket && len(out) > 1 {
		// Each request leaves at least its cost at the rate, in whole µs
		// rounded down, after the one before.
		r := s.limit.Rate()
		gap := new(big.Int).Mul(big.NewInt(cost), big.NewInt(r.Period.Microseconds()))
		gap.Quo(gap, big.NewInt(r.Tokens))
		if least, _ := gaps(out); big.NewInt(least.Microseconds()).Cmp(gap) < 0 {
			return fmt.Sprintf("%s let two requests leave %v apart, less than %vµs", s.name, least, gap)
		}
	}
	return ""
}

// gaps returns the least and the most time between two instants of at,
// in order, and 0, 0 for fewer than two.
func gaps(at []time.Duration) (least, most time.Duration) {
	for i := 1; i < len(at); i++ {
		g := at[i] - at[i-1]
		if i == 1 || g < least {
			least = g
		}
		most = max(most, g)
	}
	return least, most
}

// longestDelay returns the longest Delay of s's admitted requests.
func (s *sim) longestDelay() time.Duration {
	var d time.Duration
	for _, st := range s.steps {
		d = max(d, st.a.Delay)
	}
	return d
}

func printTimeline(w io.Writer, s *sim, cost int64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	leaky := s.kind == spigot.LeakyBucket
	header := "#\tt\tcost\tresult\tleft\tretry-after"
	if leaky {
		header += "\tdelay\tdeparts\tspacing"
	}
	fmt.Fprintln(tw, header)
	prev := time.Duration(-1)
	for i, st := range s.steps {
		result, retry := "admitted", "-"
		if !st.a.Allowed() {
			result, retry = "denied", duration(st.a.RetryAfter)
		}
		fmt.Fprintf(tw, "%d\t%v\t%d\t%s\t%d\t%s", i+1, st.at, cost, result, st.a.Remaining, retry)
		if leaky {
			switch {
			case !st.a.Allowed():
				fmt.Fprint(tw, "\t-\t-\t-")
			case prev < 0:
				fmt.Fprintf(tw, "\t%v\t%v\t-", st.a.Delay, st.at+st.a.Delay)
			default:
				fmt.Fprintf(tw, "\t%v\t%v\t%v", st.a.Delay, st.at+st.a.Delay, st.at+st.a.Delay-prev)
			}
			if st.a.Allowed() {
				prev = st.at + st.a.Delay
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// describe returns what s's limit is, in the flags' terms.
func (s *sim) describe(cost int64) string {
	l := s.limit
	r := l.Rate()
	switch s.kind {
	case spigot.LeakyBucket:
		return fmt.Sprintf("leaky, a queue of %d leaving at %v, cost %d", l.Capacity(), r, cost)
	case spigot.FixedWindow:
		where := ""
		if l.Offset() != 0 {
			where = fmt.Sprintf(", the windows starting %v after each whole %v", l.Offset(), r.Period)
		}
		return fmt.Sprintf("fixed window, %d tokens in each window of %v%s, cost %d", r.Tokens, r.Period, where, cost)
	case spigot.SlidingWindow:
		return fmt.Sprintf("sliding window counter, %d tokens in each window of %v, weighing the previous one's, cost %d", r.Tokens, r.Period, cost)
	case spigot.SlidingLog:
		return fmt.Sprintf("sliding log, %d tokens in any window of %v, cost %d", r.Tokens, r.Period, cost)
	}
	return fmt.Sprintf("capacity %d, rate %v, cost %d", l.Capacity(), r, cost)
}

// printSummary prints the totals of one algorithm's run and returns the
// exit status: 1 if it admitted more than its bound, which would be a
// bug.
func printSummary(w, stderr io.Writer, s *sim, f *simFlags) int {
	steps, cost, b := s.steps, f.cost, s.limit
	var admitted, denied, streak, longest int64
	firstDenied := -1
	for i, st := range steps {
		if st.a.Allowed() {
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
	took := tokens(admitted, cost)
	first, last := steps[0], steps[len(steps)-1]
	span := last.at - first.at
	period := b.Rate().Period

	pattern := fmt.Sprintf("%d at once", f.burst)
	if f.n > 0 {
		pattern += fmt.Sprintf(", then %d every %v", f.n, f.every)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	label := "bucket"
	if !s.bucket() {
		label = "limit"
	}
	fmt.Fprintf(tw, "%s\t%s\n", label, s.describe(cost))
	fmt.Fprintf(tw, "requests\t%d (%s) over %v\n", len(steps), pattern, span)
	fmt.Fprintf(tw, "admitted\t%s, %s%s\n", count(admitted, "request"), count(took, "token"), perSecond(took, span))
	var bound *big.Int // over the whole run, for a bucket
	switch s.kind {
	case spigot.TokenBucket, spigot.LeakyBucket:
		// The model counts whole microseconds; the start is a whole second.
		us := int64(last.at/time.Microsecond) - int64(first.at/time.Microsecond)
		refilled := new(big.Int).Mul(big.NewInt(us), big.NewInt(b.Rate().Tokens))
		refilled.Quo(refilled, big.NewInt(int64(period/time.Microsecond)))
		bound = new(big.Int).Add(refilled, big.NewInt(b.Capacity()))
		size := "capacity"
		if s.kind == spigot.LeakyBucket {
			size = "size"
		}
		fmt.Fprintf(tw, "bound\t%v tokens = %s %d + %v refilled in %v at %v%s\n",
			bound, size, b.Capacity(), refilled, span, b.Rate(), perSecond(bound, span))
	case spigot.SlidingLog:
		fmt.Fprintf(tw, "bound\t%d tokens in any window of %v, exactly\n", b.Capacity(), period)
	default:
		fmt.Fprintf(tw, "bound\t%d tokens in each of its windows of %v, so %v in any window of %v\n", b.Capacity(), period, s.allowed(), period)
	}
	most, from := busiest(s.admittedAt(), period)
	fmt.Fprintf(tw, "busiest\t%s in the %v from %v: the most admitted in any window of %v\n", count(tokens(most, cost), "token"), period, from, period)
	if s.kind == spigot.LeakyBucket && admitted > 0 {
		out := s.departures()
		least, _ := gaps(out)
		leaving, _ := busiest(out, period)
		fmt.Fprintf(tw, "departs\t%s from %v to %v, at least %v apart; %d in the busiest %v; longest delay %v\n",
			count(admitted, "request"), out[0], out[len(out)-1], least, leaving, period, s.longestDelay())
	}
	fmt.Fprintf(tw, "denied\t%s", count(denied, "request"))
	if firstDenied >= 0 {
		fmt.Fprintf(tw, ", first #%d at %v, longest streak %d", firstDenied+1, steps[firstDenied].at, longest)
	}
	if cost > b.Capacity() {
		fmt.Fprintf(tw, "; cost %d > capacity %d is never admitted", cost, b.Capacity())
	}
	fmt.Fprintln(tw)
	left, full, again := count(last.a.Remaining, "token")+" left", "full", "full again after "
	switch s.kind {
	case spigot.LeakyBucket:
		left, full, again = count(last.a.Remaining, "place")+" free in the queue", "empty", "empty after "
	case spigot.FixedWindow, spigot.SlidingWindow, spigot.SlidingLog:
		full, again = "whole", "whole again after "
	}
	if last.a.ResetAfter > 0 {
		full = again + duration(last.a.ResetAfter)
	}
	fmt.Fprintf(tw, "end\t%s, %s\n", left, full)
	tw.Flush()

	if bound != nil && took.Cmp(bound) > 0 {
		fmt.Fprintf(stderr, "spigot simulate: admitted %d tokens in %v, more than the bound %v: a bug in spigot\n", took, span, bound)
		return 1
	}
	if msg := s.check(simStart(b), cost); msg != "" {
		fmt.Fprintf(stderr, "spigot simulate: %s: a bug in spigot\n", msg)
		return 1
	}
	return 0
}

// printTimelines prints one row per request and one column per algorithm.
func printTimelines(w io.Writer, sims []sim, cost int64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "#\tt\tcost")
	for _, s := range sims {
		fmt.Fprintf(tw, "\t%s", s.name)
	}
	fmt.Fprintln(tw)
	for i, st := range sims[0].steps {
		fmt.Fprintf(tw, "%d\t%v\t%d", i+1, st.at, cost)
		for _, s := range sims {
			a := s.steps[i].a
			switch {
			case !a.Allowed():
				fmt.Fprintf(tw, "\tdenied %s", duration(a.RetryAfter))
			case s.kind == spigot.LeakyBucket:
				fmt.Fprintf(tw, "\tdeparts %v", st.at+a.Delay)
			default:
				fmt.Fprint(tw, "\tadmitted")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// printComparison prints the summary of every algorithm's run, side by
// side, and what differs, and returns the exit status: 1 if one admitted
// more than its bound, which would be a bug.
func printComparison(w, stderr io.Writer, sims []sim, f *simFlags) int {
	steps := sims[0].steps
	span := steps[len(steps)-1].at - steps[0].at
	period := f.rate.rate.Period
	pattern := fmt.Sprintf("%d at once", f.burst)
	if f.n > 0 {
		pattern += fmt.Sprintf(", then %d every %v", f.n, f.every)
	}
	fmt.Fprintf(w, "requests  %d (%s) over %v, cost %d\n", len(steps), pattern, span, f.cost)
	for _, s := range sims {
		fmt.Fprintf(w, "%-15s %s\n", s.name, strings.TrimSuffix(s.describe(f.cost), fmt.Sprintf(", cost %d", f.cost)))
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label string, cell func(s *sim) string) {
		fmt.Fprint(tw, label)
		for i := range sims {
			fmt.Fprintf(tw, "\t%s", cell(&sims[i]))
		}
		fmt.Fprintln(tw)
	}
	row("", func(s *sim) string { return s.name })
	admitted := func(s *sim) int64 { return int64(len(s.admittedAt())) }
	row("admitted", func(s *sim) string { return fmt.Sprint(admitted(s)) })
	row("denied", func(s *sim) string { return fmt.Sprint(int64(len(s.steps)) - admitted(s)) })
	mostIn := func(at []time.Duration) string {
		most, _ := busiest(at, period)
		return tokens(most, f.cost).String()
	}
	row(fmt.Sprintf("most tokens admitted in any %v", period), func(s *sim) string { return mostIn(s.admittedAt()) })
	row(fmt.Sprintf("most tokens leaving in any %v", period), func(s *sim) string { return mostIn(s.departures()) })
	row(fmt.Sprintf("the model's bound in any %v", period), func(s *sim) string { return s.allowed().String() })
	row("longest delay", func(s *sim) string { return s.longestDelay().String() })
	tw.Flush()
	fmt.Fprintln(w)

	start := simStart(sims[0].limit)
	for i := range sims {
		if line := sims[i].difference(f.cost, start); line != "" {
			fmt.Fprintln(w, line)
		}
	}
	for i := range sims {
		if msg := sims[i].check(start, f.cost); msg != "" {
			fmt.Fprintf(stderr, "spigot simulate: %s: a bug in spigot\n", msg)
			return 1
		}
	}
	return 0
}

// difference returns one line on what s did with the traffic that the
// others did not, or "".
func (s *sim) difference(cost int64, start time.Time) string {
	period := s.limit.Rate().Period
	limit := s.limit.Capacity()
	at := s.admittedAt()
	most, from := busiest(at, period)
	got := tokens(most, cost)
	switch s.kind {
	case spigot.TokenBucket:
		return fmt.Sprintf("token-bucket admitted at most %v in any %v: up to its capacity of %d at once, then %v.", got, period, limit, s.limit.Rate())
	case spigot.FixedWindow:
		if got.Cmp(big.NewInt(limit)) <= 0 {
			return fmt.Sprintf("fixed-window admitted at most %v in any %v: this traffic did not fill one window's end and the next one's start.", got, period)
		}
		// The boundary inside the busiest window, and what came on
		// either side of it.
		wu, off := period.Microseconds(), s.limit.Offset().Microseconds()
		abs := start.UnixMicro() + from.Microseconds() - off
		next := abs - ((abs%wu)+wu)%wu + wu // the next window's start
		boundary := time.Duration(next+off-start.UnixMicro()) * time.Microsecond
		var before int64
		for _, t := range at {
			if t >= from && t < boundary {
				before++
			}
		}
		times := "more than"
		if got.Cmp(s.allowed()) == 0 {
			times = "twice"
		}
		return fmt.Sprintf("fixed-window admitted %v in the %v from %v, %s its capacity of %d: %v before the window boundary at %v, %v after.",
			got, period, from, times, limit, tokens(before, cost), boundary, tokens(most-before, cost))
	case spigot.SlidingWindow:
		line := fmt.Sprintf("sliding-window admitted at most %v in any %v, against its capacity of %d", got, period, limit)
		if got.Cmp(big.NewInt(limit)) > 0 {
			return line + ": its weighted count takes the previous window's tokens as spread evenly, and here they were not."
		}
		return line + "."
	case spigot.SlidingLog:
		return fmt.Sprintf("sliding-log admitted at most %v in any %v, never more than its capacity of %d: it is exact.", got, period, limit)
	case spigot.LeakyBucket:
		out := s.departures()
		if len(out) == 0 {
			return "leaky-bucket admitted nothing."
		}
		least, _ := gaps(out)
		leaving, _ := busiest(out, period)
		spaced := ""
		if len(out) > 1 {
			spaced = fmt.Sprintf(", at least %v apart", least)
		}
		return fmt.Sprintf("leaky-bucket delayed its %s by up to %v: they left from %v to %v%s, at most %v in any %v.",
			count(int64(len(out)), "request"), s.longestDelay(), out[0], out[len(out)-1], spaced, tokens(leaving, cost), period)
	}
	return ""
}
