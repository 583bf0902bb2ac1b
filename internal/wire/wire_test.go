package wire_test

// These tests cover the pure parts of package wire: reply decoding, the
// script's arguments and the script's name. What the script does on a
// server is in store/servers_test.go and store/deploy_test.go.

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/internal/wire"
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

func TestDecode(t *testing.T) {
	for i, c := range []struct {
		reply any
		want  spigot.Decision
	}{
		// moved, remaining, retry-after ms (0: allowed), reset-after ms,
		// refill-after ms
		{ints(1, 19, 0, 3000, 3000), spigot.Decision{N: 1, Remaining: 19, ResetAfter: 3 * time.Second, RefillAfter: 3 * time.Second}},
		{ints(0, 0, 2999, 60000, 2999), spigot.Decision{RetryAfter: 2999 * time.Millisecond, ResetAfter: time.Minute, RefillAfter: 2999 * time.Millisecond}},
		{ints(0, 20, 0, 0, 3000), spigot.Decision{Remaining: 20, RefillAfter: 3 * time.Second}},                                           // Take of 0 on a full bucket
		{ints(0, 0, 0, 0, -1), spigot.Decision{RefillAfter: spigot.Never}},                                                                // capacity 0, Take of 0
		{ints(0, 5, -1, 0, 1000), spigot.Decision{Remaining: 5, RetryAfter: spigot.Never, RefillAfter: time.Second}},                      // Take > capacity on a full bucket
		{ints(3, 20, 0, 0, 1000), spigot.Decision{N: 3, Remaining: 20, RefillAfter: time.Second}},                                         // a Reset of a bucket that lacked 3
		{ints(2, 7, 0, 9000, 500), spigot.Decision{N: 2, Remaining: 7, ResetAfter: 9 * time.Second, RefillAfter: 500 * time.Millisecond}}, // a Refund, a TakeUpTo
		{ints(0, 3, 0, 100, 1), spigot.Decision{Remaining: 3, ResetAfter: 100 * time.Millisecond, RefillAfter: time.Millisecond}},         // a Peek that would be allowed
		{ints(0, 0, -1, 60000, 60000), spigot.Decision{RetryAfter: spigot.Never, ResetAfter: time.Minute, RefillAfter: time.Minute}},
		{ints(0, 0, -1, -1, -1), spigot.Decision{RetryAfter: spigot.Never, ResetAfter: spigot.Never, RefillAfter: spigot.Never}}, // a clock stepped back past what a Duration holds
		{ints(0, 0, 1, 1, 1), spigot.Decision{RetryAfter: time.Millisecond, ResetAfter: time.Millisecond, RefillAfter: time.Millisecond}},
		{ints(0, 0, maxMs, maxMs, maxMs), spigot.Decision{RetryAfter: time.Duration(maxMs) * time.Millisecond, ResetAfter: time.Duration(maxMs) * time.Millisecond, RefillAfter: time.Duration(maxMs) * time.Millisecond}},
		{ints(0, math.MaxInt64, 0, 0, 0), spigot.Decision{Remaining: math.MaxInt64}},
		{ints(math.MaxInt64, 0, 0, 0, 0), spigot.Decision{N: math.MaxInt64}},
		{[]int64{1, 19, 0, 3000, 3000}, spigot.Decision{N: 1, Remaining: 19, ResetAfter: 3 * time.Second, RefillAfter: 3 * time.Second}},
		{[]int64{0, 0, -1, 60000, 2000}, spigot.Decision{RetryAfter: spigot.Never, ResetAfter: time.Minute, RefillAfter: 2 * time.Second}},
	} {
		got, err := wire.Decode(c.reply)
		if err != nil || got != c.want {
			t.Errorf("step %d: Decode(%v) = %+v, %v; want %+v, nil", i, c.reply, got, err, c.want)
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	for i, c := range []struct {
		reply any
		want  string // the problem, as the error names it
	}{
		// Not an array.
		{nil, "want an array of 5 integers, got <nil>"},
		{"OK", "want an array of 5 integers, got string"},
		{int64(1), "want an array of 5 integers, got int64"},
		{[]byte("1 2 3 4 5"), "want an array of 5 integers, got []uint8"},
		{[]int{1, 2, 0, 0, 0}, "want an array of 5 integers, got []int"},
		{[]string{"1", "2", "0", "0", "0"}, "want an array of 5 integers, got []string"},
		{errors.New("NOSCRIPT No matching script"), "want an array of 5 integers, got *errors.errorString"},
		// The wrong length.
		{[]any(nil), "want 5 integers, got 0 values"},
		{[]any{}, "want 5 integers, got 0 values"},
		{ints(1), "want 5 integers, got 1 values"},
		{ints(1, 2, 0), "want 5 integers, got 3 values"},
		{ints(1, 19, 0, 3000), "want 5 integers, got 4 values"},
		{ints(1, 2, 0, 0, 0, 0), "want 5 integers, got 6 values"},
		{[]int64(nil), "want 5 integers, got 0 values"},
		{[]int64{1, 19, 0}, "want 5 integers, got 3 values"},
		{[]int64{1, 19, 0, 3000}, "want 5 integers, got 4 values"},
		{[]int64{1, 2, 0, 0, 0, 0}, "want 5 integers, got 6 values"},
		// A value that is not an integer.
		{[]any{"1", int64(2), int64(0), int64(0), int64(0)}, "value 1 is string, want an integer"},
		{[]any{int64(1), 1.0, int64(0), int64(0), int64(0)}, "value 2 is float64, want an integer"},
		{[]any{int64(1), int64(2), nil, int64(0), int64(0)}, "value 3 is <nil>, want an integer"},
		{[]any{int64(1), int64(2), []byte("0"), int64(0), int64(0)}, "value 3 is []uint8, want an integer"},
		{[]any{int64(1), int64(2), int64(0), 0, int64(0)}, "value 4 is int, want an integer"},
		{[]any{ints(1, 2, 0, 0, 0), int64(2), int64(0), int64(0), int64(0)}, "value 1 is []interface {}, want an integer"},
		{[]any{int64(1), errors.New("ERR boom"), int64(0), int64(0), int64(0)}, "value 2 is *errors.errorString, want an integer"},
		{[]any{int64(1), int64(2), int64(0), true, int64(0)}, "value 4 is bool, want an integer"},
		{[]any{int64(1), int64(2), int64(0), int64(0), "1000"}, "value 5 is string, want an integer"},
		// Integers the model cannot produce.
		{ints(-1, 0, 0, 0, 1), "moved -1 tokens, want 0 or more"},
		{ints(-1, 0, 5, 0, 1), "moved -1 tokens, want 0 or more"},
		{ints(math.MinInt64, 0, 0, 0, 1), "moved -9223372036854775808 tokens, want 0 or more"},
		{ints(0, -1, 0, 0, 1), "remaining is -1, want 0 or more"},
		{ints(0, math.MinInt64, 5, 0, 1), "remaining is -9223372036854775808, want 0 or more"},
		{ints(0, 0, -2, 0, 1), "retry-after is -2 ms, want -1 (never) to 9223372036854"},
		{ints(0, 3, math.MinInt64, 0, 1), "retry-after is -9223372036854775808 ms"},
		{ints(0, 0, maxMs+1, 0, 1), "retry-after is 9223372036855 ms"},
		{ints(0, 0, math.MaxInt64, 0, 1), "retry-after is 9223372036854775807 ms"},
		{ints(3, 3, maxMs+1, 100, 1), "retry-after is 9223372036855 ms"}, // named before what it moved
		{ints(0, 0, 0, -2, 1), "reset-after is -2 ms, want -1 (never) to 9223372036854"},
		{ints(0, 0, 0, maxMs+1, 1), "reset-after is 9223372036855 ms"},
		{ints(0, 0, 0, math.MinInt64, 1), "reset-after is -9223372036854775808 ms"},
		{ints(0, 3, 0, math.MaxInt64, 1), "reset-after is 9223372036854775807 ms"},
		{ints(0, 0, 0, 0, -2), "refill-after is -2 ms, want -1 (never) to 9223372036854"},
		{ints(0, 0, 0, 0, maxMs+1), "refill-after is 9223372036855 ms"},
		{ints(0, 0, 0, 0, math.MinInt64), "refill-after is -9223372036854775808 ms"},
		{ints(0, 3, 0, 0, math.MaxInt64), "refill-after is 9223372036854775807 ms"},
		{ints(-1, 1, 0, 0, 5), "moved -1 tokens"}, // an op that failed alone has no refill
		{ints(1, 3, 5, 0, 1), "denied, yet moved 1 tokens"},
		{ints(3, 3, 5, 100, 1), "denied, yet moved 3 tokens"},
		{ints(1, 0, -1, 0, 1), "denied, yet moved 1 tokens"},
		{ints(math.MaxInt64, 0, 1, 0, 1), "denied, yet moved 9223372036854775807 tokens"},
		{[]int64{-1, 0, 0, 0, 1}, "moved -1 tokens, want 0 or more"},
		{[]int64{0, -1, 5, 0, 1}, "remaining is -1, want 0 or more"},
		{[]int64{0, 0, -2, 0, 1}, "retry-after is -2 ms, want -1 (never) to 9223372036854"},
		{[]int64{0, 3, 0, maxMs + 1, 1}, "reset-after is 9223372036855 ms"},
		{[]int64{0, 3, 0, 1, -5}, "refill-after is -5 ms"},
		{[]int64{2, 3, 5, 100, 1}, "denied, yet moved 2 tokens"},
	} {
		d, err := wire.Decode(c.reply)
		if err == nil {
			t.Errorf("step %d: Decode(%#v) = %+v, nil; want an error naming %q", i, c.reply, d, c.want)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "spigot: malformed reply from the script: ") || !strings.Contains(msg, c.want) {
			t.Errorf("step %d: Decode(%#v) error = %q; want one starting with %q that names %q", i, c.reply, msg, "spigot: malformed reply from the script: ", c.want)
		}
		if !errors.Is(err, spigot.ErrRequestFailed) {
			t.Errorf("step %d: Decode(%#v) error = %q; want one matching ErrRequestFailed", i, c.reply, err)
		}
		if d != (spigot.Decision{}) {
			t.Errorf("step %d: Decode(%#v) = %+v with its error; want the zero Decision", i, c.reply, d)
		}
	}
}

// The error shows the reply as the client decoded it, cut short when it
// is long.
func TestDecodeShowsReply(t *testing.T) {
	_, err := wire.Decode(ints(1, 2, 0))
	if want := "want 5 integers, got 3 values: [1 2 0]"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Decode([1 2 0]) error = %.300v; want one ending %q", err, want)
	}
	_, err = wire.Decode(ints(-2, 0, 0, 0, 1))
	if want := "moved -2 tokens, want 0 or more: [-2 0 0 0 1]"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Decode([-2 0 0 0 1]) error = %.300v; want one ending %q", err, want)
	}
	_, err = wire.DecodeInts([wire.Fields]int64{4, 0, 7, 0, 7})
	if want := "denied, yet moved 4 tokens: [4 0 7 0 7]"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("DecodeInts([4 0 7 0 7]) error = %.300v; want one ending %q", err, want)
	}
	_, err = wire.Decode("a reply as long as this one, which goes on and on for more than a hundred characters, and then some")
	if want := "got string: a reply as long"; err == nil || !strings.Contains(err.Error(), want) || len(err.Error()) > 250 {
		t.Errorf("Decode(long string) error = %.300v; want one under 250 bytes showing %q", err, want)
	}
	long := make([]any, 10000)
	for i := range long {
		long[i] = int64(i)
	}
	_, err = wire.Decode(long)
	if want := "got 10000 values: [0 1 2 3"; err == nil || !strings.Contains(err.Error(), want) || len(err.Error()) > 250 {
		t.Errorf("Decode(10000 integers) error = %.300v (%d bytes); want one under 250 bytes showing %q", err, len(fmt.Sprint(err)), want)
	}
}

