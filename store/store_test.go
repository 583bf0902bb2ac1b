package store_test

// These tests cover the pure parts of package store: reply decoding, the
// script's arguments, key naming and the script's name. What the script
// does on a server is in servers_test.go.

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store"
)

// maxMs is the largest whole number of milliseconds a Duration holds: the
// largest RetryAfter or ResetAfter a reply may carry.
const maxMs = int64(spigot.Never / time.Millisecond)

// ints returns a reply of integers, as a client decodes it from RESP.
func ints(v ...int64) []any {
	r := make([]any, len(v))
	for i, x := range v {
		r[i] = x
	}
	return r
}

func TestDecodeAcquire(t *testing.T) {
	for i, c := range []struct {
		reply any
		want  spigot.Decision
	}{
		{ints(1, 19, 0, 3000), spigot.Decision{Allowed: true, Remaining: 19, ResetAfter: 3 * time.Second}},
		{ints(0, 0, 2999, 60000), spigot.Decision{RetryAfter: 2999 * time.Millisecond, ResetAfter: time.Minute}},
		{ints(1, 20, 0, 0), spigot.Decision{Allowed: true, Remaining: 20}},           // cost 0 on a full bucket
		{ints(1, 0, 0, 0), spigot.Decision{Allowed: true}},                           // capacity 0, cost 0
		{ints(0, 5, -1, 0), spigot.Decision{Remaining: 5, RetryAfter: spigot.Never}}, // cost > capacity on a full bucket
		{ints(0, 0, -1, 60000), spigot.Decision{RetryAfter: spigot.Never, ResetAfter: time.Minute}},
		{ints(0, 0, -1, -1), spigot.Decision{RetryAfter: spigot.Never, ResetAfter: spigot.Never}}, // a clock stepped back past what a Duration holds
		{ints(0, 0, 1, 1), spigot.Decision{RetryAfter: time.Millisecond, ResetAfter: time.Millisecond}},
		{ints(0, 0, maxMs, maxMs), spigot.Decision{RetryAfter: time.Duration(maxMs) * time.Millisecond, ResetAfter: time.Duration(maxMs) * time.Millisecond}},
		{ints(1, math.MaxInt64, 0, 0), spigot.Decision{Allowed: true, Remaining: math.MaxInt64}},
		{[]int64{1, 19, 0, 3000}, spigot.Decision{Allowed: true, Remaining: 19, ResetAfter: 3 * time.Second}},
		{[]int64{0, 0, -1, 60000}, spigot.Decision{RetryAfter: spigot.Never, ResetAfter: time.Minute}},
	} {
		got, err := store.DecodeAcquire(c.reply)
		if err != nil || got != c.want {
			t.Errorf("step %d: DecodeAcquire(%v) = %+v, %v; want %+v, nil", i, c.reply, got, err, c.want)
		}
	}
}

