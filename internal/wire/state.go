package wire

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
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
	spigot.TokenBucket:   "tb/1",
	spigot.FixedWindow:   "fw/1",
	spigot.SlidingWindow: "sw/1",
	spigot.SlidingLog:    "sl/1",
	spigot.LeakyBucket:   "lb/1",
}

// ParseState returns the State a key's value stands for, as the script
// reads it for a limit of kind reader (it is the script's reading, stated
// in Go, for tests to hold the script to): every value is either a State,
// on which the script decides as store.Apply does, or ErrUnreadable,
// which fails its key alone. The script writes nothing else than what
// FormatState writes.
//
//   - "tb/1 <fullat> <stamp> <tokens> <scale>": a token bucket's state.
//   - "lb/1 <fullat> <stamp> <tokens> <scale>": a leaky bucket's.
//   - "fw/1 <fullat> <stamp> <start> <window> <count>": a fixed window's.
//   - "sw/1 <fullat> <stamp> <start> <window> <count> <prev>": a sliding
//     window's.
//   - "sl/1 <fullat> <stamp> <base> <width> <entries>": a sliding log's,
//     one entry a token, in the order of its Log: each entry the offset of
//     its instant from base, in exactly width digits (1 to 15, zero-padded,
//     width without a leading zero), the entries written together without
//     separators, 1 to spigot.MaxLog of them (so the entries' length is a
//     multiple of width). base is at most store.MaxExact in magnitude, and
//     base + 10^width − 1 at most store.MaxExact, so that every instant
//     the entries can hold is. The script reads an entry only when it
//     needs it (the ones that left the window, from the front, the one a
//     denial's RetryAfter counts from, the last), so a log is read as it
//     is written, in order or not: the syntax and these bounds, checked on
//     the whole value, are all that makes one readable.
//   - "<kind>/<version> <fullat>", alone or followed by a space and
//     anything: a state of another kind (a kind of lower-case letters),
//     or of a later version of one of the kinds above: OtherKind, and
//     only the FullAt.
//
// Each field is a decimal integer: an optional '-' and digits, without a
// '+' or spaces. Every field is at most store.MaxExact in magnitude, where
// Lua's numbers are exact, but the FullAt of a state of the reader's own
// kind, which has at most 18 digits: it is only compared with now, so it
// may pass 2^53. A value of a known tag and version that does not fit its
// format, and one of a known tag whose version is its own written
// otherwise ("tb/01") or one before it ("tb/0"), are unreadable; so is
// anything else.
//
// These are the formats of spigot v0.1.0, version 1 of every kind, which
// every later release reads.
func ParseState(v string, reader spigot.Kind) (store.State, error) {
	s, err := parseState(v)
	if err != nil {
		return store.State{}, err
	}
	if s.Kind != reader && (s.FullAt > store.MaxExact || s.FullAt < -store.MaxExact) {
		return store.State{}, ErrUnreadable
	}
	return s, nil
}

