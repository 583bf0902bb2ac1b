package httplimit_test

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/spigot-go/spigot/httplimit"
)

// TestClientIPForwardedPrefix is the table of Forwarded and X-Forwarded-For
// lines whose left part a client wrote and to which trusted proxies then
// appended their elements, on the same line or on lines of their own: the
// key is the address the last untrusted hop was seen from, or no key at
// all, never an address of the client's choosing.
func TestClientIPForwardedPrefix(t *testing.T) {
	fwd := httplimit.ClientIP(httplimit.TrustForwarded(proxies))
	xff := httplimit.ClientIP(httplimit.TrustXForwardedFor(proxies))
	v6 := httplimit.ClientIP(httplimit.TrustForwarded(proxies), httplimit.IPv6Prefix(64))
	hops := func(n int) string { return strings.Repeat("for=10.1.1.1, ", n-1) + "for=10.1.1.1" }
	for i, c := range []struct {
		name   string
		key    httplimit.KeyFunc
		header string   // the header's name
		values []string // its lines
		want   string   // "" for ErrNoKey
	}{
		// The client's part ends in an open quote, a backslash or an
		// unfinished pair; the proxy's element after it is read as the
		// proxy wrote it.
		{"a quote the client opened", fwd, "Forwarded", []string{`for=1.2.3.4;x=", for=198.51.100.1`}, "198.51.100.1"},
		{"a quote the client opened, two trusted hops", fwd, "Forwarded", []string{`for=1.2.3.4;x=", for=198.51.100.1, for=10.0.0.2`}, "198.51.100.1"},
		{"a quote the client opened, the proxy's quoted IPv6", fwd, "Forwarded", []string{`x=", for="[2001:db8::1]:4711"`}, "2001:db8::1"},
		{"a quote the client opened, the proxy's quoted IPv4", fwd, "Forwarded", []string{`x="a, for="198.51.100.1:80"`}, "198.51.100.1"},
		{"a quote the client opened, the proxy's parameters", fwd, "Forwarded", []string{`for="1.2.3.4, for=198.51.100.1;proto=https;by="[2001:db8::9]"`}, "198.51.100.1"},
		{"a backslash the client left", fwd, "Forwarded", []string{`for=1.2.3.4;x="\, for=198.51.100.1`}, "198.51.100.1"},
		{"a quote the client escaped", fwd, "Forwarded", []string{`for=1.2.3.4;x="\", for=198.51.100.1`}, "198.51.100.1"},
		{"an unfinished pair", fwd, "Forwarded", []string{`for=1.2.3.4;x=, for=198.51.100.1`}, "198.51.100.1"},
		{"an unfinished element", fwd, "Forwarded", []string{`for=1.2.3.4;, for=198.51.100.1`}, "198.51.100.1"},
		{"an open bracket", fwd, "Forwarded", []string{`for="[1.2.3.4, for=198.51.100.1`}, "198.51.100.1"},
		{"no comma from the client", fwd, "Forwarded", []string{`for=1.2.3.4 ,for=198.51.100.1`}, "198.51.100.1"},
		{"an open quote on the client's own line", fwd, "Forwarded", []string{`for=1.2.3.4;x="`, "for=198.51.100.1"}, "198.51.100.1"},
		{"IPv6 by network", v6, "Forwarded", []string{`x=", for="[2001:db8:1:2::1]:4711"`}, "2001:db8:1:2::/64"},

		// An element the walk has to read is malformed: no key, never
		// an address from it.
		{"an open quote in an element read", fwd, "Forwarded", []string{`for=1.2.3.4;x="`, "for=10.0.0.2"}, ""},
		{"an open quote before the proxy's comma, read", fwd, "Forwarded", []string{`for=1.2.3.4;x=", for=10.0.0.2`}, ""},
		{"an escaped closing quote", fwd, "Forwarded", []string{`for=1.2.3.4;x="a\"`, "for=10.0.0.2"}, ""},
		{"for twice", fwd, "Forwarded", []string{"for=1.2.3.4;for=1.2.3.5", "for=10.0.0.2"}, ""},
		{"for twice, any case", fwd, "Forwarded", []string{"for=198.51.100.1;FOR=1.2.3.4"}, ""},
		{"a space within an element", fwd, "Forwarded", []string{"for=198.51.100.1 ;proto=https"}, ""},
		{"a space around =", fwd, "Forwarded", []string{"for = 198.51.100.1"}, ""},
		{"no name", fwd, "Forwarded", []string{"=198.51.100.1"}, ""},
		{"no value", fwd, "Forwarded", []string{"for="}, ""},
		{"a name that is not a token", fwd, "Forwarded", []string{"f(r=198.51.100.1"}, ""},
		{"text after a quoted value", fwd, "Forwarded", []string{`for="198.51.100.1"x`}, ""},
		{"two values", fwd, "Forwarded", []string{`for=198.51.100.1"x"`}, ""},
		{"a control character in a quoted value", fwd, "Forwarded", []string{"x=\"a\x01\";for=198.51.100.1"}, ""},
		{"an element without for where the walk stops", fwd, "Forwarded", []string{"for=1.2.3.4, proto=https"}, ""},
		{"an empty pair list where the walk stops", fwd, "Forwarded", []string{"for=1.2.3.4, ;"}, ""},
		{"too many trusted hops", fwd, "Forwarded", []string{hops(httplimit.MaxHops + 1)}, ""},
		{"as many trusted hops as allowed", fwd, "Forwarded", []string{hops(httplimit.MaxHops)}, "10.1.1.1"},

		// The values of for= that name an address, and those that do not.
		{"a quoted IPv6 address", fwd, "Forwarded", []string{`for="[2001:db8:cafe::17]"`}, "2001:db8:cafe::17"},
		{"a quoted IPv6 address with a port", fwd, "Forwarded", []string{`for="[2001:DB8:cafe::17]:4711"`}, "2001:db8:cafe::17"},
		{"a mapped IPv4 address", fwd, "Forwarded", []string{`for="[::ffff:198.51.100.1]"`}, "198.51.100.1"},
		{"a quoted IPv4 address", fwd, "Forwarded", []string{`for="198.51.100.1"`}, "198.51.100.1"},
		{"an obfuscated port", fwd, "Forwarded", []string{`for="198.51.100.1:_p-1.x"`}, "198.51.100.1"},
		{"FOR in capitals", fwd, "Forwarded", []string{"proto=https;FOR=198.51.100.1"}, "198.51.100.1"},
		{"quoted parameters beside for", fwd, "Forwarded", []string{`for=198.51.100.1;host="a\"b, for=6.6.6.6";by="\\"`}, "198.51.100.1"},
		{"escaped backslashes and quotes", fwd, "Forwarded", []string{`for=198.51.100.1;host="\\\", for=10.0.0.9\\"`}, "198.51.100.1"},
		{"empty elements", fwd, "Forwarded", []string{", for=198.51.100.1,\t,"}, "198.51.100.1"},
		{"tabs and spaces around commas", fwd, "Forwarded", []string{"for=6.6.6.6 \t,\t for=198.51.100.1"}, "198.51.100.1"},
		{"an unquoted IPv6 address", fwd, "Forwarded", []string{"for=[2001:db8::1]"}, ""},
		{"an IPv6 address without brackets", fwd, "Forwarded", []string{`for="2001:db8::1"`}, ""},
		{"an IPv6 address with a zone", fwd, "Forwarded", []string{`for="[fe80::1%eth0]"`}, ""},
		{"an IPv4 address in brackets", fwd, "Forwarded", []string{`for="[198.51.100.1]"`}, ""},
		{"an unquoted port", fwd, "Forwarded", []string{"for=198.51.100.1:80"}, ""},
		{"an empty port", fwd, "Forwarded", []string{`for="198.51.100.1:"`}, ""},
		{"a port of six digits", fwd, "Forwarded", []string{`for="198.51.100.1:123456"`}, ""},
		{"text after the brackets", fwd, "Forwarded", []string{`for="[2001:db8::1]x"`}, ""},
		{"an escape in the address", fwd, "Forwarded", []string{`for="\198.51.100.1"`}, ""},
		{"unknown", fwd, "Forwarded", []string{"for=unknown"}, ""},
		{"an obfuscated identifier", fwd, "Forwarded", []string{"for=_hidden"}, ""},
		{"an obfuscated identifier with a port", fwd, "Forwarded", []string{`for="_hidden:80"`}, ""},
		{"an IPv4 address with leading zeros", fwd, "Forwarded", []string{"for=198.051.100.1"}, ""},

		// X-Forwarded-For: the entries are split at the commas, which
		// the client cannot hide.
		{"X-Forwarded-For: a quote the client opened", xff, "X-Forwarded-For", []string{`"1.2.3.4, 198.51.100.1`}, "198.51.100.1"},
		{"X-Forwarded-For: a bracket the client opened", xff, "X-Forwarded-For", []string{`[1.2.3.4, 198.51.100.1, 10.0.0.2`}, "198.51.100.1"},
		{"X-Forwarded-For: a backslash", xff, "X-Forwarded-For", []string{`1.2.3.4\, 198.51.100.1`}, "198.51.100.1"},
		{"X-Forwarded-For: no comma from the client", xff, "X-Forwarded-For", []string{"1.2.3.4 198.51.100.1"}, ""},
		{"X-Forwarded-For: a quoted entry", xff, "X-Forwarded-For", []string{`"198.51.100.1"`}, ""},
		{"X-Forwarded-For: an entry with a zone", xff, "X-Forwarded-For", []string{"fe80::1%eth0"}, "fe80::1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "10.0.0.1:1234"
			for _, v := range c.values {
				r.Header.Add(c.header, v)
			}
			checkKey(t, i, c.key, r, c.want)
		})
	}
}