// TestScriptReplies is the walk-through of what a store sends and what it
// makes of the replies: EVALSHA SHA1() with one key and the Argv of an
// operation, and the script's five integers, -1 meaning never.
func TestScriptReplies(t *testing.T) {
	login := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	args := wire.NewArgs(nil) // nil: the script reads the server's TIME
	want := wire.Argv{"", "tb.take", "20", "3000000", "1", "1"}
	if got := args.Op(spigot.Op{Limit: login, Key: "alice", N: 1}); got != want {
		t.Errorf("Op(Take 1) = %q; want %q", got, want)
	}
	for i, c := range []struct {
		reply any
		want  string
	}{
		{ints(1, 19, 0, 3000, 3000), "allowed true, moved 1, remaining 19, retry after 0s, full after 3s, one more after 3s"},
		{ints(0, 0, 2500, 60000, 2500), "allowed false, moved 0, remaining 0, retry after 2.5s, full after 1m0s, one more after 2.5s"},
		{ints(0, 20, -1, 0, 3000), "allowed false, moved 0, remaining 20, retry after never, full after 0s, one more after 3s"},
		{ints(4, 20, 0, 0, 3000), "allowed true, moved 4, remaining 20, retry after 0s, full after 0s, one more after 3s"},
		{"QUEUED", "spigot: malformed reply from the script: want an array of 5 integers, got string: QUEUED"}, // what a command inside MULTI answers
	} {
		var got string
		d, err := wire.Decode(c.reply)
		if err != nil {
			got = err.Error()
		} else {
			retry := d.RetryAfter.String()
			if d.RetryAfter == spigot.Never {
				retry = "never"
			}
			got = fmt.Sprintf("allowed %v, moved %d, remaining %d, retry after %s, full after %v, one more after %v", d.Allowed(), d.N, d.Remaining, retry, d.ResetAfter, d.RefillAfter)
		}
		if got != c.want {
			t.Errorf("step %d: Decode(%v): got %q; want %q", i, c.reply, got, c.want)
		}
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
		want [wire.Fields]int64
		ok   bool
	}{
		{msgs(int64(1), int64(19), int64(0), int64(3000), int64(3000)), [wire.Fields]int64{1, 19, 0, 3000, 3000}, true},
		{msgs(int64(0), int64(0), int64(-1), int64(-1), int64(-1)), [wire.Fields]int64{0, 0, -1, -1, -1}, true},
		{msgs(int64(-3), int64(-5), int64(7), int64(math.MinInt64), int64(-9)), [wire.Fields]int64{-3, -5, 7, math.MinInt64, -9}, true}, // DecodeInts judges the values
		{nil, [wire.Fields]int64{}, false},
		{msgs(int64(1), int64(19), int64(0)), [wire.Fields]int64{}, false},
		{msgs(int64(1), int64(19), int64(0), int64(3000)), [wire.Fields]int64{}, false},
		{msgs(int64(1), int64(19), int64(0), int64(3000), int64(0), int64(0)), [wire.Fields]int64{}, false},
		{msgs(int64(1), "19", int64(0), int64(3000), int64(0)), [wire.Fields]int64{}, false},
		{msgs(int64(1), int64(19), int64(0), int64(0), nil), [wire.Fields]int64{}, false},
	} {
		n, ok := wire.Ints(c.msgs)
		if ok != c.ok || (ok && n != c.want) {
			t.Errorf("step %d: Ints(%v) = %v, %v; want %v, %v", i, c.msgs, n, ok, c.want, c.ok)
		}
	}
	if wire.Fields != 5 || wire.MaxFields != 6 {
		t.Errorf("Fields = %d, MaxFields = %d; want 5 and 6", wire.Fields, wire.MaxFields)
	}
}

