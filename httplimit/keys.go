package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// A KeyFunc returns the key that a rule limits a request by: the client's
// address, an API key, a user. When it fails, the middleware charges
// nothing and answers the request with its key error handler (400 by
// default, see WithKeyErrorHandler).
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey is matched by the error of a KeyFunc of this package when the
// request lacks what it keys by: no such header, no value in the context,
// or no client address it can trust.
var ErrNoKey = errors.New("spigot: httplimit: no key")

// MaxHops is the most proxies ClientIP walks back through, from the
// connection's peer: a request that came through more trusted proxies than
// this has no key.
const MaxHops = 16

// An IPOption configures ClientIP.
type IPOption func(*clientIP)

type clientIP struct {
	header  string // "" (none), "Forwarded" or "X-Forwarded-For"
	trusted []netip.Prefix
	v6bits  int // 0: the whole address
}

// TrustForwarded makes ClientIP read the client's address from the
// Forwarded header (RFC 7239) that proxies in the given networks write,
// as the for= parameter of the element that the nearest proxy not in them
// added; see ClientIP. It panics on an invalid prefix.
func TrustForwarded(proxies ...netip.Prefix) IPOption {
	return trust("Forwarded", proxies)
}

// TrustXForwardedFor makes ClientIP read the client's address from the
// X-Forwarded-For header that proxies in the given networks write; see
// ClientIP. It panics on an invalid prefix.
func TrustXForwardedFor(proxies ...netip.Prefix) IPOption {
	return trust("X-Forwarded-For", proxies)
}

func trust(header string, proxies []netip.Prefix) IPOption {
	masked := make([]netip.Prefix, len(proxies))
	for i, p := range proxies {
		if !p.IsValid() {
			panic(fmt.Sprintf("spigot: httplimit: Trust%s: proxy network %d is not a valid prefix", strings.ReplaceAll(header, "-", ""), i))
		}
		masked[i] = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr())).Masked()
	}
	return func(c *clientIP) { c.header, c.trusted = header, masked }
}

// unmapBits is the number of prefix bits that unmapping a takes away: 96
// for an IPv4-mapped IPv6 address, 0 otherwise.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// IPv6Prefix makes ClientIP key an IPv6 client by the network of its
// first bits bits, such as 64: one host usually holds a whole /64, and
// could otherwise take a fresh bucket with each of its addresses. The key
// is then the network, as in "2001:db8:1:2::/64". IPv4 clients are keyed
// by their address. It panics unless 1 ≤ bits ≤ 128.
func IPv6Prefix(bits int) IPOption {
	if bits < 1 || bits > 128 {
		panic(fmt.Sprintf("spigot: httplimit: IPv6Prefix(%d): want 1 to 128 bits", bits))
	}
	return func(c *clientIP) { c.v6bits = bits }
}

// ClientIP returns the KeyFunc of the client's IP address: the address of
// the connection's peer (Request.RemoteAddr) without its port, in its
// canonical form (IPv4 as 192.0.2.1, also when mapped in IPv6; IPv6 as in
// RFC 5952, without a zone), so that every connection of a client shares
// one key. It is the default key of By.
//
// Behind proxies, the peer is the proxy. Name the networks of your
// proxies with TrustXForwardedFor or TrustForwarded: when the peer is in
// one of them, ClientIP walks that header from the right, the last entry
// being the address the peer saw, and skips every entry in a trusted
// network, up to MaxHops; the first address it meets outside them is the
// client. Entries to its left were written by the client, or by proxies
// you do not trust, and are never read, so a client cannot choose its own
// key by sending the header. Without a trusted network the headers are
// ignored. Several lines of the header count as one list, in order.
//
// The key function fails, with an error that matches ErrNoKey, when the
// address is not an IP address (a Unix socket's peer, when no proxy is
// trusted), when the entry it stops at is not an IP address ("unknown",
// an obfuscated identifier, garbage), and past MaxHops trusted hops. When
// proxies are trusted, a peer without an IP address (a proxy on a Unix
// socket) counts as a trusted proxy.
//
// ClientIP panics on an invalid option (see each option).
func ClientIP(opts ...IPOption) KeyFunc {
	c := &clientIP{}
	for _, o := range opts {
		o(c)
	}
	return c.key
}

