package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/spigot-go/spigot/httplimit"
)

var proxies = netip.MustParsePrefix("10.0.0.0/8")

// TestClientIP keys requests by the peer's address, without proxies.
func TestClientIP(t *testing.T) {
	v6 := httplimit.ClientIP(httplimit.IPv6Prefix(64))
	for i, c := range []struct {
		key        httplimit.KeyFunc
		remoteAddr string
		want       string // "" for ErrNoKey
	}{
		{httplimit.ClientIP(), "192.0.2.1:1234", "192.0.2.1"},
		{httplimit.ClientIP(), "192.0.2.1:65000", "192.0.2.1"}, // another connection, the same key
		{httplimit.ClientIP(), "192.0.2.1", "192.0.2.1"},
		{httplimit.ClientIP(), "[2001:0db8:0000::0001]:80", "2001:db8::1"},
		{httplimit.ClientIP(), "[2001:DB8::1]:80", "2001:db8::1"},
		{httplimit.ClientIP(), "[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{httplimit.ClientIP(), "[fe80::1%eth0]:80", "fe80::1"},
		{httplimit.ClientIP(), "2001:db8::1", "2001:db8::1"},
		{httplimit.ClientIP(), "[::1]:80", "::1"},
		{httplimit.ClientIP(), "@", ""}, // a Unix socket
		{httplimit.ClientIP(), "", ""},
		{httplimit.ClientIP(), "example.com:80", ""},
		{v6, "[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
		{v6, "[2001:db8:1:2:ffff::9]:80", "2001:db8:1:2::/64"},
		{v6, "[2001:db8:1:3::1]:80", "2001:db8:1:3::/64"},
		{v6, "192.0.2.1:80", "192.0.2.1"},
		{v6, "[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{httplimit.ClientIP(httplimit.IPv6Prefix(48)), "[2001:db8:1:2::1]:80", "2001:db8:1::/48"},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remoteAddr
		checkKey(t, i, c.key, r, c.want)
	}
}

// checkKey checks that key gives want for r, or ErrNoKey for want "".
func checkKey(t *testing.T, step int, key httplimit.KeyFunc, r *http.Request, want string) {
	t.Helper()
	got, err := key(r)
	switch {
	case want == "" && !errors.Is(err, httplimit.ErrNoKey):
		t.Errorf("step %d: key(RemoteAddr %q, %v) = %q, %v; want an error matching ErrNoKey", step+1, r.RemoteAddr, r.Header, got, err)
	case want == "":
		if !strings.HasPrefix(err.Error(), "spigot: httplimit: ") {
			t.Errorf("step %d: error %q does not start with the package name", step+1, err)
		}
	case err != nil || got != want:
		t.Errorf("step %d: key(RemoteAddr %q, %v) = %q, %v; want %q", step+1, r.RemoteAddr, r.Header, got, err, want)
	}
}

// TestClientIPSpoofing is the table of forged and malformed proxy headers:
// a client never chooses its own key.
func TestClientIPSpoofing(t *testing.T) {
	xff := httplimit.ClientIP(httplimit.TrustXForwardedFor(proxies))
	fwd := httplimit.ClientIP(httplimit.TrustForwarded(proxies))
	mapped := httplimit.ClientIP(httplimit.TrustXForwardedFor(netip.MustParsePrefix("::ffff:10.0.0.0/104")))
	none := httplimit.ClientIP()
	hops := func(n int) string { return strings.Repeat("10.1.1.1, ", n-1) + "10.1.1.1" }
	for i, c := range []struct {
		name   string
		key    httplimit.KeyFunc
		peer   string
		header string   // the header's name
		values []string // its lines
		want   string   // "" for ErrNoKey
	}{
		{"no trusted proxy: the header is ignored", none, "10.0.0.1:80", "X-Forwarded-For", []string{"198.51.100.9"}, "10.0.0.1"},
		{"no trusted proxy: Forwarded is ignored", none, "10.0.0.1:80", "Forwarded", []string{"for=198.51.100.9"}, "10.0.0.1"},
		{"an untrusted peer's header is ignored", xff, "203.0.113.7:80", "X-Forwarded-For", []string{"198.51.100.9"}, "203.0.113.7"},
		{"a trusted proxy's client", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"198.51.100.9"}, "198.51.100.9"},
		{"a forged entry left of the client", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"6.6.6.6, 198.51.100.9"}, "198.51.100.9"},
		{"a forged trusted address left of the client", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"10.9.9.9, 198.51.100.9"}, "198.51.100.9"},
		{"two trusted hops", xff, "10.0.0.2:80", "X-Forwarded-For", []string{"6.6.6.6, 198.51.100.9, 10.0.0.1"}, "198.51.100.9"},
		{"several lines are one list", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"6.6.6.6", "198.51.100.9"}, "198.51.100.9"},
		{"an empty line", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"198.51.100.9", ""}, "198.51.100.9"},
		{"garbage left of the client is never read", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"<script>, 198.51.100.9"}, "198.51.100.9"},
		{"garbage where the client should be", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"198.51.100.9, garbage"}, ""},
		{"an empty entry where the client should be", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"198.51.100.9,"}, ""},
		{"an entry with a port", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"198.51.100.9:5555"}, "198.51.100.9"},
		{"IPv6, normalized", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"2001:DB8:0:0::1"}, "2001:db8::1"},
		{"IPv6 with a port", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"[2001:db8::1]:443"}, "2001:db8::1"},
		{"no header from a trusted proxy: the proxy", xff, "10.0.0.1:80", "X-Forwarded-For", nil, "10.0.0.1"},
		{"every hop trusted: the leftmost", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"10.0.0.5"}, "10.0.0.5"},
		{"as many trusted hops as allowed", xff, "10.0.0.1:80", "X-Forwarded-For", []string{hops(httplimit.MaxHops)}, "10.1.1.1"},
		{"too many trusted hops", xff, "10.0.0.1:80", "X-Forwarded-For", []string{hops(httplimit.MaxHops + 1)}, ""},
		{"a mapped proxy network", mapped, "[::ffff:10.0.0.1]:80", "X-Forwarded-For", []string{"198.51.100.9"}, "198.51.100.9"},
		{"a mapped peer, an IPv4 network", xff, "[::ffff:10.0.0.1]:80", "X-Forwarded-For", []string{"198.51.100.9"}, "198.51.100.9"},
		{"a Unix socket's proxy is trusted", xff, "@", "X-Forwarded-For", []string{"198.51.100.9"}, "198.51.100.9"},
		{"a Unix socket without a header", xff, "@", "X-Forwarded-For", nil, ""},
		{"the header the proxies do not write is ignored", xff, "10.0.0.1:80", "Forwarded", []string{"for=6.6.6.6"}, "10.0.0.1"},

		{"Forwarded: a trusted proxy's client", fwd, "10.0.0.1:80", "Forwarded", []string{"for=198.51.100.9;proto=https"}, "198.51.100.9"},
		{"Forwarded: a forged element", fwd, "10.0.0.1:80", "Forwarded", []string{"for=6.6.6.6, for=198.51.100.9"}, "198.51.100.9"},
		{"Forwarded: several lines", fwd, "10.0.0.1:80", "Forwarded", []string{"for=6.6.6.6", "for=198.51.100.9;by=10.0.0.1"}, "198.51.100.9"},
		{"Forwarded: two trusted hops", fwd, "10.0.0.2:80", "Forwarded", []string{"for=198.51.100.9, for=10.0.0.1"}, "198.51.100.9"},
		{"Forwarded: IPv6 quoted with a port", fwd, "10.0.0.1:80", "Forwarded", []string{`for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::17"},
		{"Forwarded: IPv4 quoted with a port", fwd, "10.0.0.1:80", "Forwarded", []string{`for="198.51.100.9:80"`}, "198.51.100.9"},
		{"Forwarded: a case-insensitive name", fwd, "10.0.0.1:80", "Forwarded", []string{"For=198.51.100.9"}, "198.51.100.9"},
		{"Forwarded: a comma in a quoted value", fwd, "10.0.0.1:80", "Forwarded", []string{`for=6.6.6.6;ext="a,for=1.1.1.1", for=198.51.100.9`}, "198.51.100.9"},
		{"Forwarded: a semicolon in a quoted value", fwd, "10.0.0.1:80", "Forwarded", []string{`ext="x;for=1.1.1.1";for=198.51.100.9`}, "198.51.100.9"},
		{"Forwarded: unknown", fwd, "10.0.0.1:80", "Forwarded", []string{"for=unknown"}, ""},
		{"Forwarded: an obfuscated identifier", fwd, "10.0.0.1:80", "Forwarded", []string{`for="_hidden"`}, ""},
		{"Forwarded: an element without for", fwd, "10.0.0.1:80", "Forwarded", []string{"for=6.6.6.6, proto=https"}, ""},
		{"Forwarded: an unclosed quote", fwd, "10.0.0.1:80", "Forwarded", []string{`for="198.51.100.9`}, ""},
		{"Forwarded: X-Forwarded-For is ignored", fwd, "10.0.0.1:80", "X-Forwarded-For", []string{"6.6.6.6"}, "10.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.peer
			for _, v := range c.values {
				r.Header.Add(c.header, v)
			}
			checkKey(t, i, c.key, r, c.want)
		})
	}
}