// FuzzDecode checks that Decode never panics, that every error it returns
// is a malformed-reply error that matches spigot.ErrRequestFailed, and
// that every reply it accepts is a consistent Decision that encodes back
// to the same reply. shape varies the reply around the five integers: its
// length, and one value of another type.
func FuzzDecode(f *testing.F) {
	for _, s := range []struct {
		moved, remaining, retry, reset, refill int64
		shape                                  uint8
	}{
		{1, 19, 0, 3000, 3000, 0},
		{0, 0, 2999, 60000, 2999, 0},
		{0, 5, -1, 0, 1000, 0},
		{0, 0, -1, -1, -1, 0},
		{0, 0, maxMs, maxMs, maxMs, 0},
		{3, 20, 0, 0, 1, 0},
		{0, 0, 0, maxMs + 1, 1, 0},
		{0, 0, 0, 1, maxMs + 1, 0},
		{0, 0, 0, 1, -2, 0},
		{0, 0, -2, 0, 1, 0},
		{-1, 0, 0, 0, 0, 0},
		{-1, 1, 0, 0, 0, 0}, // an op of a batch that failed alone: WRONGTYPE
		{-1, 2, 0, 0, 0, 0}, // unreadable
		{-1, 3, 0, 0, 0, 0},
		{-1, 1, 1, 0, 0, 0},
		{-1, 1, 0, 0, 1, 0},
		{0, -1, 0, 0, 1, 0},
		{1, 3, 5, 0, 1, 0},
		{0, 3, 0, 100, 1, 0},
		{2, 3, 5, 100, 1, 0},
		{1, 19, 0, 3000, 3000, 1},
		{1, 19, 0, 3000, 3000, 5},
		{1, 19, 0, 3000, 3000, 7},
		{1, 19, 0, 3000, 3000, 12},
		{1, 19, 0, 3000, 3000, 0x4c},
	} {
		f.Add(s.moved, s.remaining, s.retry, s.reset, s.refill, s.shape)
	}
	f.Fuzz(func(t *testing.T, moved, remaining, retry, reset, refill int64, shape uint8) {
		reply := ints(moved, remaining, retry, reset, refill)
		switch n := shape % 16; {
		case n == 0: // the five integers
		case n < 5: // a shorter reply
			reply = reply[:n-1]
		case n < 8: // a longer one
			for range n - 4 {
				reply = append(reply, remaining)
			}
		default: // one value of another type
			others := []any{nil, "1", 1.0, []byte("1"), ints(1), errors.New("ERR"), int(1), true}
			reply[int(shape>>4)%wire.Fields] = others[n-8]
		}
		d, err := wire.Decode(reply)
		if shape%16 == 0 {
			// The other shapes of five integers decode alike.
			n := [wire.Fields]int64{moved, remaining, retry, reset, refill}
			d2, err2 := wire.Decode(n[:])
			d3, err3 := wire.DecodeInts(n)
			m, ok := wire.Ints(msgs(moved, remaining, retry, reset, refill))
			if d2 != d || d3 != d || fmt.Sprint(err2) != fmt.Sprint(err) || fmt.Sprint(err3) != fmt.Sprint(err) || !ok || m != n {
				t.Fatalf("five integers %v: as []any: %+v, %v; as []int64: %+v, %v; DecodeInts: %+v, %v; Ints: %v, %v",
					n, d, err, d2, err2, d3, err3, m, ok)
			}
		}
		failedAlone := shape%16 == 0 && moved == -1 && (remaining == 1 || remaining == 2) && retry == 0 && reset == 0 && refill == 0
		if err != nil {
			if failedAlone && errors.Is(err, spigot.ErrRequestFailed) && d == (spigot.Decision{}) {
				return // the error of an op of a batch that failed alone
			}
			if !strings.HasPrefix(err.Error(), "spigot: malformed reply from the script: ") || !errors.Is(err, spigot.ErrRequestFailed) {
				t.Fatalf("Decode(%v) error = %q; want a malformed-reply error matching ErrRequestFailed", reply, err)
			}
			if d != (spigot.Decision{}) {
				t.Fatalf("Decode(%v) = %+v with its error; want the zero Decision", reply, d)
			}
			return
		}
		switch {
		case d.N < 0 || d.Remaining < 0 || d.RetryAfter < 0 || d.ResetAfter < 0 || d.RefillAfter < 0:
			t.Fatalf("Decode(%v) = %+v: negative field", reply, d)
		case d.Allowed() != (d.RetryAfter == 0):
			t.Fatalf("Decode(%v) = %+v: RetryAfter must be 0 exactly when allowed", reply, d)
		case !d.Allowed() && d.N != 0:
			t.Fatalf("Decode(%v) = %+v: a denial moves nothing", reply, d)
		case d.Degraded():
			t.Fatalf("Decode(%v) = %+v: a reply of the script is never Degraded", reply, d)
		case d.RetryAfter%time.Millisecond != 0 && d.RetryAfter != spigot.Never,
			d.ResetAfter%time.Millisecond != 0 && d.ResetAfter != spigot.Never,
			d.RefillAfter%time.Millisecond != 0 && d.RefillAfter != spigot.Never:
			t.Fatalf("Decode(%v) = %+v: not whole milliseconds", reply, d)
		}
		back := ints(d.N, d.Remaining, ms(d.RetryAfter), ms(d.ResetAfter), ms(d.RefillAfter))
		if fmt.Sprint(back) != fmt.Sprint(reply) {
			t.Fatalf("Decode(%v) = %+v, which encodes back to %v", reply, d, back)
		}
	})
}