func TestDecodeAcquireMalformed(t *testing.T) {
	for i, c := range []struct {
		reply any
		want  string // the problem, as the error names it
	}{
		// Not an array.
		{nil, "want an array of 4 integers, got <nil>"},
		{"OK", "want an array of 4 integers, got string"},
		{int64(1), "want an array of 4 integers, got int64"},
		{[]byte("1 2 3 4"), "want an array of 4 integers, got []uint8"},
		{[]int{1, 2, 0, 0}, "want an array of 4 integers, got []int"},
		{[]string{"1", "2", "0", "0"}, "want an array of 4 integers, got []string"},
		{errors.New("NOSCRIPT No matching script"), "want an array of 4 integers, got *errors.errorString"},
		// The wrong length.
		{[]any(nil), "want 4 integers, got 0 values"},
		{[]any{}, "want 4 integers, got 0 values"},
		{ints(1), "want 4 integers, got 1 values"},
		{ints(1, 2, 0), "want 4 integers, got 3 values"},
		{ints(1, 2, 0, 0, 0), "want 4 integers, got 5 values"},
		{[]int64(nil), "want 4 integers, got 0 values"},
		{[]int64{1, 2, 0}, "want 4 integers, got 3 values"},
		{[]int64{1, 2, 0, 0, 0}, "want 4 integers, got 5 values"},
		// A value that is not an integer.
		{[]any{"1", int64(2), int64(0), int64(0)}, "value 1 is string, want an integer"},
		{[]any{int64(1), 2.0, int64(0), int64(0)}, "value 2 is float64, want an integer"},
		{[]any{int64(1), int64(2), nil, int64(0)}, "value 3 is <nil>, want an integer"},
		{[]any{int64(1), int64(2), int64(0), []byte("0")}, "value 4 is []uint8, want an integer"},
		{[]any{ints(1, 2, 0, 0), int64(2), int64(0), int64(0)}, "value 1 is []interface {}, want an integer"},
		{[]any{int64(1), errors.New("ERR boom"), int64(0), int64(0)}, "value 2 is *errors.errorString, want an integer"},
		{[]any{int64(1), int64(2), int64(0), 0}, "value 4 is int, want an integer"},
		{[]any{true, int64(2), int64(0), int64(0)}, "value 1 is bool, want an integer"},
		// Integers the model cannot produce.
		{ints(2, 0, 0, 0), "allowed is 2, want 0 or 1"},
		{ints(-1, 0, 5, 0), "allowed is -1, want 0 or 1"},
		{ints(1, -1, 0, 0), "remaining is -1, want 0 or more"},
		{ints(0, math.MinInt64, 5, 0), "remaining is -9223372036854775808, want 0 or more"},
		{ints(0, 0, -2, 0), "retry-after is -2 ms, want -1 (never) to 9223372036854"},
		{ints(0, 0, maxMs+1, 0), "retry-after is 9223372036855 ms"},
		{ints(0, 0, math.MaxInt64, 0), "retry-after is 9223372036854775807 ms"},
		{ints(1, 0, 0, -2), "reset-after is -2 ms, want -1 (never) to 9223372036854"},
		{ints(1, 0, 0, maxMs+1), "reset-after is 9223372036855 ms"},
		{ints(1, 0, 0, math.MinInt64), "reset-after is -9223372036854775808 ms"},
		{ints(1, 3, 5, 0), "allowed with a retry-after of 5 ms"},
		{ints(1, 3, -1, 0), "allowed with a retry-after of -1 ms"},
		{ints(0, 3, 0, 100), "denied with no retry-after"},
		{[]int64{2, 0, 0, 0}, "allowed is 2, want 0 or 1"},
		{[]int64{0, -1, 5, 0}, "remaining is -1, want 0 or more"},
		{[]int64{0, 3, 0, 100}, "denied with no retry-after"},
	} {
		a, err := store.DecodeAcquire(c.reply)
		if err == nil {
			t.Errorf("step %d: DecodeAcquire(%#v) = %+v, nil; want an error naming %q", i, c.reply, a, c.want)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "spigot: malformed reply") || !strings.Contains(msg, c.want) {
			t.Errorf("step %d: DecodeAcquire(%#v) error = %q; want one starting with %q that names %q", i, c.reply, msg, "spigot: malformed reply", c.want)
		}
		if a != (spigot.Decision{}) {
			t.Errorf("step %d: DecodeAcquire(%#v) = %+v with its error; want the zero Decision", i, c.reply, a)
		}
	}
}

// The error shows the reply as the client decoded it, cut short when it
// is long.
func TestDecodeAcquireShowsReply(t *testing.T) {
	_, err := store.DecodeAcquire(ints(1, 2, 0))
	if want := "want 4 integers, got 3 values: [1 2 0]"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("DecodeAcquire([1 2 0]) error = %.300v; want one ending %q", err, want)
	}
	_, err = store.DecodeAcquire(ints(2, 0, 0, 0))
	if want := "allowed is 2, want 0 or 1: [2 0 0 0]"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("DecodeAcquire([2 0 0 0]) error = %.300v; want one ending %q", err, want)
	}
	_, err = store.DecodeAcquire("a reply as long as this one, which goes on and on for more than a hundred characters, and then some")
	if want := "got string: a reply as long"; err == nil || !strings.Contains(err.Error(), want) || len(err.Error()) > 250 {
		t.Errorf("DecodeAcquire(long string) error = %.300v; want one under 250 bytes showing %q", err, want)
	}
	long := make([]any, 10000)
	for i := range long {
		long[i] = int64(i)
	}
	_, err = store.DecodeAcquire(long)
	if want := "got 10000 values: [0 1 2 3"; err == nil || !strings.Contains(err.Error(), want) || len(err.Error()) > 250 {
		t.Errorf("DecodeAcquire(10000 integers) error = %.300v (%d bytes); want one under 250 bytes showing %q", err, len(fmt.Sprint(err)), want)
	}
}

