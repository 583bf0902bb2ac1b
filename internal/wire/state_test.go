package wire_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
)

// TestArgsExactN: every way of building ARGV sends an N above MaxExact
// as 2^54, and any other N as it is.
func TestArgsExactN(t *testing.T) {
	b := spigot.MustBucket("edge", 1<<53, spigot.Per(1, time.Microsecond))
	a := wire.NewArgs(nil)
	ns := []int64{0, 1, 1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<53 + 2, 1 << 54, math.MaxInt64}
	want := []int64{0, 1, 1<<53 - 1, 1 << 53, 1 << 54, 1 << 54, 1 << 54, 1 << 54}
	var ops []spigot.Op
	for i, n := range ns {
		ops = append(ops, spigot.Op{Limit: b, Key: "k", Action: allActions[i%len(allActions)], N: n})
	}
	for i, op := range ops {
		w := fmt.Sprint(want[i])
		if got := a.Op(op)[5]; got != w {
			t.Errorf("step %d: Op(%v)[5] = %q; want %q", i, op, got, w)
		}
		if got := a.OpAny(op)[5]; got != want[i] {
			t.Errorf("step %d: OpAny(%v)[5] = %#v; want %d", i, op, got, want[i])
		}
		if got := a.Ops(ops)[5+5*i]; got != w {
			t.Errorf("step %d: Ops(…)[%d] = %q; want %q", i, 5+5*i, got, w)
		}
		if got := a.Batch(ops)[5+5*i]; got != w {
			t.Errorf("step %d: Batch(…)[%d] = %q; want %q", i, 5+5*i, got, w)
		}
		if got := a.OpsAny(ops)[5+5*i]; got != want[i] {
			t.Errorf("step %d: OpsAny(…)[%d] = %#v; want %d", i, 5+5*i, got, want[i])
		}
		if got := a.BatchAny(ops)[5+5*i]; got != want[i] {
			t.Errorf("step %d: BatchAny(…)[%d] = %#v; want %d", i, 5+5*i, got, want[i])
		}
	}
}

var allActions = []spigot.Action{spigot.Take, spigot.TakeUpTo, spigot.Refund, spigot.Reset, spigot.Peek}

func TestParseState(t *testing.T) {
	const max53 = 1 << 53
	for i, c := range []struct {
		value string
		want  store.State // the zero State: unreadable
	}{
		{"tb/1 1767323051000000 1767323045000000 14000000 2000000", store.State{Kind: spigot.TokenBucket, FullAt: 1767323051000000, Stamp: 1767323045000000, Tokens: 14000000, Scale: 2000000}},
		{"tb/1 0 -5 -0 0", store.State{Kind: spigot.TokenBucket, Stamp: -5}},
		{"tb/1 007 008 009 010", store.State{Kind: spigot.TokenBucket, FullAt: 7, Stamp: 8, Tokens: 9, Scale: 10}},
		// The bounds: 2^53 for the stamp, tokens and scale, 18 digits for FullAt.
		{"tb/1 1 9007199254740992 -9007199254740992 0009007199254740992", store.State{Kind: spigot.TokenBucket, FullAt: 1, Stamp: max53, Tokens: -max53, Scale: max53}},
		{"tb/1 1 9007199254740993 0 1", store.State{}},
		{"tb/1 1 0 -9007199254740993 1", store.State{}},
		{"tb/1 1 0 0 10000000000000000", store.State{}},
		{"tb/1 999999999999999999 0 0 1", store.State{Kind: spigot.TokenBucket, FullAt: 999999999999999999, Scale: 1}},
		{"tb/1 -999999999999999999 0 0 1", store.State{Kind: spigot.TokenBucket, FullAt: -999999999999999999, Scale: 1}},
		{"tb/1 0999999999999999999 0 0 1", store.State{}},
		{"tb/1 1000000000000000000 0 0 1", store.State{}},
		{"tb/1 18014398509481984 0 0 1", store.State{Kind: spigot.TokenBucket, FullAt: 1 << 54, Scale: 1}},
		// This format, broken.
		{"tb/1 1 2 3", store.State{}},
		{"tb/1 1 2 3 4 5", store.State{}},
		{"tb/1 1 2 3 -", store.State{}},
		{"tb/1 1 2 3 ", store.State{}},
		{"tb/1 1 2 3-5", store.State{}},
		{"tb/1 1  2 3 4", store.State{}},
		{"tb/1 1 +2 3 4", store.State{}},
		{"tb/1 5", store.State{}},
		// No tag.
		{"5 6 7 8", store.State{}},
		{"5000000 1767323044000000 2000000", store.State{}},
		// Other kinds and later versions: the FullAt alone, within 2^53.
		{"xx/1 5", store.State{Kind: wire.OtherKind, FullAt: 5}},
		{"xx/1 -5 anything", store.State{Kind: wire.OtherKind, FullAt: -5}},
		{"tb/2 9007199254740992", store.State{Kind: wire.OtherKind, FullAt: max53}},
		{"tb/2 9007199254740993", store.State{}},
		{"tb/10 0", store.State{Kind: wire.OtherKind}},
		{"tb/0002 7 ", store.State{Kind: wire.OtherKind, FullAt: 7}},
		// This version written otherwise, and one before it.
		{"tb/01 5 6 7 8", store.State{}},
		{"tb/0 5 6 7 8", store.State{}},
		{"tb/0 5", store.State{}},
		{"xx/1 5abc", store.State{}},
		{"xx/1 5\n", store.State{}},
		{"xx/1 ", store.State{}},
		{"xx/1", store.State{}},
		{"xx/ 5", store.State{}},
		{"/1 5", store.State{}},
		{"Xx/1 5", store.State{}},
		{"x1/1 5", store.State{}},
		{"xx/1 -", store.State{}},
		{"", store.State{}},
		{"garbage", store.State{}},
	} {
		got, err := wire.ParseState(c.value, spigot.TokenBucket)
		switch {
		case c.want.IsZero() && !errors.Is(err, wire.ErrUnreadable):
			t.Errorf("step %d: ParseState(%q) = %+v, %v; want ErrUnreadable", i, c.value, got, err)
		case !c.want.IsZero() && (err != nil || !reflect.DeepEqual(got, c.want)):
			t.Errorf("step %d: ParseState(%q) = %+v, %v; want %+v", i, c.value, got, err, c.want)
		}
	}
}