// TestDecodeBatch: the reply to a batch call decodes key by key; a key
// that failed alone fails alone, and a reply that is not the script's
// fails every key.
func TestDecodeBatch(t *testing.T) {
	ok := []any{int64(1), int64(19), int64(0), int64(3000), int64(1000)}
	denied := []any{int64(0), int64(0), int64(2999), int64(60000), int64(2999)}
	wrongType := []any{int64(-1), int64(1), int64(0), int64(0), int64(0)}
	unreadable := []any{int64(-1), int64(2), int64(0), int64(0), int64(0)}
	bad := []any{int64(-1), int64(3), int64(0), int64(0), int64(0)}
	cat := func(parts ...[]any) []any { return slices.Concat(parts...) }
	okD := spigot.Decision{N: 1, Remaining: 19, ResetAfter: 3 * time.Second, RefillAfter: time.Second}
	deniedD := spigot.Decision{RetryAfter: 2999 * time.Millisecond, ResetAfter: time.Minute, RefillAfter: 2999 * time.Millisecond}
	for i, c := range []struct {
		reply   any
		n       int
		want    []spigot.Decision
		errs    []string // substrings of errs[i]; "" for nil
		replyOK bool
	}{
		{cat(ok, denied), 2, []spigot.Decision{okD, deniedD}, []string{"", ""}, true},
		{cat(ok, wrongType, denied), 3, []spigot.Decision{okD, spigot.Undecided(), deniedD}, []string{"", "WRONGTYPE", ""}, true},
		{cat(unreadable, ok), 2, []spigot.Decision{spigot.Undecided(), okD}, []string{"unreadable", ""}, true},
		{cat(ok, bad), 2, []spigot.Decision{okD, spigot.Undecided()}, []string{"", "malformed reply"}, true},
		{cat(ok, ok), 3, nil, nil, false},                                                 // too short
		{cat(ok, ok, ok[:1]), 2, nil, nil, false},                                         // too long
		{cat(ok, []any{int64(0), "1", int64(0), int64(0), int64(0)}), 2, nil, nil, false}, // not an integer
		{"OK", 2, nil, nil, false},
		{nil, 2, nil, nil, false},
	} {
		out := make([]spigot.Decision, c.n)
		errs := make([]error, c.n)
		ops := slices.Repeat([]spigot.Op{{Limit: spigot.MustBucket("b", 20, spigot.PerSecond(1))}}, c.n)
		err := wire.DecodeBatch(c.reply, ops, out, errs)
		// The same reply read as integers, when it is.
		out2 := make([]spigot.Decision, c.n)
		errs2 := make([]error, c.n)
		err2 := errors.New("not integers")
		if vals, isSlice := c.reply.([]any); isSlice {
			ints := make([]int64, 0, len(vals))
			for _, v := range vals {
				if x, ok := v.(int64); ok {
					ints = append(ints, x)
				}
			}
			if len(ints) == len(vals) {
				err2 = wire.DecodeBatchInts(ints, ops, out2, errs2)
			}
		}
		if !c.replyOK {
			if err == nil || !errors.Is(err, spigot.ErrRequestFailed) || err2 == nil {
				t.Errorf("step %d: DecodeBatch(%v) = %v (as integers: %v); want a malformed-reply error", i+1, c.reply, err, err2)
			}
			continue
		}
		if err != nil || err2 != nil {
			t.Errorf("step %d: DecodeBatch(%v) = %v (as integers: %v); want nil", i+1, c.reply, err, err2)
			continue
		}
		for k := range out {
			if out[k] != c.want[k] || out2[k] != c.want[k] {
				t.Errorf("step %d: key %d = %+v (as integers: %+v); want %+v", i+1, k, out[k], out2[k], c.want[k])
			}
			for _, e := range []error{errs[k], errs2[k]} {
				switch {
				case c.errs[k] == "" && e != nil:
					t.Errorf("step %d: key %d: error %v; want none", i+1, k, e)
				case c.errs[k] != "" && (e == nil || !strings.Contains(e.Error(), c.errs[k]) || !errors.Is(e, spigot.ErrRequestFailed)):
					t.Errorf("step %d: key %d: error %v; want one with %q matching ErrRequestFailed", i+1, k, e, c.errs[k])
				}
			}
		}
	}
}

