package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/spigot-go/spigot"
)

// Entry is one key and value of a request's descriptor.
type Entry struct{ Key, Value string }

// match is what the config says of one request descriptor: its rate
// limit (nil when none matched) and, for each entry that matched a
// wildcard with share_threshold, the wildcard's value (which then stands
// for the request's in the key, so that every value it matches shares
// one counter).
type match struct {
	limit  *RateLimit
	shared []string
}

// lookup finds the rate limit of entries in domain, as envoyproxy/ratelimit
// does: at each level, the descriptor of the entry's key and value, else
// the first wildcard listed that the entry matches, else the descriptor of
// its key alone; a rate limit applies only at the level of the last entry.
func (c *Config) lookup(domainName string, entries []Entry) match {
	if c == nil {
		return match{}
	}
	d := c.domains[domainName]
	if d == nil {
		return match{}
	}
	level := &d.children
	var m match
	for i, e := range entries {
		next := level.exact[[2]string{e.Key, e.Value}]
		if next == nil {
			for _, w := range level.wildcards {
				if w.matches(e) {
					next = w
					if w.shareThreshold {
						if m.shared == nil {
							m.shared = make([]string, len(entries))
						}
						m.shared[i] = w.value
						if w.value == "" { // a key-only wildcard
							m.shared[i] = w.key
						}
					}
					break
				}
			}
		}
		if next == nil {
			next = level.exact[[2]string{e.Key, ""}]
		}
		if next == nil {
			return match{}
		}
		if i == len(entries)-1 {
			if next.limit == nil {
				return match{}
			}
			m.limit = next.limit
			return m
		}
		if len(next.exact) == 0 {
			return match{}
		}
		level = &next.children
	}
	return match{}
}

// matches reports whether a wildcard descriptor matches e: a value
// ending in '*' matches the values of its key that start with what
// precedes it, and a key ending in '*' (with no value) matches the keys
// that start with what precedes it.
func (d *descriptor) matches(e Entry) bool {
	if d.value == "" {
		return strings.HasPrefix(e.Key, strings.TrimSuffix(d.key, "*"))
	}
	return e.Key == d.key && strings.HasPrefix(e.Value, strings.TrimSuffix(d.value, "*"))
}

// storeKey returns the key of a descriptor's counter: the domain, then
// each entry's key and value (or, where share_threshold applies, the
// wildcard), each written as its length in decimal, a colon and its bytes,
// so that no two descriptors share a key unless they are equal. A value
// is preceded by '=', a shared wildcard by '*'. A key longer than
// spigot.MaxKeyLen is replaced by "#" and the hex SHA-256 of it: it still
// names one counter for each descriptor.
func storeKey(domainName string, entries []Entry, shared []string) string {
	n := len(domainName) + 4
	for _, e := range entries {
		n += len(e.Key) + len(e.Value) + 10
	}
	b := make([]byte, 0, n)
	b = appendField(b, domainName)
	for i, e := range entries {
		b = appendField(b, e.Key)
		if i < len(shared) && shared[i] != "" {
			b = append(b, '*')
			b = appendField(b, shared[i])
		} else {
			b = append(b, '=')
			b = appendField(b, e.Value)
		}
	}
	if len(b) > spigot.MaxKeyLen {
		sum := sha256.Sum256(b)
		return "#" + hex.EncodeToString(sum[:])
	}
	return string(b)
}

func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// parseKey is storeKey's inverse for a key that was not hashed: it
// returns the domain and the entries (a shared wildcard in place of the
// value, with shared[i] set), and false for a key storeKey never returns.
func parseKey(k string) (domainName string, entries []Entry, shared []bool, ok bool) {
	field := func() (string, bool) {
		i := strings.IndexByte(k, ':')
		if i <= 0 {
			return "", false
		}
		n, err := strconv.Atoi(k[:i])
		if err != nil || n < 0 || strconv.Itoa(n) != k[:i] || len(k)-i-1 < n {
			return "", false
		}
		s := k[i+1 : i+1+n]
		k = k[i+1+n:]
		return s, true
	}
	domainName, ok = field()
	if !ok {
		return "", nil, nil, false
	}
	for k != "" {
		key, ok := field()
		if !ok || k == "" {
			return "", nil, nil, false
		}
		mark := k[0]
		k = k[1:]
		if mark != '=' && mark != '*' {
			return "", nil, nil, false
		}
		v, ok := field()
		if !ok {
			return "", nil, nil, false
		}
		entries = append(entries, Entry{key, v})
		shared = append(shared, mark == '*')
	}
	return domainName, entries, shared, true
}
