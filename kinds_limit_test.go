package spigot_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
)

// TestNewKindsReject: each constructor rejects what it cannot make exact,
// with an error that starts with "spigot: " and matches ErrInvalidLimit.
func TestNewKindsReject(t *testing.T) {
	fixed := func(r spigot.Rate) func(string) (spigot.Limit, error) {
		return func(name string) (spigot.Limit, error) { return spigot.NewFixedWindow(name, r, 0) }
	}
	sliding := func(r spigot.Rate) func(string) (spigot.Limit, error) {
		return func(name string) (spigot.Limit, error) { return spigot.NewSlidingWindow(name, r) }
	}
	logOf := func(r spigot.Rate) func(string) (spigot.Limit, error) {
		return func(name string) (spigot.Limit, error) { return spigot.NewSlidingLog(name, r) }
	}
	leaky := func(capacity int64, r spigot.Rate) func(string) (spigot.Limit, error) {
		return func(name string) (spigot.Limit, error) { return spigot.NewLeakyBucket(name, capacity, r) }
	}
	tests := []struct {
		what string
		name string
		make func(string) (spigot.Limit, error)
		want string // in the message
	}{
		{"fixed: empty name", "", fixed(spigot.PerSecond(1)), "the name is empty"},
		{"fixed: colon", "a:b", fixed(spigot.PerSecond(1)), "must not contain ':'"},
		{"fixed: unclosed tag", "{a", fixed(spigot.PerSecond(1)), "must be closed by a '}'"},
		{"fixed: no tokens", "w", fixed(spigot.Per(0, time.Second)), "at least one token"},
		{"fixed: sub-ms window", "w", fixed(spigot.Per(1, 999*time.Microsecond)), "whole number of milliseconds"},
		{"fixed: fractional ms", "w", fixed(spigot.Per(1, 1500*time.Microsecond)), "whole number of milliseconds"},
		{"fixed: negative window", "w", fixed(spigot.Per(1, -time.Second)), "whole number of milliseconds"},
		{"fixed: too many", "w", fixed(spigot.Per(1<<53+1, time.Second)), "more than 2^53"},
		{"fixed: fractional offset", "w", func(name string) (spigot.Limit, error) {
			return spigot.NewFixedWindow(name, spigot.PerSecond(1), 1500*time.Microsecond)
		}, "offset 1.5ms"},
		{"sliding: no tokens", "w", sliding(spigot.Per(0, time.Second)), "at least one token"},
		{"sliding: sub-ms window", "w", sliding(spigot.Per(1, time.Microsecond)), "whole number of milliseconds"},
		{"sliding: not exact", "w", sliding(spigot.PerDay(104_249_992)), "more than 2^53"},
		{"log: no tokens", "w", logOf(spigot.Per(0, time.Second)), "at least one token"},
		{"log: above MaxLog", "w", logOf(spigot.PerSecond(spigot.MaxLog + 1)), "MaxLog"},
		{"log: sub-ms window", "w", logOf(spigot.Per(1, 10*time.Microsecond)), "whole number of milliseconds"},
		{"leaky: negative capacity", "q", leaky(-1, spigot.PerSecond(1)), "capacity -1 is negative"},
		{"leaky: zero rate", "q", leaky(1, spigot.Rate{}), "at least one token"},
		{"leaky: not exact", "q", leaky(1<<53, spigot.PerSecond(1)), "more than 2^53"},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			l, err := tt.make(tt.name)
			if !errors.Is(err, spigot.ErrInvalidLimit) {
				t.Fatalf("got %v, %v; want ErrInvalidLimit", l, err)
			}
			if !strings.HasPrefix(err.Error(), "spigot: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not start with \"spigot: \" or lacks %q", err, tt.want)
			}
			if l != (spigot.Limit{}) {
				t.Errorf("got %v with the error; want the zero Limit", l)
			}
		})
	}
	// The largest exact sliding window counter of a day is accepted.
	if _, err := spigot.NewSlidingWindow("w", spigot.PerDay(104_249_991)); err != nil {
		t.Errorf("NewSlidingWindow of 104249991 a day: %v; want it accepted (× 86400000 ms ≤ 2^53)", err)
	}
	if _, err := spigot.NewSlidingLog("w", spigot.PerDay(spigot.MaxLog)); err != nil {
		t.Errorf("NewSlidingLog of MaxLog a day: %v; want it accepted", err)
	}
}