// FuzzParseState: ParseState never panics; a state it reads has the
// bounds it states; FormatState of a state of a kind it knows reads back
// as itself.
func FuzzParseState(f *testing.F) {
	for _, v := range []string{
		"tb/1 1767323051000000 1767323045000000 14000000 2000000", "1 2 3 4",
		"xx/1 5 x", "tb/2 9007199254740992", "tb/1 -0 -0 -0 -0", "tb/01 1 2 3 4", "",
		"lb/1 5 6 7 8", "fw/1 5 6 7 8 9", "sw/1 5 6 7 8 9 10", "sl/1 5 6 7 2 000102",
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, reader := range readers {
			s, err := wire.ParseState(v, reader)
			checkParsed(t, v, reader, s, err)
		}
	})
}

var readers = []spigot.Kind{spigot.TokenBucket, spigot.LeakyBucket, spigot.FixedWindow, spigot.SlidingWindow, spigot.SlidingLog}

// checkParsed checks what ParseState(v, reader) returned: the zero State
// and ErrUnreadable, or a State within the bounds ParseState states, which
// FormatState writes back as a value that reads as itself.
func checkParsed(t *testing.T, v string, reader spigot.Kind, s store.State, err error) {
	t.Helper()
	{
		if err != nil {
			if !errors.Is(err, wire.ErrUnreadable) || !s.IsZero() {
				t.Fatalf("ParseState(%q) = %+v, %v; want the zero State and ErrUnreadable", v, s, err)
			}
			return
		}
		abs := func(x int64) int64 { return max(x, -x) }
		fullMax := int64(1e18)
		if s.Kind != reader {
			fullMax = store.MaxExact + 1
		}
		switch s.Kind {
		case spigot.TokenBucket, spigot.LeakyBucket, spigot.FixedWindow, spigot.SlidingWindow, spigot.SlidingLog:
			over := false
			for _, x := range append([]int64{s.Stamp, s.Tokens, s.Scale, s.Start, s.Window, s.Count, s.Prev}, s.Log...) {
				over = over || abs(x) > store.MaxExact
			}
			if over || abs(s.FullAt) >= fullMax || len(s.Log) > spigot.MaxLog { // a log in any order: read as written
				t.Fatalf("ParseState(%q, %v) = %+v: out of bounds", v, reader, s)
			}
			if (s.Kind == spigot.SlidingLog) != (len(s.Log) > 0) {
				t.Fatalf("ParseState(%q, %v) = %+v: a log, or none, of the wrong kind", v, reader, s)
			}
			if back, err := wire.ParseState(wire.FormatState(s), reader); err != nil || !reflect.DeepEqual(back, s) {
				t.Fatalf("ParseState(FormatState(%+v)) = %+v, %v", s, back, err)
			}
		case wire.OtherKind:
			if abs(s.FullAt) > store.MaxExact || s.Stamp != 0 || s.Tokens != 0 || s.Scale != 0 || !strings.Contains(v, "/") {
				t.Fatalf("ParseState(%q) = %+v: not another kind's state", v, s)
			}
		default:
			t.Fatalf("ParseState(%q) = %+v: kind %v", v, s, s.Kind)
		}
	}
}