// appended is what trusted proxies append to what a client wrote: on the
// client's last line (line) or on lines of their own (lines), and the key
// that gives.
var appended = []struct {
	header string
	line   string
	lines  []string
	want   string
}{
	{"Forwarded", ", for=198.51.100.1", nil, "198.51.100.1"},
	{"Forwarded", ",for=198.51.100.1", nil, "198.51.100.1"},
	{"Forwarded", ", for=198.51.100.1, for=10.0.0.2", nil, "198.51.100.1"},
	{"Forwarded", ", for=198.51.100.1;proto=https;by=10.0.0.2, for=10.0.0.3;by=10.0.0.1", nil, "198.51.100.1"},
	{"Forwarded", `, for="[2001:db8::17]:4711";host="a\"b, for=6.6.6.6", for="10.0.0.2:80"`, nil, "2001:db8::17"},
	{"Forwarded", "", []string{"for=198.51.100.1"}, "198.51.100.1"},
	{"Forwarded", "", []string{"for=198.51.100.1", "for=10.0.0.2"}, "198.51.100.1"},
	{"Forwarded", ", for=198.51.100.1", []string{"for=10.0.0.2, for=10.0.0.3"}, "198.51.100.1"},
	{"X-Forwarded-For", ", 198.51.100.1", nil, "198.51.100.1"},
	{"X-Forwarded-For", ",198.51.100.1, 10.0.0.2", nil, "198.51.100.1"},
	{"X-Forwarded-For", ", [2001:db8::17]:4711, 10.0.0.2:80", nil, "2001:db8::17"},
	{"X-Forwarded-For", "", []string{"198.51.100.1"}, "198.51.100.1"},
	{"X-Forwarded-For", "", []string{"198.51.100.1", "10.0.0.2"}, "198.51.100.1"},
	{"X-Forwarded-For", ", 198.51.100.1", []string{"10.0.0.2"}, "198.51.100.1"},
}