// msg is a client's decoded RESP value, as *rueidis.RedisMessage is.
type msg struct{ v any }

func (m *msg) IsInt64() bool { _, ok := m.v.(int64); return ok }

func (m *msg) AsInt64() (int64, error) {
	if n, ok := m.v.(int64); ok {
		return n, nil
	}
	return 0, fmt.Errorf("%v is not an integer", m.v)
}

func msgs(v ...any) []msg {
	m := make([]msg, len(v))
	for i, x := range v {
		m[i] = msg{x}
	}
	return m
}

func TestInts(t *testing.T) {
	for i, c := range []struct {
		msgs []msg
		want [4]int64
		ok   bool
	}{
		{msgs(int64(1), int64(19), int64(0), int64(3000)), [4]int64{1, 19, 0, 3000}, true},
		{msgs(int64(0), int64(0), int64(-1), int64(-1)), [4]int64{0, 0, -1, -1}, true},
		{msgs(int64(2), int64(-5), int64(7), int64(math.MinInt64)), [4]int64{2, -5, 7, math.MinInt64}, true}, // DecodeInts judges the values
		{nil, [4]int64{}, false},
		{msgs(int64(1), int64(19), int64(0)), [4]int64{}, false},
		{msgs(int64(1), int64(19), int64(0), int64(3000), int64(0)), [4]int64{}, false},
		{msgs(int64(1), "19", int64(0), int64(3000)), [4]int64{}, false},
		{msgs(int64(1), int64(19), int64(0), nil), [4]int64{}, false},
	} {
		n, ok := store.Ints(c.msgs)
		if ok != c.ok || (ok && n != c.want) {
			t.Errorf("step %d: Ints(%v) = %v, %v; want %v, %v", i, c.msgs, n, ok, c.want, c.ok)
		}
	}
}

func TestDecodeReset(t *testing.T) {
	for i, c := range []struct {
		reply any
		want  bool
	}{
		{int64(1), true},
		{int64(0), false},
	} {
		got, err := store.DecodeReset(c.reply)
		if err != nil || got != c.want {
			t.Errorf("step %d: DecodeReset(%#v) = %v, %v; want %v, nil", i, c.reply, got, err, c.want)
		}
	}
	for i, reply := range []any{
		nil,
		int64(2),
		int64(-1),
		int64(math.MaxInt64),
		1, // an int, not the int64 clients decode
		1.0,
		true,
		"1",
		[]byte("1"),
		ints(1),
		[]any(nil),
		ints(1, 0, 0, 0),
		errors.New("ERR boom"),
	} {
		got, err := store.DecodeReset(reply)
		const want = "want the integer 0 or 1"
		if err == nil {
			t.Errorf("step %d: DecodeReset(%#v) = %v, nil; want an error", i, reply, got)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "spigot: malformed reply") || !strings.Contains(msg, want) {
			t.Errorf("step %d: DecodeReset(%#v) error = %q; want one starting with %q that names %q", i, reply, msg, "spigot: malformed reply", want)
		}
		if got {
			t.Errorf("step %d: DecodeReset(%#v) = true with its error; want false", i, reply)
		}
	}
}