// TestParseStateKinds: the formats of the kinds besides the token bucket,
// each read by a limit of its own kind and of another (whose reading takes
// a FullAt within 2^53 only), their broken forms, and the earlier versions
// of known kinds, which are unreadable.
func TestParseStateKinds(t *testing.T) {
	const max53 = 1 << 53
	lb, fw, sw, sl, tb := spigot.LeakyBucket, spigot.FixedWindow, spigot.SlidingWindow, spigot.SlidingLog, spigot.TokenBucket
	for i, c := range []struct {
		value  string
		reader spigot.Kind
		want   store.State // the zero State: unreadable
	}{
		{"lb/1 10 5 6 7", lb, store.State{Kind: lb, FullAt: 10, Stamp: 5, Tokens: 6, Scale: 7}},
		{"lb/1 10 5 6 7", tb, store.State{Kind: lb, FullAt: 10, Stamp: 5, Tokens: 6, Scale: 7}},
		{"lb/1 999999999999999999 5 6 7", lb, store.State{Kind: lb, FullAt: 999999999999999999, Stamp: 5, Tokens: 6, Scale: 7}},
		{"lb/1 999999999999999999 5 6 7", tb, store.State{}}, // another kind's FullAt past 2^53
		{"lb/1 9007199254740992 5 6 7", fw, store.State{Kind: lb, FullAt: max53, Stamp: 5, Tokens: 6, Scale: 7}},
		{"lb/1 1000000000000000000 5 6 7", lb, store.State{}},
		{"lb/1 10 5 6", lb, store.State{}},
		{"lb/1 10 5 6 7 8", lb, store.State{}},
		{"lb/1 10 5 6 9007199254740993", lb, store.State{}},
		{"lb/0 10", lb, store.State{}},
		{"lb/01 10 5 6 7", lb, store.State{}},
		{"lb/2 10 x", lb, store.State{Kind: wire.OtherKind, FullAt: 10}},
		{"fw/1 20 5 0 60000000 3", fw, store.State{Kind: fw, FullAt: 20, Stamp: 5, Window: 60000000, Count: 3}},
		{"fw/1 20 5 -7 1000 -3", sw, store.State{Kind: fw, FullAt: 20, Stamp: 5, Start: -7, Window: 1000, Count: -3}},
		{"fw/1 20 5 0 60000000 3 4", fw, store.State{}},
		{"fw/1 20 5 0 60000000", fw, store.State{}},
		{"fw/1 20 5 0 9007199254740993 3", fw, store.State{}},
		{"sw/1 20 5 0 1000 3 4", sw, store.State{Kind: sw, FullAt: 20, Stamp: 5, Window: 1000, Count: 3, Prev: 4}},
		{"sw/1 20 5 0 1000 3", sw, store.State{}},
		{"sw/1 20 5 0 1000 3 4 5", sw, store.State{}},
		{"sw/1 20 5 0 1000 3 +4", sw, store.State{}},
		{"sw/2 20 5 0 1000 3 4", sw, store.State{Kind: wire.OtherKind, FullAt: 20}},
		{"sl/1 30 9 7 1 0", sl, store.State{Kind: sl, FullAt: 30, Stamp: 9, Log: []int64{7}}},
		{"sl/1 30 9 -7 1 0033", sl, store.State{Kind: sl, FullAt: 30, Stamp: 9, Log: []int64{-7, -7, -4, -4}}},
		{"sl/1 30 9 -7 2 00000303", sl, store.State{Kind: sl, FullAt: 30, Stamp: 9, Log: []int64{-7, -7, -4, -4}}},
		{"sl/1 30 9 5 1 0111333", tb, store.State{Kind: sl, FullAt: 30, Stamp: 9, Log: []int64{5, 6, 6, 6, 8, 8, 8}}},
		{"sl/1 30 9 5 1 9070", sl, store.State{Kind: sl, FullAt: 30, Stamp: 9, Log: []int64{14, 5, 12, 5}}}, // out of order: read as written
		{"sl/0 30 9 7 1 0", sl, store.State{}},                                                              // a version before this one
		{"sl/1 30 9 5 01 7", sl, store.State{}},                                                             // a width's leading zero
		{"sl/1 30 9 5 0 7", sl, store.State{}},
		{"sl/1 30 9 5 16 0000000000000000", sl, store.State{}},
		{"sl/1 30 9 5 15 000000000000000", sl, store.State{Kind: sl, FullAt: 30, Stamp: 9, Log: []int64{5}}},
		{"sl/1 30 9 5 2 123", sl, store.State{}}, // not a multiple of the width
		{"sl/1 30 9 5 2 ", sl, store.State{}},
		{"sl/1 30 9 5 2", sl, store.State{}},
		{"sl/1 30 9 5 1 1 2", sl, store.State{}},
		{"sl/1 30 9 5 1 1-2", sl, store.State{}},
		{"sl/1 30 9 5 1 +2", sl, store.State{}},
		{"sl/1 30 9 9007199254740983 1 09", sl, store.State{Kind: sl, FullAt: 30, Stamp: 9, Log: []int64{max53 - 9, max53}}},
		{"sl/1 30 9 9007199254740984 1 0", sl, store.State{}}, // 9 more would pass 2^53
		{"sl/1 30 9 -9007199254740992 15 000000000000000", sl, store.State{Kind: sl, FullAt: 30, Stamp: 9, Log: []int64{-max53}}},
		{"sl/1 30 9 -9007199254740993 1 0", sl, store.State{}},
		{"sl/1 30 9007199254740993 0 1 0", sl, store.State{}},
		{"sl/1 30 9 0 1 " + strings.Repeat("0", 1000), sl, store.State{Kind: sl, FullAt: 30, Stamp: 9, Log: make([]int64, 1000)}},
		{"sl/1 30 9 0 1 " + strings.Repeat("0", 1001), sl, store.State{}}, // past MaxLog
		{"sl/1 30 9 0 2 " + strings.Repeat("0", 2000), sl, store.State{Kind: sl, FullAt: 30, Stamp: 9, Log: make([]int64, 1000)}},
		{"sl/1 30 9 0 2 " + strings.Repeat("0", 2002), sl, store.State{}},
		{"sl/2 30", sl, store.State{Kind: wire.OtherKind, FullAt: 30}},
		{"fw/1 0000000000000000005 5 0 1000 3", tb, store.State{}}, // 19 digits
		{"xx/1 0000000000000000005", fw, store.State{Kind: wire.OtherKind, FullAt: 5}},
		{"tb/1 999999999999999999 0 0 1", sw, store.State{}},
		{"tb/1 9007199254740992 0 0 1", lb, store.State{Kind: tb, FullAt: max53, Scale: 1}},
	} {
		got, err := wire.ParseState(c.value, c.reader)
		switch {
		case c.want.IsZero() && !errors.Is(err, wire.ErrUnreadable):
			t.Errorf("step %d: ParseState(%q, %v) = %+v, %v; want ErrUnreadable", i, c.value, c.reader, got, err)
		case !c.want.IsZero() && (err != nil || !reflect.DeepEqual(got, c.want)):
			t.Errorf("step %d: ParseState(%q, %v) = %+v, %v; want %+v", i, c.value, c.reader, got, err, c.want)
		}
		if err == nil {
			checkParsed(t, c.value, c.reader, got, err)
		}
	}
}

