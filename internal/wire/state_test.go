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
		want  spigot.State // the zero State: unreadable
	}{
		{"tb/2 1767323051000000 1767323045000000 14000000 2000000", spigot.State{Kind: spigot.TokenBucket, FullAt: 1767323051000000, Stamp: 1767323045000000, Tokens: 14000000, Scale: 2000000}},
		{"tb/2 0 -5 -0 0", spigot.State{Kind: spigot.TokenBucket, Stamp: -5}},
		{"tb/2 007 008 009 010", spigot.State{Kind: spigot.TokenBucket, FullAt: 7, Stamp: 8, Tokens: 9, Scale: 10}},
		// The bounds: 2^53 for the stamp, tokens and scale, 18 digits for FullAt.
		{"tb/2 1 9007199254740992 -9007199254740992 0009007199254740992", spigot.State{Kind: spigot.TokenBucket, FullAt: 1, Stamp: max53, Tokens: -max53, Scale: max53}},
		{"tb/2 1 9007199254740993 0 1", spigot.State{}},
		{"tb/2 1 0 -9007199254740993 1", spigot.State{}},
		{"tb/2 1 0 0 10000000000000000", spigot.State{}},
		{"tb/2 999999999999999999 0 0 1", spigot.State{Kind: spigot.TokenBucket, FullAt: 999999999999999999, Scale: 1}},
		{"tb/2 -999999999999999999 0 0 1", spigot.State{Kind: spigot.TokenBucket, FullAt: -999999999999999999, Scale: 1}},
		{"tb/2 0999999999999999999 0 0 1", spigot.State{}},
		{"tb/2 1000000000000000000 0 0 1", spigot.State{}},
		{"tb/2 18014398509481984 0 0 1", spigot.State{Kind: spigot.TokenBucket, FullAt: 1 << 54, Scale: 1}},
		// Before versions.
		{"5000000 1767323044000000 2000000", spigot.State{Tokens: 5000000, Stamp: 1767323044000000, Scale: 2000000}},
		{"5 6 7 8", spigot.State{Tokens: 5, Stamp: 6, Scale: 7, FullAt: 8}},
		{"1 2 3 -", spigot.State{}},
		{"1 2 3 ", spigot.State{}},
		{"1 2 3-5", spigot.State{}},
		{"1 2 34", spigot.State{Tokens: 1, Stamp: 2, Scale: 34}},
		{"1 2 3 4 5", spigot.State{}},
		{"1 2", spigot.State{}},
		{"1  2 3", spigot.State{}},
		{"+1 2 3", spigot.State{}},
		{"1 2 9007199254740993", spigot.State{}},
		// Other kinds and later versions: the FullAt alone, within 2^53.
		{"xx/1 5", spigot.State{Kind: wire.OtherKind, FullAt: 5}},
		{"xx/1 -5 anything", spigot.State{Kind: wire.OtherKind, FullAt: -5}},
		{"tb/3 9007199254740992", spigot.State{Kind: wire.OtherKind, FullAt: max53}},
		{"tb/3 9007199254740993", spigot.State{}},
		{"tb/10 0", spigot.State{Kind: wire.OtherKind}},
		{"tb/0003 7 ", spigot.State{Kind: wire.OtherKind, FullAt: 7}},
		{"tb/2 5", spigot.State{}},
		{"tb/002 5 6 7 8", spigot.State{}},
		{"tb/1 5 6 7 8", spigot.State{}},
		{"tb/0 5", spigot.State{}},
		{"xx/1 5abc", spigot.State{}},
		{"xx/1 5\n", spigot.State{}},
		{"xx/1 ", spigot.State{}},
		{"xx/1", spigot.State{}},
		{"xx/ 5", spigot.State{}},
		{"/1 5", spigot.State{}},
		{"Xx/1 5", spigot.State{}},
		{"x1/1 5", spigot.State{}},
		{"xx/1 -", spigot.State{}},
		{"", spigot.State{}},
		{"garbage", spigot.State{}},
	} {
		got, err := wire.ParseState(c.value)
		switch {
		case c.want.IsZero() && !errors.Is(err, wire.ErrUnreadable):
			t.Errorf("step %d: ParseState(%q) = %+v, %v; want ErrUnreadable", i, c.value, got, err)
		case !c.want.IsZero() && (err != nil || !reflect.DeepEqual(got, c.want)):
			t.Errorf("step %d: ParseState(%q) = %+v, %v; want %+v", i, c.value, got, err, c.want)
		}
	}
}

// FuzzParseState: ParseState never panics; a state it reads has the
// bounds it states; FormatState of a token bucket's state reads back as
// itself.
func FuzzParseState(f *testing.F) {
	for _, v := range []string{
		"tb/2 1767323051000000 1767323045000000 14000000 2000000", "1 2 3", "1 2 3 4", "1 2 3 -",
		"xx/1 5 x", "tb/3 9007199254740992", "tb/2 -0 -0 -0 -0", "tb/02 1 2 3 4", "",
	} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		s, err := wire.ParseState(v)
		if err != nil {
			if !errors.Is(err, wire.ErrUnreadable) || !s.IsZero() {
				t.Fatalf("ParseState(%q) = %+v, %v; want the zero State and ErrUnreadable", v, s, err)
			}
			return
		}
		abs := func(x int64) int64 { return max(x, -x) }
		switch s.Kind {
		case spigot.TokenBucket, 0:
			if abs(s.Stamp) > spigot.MaxExact || abs(s.Tokens) > spigot.MaxExact || abs(s.Scale) > spigot.MaxExact || abs(s.FullAt) >= 1e18 {
				t.Fatalf("ParseState(%q) = %+v: out of bounds", v, s)
			}
			if s.Kind == spigot.TokenBucket {
				if back, err := wire.ParseState(wire.FormatState(s)); err != nil || !reflect.DeepEqual(back, s) {
					t.Fatalf("ParseState(FormatState(%+v)) = %+v, %v", s, back, err)
				}
			}
		case wire.OtherKind:
			if abs(s.FullAt) > spigot.MaxExact || s.Stamp != 0 || s.Tokens != 0 || s.Scale != 0 || !strings.Contains(v, "/") {
				t.Fatalf("ParseState(%q) = %+v: not another kind's state", v, s)
			}
		default:
			t.Fatalf("ParseState(%q) = %+v: kind %v", v, s, s.Kind)
		}
	})
}
