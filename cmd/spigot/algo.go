package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spigot-go/spigot"
)

// An algorithm is a kind of limit as the command names it.
type algorithm struct {
	name string // as in -algo and the demo's API: "fixed-window"
	kind spigot.Kind
}

// algorithms are the kinds of limit, in the order simulate and the demo
// show them.
var algorithms = []algorithm{
	{"token-bucket", spigot.TokenBucket},
	{"fixed-window", spigot.FixedWindow},
	{"sliding-window", spigot.SlidingWindow},
	{"sliding-log", spigot.SlidingLog},
	{"leaky-bucket", spigot.LeakyBucket},
}

// algorithmNames is the list of names for messages: "token-bucket,
// fixed-window, sliding-window, sliding-log, leaky-bucket".
func algorithmNames() string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = a.name
	}
	return strings.Join(names, ", ")
}

// findAlgorithm returns the algorithm named name.
func findAlgorithm(name string) (algorithm, bool) {
	for _, a := range algorithms {
		if a.name == name {
			return a, true
		}
	}
	return algorithm{}, false
}

// bucket reports whether a is a token or leaky bucket, which take a
// capacity and refill at the rate; the windows admit the rate's tokens in
// each window of its period.
func (a algorithm) bucket() bool {
	return a.kind == spigot.TokenBucket || a.kind == spigot.LeakyBucket
}

// limitOf returns a's limit named name of capacity and rate, as the demo
// and simulate make them: a bucket of capacity that refills at rate; a
// window that admits capacity in each window of capacity ÷ rate (the time
// the bucket takes to refill from empty, rounded up to the millisecond),
// so that all five admit the same burst and, on average, the same rate;
// offset for a fixed window.
func (a algorithm) limitOf(name string, capacity int64, rate spigot.Rate, offset time.Duration) (spigot.Limit, error) {
	if !a.bucket() {
		window := refillTime(capacity, rate)
		rate = spigot.Per(capacity, (window + time.Millisecond - 1).Truncate(time.Millisecond))
	}
	return a.newLimit(name, capacity, rate, offset)
}

// newLimit returns a's limit named name: capacity and rate for a bucket;
// for a window, rate.Tokens in each window of rate.Period, and offset for
// a fixed window.
func (a algorithm) newLimit(name string, capacity int64, rate spigot.Rate, offset time.Duration) (spigot.Limit, error) {
	switch a.kind {
	case spigot.TokenBucket:
		return spigot.NewBucket(name, capacity, rate)
	case spigot.LeakyBucket:
		return spigot.NewLeakyBucket(name, capacity, rate)
	case spigot.FixedWindow:
		return spigot.NewFixedWindow(name, rate, offset)
	case spigot.SlidingWindow:
		return spigot.NewSlidingWindow(name, rate)
	case spigot.SlidingLog:
		return spigot.NewSlidingLog(name, rate)
	}
	return spigot.Limit{}, fmt.Errorf("no algorithm %q", a.name)
}