// TestClientIPRequireForwardedClient: a request from a trusted proxy is
// keyed by the proxy's own address, or by the leftmost trusted hop, when
// its header names no client outside the trusted networks; with
// RequireForwardedClient it has no key instead, and the key is never a
// trusted address.
func TestClientIPRequireForwardedClient(t *testing.T) {
	xff := httplimit.TrustXForwardedFor(proxies)
	fwd := httplimit.TrustForwarded(proxies)
	require := httplimit.RequireForwardedClient()
	for i, c := range []struct {
		name         string
		opt          httplimit.IPOption
		peer         string
		header       string   // the header's name
		values       []string // its lines
		want, strict string   // without and with RequireForwardedClient; "" for ErrNoKey
	}{
		{"a client", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"198.51.100.9"}, "198.51.100.9", "198.51.100.9"},
		{"a client behind two proxies", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"198.51.100.9, 10.0.0.2"}, "198.51.100.9", "198.51.100.9"},
		{"no header", xff, "10.0.0.1:80", "X-Forwarded-For", nil, "10.0.0.1", ""},
		{"an empty line", xff, "10.0.0.1:80", "X-Forwarded-For", []string{""}, "10.0.0.1", ""},
		{"lines of spaces and tabs", xff, "10.0.0.1:80", "X-Forwarded-For", []string{" \t", "  "}, "10.0.0.1", ""},
		{"an empty line after a client", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"198.51.100.9", ""}, "198.51.100.9", "198.51.100.9"},
		{"every hop trusted", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"10.0.0.5"}, "10.0.0.5", ""},
		{"every hop trusted, on two lines", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"10.0.0.5", "10.0.0.6"}, "10.0.0.5", ""},
		{"only the other header", xff, "10.0.0.1:80", "Forwarded", []string{"for=198.51.100.9"}, "10.0.0.1", ""},
		{"an untrusted peer's header is ignored", xff, "203.0.113.7:80", "X-Forwarded-For", nil, "203.0.113.7", "203.0.113.7"},
		{"a Unix socket's proxy", xff, "@", "X-Forwarded-For", []string{"198.51.100.9"}, "198.51.100.9", "198.51.100.9"},
		{"a Unix socket's proxy without a header", xff, "@", "X-Forwarded-For", nil, "", ""},
		{"garbage stays an error", xff, "10.0.0.1:80", "X-Forwarded-For", []string{"garbage"}, "", ""},

		{"Forwarded: a client", fwd, "10.0.0.1:80", "Forwarded", []string{"for=198.51.100.9;proto=https"}, "198.51.100.9", "198.51.100.9"},
		{"Forwarded: no header", fwd, "10.0.0.1:80", "Forwarded", nil, "10.0.0.1", ""},
		{"Forwarded: an empty line", fwd, "10.0.0.1:80", "Forwarded", []string{""}, "10.0.0.1", ""},
		{"Forwarded: empty elements", fwd, "10.0.0.1:80", "Forwarded", []string{" , ,", ","}, "10.0.0.1", ""},
		{"Forwarded: every hop trusted", fwd, "10.0.0.1:80", "Forwarded", []string{"for=10.0.0.5, for=10.0.0.6"}, "10.0.0.5", ""},
		{"Forwarded: only the other header", fwd, "10.0.0.1:80", "X-Forwarded-For", []string{"198.51.100.9"}, "10.0.0.1", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.peer
			for _, v := range c.values {
				r.Header.Add(c.header, v)
			}
			checkKey(t, i, httplimit.ClientIP(c.opt), r, c.want)
			checkKey(t, i, httplimit.ClientIP(c.opt, require), r, c.strict)
			checkKey(t, i, httplimit.ClientIP(require, c.opt, httplimit.IPv6Prefix(64)), r, c.strict)
		})
	}
}