// ms encodes a duration as the script does: whole milliseconds, -1 for Never.
func ms(d time.Duration) int64 {
	if d == spigot.Never {
		return -1
	}
	return int64(d / time.Millisecond)
}

// actions are every action with the name the script knows it by.
var actions = []struct {
	a    spigot.Action
	name string
}{
	{spigot.Take, "tb.take"},
	{spigot.TakeUpTo, "tb.takeupto"},
	{spigot.Refund, "tb.refund"},
	{spigot.Reset, "tb.reset"},
	{spigot.Peek, "tb.peek"},
}

func TestArgsServerTime(t *testing.T) {
	login := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	tenth := spigot.MustBucket("tenth", 10, spigot.Per(7, 10*time.Second))
	a := wire.NewArgs(nil)
	op := func(l spigot.Limit, action spigot.Action, n int64) spigot.Op {
		return spigot.Op{Limit: l, Key: "k", Action: action, N: n}
	}
	for i, c := range []struct {
		got, want wire.Argv
	}{
		// now ("": TIME), kind.action, capacity, scale (µs per token / g), refill (units per µs), n
		{a.Op(op(login, spigot.Take, 1)), wire.Argv{"", "tb.take", "20", "3000000", "1", "1"}},
		{a.Op(op(login, spigot.Take, 0)), wire.Argv{"", "tb.take", "20", "3000000", "1", "0"}},
		{a.Op(op(login, spigot.Take, 21)), wire.Argv{"", "tb.take", "20", "3000000", "1", "21"}},
		// An N past 2^53, where a Lua number would round it, is 2^54: above
		// every capacity, decided as N is.
		{a.Op(op(login, spigot.Take, math.MaxInt64)), wire.Argv{"", "tb.take", "20", "3000000", "1", "18014398509481984"}},
		{a.Op(op(login, spigot.Peek, 1<<53+1)), wire.Argv{"", "tb.peek", "20", "3000000", "1", "18014398509481984"}},
		{a.Op(op(login, spigot.TakeUpTo, 1<<53)), wire.Argv{"", "tb.takeupto", "20", "3000000", "1", "9007199254740992"}},
		{a.Op(op(login, spigot.Refund, 1<<53-1)), wire.Argv{"", "tb.refund", "20", "3000000", "1", "9007199254740991"}},
		{a.Op(op(login, spigot.TakeUpTo, 5)), wire.Argv{"", "tb.takeupto", "20", "3000000", "1", "5"}},
		{a.Op(op(login, spigot.Refund, 2)), wire.Argv{"", "tb.refund", "20", "3000000", "1", "2"}},
		{a.Op(op(login, spigot.Reset, 0)), wire.Argv{"", "tb.reset", "20", "3000000", "1", "0"}},
		{a.Op(op(login, spigot.Peek, 3)), wire.Argv{"", "tb.peek", "20", "3000000", "1", "3"}},
		{a.Op(op(tenth, spigot.Take, 3)), wire.Argv{"", "tb.take", "10", "10000000", "7", "3"}},
		{a.Op(op(tenth, spigot.Reset, 0)), wire.Argv{"", "tb.reset", "10", "10000000", "7", "0"}},
	} {
		if c.got != c.want {
			t.Errorf("step %d: argv = %q; want %q", i, c.got, c.want)
		}
	}
	for i, c := range []struct {
		got, want [6]any
	}{
		// The same, for clients that take ...any: N as an int64.
		{a.OpAny(op(login, spigot.Take, 1)), [6]any{"", "tb.take", "20", "3000000", "1", int64(1)}},
		{a.OpAny(op(login, spigot.Take, math.MaxInt64)), [6]any{"", "tb.take", "20", "3000000", "1", int64(1 << 54)}},
		{a.OpAny(op(login, spigot.Refund, 1<<53+1)), [6]any{"", "tb.refund", "20", "3000000", "1", int64(1 << 54)}},
		{a.OpAny(op(login, spigot.Take, 1<<53)), [6]any{"", "tb.take", "20", "3000000", "1", int64(1 << 53)}},
		{a.OpAny(op(login, spigot.Reset, 0)), [6]any{"", "tb.reset", "20", "3000000", "1", int64(0)}},
		{a.OpAny(op(tenth, spigot.TakeUpTo, 0)), [6]any{"", "tb.takeupto", "10", "10000000", "7", int64(0)}},
	} {
		if c.got != c.want {
			t.Errorf("step %d: argv = %#v; want %#v", i, c.got, c.want)
		}
	}
	// Every action has its name, as a string and boxed.
	for i, c := range actions {
		o := op(tenth, c.a, 4)
		if got := a.Op(o)[1]; got != c.name {
			t.Errorf("step %d: Op(%v)[1] = %q; want %q", i, o, got, c.name)
		}
		if got := a.OpAny(o)[1]; got != c.name {
			t.Errorf("step %d: OpAny(%v)[1] = %#v; want %q", i, o, got, c.name)
		}
	}
}