// FuzzDecodeAcquire checks that DecodeAcquire never panics, that every
// error it returns is a malformed-reply error, and that every reply it
// accepts is a consistent Decision that encodes back to the same reply.
// shape varies the reply around the four integers: its length, and one
// value of another type.
func FuzzDecodeAcquire(f *testing.F) {
	for _, s := range []struct {
		allowed, remaining, retry, reset int64
		shape                            uint8
	}{
		{1, 19, 0, 3000, 0},
		{0, 0, 2999, 60000, 0},
		{0, 5, -1, 0, 0},
		{0, 0, -1, -1, 0},
		{0, 0, maxMs, maxMs, 0},
		{1, 0, 0, maxMs + 1, 0},
		{2, 0, 0, 0, 0},
		{1, -1, 0, 0, 0},
		{1, 3, 5, 0, 0},
		{0, 3, 0, 100, 0},
		{1, 19, 0, 3000, 1},
		{1, 19, 0, 3000, 7},
		{1, 19, 0, 3000, 12},
	} {
		f.Add(s.allowed, s.remaining, s.retry, s.reset, s.shape)
	}
	f.Fuzz(func(t *testing.T, allowed, remaining, retry, reset int64, shape uint8) {
		reply := ints(allowed, remaining, retry, reset)
		switch n := shape % 16; {
		case n == 0: // the four integers
		case n < 5: // a shorter reply
			reply = reply[:n-1]
		case n < 8: // a longer one
			for range n - 4 {
				reply = append(reply, remaining)
			}
		default: // one value of another type
			others := []any{nil, "1", 1.0, []byte("1"), ints(1), errors.New("ERR"), int(1), true}
			reply[int(shape>>4)%4] = others[n-8]
		}
		a, err := store.DecodeAcquire(reply)
		if shape%16 == 0 {
			// The other shapes of four integers decode alike.
			n := [4]int64{allowed, remaining, retry, reset}
			a2, err2 := store.DecodeAcquire(n[:])
			a3, err3 := store.DecodeInts(n)
			if a2 != a || a3 != a || fmt.Sprint(err2) != fmt.Sprint(err) || fmt.Sprint(err3) != fmt.Sprint(err) {
				t.Fatalf("four integers %v: as []any: %+v, %v; as []int64: %+v, %v; DecodeInts: %+v, %v", n, a, err, a2, err2, a3, err3)
			}
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "spigot: malformed reply") {
				t.Fatalf("DecodeAcquire(%v) error = %q; want a malformed-reply error", reply, err)
			}
			return
		}
		switch {
		case a.Remaining < 0 || a.RetryAfter < 0 || a.ResetAfter < 0:
			t.Fatalf("DecodeAcquire(%v) = %+v: negative field", reply, a)
		case a.Allowed != (a.RetryAfter == 0):
			t.Fatalf("DecodeAcquire(%v) = %+v: RetryAfter must be 0 exactly when allowed", reply, a)
		case a.RetryAfter%time.Millisecond != 0 && a.RetryAfter != spigot.Never,
			a.ResetAfter%time.Millisecond != 0 && a.ResetAfter != spigot.Never:
			t.Fatalf("DecodeAcquire(%v) = %+v: not whole milliseconds", reply, a)
		}
		back := ints(b2i(a.Allowed), a.Remaining, ms(a.RetryAfter), ms(a.ResetAfter))
		if fmt.Sprint(back) != fmt.Sprint(reply) {
			t.Fatalf("DecodeAcquire(%v) = %+v, which encodes back to %v", reply, a, back)
		}
	})
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// ms encodes a duration as the script does: whole milliseconds, -1 for Never.
func ms(d time.Duration) int64 {
	if d == spigot.Never {
		return -1
	}
	return int64(d / time.Millisecond)
}