// TestFormatState: what the script writes for each kind, a sliding log's
// entries from its least instant in the fewest digits, and "" for a state of no kind it writes.
func TestFormatState(t *testing.T) {
	for i, c := range []struct {
		s    store.State
		want string
	}{
		{store.State{Kind: spigot.TokenBucket, FullAt: 1, Stamp: 2, Tokens: 3, Scale: 4}, "tb/1 1 2 3 4"},
		{store.State{Kind: spigot.LeakyBucket, FullAt: 1, Stamp: 2, Tokens: 3, Scale: 4}, "lb/1 1 2 3 4"},
		{store.State{Kind: spigot.FixedWindow, FullAt: 1, Stamp: 2, Start: 3, Window: 4, Count: 5}, "fw/1 1 2 3 4 5"},
		{store.State{Kind: spigot.SlidingWindow, FullAt: 1, Stamp: 2, Start: 3, Window: 4, Count: 5, Prev: 6}, "sw/1 1 2 3 4 5 6"},
		{store.State{Kind: spigot.SlidingLog, FullAt: 1, Stamp: 2, Log: []int64{5, 5, 5, 7, 10, 10}}, "sl/1 1 2 5 2 000000020505"},
		{store.State{Kind: spigot.SlidingLog, FullAt: 1, Stamp: 2, Log: []int64{9007199254740990, 9007199254740991}}, "sl/1 1 2 9007199254740893 2 9798"},
		{store.State{Kind: spigot.SlidingLog, FullAt: 1, Stamp: 2, Log: []int64{-5}}, "sl/1 1 2 -5 2 00"},
		{store.State{Kind: spigot.SlidingLog, FullAt: 1, Stamp: 2, Log: []int64{7, -5, 200}}, "sl/1 1 2 -5 4 001200000205"},
		{store.State{FullAt: 1, Stamp: 2, Tokens: 3, Scale: 4}, ""},
		{store.State{Kind: wire.OtherKind, FullAt: 1}, ""},
	} {
		if got := wire.FormatState(c.s); got != c.want {
			t.Errorf("step %d: FormatState(%+v) = %q; want %q", i, c.s, got, c.want)
		}
	}
}