func (c *clientIP) key(r *http.Request) (string, error) {
	peer, err := parseHost(r.RemoteAddr, true)
	if c.header == "" || (err == nil && !c.isTrusted(peer)) {
		if err != nil {
			return "", fmt.Errorf("%w: the peer's address %q is not an IP address", ErrNoKey, r.RemoteAddr)
		}
		host, _ := splitHost(r.RemoteAddr)
		return c.format(peer, host), nil
	}
	// The peer is a trusted proxy: walk its header back from the right,
	// line by line, entry by entry.
	values := r.Header.Values(c.header)
	hops := 0
	for i := len(values) - 1; i >= 0; i-- {
		for rest := values[i]; strings.TrimSpace(rest) != ""; {
			var entry string
			if c.header == "Forwarded" {
				entry, rest = lastForwardedFor(rest)
			} else if j := strings.LastIndexByte(rest, ','); j >= 0 {
				entry, rest = rest[j+1:], rest[:j]
			} else {
				entry, rest = rest, ""
			}
			if hops++; hops > MaxHops {
				return "", fmt.Errorf("%w: the request came through more than %d trusted proxies", ErrNoKey, MaxHops)
			}
			a, err := parseHost(strings.TrimSpace(entry), c.header == "Forwarded")
			if err != nil {
				return "", fmt.Errorf("%w: the %s entry %q, which a trusted proxy wrote, is not an IP address", ErrNoKey, c.header, clip(entry))
			}
			if !c.isTrusted(a) {
				return c.format(a, ""), nil
			}
			peer = a
		}
	}
	// Every hop is trusted: the request comes from inside, from the
	// leftmost address.
	if !peer.IsValid() {
		return "", fmt.Errorf("%w: the peer's address %q is not an IP address, and the %s header names no client", ErrNoKey, r.RemoteAddr, c.header)
	}
	return c.format(peer, ""), nil
}

// isTrusted reports whether a is in a trusted network.
func (c *clientIP) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// format returns the key of a: its canonical form, or its network under
// IPv6Prefix. When text already is that form, it returns text itself,
// without allocating.
func (c *clientIP) format(a netip.Addr, text string) string {
	if c.v6bits > 0 && a.Is6() {
		p, _ := a.Prefix(c.v6bits)
		return p.String()
	}
	var buf [64]byte
	b := a.AppendTo(buf[:0])
	if string(b) == text {
		return text
	}
	return string(b)
}

// splitHost returns the host of "host:port" or "[host]:port", or s itself
// when it has no port, and false for a bracketed host followed by
// something other than a port.
func splitHost(s string) (host string, ok bool) {
	if strings.HasPrefix(s, "[") { // [IPv6] or [IPv6]:port
		end := strings.IndexByte(s, ']')
		if end < 0 || end+1 < len(s) && s[end+1] != ':' {
			return s, false
		}
		return s[1:end], true
	}
	if i := strings.IndexByte(s, ':'); i >= 0 && strings.LastIndexByte(s, ':') == i { // IPv4:port
		return s[:i], true
	}
	return s, true
}

// parseHost parses an address with or without a port ("192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]:80", and with quotes when
// quoted, as Forwarded writes IPv6), and returns it unmapped, without its
// zone.
func parseHost(s string, quoted bool) (netip.Addr, error) {
	if quoted && len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	host, ok := splitHost(s)
	if !ok {
		return netip.Addr{}, errNotIP
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, err
	}
	return a.Unmap().WithZone(""), nil
}

var errNotIP = errors.New("not an IP address")