// TestClientIPOptions panics on invalid options, naming them.
func TestClientIPOptions(t *testing.T) {
	for i, c := range []struct {
		f    func()
		want string
	}{
		{func() { httplimit.IPv6Prefix(0) }, "IPv6Prefix(0)"},
		{func() { httplimit.IPv6Prefix(129) }, "IPv6Prefix(129)"},
		{func() { httplimit.TrustXForwardedFor(netip.Prefix{}) }, "TrustXForwardedFor"},
		{func() { httplimit.TrustForwarded(proxies, netip.Prefix{}) }, "TrustForwarded: proxy network 1"},
		{func() { httplimit.ClientIP(httplimit.RequireForwardedClient()) }, "ClientIP: RequireForwardedClient without"},
		{func() { httplimit.ClientIP(httplimit.RequireForwardedClient(), httplimit.IPv6Prefix(64)) }, "ClientIP: RequireForwardedClient without"},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), c.want) {
					t.Errorf("step %d: recovered %v; want a panic naming %q", i+1, r, c.want)
				}
			}()
			c.f()
		}()
	}
}

// TestClientIPAllocs: the key of a canonical address is RemoteAddr's own
// text, with no allocation.
func TestClientIPAllocs(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	key := httplimit.ClientIP()
	if n := testing.AllocsPerRun(100, func() { key(r) }); n != 0 {
		t.Errorf("ClientIP allocates %v times per request; want 0", n)
	}
}

