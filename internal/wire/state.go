package wire

import (
	"errors"
	"strconv"
	"strings"

	"github.com/spigot-go/spigot"
)

// OtherKind is the Kind of the State that ParseState returns for a state
// of another kind of limit, or of a later version of the token bucket's
// format: Apply reads such a State by its FullAt alone.
const OtherKind spigot.Kind = 255

// ErrUnreadable is ParseState's error for a value that is no state the
// script can read: the script fails that key alone.
var ErrUnreadable = errors.New("spigot: unreadable state")

// ParseState returns the State a key's value stands for, as the script
// reads it (it is the script's reading, stated in Go, for tests to hold
// the script to): every value is either a State, on which the script
// decides as spigot.Op.Apply does, or ErrUnreadable, which fails its key
// alone. The script writes nothing else than what FormatState writes.
//
//   - "tb/2 <fullat> <stamp> <tokens> <scale>": a token bucket's state,
//     Kind TokenBucket.
//   - "<tokens> <stamp> <scale> <fullat>" and "<tokens> <stamp> <scale>",
//     the formats before versions: a token bucket's state of Kind 0, the
//     second with a FullAt of 0 (unknown).
//   - "<kind>/<version> <fullat>", alone or followed by a space and
//     anything: a state of another kind (a kind of lower-case letters),
//     or of a later version of the token bucket ("tb" and a version above
//     2): OtherKind, and only the FullAt.
//
// Each field is a decimal integer: an optional '-' and digits, without a
// '+' or spaces. A token bucket's FullAt has at most 18 digits (it is
// only compared with now, so it may pass 2^53); every other field, the
// FullAt of another kind included, is at most spigot.MaxExact in
// magnitude, where Lua's numbers are exact. Anything else is unreadable.
func ParseState(v string) (spigot.State, error) {
	if f, ok := strings.CutPrefix(v, "tb/2 "); ok {
		if x, ok := fields(f, 4); ok {
			return bucket(spigot.TokenBucket, x[0], x[1], x[2], x[3])
		}
	}
	if x, ok := fields(v, 4); ok {
		return bucket(0, x[3], x[1], x[0], x[2])
	}
	if x, ok := fields(v, 3); ok {
		return bucket(0, "0", x[1], x[0], x[2])
	}
	// "<kind>/<version> <fullat>[ …]"
	kind, rest, ok := strings.Cut(v, "/")
	if !ok || kind == "" || strings.Trim(kind, "abcdefghijklmnopqrstuvwxyz") != "" {
		return spigot.State{}, ErrUnreadable
	}
	version, rest, ok := strings.Cut(rest, " ")
	if !ok || !isDigits(version) || (kind == "tb" && atMost2(version)) {
		return spigot.State{}, ErrUnreadable // tb/2 and before: a format the script reads, broken
	}
	full, _, _ := strings.Cut(rest, " ")
	n, ok := exactInt(full)
	if !ok {
		return spigot.State{}, ErrUnreadable
	}
	return spigot.State{Kind: OtherKind, FullAt: n}, nil
}

// bucket returns the token bucket's State of the fields' digits.
func bucket(kind spigot.Kind, fullAt, stamp, tokens, scale string) (spigot.State, error) {
	s := spigot.State{Kind: kind}
	var ok [4]bool
	s.Stamp, ok[0] = exactInt(stamp)
	s.Tokens, ok[1] = exactInt(tokens)
	s.Scale, ok[2] = exactInt(scale)
	digits := strings.TrimPrefix(fullAt, "-")
	ok[3] = isDigits(digits) && len(digits) <= 18
	if ok != [4]bool{true, true, true, true} {
		return spigot.State{}, ErrUnreadable
	}
	s.FullAt, _ = strconv.ParseInt(fullAt, 10, 64) // 18 digits fit
	return s, nil
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

// atMost2 reports whether the digits d spell 0, 1 or 2.
func atMost2(d string) bool {
	d = strings.TrimLeft(d, "0")
	return d == "" || d == "1" || d == "2"
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

// FormatState returns the value the script stores for s, a token
// bucket's state (Kind TokenBucket): "tb/2 <fullat> <stamp> <tokens>
// <scale>".
func FormatState(s spigot.State) string {
	return "tb/2 " + strconv.FormatInt(s.FullAt, 10) + " " + strconv.FormatInt(s.Stamp, 10) + " " +
		strconv.FormatInt(s.Tokens, 10) + " " + strconv.FormatInt(s.Scale, 10)
}
