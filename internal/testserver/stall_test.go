package testserver

import (
	"testing"
	"time"
)

// TestStallCount: the gaps between the meter's runs longer than stallGap
// count, beyond the tick, as stalls; shorter ones are the ticker's jitter.
func TestStallCount(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := time.Millisecond
	c := stallCount{last: t0}
	for i, st := range []struct {
		at   time.Duration // the run's instant, from t0
		want time.Duration // the stalls so far
	}{
		{1 * ms, 0},
		{2 * ms, 0},
		{7 * ms, 0},          // a gap of 5 ms: jitter
		{13 * ms, 5 * ms},    // 6 ms: a stall of 5 beyond the tick
		{14 * ms, 5 * ms},    //
		{314 * ms, 304 * ms}, // 300 ms
		{315 * ms, 304 * ms},
	} {
		c.tick(t0.Add(st.at))
		if c.total != st.want {
			t.Errorf("step %d: got %v stalled, want %v", i, c.total, st.want)
		}
	}
}

// TestMeasureStalls: the meter answers while the test runs, and its count
// never goes back.
func TestMeasureStalls(t *testing.T) {
	m := MeasureStalls(t)
	prev := m.Stalled()
	for i := range 10 {
		time.Sleep(2 * time.Millisecond)
		if got := m.Stalled(); got < prev {
			t.Fatalf("step %d: got %v stalled, want at least %v", i, got, prev)
		} else {
			prev = got
		}
	}
}