type userKey struct{}

type user struct{ id string }

func (u user) String() string { return u.id }

// TestKeyFuncs: headers, context values, routes, constants, form values
// and composites.
func TestKeyFuncs(t *testing.T) {
	req := func(f func(r *http.Request) *http.Request) *http.Request {
		r := httptest.NewRequest("POST", "/login?user=alice", strings.NewReader("password=x"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if f != nil {
			r = f(r)
		}
		return r
	}
	withHeader := func(k, v string) func(*http.Request) *http.Request {
		return func(r *http.Request) *http.Request { r.Header.Set(k, v); return r }
	}
	withValue := func(v any) func(*http.Request) *http.Request {
		return func(r *http.Request) *http.Request {
			return r.WithContext(context.WithValue(r.Context(), userKey{}, v))
		}
	}
	withPattern := func(r *http.Request) *http.Request { r.Pattern = "POST /login"; return r }
	for i, c := range []struct {
		key  httplimit.KeyFunc
		req  *http.Request
		want string // "" for an error
	}{
		{httplimit.Header("x-api-key"), req(withHeader("X-Api-Key", "k1")), "k1"},
		{httplimit.Header("X-API-Key"), req(nil), ""},
		{httplimit.Header("X-API-Key"), req(withHeader("X-Api-Key", "")), ""},
		{httplimit.FromContext(userKey{}), req(withValue("u42")), "u42"},
		{httplimit.FromContext(userKey{}), req(withValue(user{"u7"})), "u7"},
		{httplimit.FromContext(userKey{}), req(withValue(42)), "42"},
		{httplimit.FromContext(userKey{}), req(withValue(int64(-3))), "-3"},
		{httplimit.FromContext(userKey{}), req(withValue(uint64(9))), "9"},
		{httplimit.FromContext(userKey{}), req(nil), ""},
		{httplimit.FromContext(userKey{}), req(withValue("")), ""},
		{httplimit.FromContext(userKey{}), req(withValue(3.5)), ""},
		{httplimit.Route(), req(withPattern), "POST /login"},
		{httplimit.Route(), req(nil), ""},
		{httplimit.Const("global"), req(nil), "global"},
		{httplimit.FormValue("user"), req(nil), "alice"},
		{httplimit.FormValue("password"), req(nil), "x"},
		{httplimit.FormValue("tenant"), req(nil), ""},
		{httplimit.Join(httplimit.Const("t1"), httplimit.Const("GET /a")), req(nil), "t1|GET /a"},
		{httplimit.Join(httplimit.Const("a|b"), httplimit.Const("c")), req(nil), `a\|b|c`},
		{httplimit.Join(httplimit.Const("a"), httplimit.Const("b|c")), req(nil), `a|b\|c`},
		{httplimit.Join(httplimit.Const(`a\`), httplimit.Const("b")), req(nil), `a\\|b`},
		{httplimit.Join(httplimit.Const("a"), httplimit.Header("X-Tenant")), req(nil), ""},
	} {
		got, err := c.key(c.req)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("step %d: key = %q; want an error", i+1, got)
		case c.want == "" && !strings.HasPrefix(err.Error(), "spigot: httplimit: "):
			t.Errorf("step %d: error %q does not start with the package name", i+1, err)
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("step %d: key = %q, %v; want %q", i+1, got, err, c.want)
		}
	}
}