// FuzzForwardedSpoof: whatever a client writes (p, its lines separated by
// '\n'), the elements that trusted proxies append after it are read as
// they wrote them, so the key is the address of the last untrusted hop.
func FuzzForwardedSpoof(f *testing.F) {
	for _, s := range []string{
		"", "for=1.2.3.4", `for=1.2.3.4;x="`, `x="\`, `x="\"`, `x="a\\"`, `for="[2001:db8::1`,
		"for=1.2.3.4,", "for=1.2.3.4;", "for=1.2.3.4 ", ";;,", "\"\n\"", "for=10.0.0.9\nfor=1.2.3.4;x=\"",
		`for=1.2.3.4;x="a, for=10.0.0.4`, "1.2.3.4", "10.0.0.9, [::1", "\\", "=", "\t",
	} {
		f.Add(s)
	}
	fwd := httplimit.ClientIP(httplimit.TrustForwarded(proxies))
	xff := httplimit.ClientIP(httplimit.TrustXForwardedFor(proxies))
	f.Fuzz(func(t *testing.T, p string) {
		client := strings.Split(p, "\n")
		for i, a := range appended {
			key := fwd
			if a.header == "X-Forwarded-For" {
				key = xff
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "10.0.0.1:1234"
			for j, v := range client {
				if j == len(client)-1 {
					v += a.line
				}
				r.Header.Add(a.header, v)
			}
			for _, v := range a.lines {
				r.Header.Add(a.header, v)
			}
			if got, err := key(r); got != a.want || err != nil {
				t.Errorf("step %d: key(%s %q) = %q, %v; want %q", i+1, a.header, r.Header.Values(a.header), got, err, a.want)
			}
		}
	})
}

// FuzzClientIP: for any peer and any header, ClientIP never panics, and
// gives either the canonical text of an address (of a network under
// IPv6Prefix) or an error matching ErrNoKey; with RequireForwardedClient,
// the same key when it is outside the trusted networks, and ErrNoKey
// otherwise. When every line of a
// Forwarded header is well-formed, it gives what a reading of the whole
// header from the left does.
func FuzzClientIP(f *testing.F) {
	for _, s := range []struct {
		peer, header string
		opts         byte
	}{
		{"10.0.0.1:1234", "for=198.51.100.1", 1},
		{"10.0.0.1:1234", `for=1.2.3.4;x=", for=198.51.100.1`, 1},
		{"10.0.0.1:1234", "for=198.51.100.1, for=10.0.0.2\nfor=10.0.0.3;proto=https", 1},
		{"10.0.0.1:1234", `for="[2001:db8:1:2::1]:4711";by=_x, for=unknown`, 3},
		{"[2001:db8::1]:80", "for=10.0.0.2;host=\"a\\\"b\", ,for=\"[2001:db8::2]\"", 1},
		{"10.0.0.1:1234", `for=198.51.100.1;host="\\\", for=10.0.0.9\\", for=10.0.0.2`, 1},
		{"10.0.0.1:1234", "198.51.100.1, 10.0.0.2", 0},
		{"@", "[2001:db8:1:2::1]:80", 2},
		{"192.0.2.1:1234", "", 0},
		{"", "", 0},
	} {
		f.Add(s.peer, s.header, s.opts)
	}
	two := []netip.Prefix{proxies, netip.MustParsePrefix("2001:db8::/64")}
	keys := []httplimit.KeyFunc{
		httplimit.ClientIP(httplimit.TrustXForwardedFor(two...)),
		httplimit.ClientIP(httplimit.TrustForwarded(two...)),
		httplimit.ClientIP(httplimit.TrustXForwardedFor(two...), httplimit.IPv6Prefix(64)),
		httplimit.ClientIP(httplimit.TrustForwarded(two...), httplimit.IPv6Prefix(64)),
	}
	strictKeys := make([]httplimit.KeyFunc, len(keys))
	for i := range keys {
		opts := []httplimit.IPOption{httplimit.TrustXForwardedFor(two...), httplimit.RequireForwardedClient()}
		if i&1 == 1 {
			opts[0] = httplimit.TrustForwarded(two...)
		}
		if i&2 == 2 {
			opts = append(opts, httplimit.IPv6Prefix(64))
		}
		strictKeys[i] = httplimit.ClientIP(opts...)
	}
	f.Fuzz(func(t *testing.T, peer, header string, opts byte) {
		name := "X-Forwarded-For"
		if opts&1 == 1 {
			name = "Forwarded"
		}
		prefix := opts&2 == 2
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		lines := strings.Split(header, "\n")
		for _, v := range lines {
			r.Header.Add(name, v)
		}
		got, err := keys[opts&3](r)
		if err != nil {
			if !errors.Is(err, httplimit.ErrNoKey) || got != "" {
				t.Fatalf("key(%q, %s %q) = %q, %v; want an error matching ErrNoKey", peer, name, lines, got, err)
			}
		} else if !isKey(got, prefix) {
			t.Fatalf("key(%q, %s %q) = %q; want an address in canonical form", peer, name, lines, got)
		}
		// With RequireForwardedClient, the same key when it is outside
		// the trusted networks, and no key otherwise.
		strict, serr := strictKeys[opts&3](r)
		if err == nil && !inside(got, two) {
			if strict != got || serr != nil {
				t.Fatalf("RequireForwardedClient: key(%q, %s %q) = %q, %v; want %q", peer, name, lines, strict, serr, got)
			}
		} else if !errors.Is(serr, httplimit.ErrNoKey) || strict != "" {
			t.Fatalf("RequireForwardedClient: key(%q, %s %q) = %q, %v; want an error matching ErrNoKey (without it: %q, %v)", peer, name, lines, strict, serr, got, err)
		}
		if name != "Forwarded" {
			return
		}
		ap, perr := netip.ParseAddrPort(peer)
		a := ap.Addr().Unmap()
		if perr != nil || !two[0].Contains(a) && !two[1].Contains(a) {
			return
		}
		if want, ok := readForwarded(lines, a, two, prefix); ok && got != want {
			t.Fatalf("key(%q, Forwarded %q) = %q, %v; a reading from the left gives %q", peer, lines, got, err, want)
		}
	})
}

// inside reports whether the key k, an address or an IPv6 network, is in
// one of the networks of trusted, none of which is longer than a /64.
func inside(k string, trusted []netip.Prefix) bool {
	a, err := netip.ParseAddr(k)
	if err != nil {
		a = netip.MustParsePrefix(k).Addr()
	}
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// isKey reports whether k is the canonical text of an address, or of an
// IPv6 network when prefix.
func isKey(k string, prefix bool) bool {
	if a, err := netip.ParseAddr(k); err == nil {
		return a.String() == k && a.Zone() == "" && !a.Is4In6() && (a.Is4() || !prefix)
	}
	p, err := netip.ParsePrefix(k)
	return err == nil && prefix && p.String() == k && p.Addr().Is6() && p == p.Masked()
}

// readForwarded is the key of a Forwarded header from a trusted peer,
// parsed from the left by the grammar of RFC 7239 and then walked from
// the right; ok is false when a line is not well-formed.
func readForwarded(lines []string, peer netip.Addr, trusted []netip.Prefix, prefix bool) (key string, ok bool) {
	var fors [][]string // each element's for= values
	for _, line := range lines {
		elems, ok := parseForwardedLine(line)
		if !ok {
			return "", false
		}
		fors = append(fors, elems...)
	}
	format := func(a netip.Addr) string {
		if prefix && a.Is6() {
			return netip.PrefixFrom(a, 64).Masked().String()
		}
		return a.String()
	}
	for i := len(fors) - 1; i >= 0; i-- {
		if len(fors)-i > httplimit.MaxHops || len(fors[i]) != 1 {
			return "", true
		}
		a, ok := parseNode(fors[i][0])
		if !ok {
			return "", true
		}
		if !trusted[0].Contains(a) && !trusted[1].Contains(a) {
			return format(a), true
		}
		peer = a
	}
	return format(peer), true
}

// parseForwardedLine parses a line of Forwarded from the left: it returns
// the for= values of each of its non-empty elements, or ok false.
func parseForwardedLine(s string) (elems [][]string, ok bool) {
	ows := func() {
		for s != "" && (s[0] == ' ' || s[0] == '\t') {
			s = s[1:]
		}
	}
	token := func() string {
		n := 0
		for n < len(s) && (s[n] >= 'a' && s[n] <= 'z' || s[n] >= 'A' && s[n] <= 'Z' || s[n] >= '0' && s[n] <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", s[n]) >= 0) {
			n++
		}
		t := s[:n]
		s = s[n:]
		return t
	}
	for {
		ows()
		if s == "" {
			return elems, true
		}
		if s[0] == ',' {
			s = s[1:]
			continue
		}
		var fors []string
		for s != "" && s[0] != ',' && s[0] != ' ' && s[0] != '\t' {
			if s[0] == ';' {
				s = s[1:]
				continue
			}
			name := token()
			if name == "" || s == "" || s[0] != '=' {
				return nil, false
			}
			s = s[1:]
			var value string
			if s != "" && s[0] == '"' {
				n := 1
				for ; n < len(s) && s[n] != '"'; n++ {
					c := s[n]
					if c == '\\' {
						n++
						if n == len(s) {
							return nil, false
						}
						c = s[n]
					}
					if c != '\t' && (c < ' ' || c == 0x7f) {
						return nil, false
					}
				}
				if n == len(s) {
					return nil, false
				}
				value, s = s[:n+1], s[n+1:]
			} else if value = token(); value == "" {
				return nil, false
			}
			if s != "" && s[0] != ';' && s[0] != ',' && s[0] != ' ' && s[0] != '\t' {
				return nil, false
			}
			if strings.EqualFold(name, "for") {
				fors = append(fors, value)
			}
		}
		elems = append(elems, fors)
		ows()
		if s != "" && s[0] != ',' {
			return nil, false
		}
	}
}

// parseNode is the address of a for= value by RFC 7239 section 6.
func parseNode(v string) (netip.Addr, bool) {
	if strings.HasPrefix(v, `"`) {
		v = v[1 : len(v)-1]
	}
	if strings.Contains(v, `\`) {
		return netip.Addr{}, false
	}
	host, port, six := v, "", false
	if rest, ok := strings.CutPrefix(v, "["); ok {
		h, p, ok := strings.Cut(rest, "]")
		if !ok {
			return netip.Addr{}, false
		}
		host, port, six = h, p, true
	} else if h, p, ok := strings.Cut(v, ":"); ok {
		host, port = h, ":"+p
	}
	if port != "" {
		p, ok := strings.CutPrefix(port, ":")
		digits := strings.Trim(p, "0123456789") == "" && len(p) >= 1 && len(p) <= 5
		obf := len(p) >= 2 && p[0] == '_' && strings.Trim(p[1:], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
		if !ok || !digits && !obf {
			return netip.Addr{}, false
		}
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.Zone() != "" || a.Is4() == six {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}
