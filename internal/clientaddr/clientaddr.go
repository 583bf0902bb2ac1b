// Package clientaddr reads client addresses as proxies write them: an IP
// address with or without a port, and the entries of an X-Forwarded-For
// line read back from its right end. httplimit's ClientIP and grpclimit's
// PeerIP share it, so that both walk proxies the same way.
package clientaddr

import (
	"errors"
	"net/netip"
	"strings"
)

// ErrNotIP is the error of ParseHost for text that is not an IP address.
var ErrNotIP = errors.New("is not an IP address")

// SplitHost returns the host of "host:port" or "[host]:port", or s itself
// when it has no port, and false when what follows the host is not a port
// of 1 to 5 digits.
func SplitHost(s string) (host string, ok bool) {
	if strings.HasPrefix(s, "[") { // [IPv6] or [IPv6]:port
		end := strings.IndexByte(s, ']')
		if end < 0 || end+1 < len(s) && (s[end+1] != ':' || !IsPort(s[end+2:])) {
			return s, false
		}
		return s[1:end], true
	}
	if i := strings.IndexByte(s, ':'); i >= 0 && strings.LastIndexByte(s, ':') == i { // IPv4:port
		return s[:i], IsPort(s[i+1:])
	}
	return s, true
}

// IsPort reports whether s is a port: 1 to 5 digits.
func IsPort(s string) bool {
	if len(s) < 1 || len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ParseHost parses an IP address with or without a port ("192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]:80"), and returns it
// unmapped, without its zone.
func ParseHost(s string) (netip.Addr, error) {
	host, ok := SplitHost(s)
	if !ok {
		return netip.Addr{}, ErrNotIP
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, ErrNotIP
	}
	return a.Unmap().WithZone(""), nil
}

// LastXForwardedFor splits the X-Forwarded-For line s before its last
// entry, the text after its last comma without the spaces and tabs around
// it, and returns that entry and the line before it (without the comma).
// It returns ok false when s holds nothing but spaces and tabs.
func LastXForwardedFor(s string) (rest, entry string, ok bool) {
	end := TrimOWS(s, len(s))
	if end == 0 {
		return "", "", false
	}
	start := strings.LastIndexByte(s[:end], ',') + 1
	if start > 0 {
		rest = s[:start-1]
	}
	for start < end && IsOWS(s[start]) {
		start++
	}
	return rest, s[start:end], true
}

// IsOWS reports whether c is a space or a tab.
func IsOWS(c byte) bool { return c == ' ' || c == '\t' }

// TrimOWS returns the end of s[:end] without its trailing spaces and tabs.
func TrimOWS(s string, end int) int {
	for end > 0 && IsOWS(s[end-1]) {
		end--
	}
	return end
}

// Clip shortens s for an error message to its last 64 bytes, those
// nearest the proxies.
func Clip(s string) string {
	if len(s) > 64 {
		return "…" + s[len(s)-64:]
	}
	return s
}