func parseState(v string) (store.State, error) {
	bad := store.State{}
	// "<kind>/<version> <fullat><rest>"
	tag, rest, ok := strings.Cut(v, "/")
	if !ok || tag == "" || strings.Trim(tag, "abcdefghijklmnopqrstuvwxyz") != "" {
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
		known := tags[kind][len(tag)+1:]
		written, _ := strconv.ParseUint(known, 10, 64)
		switch n, err := strconv.ParseUint(version, 10, 64); {
		case version == known:
			return fieldsOf(kind, full, rest)
		case err == nil && n <= written:
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
	return store.State{Kind: OtherKind, FullAt: n}, nil
}

// fieldsOf returns the state of kind in the format this script writes:
// its FullAt full and the fields rest after it.
func fieldsOf(kind spigot.Kind, full, rest string) (store.State, error) {
	bad := store.State{}
	f, ok := strings.CutPrefix(rest, " ")
	if !ok {
		return bad, ErrUnreadable
	}
	s := store.State{Kind: kind}
	switch kind {
	case spigot.TokenBucket, spigot.LeakyBucket:
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
		x := strings.SplitN(f, " ", 4)
		if len(x) != 4 {
			return bad, ErrUnreadable
		}
		var ok bool
		s.Log, _ = parseLog(x[1], x[2], x[3])
		if s.Stamp, ok = exactInt(x[0]); !ok || s.Log == nil {
			return bad, ErrUnreadable
		}
	}
	if !fullAt18(full) {
		return bad, ErrUnreadable
	}
	s.FullAt, _ = strconv.ParseInt(full, 10, 64)
	return s, nil
}

// parseLog returns the instants of a sliding log's entries e, offsets
// from base of width digits each, or nil if they are not that.
func parseLog(base, width, e string) ([]int64, bool) {
	b, ok := exactInt(base)
	if !ok || !isDigits(width) || width[0] == '0' || len(width) > 2 || !isDigits(e) {
		return nil, false
	}
	w, _ := strconv.Atoi(width)
	if w > 15 || len(e)%w != 0 || len(e)/w > spigot.MaxLog || b > store.MaxExact-pow10(w)+1 {
		return nil, false
	}
	log := make([]int64, 0, len(e)/w)
	for i := 0; i < len(e); i += w {
		o, _ := strconv.ParseInt(e[i:i+w], 10, 64) // at most 15 digits
		log = append(log, b+o)
	}
	return log, true
}

// pow10 returns 10^n.
func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

// logBase returns the base and width of the entries of a log whose least
// instant is lo and greatest hi, as FormatState writes them and as the
// script does when it rebases a log: base lo, and one digit more than
// hi − lo has (at most 15), so that later entries fit for a while; or,
// where base + 10^width − 1 would pass store.MaxExact, the base that ends
// the width's span at it.
func logBase(lo, hi int64) (base int64, width int) {
	width = len(strconv.FormatInt(hi-lo, 10))
	if width < 15 {
		width++
	}
	base = min(lo, store.MaxExact-pow10(width)+1)
	return base, width
}

// bucket returns the token or leaky bucket's State of the fields' digits.
func bucket(kind spigot.Kind, fullAt, stamp, tokens, scale string) (store.State, error) {
	s := store.State{Kind: kind}
	var ok [4]bool
	s.Stamp, ok[0] = exactInt(stamp)
	s.Tokens, ok[1] = exactInt(tokens)
	s.Scale, ok[2] = exactInt(scale)
	ok[3] = fullAt18(fullAt)
	if ok != [4]bool{true, true, true, true} {
		return store.State{}, ErrUnreadable
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
// at most store.MaxExact in magnitude.
func exactInt(d string) (int64, bool) {
	neg := strings.HasPrefix(d, "-")
	digits := strings.TrimLeft(strings.TrimPrefix(d, "-"), "0")
	if !isDigits(strings.TrimPrefix(d, "-")) || len(digits) > 16 {
		return 0, false
	}
	n, _ := strconv.ParseInt("0"+digits, 10, 64) // 16 digits fit
	if n > store.MaxExact {
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
// ParseState describes them). It returns "" for any other Kind. A sliding
// log has many values that read as the same State (any base and width
// that hold its entries): FormatState's has the least instant as its base
// and one digit more than the span of its instants needs, as the script
// writes a log it rebases (when an entry would not fit); between
// rebases the script keeps the base and width it read, and only
// ParseState of its value is the State (a log whose instants span 10^15
// µs or more, some 31 years, has no value).
func FormatState(s store.State) string {
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
		if len(s.Log) == 0 {
			break
		}
		base, width := logBase(slices.Min(s.Log), slices.Max(s.Log))
		num(base)
		num(int64(width))
		b = append(b, ' ')
		for _, x := range s.Log {
			o := strconv.FormatInt(x-base, 10)
			for range width - len(o) {
				b = append(b, '0')
			}
			b = append(b, o...)
		}
	}
	return string(b)
}