// TestKindsAccessors: what each constructor made, and how it prints.
func TestKindsAccessors(t *testing.T) {
	tests := []struct {
		l              spigot.Limit
		kind           spigot.Kind
		capacity       int64
		rate           spigot.Rate
		window, offset time.Duration
		printed        string
	}{
		{spigot.MustBucket("tb", 20, spigot.Per(1, 3*time.Second)), spigot.TokenBucket, 20, spigot.Per(1, 3*time.Second), 0, 0, "tb(cap 20, 1/3s)"},
		{spigot.Must(spigot.NewLeakyBucket("lb", 3, spigot.PerSecond(100))), spigot.LeakyBucket, 3, spigot.PerSecond(100), 0, 0, "lb(leaky bucket 3, 100/s)"},
		{spigot.Must(spigot.NewFixedWindow("fw", spigot.PerDay(10_000), 5*time.Hour)), spigot.FixedWindow, 10_000, spigot.PerDay(10_000), 24 * time.Hour, 5 * time.Hour, "fw(fixed window 10000/24h+5h)"},
		// An offset is taken modulo the window: −1h is 23h.
		{spigot.Must(spigot.NewFixedWindow("fw", spigot.PerDay(10), -time.Hour)), spigot.FixedWindow, 10, spigot.PerDay(10), 24 * time.Hour, 23 * time.Hour, "fw(fixed window 10/24h+23h)"},
		{spigot.Must(spigot.NewFixedWindow("fw", spigot.PerSecond(10), 3*time.Second)), spigot.FixedWindow, 10, spigot.PerSecond(10), time.Second, 0, "fw(fixed window 10/s)"},
		{spigot.Must(spigot.NewSlidingWindow("sw", spigot.PerMinute(100))), spigot.SlidingWindow, 100, spigot.PerMinute(100), time.Minute, 0, "sw(sliding window 100/m)"},
		{spigot.Must(spigot.NewSlidingLog("sl", spigot.PerDay(5))), spigot.SlidingLog, 5, spigot.PerDay(5), 24 * time.Hour, 0, "sl(sliding log 5/24h)"},
	}
	for i, tt := range tests {
		l := tt.l
		if l.Kind() != tt.kind || l.Capacity() != tt.capacity || l.Rate() != tt.rate || l.Window() != tt.window ||
			l.Offset() != tt.offset || l.String() != tt.printed {
			t.Errorf("step %d: got %v %v cap %d rate %v window %v offset %v; want %q %v cap %d rate %v window %v offset %v",
				i, l, l.Kind(), l.Capacity(), l.Rate(), l.Window(), l.Offset(),
				tt.printed, tt.kind, tt.capacity, tt.rate, tt.window, tt.offset)
		}
	}
	for k, want := range map[spigot.Kind]string{0: "none", 1: "TokenBucket", 2: "FixedWindow", 3: "SlidingWindow", 4: "SlidingLog", 5: "LeakyBucket", 6: "Kind(6)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q; want %q", uint8(k), got, want)
		}
	}
}

// TestSplitKinds: a window splits its limit and keeps its window and
// offset; a leaky bucket splits as a token bucket does.
func TestSplitKinds(t *testing.T) {
	tests := []struct {
		l, want spigot.Limit
	}{
		{spigot.Must(spigot.NewFixedWindow("fw", spigot.PerDay(100), 5*time.Hour)), spigot.Must(spigot.NewFixedWindow("fw", spigot.PerDay(25), 5*time.Hour))},
		{spigot.Must(spigot.NewSlidingWindow("sw", spigot.PerMinute(3))), spigot.Must(spigot.NewSlidingWindow("sw", spigot.PerMinute(1)))},
		{spigot.Must(spigot.NewSlidingLog("sl", spigot.PerDay(5))), spigot.Must(spigot.NewSlidingLog("sl", spigot.PerDay(1)))},
		{spigot.Must(spigot.NewLeakyBucket("lb", 8, spigot.PerSecond(100))), spigot.Must(spigot.NewLeakyBucket("lb", 2, spigot.PerSecond(25)))},
	}
	for i, tt := range tests {
		if got := tt.l.Split(4); got != tt.want {
			t.Errorf("step %d: %v.Split(4) = %v; want %v", i, tt.l, got, tt.want)
		}
	}
}

// TestMust: Must returns the limit, or panics with the constructor's
// error.
func TestMust(t *testing.T) {
	l := spigot.Must(spigot.NewSlidingLog("reset", spigot.PerDay(5)))
	if l.Kind() != spigot.SlidingLog {
		t.Errorf("Must = %v; want the sliding log", l)
	}
	defer func() {
		err, _ := recover().(error)
		if !errors.Is(err, spigot.ErrInvalidLimit) {
			t.Errorf("Must of an invalid limit panicked with %v; want its ErrInvalidLimit error", err)
		}
	}()
	spigot.Must(spigot.NewSlidingLog("reset", spigot.PerDay(spigot.MaxLog+1)))
}