func TestArgsClock(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)
	clk := clocktest.New(t0)
	b := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	a := wire.NewArgs(clk)
	// The script adds ClockTTLSlack to the TTL of a key written on the
	// caller's clock, as a literal.
	slack := strconv.FormatInt(wire.ClockTTLSlack.Milliseconds(), 10)
	if !strings.Contains(wire.Script(), "now, nowd, slack = clock + 0, clock, "+slack+"\n") {
		t.Errorf("the script does not add ClockTTLSlack (%s ms) when ARGV[1] holds the caller's now", slack)
	}
	for i, c := range []struct {
		advance time.Duration
		want    wire.Argv // ARGV[1] is now in µs, truncated
	}{
		{0, wire.Argv{"1735787045123456", "tb.take", "20", "3000000", "1", "1"}},
		{210 * time.Nanosecond, wire.Argv{"1735787045123456", "tb.take", "20", "3000000", "1", "1"}}, // .123456999
		{time.Nanosecond, wire.Argv{"1735787045123457", "tb.take", "20", "3000000", "1", "1"}},       // .123457000
		{-time.Hour, wire.Argv{"1735783445123457", "tb.take", "20", "3000000", "1", "1"}},
	} {
		clk.Advance(c.advance)
		if got := a.Op(spigot.Op{Limit: b, Key: "k", N: 1}); got != c.want {
			t.Errorf("step %d: at %v Take argv = %q; want %q", i, clk.Now(), got, c.want)
		}
		reset := c.want
		reset[1], reset[5] = "tb.reset", "0"
		if got := a.Op(spigot.Op{Limit: b, Key: "k", Action: spigot.Reset}); got != reset {
			t.Errorf("step %d: at %v Reset argv = %q; want %q", i, clk.Now(), got, reset)
		}
		want := [6]any{c.want[0], c.want[1], c.want[2], c.want[3], c.want[4], int64(1)}
		if got := a.OpAny(spigot.Op{Limit: b, Key: "k", N: 1}); got != want {
			t.Errorf("step %d: at %v OpAny argv = %#v; want %#v", i, clk.Now(), got, want)
		}
	}
}

// The zero Args reads the server's clock, as NewArgs(nil) does.
func TestArgsZero(t *testing.T) {
	var a wire.Args
	b := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	op := spigot.Op{Limit: b, Key: "k", N: 2}
	want := wire.Argv{"", "tb.take", "20", "3000000", "1", "2"}
	if got := a.Op(op); got != want {
		t.Errorf("zero Args: Op = %q; want %q", got, want)
	}
	wantAny := [6]any{"", "tb.take", "20", "3000000", "1", int64(2)}
	if got := a.OpAny(op); got != wantAny {
		t.Errorf("zero Args: OpAny = %#v; want %#v", got, wantAny)
	}
}

// A known limit's parameters are formatted once: a second operation gets
// the very strings of the first. (The numbers are 100 or more, since
// strconv returns shared strings for smaller ones anyway.)
func TestArgsCachesParams(t *testing.T) {
	b := spigot.MustBucket("cached", 1000, spigot.Per(101, time.Second)) // scale 1000000, refill 101
	a := wire.NewArgs(nil)
	first := a.Op(spigot.Op{Limit: b, Key: "k", N: 1})
	second := a.Op(spigot.Op{Limit: b, Key: "other", Action: spigot.Reset})
	anyFirst := a.OpAny(spigot.Op{Limit: b, Key: "k", N: 1})
	want := map[int]string{2: "1000", 3: "1000000", 4: "101"}
	for i, w := range want {
		if first[i] != w || second[i] != w || anyFirst[i] != w {
			t.Fatalf("ARGV[%d] = %q, then %q, then %#v; want %q", i+1, first[i], second[i], anyFirst[i], w)
		}
		if unsafe.StringData(first[i]) != unsafe.StringData(second[i]) ||
			unsafe.StringData(first[i]) != unsafe.StringData(anyFirst[i].(string)) {
			t.Errorf("ARGV[%d] was formatted again for a known limit", i+1)
		}
	}
}

