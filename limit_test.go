package spigot_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
)

func TestNewBucketRejects(t *testing.T) {
	tests := []struct {
		name     string
		bucket   string
		capacity int64
		rate     spigot.Rate
		want     string // in the message
	}{
		{"empty name", "", 1, spigot.PerSecond(1), "the name is empty"},
		{"colon in name", "api:v2", 1, spigot.PerSecond(1), "must not contain ':'"},
		{"unclosed tag", "login{", 1, spigot.PerSecond(1), "must be closed by a '}'"},
		{"tag closed before", "lo}gin{x", 1, spigot.PerSecond(1), "must be closed by a '}'"},
		{"negative capacity", "b", -1, spigot.PerSecond(1), "capacity -1 is negative"},
		{"zero rate", "b", 1, spigot.Rate{}, "a rate must refill at least one token"},
		{"negative tokens", "b", 1, spigot.Per(-1, time.Second), "a rate must refill at least one token"},
		{"zero period", "b", 1, spigot.Per(1, 0), "at least 1µs"},
		{"negative period", "b", 1, spigot.Per(1, -time.Second), "at least 1µs"},
		{"sub-µs period", "b", 1, spigot.Per(1, 999*time.Nanosecond), "at least 1µs"},
		{"fractional µs", "b", 1, spigot.Per(1, 1500*time.Nanosecond), "whole number of microseconds"},
		{"capacity too big", "b", 1 << 53, spigot.PerSecond(1), "more than 2^53"},
		{"token too fine", "b", 1, spigot.Per(1, 290*365*24*time.Hour), "more than 2^53"},
		{"refill too fast", "b", 1, spigot.Per(1<<54, time.Microsecond), "more than 2^53"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := spigot.NewBucket(tt.bucket, tt.capacity, tt.rate)
			if !errors.Is(err, spigot.ErrInvalidLimit) {
				t.Fatalf("NewBucket(%q, %d, %v) error = %v, want ErrInvalidLimit", tt.bucket, tt.capacity, tt.rate, err)
			}
			if !strings.HasPrefix(err.Error(), "spigot: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not start with \"spigot: \" or lacks %q", err, tt.want)
			}
			if b != (spigot.Limit{}) {
				t.Errorf("NewBucket returned %v with its error, want the zero Limit", b)
			}
		})
	}
}

// TestNewBucketTags: names with a complete hash tag, or none, are valid.
func TestNewBucketTags(t *testing.T) {
	for _, name := range []string{"login", "{login}", "a{b}c", "{}", "x}", "{a}{", "a{b}c{"} {
		if _, err := spigot.NewBucket(name, 1, spigot.PerSecond(1)); err != nil {
			t.Errorf("NewBucket(%q): %v; want it accepted", name, err)
		}
	}
}

func TestNewBucketLimits(t *testing.T) {
	// At 1/s one token is 10^6 units: the largest capacity is floor(2^53 / 10^6).
	const maxExact = 1 << 53
	const maxCap = maxExact / 1_000_000
	if _, err := spigot.NewBucket("b", maxCap, spigot.PerSecond(1)); err != nil {
		t.Errorf("capacity %d at 1/s: %v, want it accepted", maxCap, err)
	}
	if _, err := spigot.NewBucket("b", maxCap+1, spigot.PerSecond(1)); err == nil {
		t.Errorf("capacity %d at 1/s accepted, want an error", maxCap+1)
	}
	// 1000/ms is one unit per token: capacity can reach 2^53.
	if _, err := spigot.NewBucket("b", maxExact, spigot.Per(1000, time.Millisecond)); err != nil {
		t.Errorf("capacity 2^53 at 1000/ms: %v, want it accepted", err)
	}
	for _, r := range []spigot.Rate{spigot.PerSecond(3), spigot.Per(7, 10*time.Second), spigot.Per(1, 24*time.Hour), spigot.Per(1000, time.Millisecond)} {
		if _, err := spigot.NewBucket("b", 100_000, r); err != nil {
			t.Errorf("capacity 10^5 at %v: %v", r, err)
		}
	}
	if _, err := spigot.NewBucket("b", 0, spigot.PerSecond(1)); err != nil {
		t.Errorf("capacity 0: %v, want it accepted", err)
	}
}

func TestLimitAccessors(t *testing.T) {
	b := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	if b.Name() != "login" || b.Capacity() != 20 || b.Rate() != spigot.Per(1, 3*time.Second) {
		t.Errorf("accessors = %q, %d, %v", b.Name(), b.Capacity(), b.Rate())
	}
	if got, want := b.String(), "login(cap 20, 1/3s)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestMustBucketPanics(t *testing.T) {
	defer func() {
		r := recover()
		err, ok := r.(error)
		if !ok || !errors.Is(err, spigot.ErrInvalidLimit) {
			t.Errorf("MustBucket panicked with %v, want an error wrapping ErrInvalidLimit", r)
		}
	}()
	spigot.MustBucket("b", -1, spigot.PerSecond(1))
}