func TestArgsServerTime(t *testing.T) {
	login := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	tenth := spigot.MustBucket("tenth", 10, spigot.Per(7, 10*time.Second))
	a := store.NewArgs(nil)
	for i, c := range []struct {
		got, want store.Argv
	}{
		// capacity, scale (µs per token / g), refill (units per µs), cost, now ("": TIME), TTL slack (ms)
		{a.Acquire(login, 1), store.Argv{"20", "3000000", "1", "1", "", "0"}},
		{a.Acquire(login, 0), store.Argv{"20", "3000000", "1", "0", "", "0"}},
		{a.Acquire(login, 21), store.Argv{"20", "3000000", "1", "21", "", "0"}},
		{a.Acquire(login, math.MaxInt64), store.Argv{"20", "3000000", "1", "9223372036854775807", "", "0"}},
		{a.Reset(login), store.Argv{"20", "3000000", "1", "reset", "", "0"}},
		{a.Acquire(tenth, 3), store.Argv{"10", "10000000", "7", "3", "", "0"}},
		{a.Reset(tenth), store.Argv{"10", "10000000", "7", "reset", "", "0"}},
	} {
		if c.got != c.want {
			t.Errorf("step %d: argv = %q; want %q", i, c.got, c.want)
		}
	}
	for i, c := range []struct {
		got, want [6]any
	}{
		// The same, for clients that take ...any: the cost as an int64.
		{a.AcquireAny(login, 1), [6]any{"20", "3000000", "1", int64(1), "", "0"}},
		{a.AcquireAny(login, math.MaxInt64), [6]any{"20", "3000000", "1", int64(math.MaxInt64), "", "0"}},
		{a.ResetAny(login), [6]any{"20", "3000000", "1", "reset", "", "0"}},
		{a.AcquireAny(tenth, 0), [6]any{"10", "10000000", "7", int64(0), "", "0"}},
	} {
		if c.got != c.want {
			t.Errorf("step %d: argv = %#v; want %#v", i, c.got, c.want)
		}
	}
}

func TestArgsClock(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)
	clk := clocktest.New(t0)
	b := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	a := store.NewArgs(clk)
	slack := strconv.FormatInt(store.ClockTTLSlack.Milliseconds(), 10)
	if slack != "60000" {
		t.Errorf("ClockTTLSlack = %v; this test expects a minute", store.ClockTTLSlack)
	}
	for i, c := range []struct {
		advance time.Duration
		want    store.Argv // ARGV[5] is now in µs, truncated
	}{
		{0, store.Argv{"20", "3000000", "1", "1", "1735787045123456", slack}},
		{210 * time.Nanosecond, store.Argv{"20", "3000000", "1", "1", "1735787045123456", slack}}, // .123456999
		{time.Nanosecond, store.Argv{"20", "3000000", "1", "1", "1735787045123457", slack}},       // .123457000
		{-time.Hour, store.Argv{"20", "3000000", "1", "1", "1735783445123457", slack}},
	} {
		clk.Advance(c.advance)
		if got := a.Acquire(b, 1); got != c.want {
			t.Errorf("step %d: at %v Acquire argv = %q; want %q", i, clk.Now(), got, c.want)
		}
		reset := c.want
		reset[3] = "reset"
		if got := a.Reset(b); got != reset {
			t.Errorf("step %d: at %v Reset argv = %q; want %q", i, clk.Now(), got, reset)
		}
		want := [6]any{c.want[0], c.want[1], c.want[2], int64(1), c.want[4], c.want[5]}
		if got := a.AcquireAny(b, 1); got != want {
			t.Errorf("step %d: at %v AcquireAny argv = %#v; want %#v", i, clk.Now(), got, want)
		}
	}
}

// The zero Args reads the server's clock, as NewArgs(nil) does.
func TestArgsZero(t *testing.T) {
	var a store.Args
	b := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	want := store.Argv{"20", "3000000", "1", "2", "", "0"}
	if got := a.Acquire(b, 2); got != want {
		t.Errorf("zero Args: Acquire = %q; want %q", got, want)
	}
}

// A known bucket's parameters are formatted once: a second request gets
// the very strings of the first. (The numbers are 100 or more, since
// strconv returns shared strings for smaller ones anyway.)
func TestArgsCachesParams(t *testing.T) {
	b := spigot.MustBucket("cached", 1000, spigot.Per(101, time.Second)) // scale 1000000, refill 101
	a := store.NewArgs(nil)
	first, second := a.Acquire(b, 1), a.Reset(b)
	anyFirst := a.AcquireAny(b, 1)
	want := [3]string{"1000", "1000000", "101"}
	for i := range want {
		if first[i] != want[i] || second[i] != want[i] || anyFirst[i] != want[i] {
			t.Fatalf("ARGV[%d] = %q, then %q, then %#v; want %q", i+1, first[i], second[i], anyFirst[i], want[i])
		}
		if unsafe.StringData(first[i]) != unsafe.StringData(second[i]) ||
			unsafe.StringData(first[i]) != unsafe.StringData(anyFirst[i].(string)) {
			t.Errorf("ARGV[%d] was formatted again for a known bucket", i+1)
		}
	}
}