// Many limits, more than Args remembers, some sharing a name with another
// config (a deploy that changes a limit), from many goroutines: every
// operation gets its own limit's parameters.
func TestArgsManyLimits(t *testing.T) {
	type limit struct {
		l    spigot.Limit
		want [3]string
	}
	var limits []limit
	for i := range 1000 {
		capacity, tokens := int64(i+1), int64(i%7+1)
		period := time.Duration(i%13+1) * time.Second
		l := spigot.MustBucket("b"+strconv.Itoa(i%400), capacity, spigot.Per(tokens, period))
		us := int64(period / time.Microsecond)
		g := gcd(tokens, us)
		limits = append(limits, limit{l, [3]string{
			strconv.FormatInt(capacity, 10), strconv.FormatInt(us/g, 10), strconv.FormatInt(tokens/g, 10),
		}})
	}
	a := wire.NewArgs(nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for round := range 3 {
				for j := range limits {
					c := limits[(j*(w+1)+round*7)%len(limits)]
					act := actions[j%len(actions)]
					op := spigot.Op{Limit: c.l, Key: "k", Action: act.a, N: int64(j)}
					want := wire.Argv{"", act.name, c.want[0], c.want[1], c.want[2], strconv.Itoa(j)}
					wantAny := [6]any{"", act.name, c.want[0], c.want[1], c.want[2], int64(j)}
					if got := a.Op(op); got != want {
						t.Errorf("worker %d round %d: Op(%v) = %q; want %q", w, round, op, got, want)
						return
					}
					if got := a.OpAny(op); got != wantAny {
						t.Errorf("worker %d round %d: OpAny(%v) = %#v; want %#v", w, round, op, got, wantAny)
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

func TestSHA1(t *testing.T) {
	sum := sha1.Sum([]byte(wire.Script()))
	if want := hex.EncodeToString(sum[:]); wire.SHA1() != want {
		t.Errorf("SHA1() = %q; want the hex SHA-1 of Script(), %q", wire.SHA1(), want)
	}
}

// The script names no key but its declared KEYS[i], so that it runs
// behind cluster proxies and on servers that forbid undeclared keys.
func TestScriptTouchesOnlyItsKeys(t *testing.T) {
	refs := regexp.MustCompile(`KEYS\s*\[\s*([^\]]*)\]`).FindAllStringSubmatch(wire.Script(), -1)
	if len(refs) == 0 {
		t.Fatal("Script never names KEYS[i]")
	}
	for _, r := range refs {
		if r[1] != "i" {
			t.Errorf("Script names %s; want only KEYS[i], for i in 1..#KEYS", r[0])
		}
	}
}

// The script knows every action and every kind by the names Args gives
// them.
func TestScriptKnowsEveryAction(t *testing.T) {
	for _, c := range actions {
		name := strings.TrimPrefix(c.name, "tb.")
		if !strings.Contains(wire.Script(), "act == '"+name+"'") && !strings.Contains(wire.Script(), "act ~= '"+name+"'") {
			t.Errorf("Script does not name the action %q", name)
		}
	}
	for _, tag := range []string{"tb", "lb", "fw", "sw", "sl"} {
		if !strings.Contains(wire.Script(), "tag == '"+tag+"'") {
			t.Errorf("Script does not name the kind %q", tag)
		}
	}
}

// TestArgsKinds: each kind's tag and parameters, as strings and boxed: a
// bucket's capacity, scale and refill; a window's limit, length and offset
// in µs.
func TestArgsKinds(t *testing.T) {
	a := wire.NewArgs(nil)
	for i, c := range []struct {
		l    spigot.Limit
		want wire.Argv
	}{
		{spigot.MustBucket("b", 20, spigot.Per(1, 3*time.Second)), wire.Argv{"", "tb.takeupto", "20", "3000000", "1", "7"}},
		{spigot.Must(spigot.NewLeakyBucket("b", 20, spigot.Per(1, 3*time.Second))), wire.Argv{"", "lb.takeupto", "20", "3000000", "1", "7"}},
		{spigot.Must(spigot.NewFixedWindow("b", spigot.PerDay(10), 5*time.Hour)), wire.Argv{"", "fw.takeupto", "10", "86400000000", "18000000000", "7"}},
		{spigot.Must(spigot.NewFixedWindow("b", spigot.PerHour(10), -time.Minute)), wire.Argv{"", "fw.takeupto", "10", "3600000000", "3540000000", "7"}},
		{spigot.Must(spigot.NewSlidingWindow("b", spigot.PerSecond(100))), wire.Argv{"", "sw.takeupto", "100", "1000000", "0", "7"}},
		{spigot.Must(spigot.NewSlidingLog("b", spigot.Per(5, time.Minute))), wire.Argv{"", "sl.takeupto", "5", "60000000", "0", "7"}},
	} {
		op := spigot.Op{Limit: c.l, Key: "k", Action: spigot.TakeUpTo, N: 7}
		if got := a.Op(op); got != c.want {
			t.Errorf("step %d: Op(%v) = %q; want %q", i, op, got, c.want)
		}
		boxed := a.OpAny(op)
		for j, w := range c.want[:5] {
			if boxed[j] != w {
				t.Errorf("step %d: OpAny(%v)[%d] = %#v; want %q", i, op, j, boxed[j], w)
			}
		}
		if got := a.Ops([]spigot.Op{op, op}); !slices.Equal(got[1:6], c.want[1:]) || !slices.Equal(got[6:], c.want[1:]) {
			t.Errorf("step %d: Ops(%v twice) = %q", i, op, got)
		}
	}
}

// TestDecodeLeaky: a leaky bucket's reply has a sixth integer, its Delay in
// µs, -1 for Never, and -2 less the µs past 2^53; a reply of several keys
// has six integers for each leaky bucket and five for any other.
func TestDecodeLeaky(t *testing.T) {
	lb := spigot.Op{Limit: spigot.Must(spigot.NewLeakyBucket("q", 10, spigot.PerSecond(1)))}
	tb := spigot.Op{Limit: spigot.MustBucket("b", 10, spigot.PerSecond(1))}
	us := time.Microsecond
	for i, c := range []struct {
		reply []int64
		want  spigot.Decision
		ok    bool
	}{
		{[]int64{1, 9, 0, 1000, 1000, 0}, spigot.Decision{N: 1, Remaining: 9, ResetAfter: time.Second, RefillAfter: time.Second}, true},
		{[]int64{1, 8, 0, 2000, 1000, 1_000_001}, spigot.Decision{N: 1, Remaining: 8, ResetAfter: 2 * time.Second, RefillAfter: time.Second, Delay: 1_000_001 * us}, true},
		{[]int64{1, 8, 0, 2000, 1000, 1 << 53}, spigot.Decision{N: 1, Remaining: 8, ResetAfter: 2 * time.Second, RefillAfter: time.Second, Delay: (1 << 53) * us}, true},
		{[]int64{1, 8, 0, 2000, 1000, -3}, spigot.Decision{N: 1, Remaining: 8, ResetAfter: 2 * time.Second, RefillAfter: time.Second, Delay: (1<<53 + 1) * us}, true},
		{[]int64{1, 8, 0, 2000, 1000, -1}, spigot.Decision{N: 1, Remaining: 8, ResetAfter: 2 * time.Second, RefillAfter: time.Second, Delay: spigot.Never}, true},
		{[]int64{1, 8, 0, 2000, -1, -2 - (int64(spigot.Never/us) - 1<<53)}, spigot.Decision{N: 1, Remaining: 8, ResetAfter: 2 * time.Second, RefillAfter: spigot.Never, Delay: spigot.Never / us * us}, true},
		{[]int64{1, 8, 0, 2000, 1000, -3 - (int64(spigot.Never/us) - 1<<53)}, spigot.Decision{}, false},
		{[]int64{1, 8, 0, 2000, 1000, -2}, spigot.Decision{}, false},
		{[]int64{1, 8, 0, 2000, 1000, 1<<53 + 1}, spigot.Decision{}, false},
		{[]int64{0, 0, 1000, 2000, 1000, 5}, spigot.Decision{}, false}, // denied, yet delayed
		{[]int64{1, 8, 0, 2000, -2, 0}, spigot.Decision{}, false},      // a refill of -2 ms
		{[]int64{1, 8, 0, 2000, 0}, spigot.Decision{}, false},          // five integers
		{[]int64{1, 8, 0, 2000, 0, 0, 0}, spigot.Decision{}, false},
	} {
		var out [1]spigot.Decision
		reply := make([]any, len(c.reply))
		for j, x := range c.reply {
			reply[j] = x
		}
		err := wire.DecodeAll(reply, []spigot.Op{lb}, out[:])
		var out2 [1]spigot.Decision
		err2 := wire.DecodeAllInts(c.reply, []spigot.Op{lb}, out2[:])
		switch {
		case c.ok && (err != nil || err2 != nil || out[0] != c.want || out2[0] != c.want):
			t.Errorf("step %d: DecodeAll(%v) = %+v, %v (as integers %+v, %v); want %+v", i, c.reply, out[0], err, out2[0], err2, c.want)
		case !c.ok && (!errors.Is(err, spigot.ErrRequestFailed) || !errors.Is(err2, spigot.ErrRequestFailed)):
			t.Errorf("step %d: DecodeAll(%v) = %v, %v; want malformed-reply errors", i, c.reply, err, err2)
		}
	}
	// Mixed kinds, all or nothing and in a batch (a leaky bucket that
	// failed alone has six integers too).
	ops := []spigot.Op{tb, lb, tb}
	out := make([]spigot.Decision, 3)
	if err := wire.DecodeAllInts([]int64{1, 9, 0, 1000, 1000, 1, 8, 0, 2000, 1000, 1000, 0, 10, 0, 0, 1000}, ops, out); err != nil ||
		out[1].Delay != time.Millisecond || out[1].RefillAfter != time.Second || out[2].Remaining != 10 || out[2].RefillAfter != time.Second {
		t.Errorf("DecodeAllInts of mixed kinds = %+v, %v", out, err)
	}
	errs := make([]error, 3)
	if err := wire.DecodeBatchInts([]int64{1, 9, 0, 1000, 1000, -1, 2, 0, 0, 0, 0, 0, 10, 0, 0, 1000}, ops, out, errs); err != nil ||
		out[1] != spigot.Undecided() || errs[1] == nil || errs[0] != nil || errs[2] != nil || out[2].Remaining != 10 {
		t.Errorf("DecodeBatchInts of mixed kinds = %+v, %v, %v", out, errs, err)
	}
	if err := wire.DecodeAllInts([]int64{1, 9, 0, 1000, 1000, 1, 8, 0, 2000, 1000, 0, 10, 0, 0, 1000}, ops, out); !errors.Is(err, spigot.ErrRequestFailed) {
		t.Errorf("DecodeAllInts of 15 integers for a leaky bucket and two others: %v; want a malformed-reply error", err)
	}
}

// TestArgsBatch: a batch call marks its time with "b"; a call of one op
// is an ordinary one, whose time the script must read as a number.
func TestArgsBatch(t *testing.T) {
	b := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	one := []spigot.Op{{Limit: b, Key: "a", N: 1}}
	two := append(one, spigot.Op{Limit: b, Key: "b", N: 2})
	clk := clocktest.New(time.UnixMicro(1_700_000_000_000_001))
	for i, c := range []struct {
		args *wire.Args
		ops  []spigot.Op
		want string
	}{
		{wire.NewArgs(nil), two, "b"},
		{wire.NewArgs(nil), one, ""},
		{wire.NewArgs(clk), two, "b1700000000000001"},
		{wire.NewArgs(clk), one, "1700000000000001"},
	} {
		argv, argvAny := c.args.Batch(c.ops), c.args.BatchAny(c.ops)
		if argv[0] != c.want || argvAny[0] != c.want {
			t.Errorf("step %d: Batch of %d ops: ARGV[1] = %q, %q; want %q", i+1, len(c.ops), argv[0], argvAny[0], c.want)
		}
		if ops := c.args.Ops(c.ops); !slices.Equal(ops[1:], argv[1:]) || len(argv) != 1+5*len(c.ops) {
			t.Errorf("step %d: Batch %q and Ops %q differ past the time", i+1, argv, ops)
		}
	}
	if !strings.Contains(wire.Script(), `string.byte(clock, 1) == 98 then -- "b"`) {
		t.Errorf("the script does not read a leading %q as a batch", "b")
	}
}
