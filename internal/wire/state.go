package wire

import (
	"errors"
	"strconv"
	"strings"

	"github.com/spigot-go/spigot"
)

// OtherKind is the Kind of the State that ParseState returns for a state
// of a kind of limit this script does not know, or of a later version of
// one it knows: Apply reads such a State by its FullAt alone.
const OtherKind spigot.Kind = 255

// ErrUnreadable is ParseState's error for a value that is no state the
// script can read: the script fails that key alone.
var ErrUnreadable = errors.New("spigot: unreadable state")

// The tags and versions of the states the script writes, by Kind.
var tags = [...]string{
	spigot.TokenBucket:   "tb/2",
	spigot.FixedWindow:   "fw/1",
	spigot.SlidingWindow: "sw/1",
	spigot.SlidingLog:    "sl/1",
	spigot.LeakyBucket:   "lb/1",
}

// ParseState returns the State a key's value stands for, as the script
// reads it for a limit of kind reader (it is the script's reading, stated
// in Go, for tests to hold the script to): every value is either a State,
// on which the script decides as spigot.Op.Apply does, or ErrUnreadable,
// which fails its key alone. The script writes nothing else than what
// FormatState writes.
//
//   - "tb/2 <fullat> <stamp> <tokens> <scale>": a token bucket's state.
//   - "lb/1 <fullat> <stamp> <tokens> <scale>": a leaky bucket's.
//   - "fw/1 <fullat> <stamp> <start> <window> <count>": a fixed window's.
//   - "sw/1 <fullat> <stamp> <start> <window> <count> <prev>": a sliding
//     window's.
//   - "sl/1 <fullat> <stamp> <count> <entries>": a sliding log's, where
//     count (1 to spigot.MaxLog, no sign) is the number of tokens in the
//     log, and entries its instants in groups of equal ones, oldest
//     first, separated by single spaces: the first group's instant, then
//     each group's distance from the group before it (1 or more, no
//     sign), each followed by "x<run>" when the group has more than one
//     token (run ≥ 2, and the runs sum to count); no number of the entries
//     has a leading zero (but the instant 0), so that the script can copy
//     the groups it does not change; every instant is at most
//     spigot.MaxExact in magnitude.
//   - "<tokens> <stamp> <scale> <fullat>" and "<tokens> <stamp> <scale>",
//     the formats before versions: a token bucket's state of Kind 0, the
//     second with a FullAt of 0 (unknown).
//   - "<kind>/<version> <fullat>", alone or followed by a space and
//     anything: a state of another kind (a kind of lower-case letters),
//     or of a later version of one of the kinds above: OtherKind, and
//     only the FullAt.
//
// Each field is a decimal integer: an optional '-' and digits, without a
// '+' or spaces. Every field is at most spigot.MaxExact in magnitude, where
// Lua's numbers are exact, but the FullAt of a state of the reader's own
// kind (Kind 0 is a token bucket's), which has at most 18 digits: it is
// only compared with now, so it may pass 2^53. A value of a known tag and
// version that does not fit its format, and one of a known tag and an
// earlier version, are unreadable; so is anything else.
func ParseState(v string, reader spigot.Kind) (spigot.State, error) {
	s, err := parseState(v)
	if err != nil {
		return spigot.State{}, err
	}
	own := s.Kind == reader || s.Kind == 0 && reader == spigot.TokenBucket
	if !own && (s.FullAt > spigot.MaxExact || s.FullAt < -spigot.MaxExact) {
		return spigot.State{}, ErrUnreadable
	}
	return s, nil
}

