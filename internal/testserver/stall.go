package testserver

import (
	"testing"
	"time"
)

// A StallMeter measures how long the test process went without running,
// for real-time tests on a loaded machine: a call that returned late by no
// more than the process stalled meanwhile was delayed by the machine, not
// by the code under test. Its methods are safe for concurrent use.
type StallMeter struct {
	ask chan chan time.Duration
}

// stallTick is how often the meter runs; a gap between two of its runs
// longer than stallGap counts, beyond stallTick, as a stall.
const (
	stallTick = time.Millisecond
	stallGap  = 5 * time.Millisecond
)

// MeasureStalls starts a StallMeter, which runs until tb ends.
func MeasureStalls(tb testing.TB) *StallMeter {
	m := &StallMeter{ask: make(chan chan time.Duration)}
	stop := make(chan struct{})
	tb.Cleanup(func() { close(stop) })
	go func() {
		t := time.NewTicker(stallTick)
		defer t.Stop()
		c := stallCount{last: time.Now()}
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				c.tick(time.Now())
			case reply := <-m.ask:
				c.tick(time.Now())
				reply <- c.total
			}
		}
	}()
	return m
}

// Stalled returns how long the process has stalled since the meter
// started, the stall that has just ended included.
func (m *StallMeter) Stalled() time.Duration {
	reply := make(chan time.Duration)
	m.ask <- reply
	return <-reply
}

// stallCount adds up the stalls between the meter's runs.
type stallCount struct {
	last  time.Time     // the last run
	total time.Duration // the stalls so far
}

// tick counts the run at now.
func (c *stallCount) tick(now time.Time) {
	if gap := now.Sub(c.last); gap > stallGap {
		c.total += gap - stallTick
	}
	c.last = now
}