// Many buckets, more than Args remembers, some sharing a name with another
// config (a deploy that changes a bucket), from many goroutines: every
// request gets its own bucket's parameters.
func TestArgsManyBuckets(t *testing.T) {
	type bucket struct {
		b    spigot.Limit
		want [3]string
	}
	var buckets []bucket
	for i := range 1000 {
		capacity, tokens := int64(i+1), int64(i%7+1)
		period := time.Duration(i%13+1) * time.Second
		b := spigot.MustBucket("b"+strconv.Itoa(i%400), capacity, spigot.Per(tokens, period))
		us := int64(period / time.Microsecond)
		g := gcd(tokens, us)
		buckets = append(buckets, bucket{b, [3]string{
			strconv.FormatInt(capacity, 10), strconv.FormatInt(us/g, 10), strconv.FormatInt(tokens/g, 10),
		}})
	}
	a := store.NewArgs(nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for round := range 3 {
				for j := range buckets {
					c := buckets[(j*(w+1)+round*7)%len(buckets)]
					want := store.Argv{c.want[0], c.want[1], c.want[2], strconv.Itoa(j), "", "0"}
					wantAny := [6]any{c.want[0], c.want[1], c.want[2], int64(j), "", "0"}
					if got := a.Acquire(c.b, int64(j)); got != want {
						t.Errorf("worker %d round %d: Acquire(%v, %d) = %q; want %q", w, round, c.b, j, got, want)
						return
					}
					if got := a.AcquireAny(c.b, int64(j)); got != wantAny {
						t.Errorf("worker %d round %d: AcquireAny(%v, %d) = %#v; want %#v", w, round, c.b, j, got, wantAny)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func TestKey(t *testing.T) {
	login := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	api := spigot.MustBucket("api", 100, spigot.PerSecond(10))
	for i, c := range []struct {
		prefix string
		b      spigot.Limit
		key    string
		want   string
	}{
		{store.DefaultPrefix, login, "alice", "spigot:login:alice"},
		{store.DefaultPrefix, api, "alice", "spigot:api:alice"},
		{store.DefaultPrefix, login, "", "spigot:login:"},
		{store.DefaultPrefix, login, "{user:42}:ip", "spigot:login:{user:42}:ip"},
		{store.DefaultPrefix, login, "a:b:c", "spigot:login:a:b:c"},
		{store.DefaultPrefix, login, "203.0.113.7", "spigot:login:203.0.113.7"},
		{"app1:", login, "alice", "app1:login:alice"},
		{"{app1}", login, "alice", "{app1}login:alice"},
		{"", login, "alice", "login:alice"},
		{"", login, "", "login:"},
	} {
		if got := store.Key(c.prefix, c.b, c.key); got != c.want {
			t.Errorf("step %d: Key(%q, %v, %q) = %q; want %q", i, c.prefix, c.b, c.key, got, c.want)
		}
	}
	if store.DefaultPrefix != "spigot:" {
		t.Errorf("DefaultPrefix = %q; want %q", store.DefaultPrefix, "spigot:")
	}
}

func TestSHA1(t *testing.T) {
	sum := sha1.Sum([]byte(store.Script))
	if want := hex.EncodeToString(sum[:]); store.SHA1 != want {
		t.Errorf("SHA1 = %q; want the hex SHA-1 of Script, %q", store.SHA1, want)
	}
}

// The script names no key but KEYS[1], so that it runs behind cluster
// proxies and on servers that forbid undeclared keys.
func TestScriptTouchesOnlyKEYS1(t *testing.T) {
	refs := regexp.MustCompile(`KEYS\s*\[\s*([^\]]*)\]`).FindAllStringSubmatch(store.Script, -1)
	if len(refs) == 0 {
		t.Fatal("Script never names KEYS[1]")
	}
	for _, r := range refs {
		if r[1] != "1" {
			t.Errorf("Script names %s; want only KEYS[1]", r[0])
		}
	}
}