func parseState(v string) (spigot.State, error) {
	bad := spigot.State{}
	if f, ok := strings.CutPrefix(v, "tb/2 "); ok {
		if x, ok := fields(f, 4); ok {
			return bucket(spigot.TokenBucket, x[0], x[1], x[2], x[3])
		}
	}
	// "<kind>/<version> <fullat><rest>"
	tag, rest, ok := strings.Cut(v, "/")
	if !ok {
		// Before versions: "<tokens> <stamp> <scale>[ <fullat>]".
		if x, ok := fields(v, 4); ok {
			return bucket(0, x[3], x[1], x[0], x[2])
		}
		if x, ok := fields(v, 3); ok {
			return bucket(0, "0", x[1], x[0], x[2])
		}
		return bad, ErrUnreadable
	}
	if tag == "" || strings.Trim(tag, "abcdefghijklmnopqrstuvwxyz") != "" {
		return bad, ErrUnreadable
	}
	version, rest, ok := strings.Cut(rest, " ")
	if !ok || !isDigits(version) {
		return bad, ErrUnreadable
	}
	// FullAt: an optional '-' and every digit after it.
	i := 0
	if strings.HasPrefix(rest, "-") {
		i = 1
	}
	j := i
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	if j == i {
		return bad, ErrUnreadable
	}
	full, rest := rest[:j], rest[j:]
	var kind spigot.Kind
	for k, t := range tags {
		if t != "" && strings.HasPrefix(t, tag+"/") {
			kind = spigot.Kind(k)
		}
	}
	if kind != 0 {
		known, _ := strconv.Atoi(tags[kind][len(tag)+1:])
		switch n, err := strconv.ParseUint(version, 10, 64); {
		case version == tags[kind][len(tag)+1:]:
			return known2(kind, full, rest)
		case err == nil && n <= uint64(known):
			return bad, ErrUnreadable // a format this script reads, broken
		}
	}
	if rest != "" && rest[0] != ' ' {
		return bad, ErrUnreadable
	}
	n, ok := exactInt(full)
	if !ok {
		return bad, ErrUnreadable
	}
	return spigot.State{Kind: OtherKind, FullAt: n}, nil
}

// known2 returns the state of one of the formats above but tb/2's: the
// kind's fields after its FullAt.
func known2(kind spigot.Kind, full, rest string) (spigot.State, error) {
	bad := spigot.State{}
	f, ok := strings.CutPrefix(rest, " ")
	if !ok {
		return bad, ErrUnreadable
	}
	s := spigot.State{Kind: kind}
	switch kind {
	case spigot.TokenBucket: // not its four fields
		return bad, ErrUnreadable
	case spigot.LeakyBucket:
		if x, ok := fields(f, 3); ok {
			return bucket(kind, full, x[0], x[1], x[2])
		}
		return bad, ErrUnreadable
	case spigot.FixedWindow, spigot.SlidingWindow:
		n := 4
		if kind == spigot.SlidingWindow {
			n = 5
		}
		x, ok := fields(f, n)
		if !ok {
			return bad, ErrUnreadable
		}
		var v [5]int64
		for i := range x {
			if v[i], ok = exactInt(x[i]); !ok {
				return bad, ErrUnreadable
			}
		}
		s.Stamp, s.Start, s.Window, s.Count, s.Prev = v[0], v[1], v[2], v[3], v[4]
	case spigot.SlidingLog:
		x := strings.SplitN(f, " ", 3)
		if len(x) != 3 {
			return bad, ErrUnreadable
		}
		var ok bool
		if s.Stamp, ok = exactInt(x[0]); !ok || !isDigits(x[1]) {
			return bad, ErrUnreadable
		}
		count, ok := exactInt(x[1])
		if !ok || count < 1 || count > spigot.MaxLog {
			return bad, ErrUnreadable
		}
		if s.Log, ok = parseLog(x[2], count); !ok {
			return bad, ErrUnreadable
		}
	}
	if !fullAt18(full) {
		return bad, ErrUnreadable
	}
	s.FullAt, _ = strconv.ParseInt(full, 10, 64)
	return s, nil
}

// parseLog returns the instants of a sliding log's entries, count of them.
func parseLog(f string, count int64) ([]int64, bool) {
	log := make([]int64, 0, count)
	var at int64
	for i, g := range strings.Split(f, " ") {
		d, r, many := strings.Cut(g, "x")
		run := int64(1)
		if many {
			var ok bool
			if run, ok = exactInt(r); !ok || !isDigits(r) || run < 1 {
				return nil, false
			}
		}
		x, ok := exactInt(d)
		switch {
		case !ok || many && (r[0] == '0' || r == "1"): // a run is 2 or more, without leading zeros
			return nil, false
		case i == 0:
			if digits := strings.TrimPrefix(d, "-"); len(digits) > 1 && digits[0] == '0' {
				return nil, false
			}
			at = x
		case d[0] == '-' || d[0] == '0' || at >= 0 && x > spigot.MaxExact-at: // a distance is 1 or more
			return nil, false
		default:
			at += x
		}
		if run > count-int64(len(log)) {
			return nil, false
		}
		for range run {
			log = append(log, at)
		}
	}
	return log, int64(len(log)) == count
}