func TestCheck(t *testing.T) {
	b := spigot.MustBucket("b", 1, spigot.PerSecond(1))
	tests := []struct {
		bucket spigot.Limit
		cost   int64
		want   error
	}{
		{b, 0, nil},
		{b, 1, nil},
		{b, 2, nil}, // more than the capacity is a denial, not an error
		{b, -1, spigot.ErrInvalidCost},
		{spigot.Limit{}, 1, spigot.ErrInvalidLimit},
		{spigot.Limit{}, -1, spigot.ErrInvalidLimit},
	}
	for i, tt := range tests {
		if err := (spigot.Op{Limit: tt.bucket, N: tt.cost}).Check(); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("case %d: Check(%d) = %v, want %v", i, tt.cost, err, tt.want)
		}
	}
}

func TestRateString(t *testing.T) {
	tests := []struct {
		rate spigot.Rate
		want string
	}{
		{spigot.PerSecond(3), "3/s"},
		{spigot.Per(7, 10*time.Second), "7/10s"},
		{spigot.Per(10, 13*time.Second), "10/13s"},
		{spigot.Per(1, 3*time.Second), "1/3s"},
		{spigot.Per(1000, time.Millisecond), "1000/ms"},
		{spigot.Per(1, 24*time.Hour), "1/24h"},
		{spigot.PerMinute(60), "60/m"},
		{spigot.Per(20, 90*time.Second), "20/90s"},
		{spigot.PerHour(5), "5/h"},
		{spigot.Per(1, 1500*time.Microsecond), "1/1500us"},
		{spigot.Per(1, 1500*time.Nanosecond), "1/1500ns"},
		{spigot.Rate{}, "0/0s"},
	}
	for _, tt := range tests {
		if got := tt.rate.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.rate, got, tt.want)
		}
		if tt.rate.Period <= 0 {
			continue
		}
		back, err := spigot.ParseRate(tt.want)
		if err != nil || back != tt.rate {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tt.want, back, err, tt.rate)
		}
	}
}

func TestParseRate(t *testing.T) {
	good := []struct {
		in   string
		want spigot.Rate
	}{
		{"20/3s", spigot.Per(20, 3*time.Second)},
		{"3/s", spigot.PerSecond(3)},
		{" 3 / s ", spigot.PerSecond(3)},
		{"1/1m30s", spigot.Per(1, 90*time.Second)},
		{"5/µs", spigot.Per(5, time.Microsecond)},
		{"1/.5s", spigot.Per(1, 500*time.Millisecond)},
	}
	for _, tt := range good {
		if got, err := spigot.ParseRate(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "3", "3/", "x/s", "3/parsec", "1.5/s", "/s", "3/s/s"} {
		if got, err := spigot.ParseRate(in); err == nil || !strings.HasPrefix(err.Error(), "spigot: ") {
			t.Errorf("ParseRate(%q) = %v, %v; want a spigot: error", in, got, err)
		}
	}
}

func TestSplit(t *testing.T) {
	huge := spigot.MustBucket("huge", 1, spigot.Per(1, time.Duration(math.MaxInt64/2).Truncate(time.Microsecond)))
	tests := []struct {
		b        spigot.Limit
		n        int
		capacity int64
		rate     spigot.Rate
	}{
		{spigot.MustBucket("login", 20, spigot.Per(20, 3*time.Second)), 4, 5, spigot.Per(5, 3*time.Second)},
		{spigot.MustBucket("api", 100, spigot.PerSecond(1)), 4, 25, spigot.Per(1, 4*time.Second)},
		{spigot.MustBucket("api", 100, spigot.PerSecond(6)), 4, 25, spigot.Per(3, 2*time.Second)},
		{spigot.MustBucket("odd", 10, spigot.PerSecond(10)), 3, 3, spigot.Per(10, 3*time.Second)},
		// Fewer tokens than replicas: 1 each, never 0.
		{spigot.MustBucket("small", 3, spigot.PerSecond(3)), 4, 1, spigot.Per(3, 4*time.Second)},
		// A bucket of 0 stays 0: it admits only cost 0 anyway.
		{spigot.MustBucket("none", 0, spigot.PerSecond(1)), 4, 0, spigot.Per(1, 4*time.Second)},
		// Nothing to split.
		{spigot.MustBucket("one", 10, spigot.PerSecond(1)), 1, 10, spigot.PerSecond(1)},
		{spigot.MustBucket("zero", 10, spigot.PerSecond(1)), 0, 10, spigot.PerSecond(1)},
		{spigot.MustBucket("neg", 10, spigot.PerSecond(1)), -3, 10, spigot.PerSecond(1)},
		// The divided period would overflow a Duration: b itself.
		{huge, 4, 1, huge.Rate()},
		// The divided rate is not exact within 2^53: b itself.
		{spigot.MustBucket("wide", 1, spigot.Per(1, 24*time.Hour)), 1 << 20, 1, spigot.Per(1, 24*time.Hour)},
	}
	for i, tt := range tests {
		got := tt.b.Split(tt.n)
		if got.Name() != tt.b.Name() || got.Capacity() != tt.capacity || got.Rate() != tt.rate {
			t.Errorf("step %d: %v.Split(%d) = %v, want %s(cap %d, %v)", i, tt.b, tt.n, got, tt.b.Name(), tt.capacity, tt.rate)
		}
		if (spigot.Op{Limit: got, N: 1}).Check() != nil {
			t.Errorf("step %d: %v.Split(%d) = %v, not a valid bucket", i, tt.b, tt.n, got)
		}
	}
	if z := (spigot.Limit{}).Split(4); z != (spigot.Limit{}) {
		t.Errorf("the zero Limit's Split(4) = %v, want the zero Limit", z)
	}
}