// lastForwardedFor splits the Forwarded list s (RFC 7239: elements
// separated by commas, each of pairs separated by semicolons, values
// tokens or quoted strings) before its last element, and returns that
// element's for= value (quotes included) and the elements before it. An
// element without for= gives "".
func lastForwardedFor(s string) (forValue, rest string) {
	// The last element starts after the last comma outside quotes (where
	// the quotes are closed, so the search can go on from there).
	start := 0
	for i := indexUnquoted(s, ','); i >= 0; i = indexUnquoted(s[start:], ',') {
		start += i + 1
	}
	elem := s[start:]
	if start > 0 {
		rest = s[:start-1]
	}
	for elem != "" {
		pair := elem
		if i := indexUnquoted(elem, ';'); i >= 0 {
			pair, elem = elem[:i], elem[i+1:]
		} else {
			elem = ""
		}
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(strings.TrimSpace(name), "for") {
			return strings.TrimSpace(value), rest
		}
	}
	return "", rest
}

// indexUnquoted returns the index of the first sep in s outside quoted
// strings (RFC 7230: between '"', with '\' escaping the next byte), or -1.
func indexUnquoted(s string, sep byte) int {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && inQuote:
			i++
		case c == '"':
			inQuote = !inQuote
		case c == sep && !inQuote:
			return i
		}
	}
	return -1
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Header returns the KeyFunc of the value of the request's header name,
// such as an API key's: X-API-Key. A request without it, or with an empty
// one, has no key (ErrNoKey). A header is what the client says: use it for
// what the client has to present anyway, and keep a per-address rule
// beside it against clients that make up values.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: the request has no %s header", ErrNoKey, name)
	}
}

// FromContext returns the KeyFunc of the value that the application put in
// the request's context under key, such as the authenticated user that an
// authentication middleware in front of the limit stored: a string, a
// fmt.Stringer, or an integer. A request whose context has no such value,
// or an empty one, has no key (ErrNoKey); a value of another type is an
// error too.
func FromContext(key any) KeyFunc {
	return func(r *http.Request) (string, error) {
		var s string
		switch v := r.Context().Value(key).(type) {
		case nil:
		case string:
			s = v
		case fmt.Stringer:
			s = v.String()
		case int:
			s = strconv.Itoa(v)
		case int64:
			s = strconv.FormatInt(v, 10)
		case uint64:
			s = strconv.FormatUint(v, 10)
		default:
			return "", fmt.Errorf("spigot: httplimit: FromContext(%v): the value is a %T; want a string, a fmt.Stringer or an integer", key, v)
		}
		if s == "" {
			return "", fmt.Errorf("%w: the request's context has no value for %v", ErrNoKey, key)
		}
		return s, nil
	}
}

// Route returns the KeyFunc of the request's route: the pattern that
// http.ServeMux matched, such as "POST /login" (Request.Pattern), for a
// limit per endpoint. It has no key (ErrNoKey) when no ServeMux routed the
// request, as when the middleware wraps the mux itself rather than the
// route's handler, or with a router that does not set Request.Pattern:
// there, use Const with the route's name.
func Route() KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.Pattern == "" {
			return "", fmt.Errorf("%w: no http.ServeMux pattern routed the request; wrap the route's handler, or use Const", ErrNoKey)
		}
		return r.Pattern, nil
	}
}

// Const returns the KeyFunc of one key for every request: a limit shared
// by every client of a route (name it), or of the whole service.
func Const(key string) KeyFunc {
	return func(*http.Request) (string, error) { return key, nil }
}

// Join returns the KeyFunc of a composite key, such as tenant and endpoint:
// the keys of fns, in order, separated by '|' (a '|' or '\' within a key
// is escaped with '\', so two different lists never make the same key).
// It fails with the first error of fns.
func Join(fns ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, f := range fns {
			k, err := f(r)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte('|')
			}
			for j := 0; j < len(k); j++ {
				if k[j] == '|' || k[j] == '\\' {
					b.WriteByte('\\')
				}
				b.WriteByte(k[j])
			}
		}
		return b.String(), nil
	}
}

// FormValue returns the KeyFunc of the request's form value name, as
// Request.FormValue reads it (the query, then a URL-encoded or multipart
// body): the user name of a login form. It parses the form, which stays
// parsed for the handler; ParseForm reads at most 10 MB of a URL-encoded
// body, so wrap the handler in http.MaxBytesHandler for less. A request
// without the value, or with an empty one, has no key (ErrNoKey).
func FormValue(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if v := r.FormValue(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: the request has no form value %q", ErrNoKey, name)
	}
}