// bucket returns the token or leaky bucket's State of the fields' digits.
func bucket(kind spigot.Kind, fullAt, stamp, tokens, scale string) (spigot.State, error) {
	s := spigot.State{Kind: kind}
	var ok [4]bool
	s.Stamp, ok[0] = exactInt(stamp)
	s.Tokens, ok[1] = exactInt(tokens)
	s.Scale, ok[2] = exactInt(scale)
	ok[3] = fullAt18(fullAt)
	if ok != [4]bool{true, true, true, true} {
		return spigot.State{}, ErrUnreadable
	}
	s.FullAt, _ = strconv.ParseInt(fullAt, 10, 64) // 18 digits fit
	return s, nil
}

// fullAt18 reports whether d is a FullAt of a known format: an optional
// '-' and at most 18 digits.
func fullAt18(d string) bool {
	digits := strings.TrimPrefix(d, "-")
	return isDigits(digits) && len(digits) <= 18
}

// fields splits v into n fields separated by single spaces, each an
// integer's syntax (an optional '-' and digits).
func fields(v string, n int) ([]string, bool) {
	x := strings.Split(v, " ")
	if len(x) != n {
		return nil, false
	}
	for _, f := range x {
		if !isDigits(strings.TrimPrefix(f, "-")) {
			return nil, false
		}
	}
	return x, true
}

// exactInt returns the integer of d (an optional '-' and digits) if it is
// at most spigot.MaxExact in magnitude.
func exactInt(d string) (int64, bool) {
	neg := strings.HasPrefix(d, "-")
	digits := strings.TrimLeft(strings.TrimPrefix(d, "-"), "0")
	if !isDigits(strings.TrimPrefix(d, "-")) || len(digits) > 16 {
		return 0, false
	}
	n, _ := strconv.ParseInt("0"+digits, 10, 64) // 16 digits fit
	if n > spigot.MaxExact {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// isDigits reports whether d is one or more ASCII digits.
func isDigits(d string) bool {
	if d == "" {
		return false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return false
		}
	}
	return true
}

// FormatState returns the value the script stores for s, a state of Kind
// TokenBucket, LeakyBucket, FixedWindow, SlidingWindow or SlidingLog (as
// ParseState describes them; a sliding log's equal instants grouped). It
// returns "" for any other Kind.
func FormatState(s spigot.State) string {
	if int(s.Kind) >= len(tags) || tags[s.Kind] == "" {
		return ""
	}
	b := make([]byte, 0, 64)
	b = append(b, tags[s.Kind]...)
	num := func(x int64) {
		b = append(b, ' ')
		b = strconv.AppendInt(b, x, 10)
	}
	num(s.FullAt)
	num(s.Stamp)
	switch s.Kind {
	case spigot.TokenBucket, spigot.LeakyBucket:
		num(s.Tokens)
		num(s.Scale)
	case spigot.FixedWindow, spigot.SlidingWindow:
		num(s.Start)
		num(s.Window)
		num(s.Count)
		if s.Kind == spigot.SlidingWindow {
			num(s.Prev)
		}
	case spigot.SlidingLog:
		num(int64(len(s.Log)))
		for i := 0; i < len(s.Log); {
			j := i + 1
			for j < len(s.Log) && s.Log[j] == s.Log[i] {
				j++
			}
			if i == 0 {
				num(s.Log[i])
			} else {
				num(s.Log[i] - s.Log[i-1])
			}
			if j-i > 1 {
				b = append(b, 'x')
				b = strconv.AppendInt(b, int64(j-i), 10)
			}
			i = j
		}
	}
	return string(b)
}
