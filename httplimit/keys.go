package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spigot-go/spigot/internal/clientaddr"
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
	v6bits  int  // 0: the whole address
	require bool // RequireForwardedClient
}

// TrustForwarded makes ClientIP read the client's address from the
// Forwarded header (RFC 7239) that proxies in the given networks write:
// the for= parameter that the first of them to receive the request wrote,
// naming the address it received it from; see ClientIP. It panics on an
// invalid prefix.
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

// RequireForwardedClient makes ClientIP fail, with an error matching
// ErrNoKey, when a request comes from a trusted proxy whose header names
// no client outside the trusted networks: the header is missing, holds
// no entry, or holds only trusted addresses. Without it, such a request
// is keyed by the address of the proxy (or of the leftmost trusted hop),
// so a proxy that stops writing the header puts all its clients in one
// bucket; with it, they get the key error handler's 400, and the key is
// never a trusted address. Name only your proxies' networks with it: a
// client inside them, calling directly or through the proxies, has no key
// either. It panics in ClientIP without TrustXForwardedFor or
// TrustForwarded.
func RequireForwardedClient() IPOption {
	return func(c *clientIP) { c.require = true }
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
// one of them, ClientIP reads that header back from its right end, where
// proxies append, the last entry being the address the peer saw, and
// skips every entry in a trusted network, up to MaxHops; the first address
// it meets outside them is the client. When every entry is in a trusted
// network, the leftmost is the client. When the header has no entry (the
// proxy sent none, or only empty lines), the client is the proxy itself:
// if a proxy stops sending the header, as a misconfigured one does, all
// its clients share its key, and one bucket. RequireForwardedClient makes
// both of these an error instead. Several lines of the header count as
// one list, in order. What lies to the left of the client's entry was
// written by the client, or by proxies you do not trust, and is never
// read, whatever it holds (an unterminated quoted string included), so a
// client cannot choose its own key by sending the header. Without a
// trusted network the headers are ignored.
//
// An X-Forwarded-For entry is the text between two commas, without the
// spaces and tabs around it: an IPv4 or IPv6 address, optionally with a
// port ("192.0.2.1", "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]:80").
// A Forwarded element is read as RFC 7239 writes it: parameters
// name=value separated by semicolons, with no space within the element,
// each name a token and each value a token or a quoted string; elements
// are separated by commas with optional spaces and tabs, and empty ones
// are skipped. Its for= parameter, exactly one, is an IPv4 address, or
// in a quoted string an IPv4 address or an IPv6 address in brackets,
// either optionally followed by a port (for=192.0.2.1,
// for="192.0.2.1:80", for="[2001:db8::1]:4711").
//
// The key function fails, with an error that matches ErrNoKey, when the
// peer's address is not an IP address (a Unix socket's peer, when no
// proxy is trusted); when an entry it reads is malformed (a Forwarded
// element that is not well-formed, such as one with an unterminated
// quoted string, one without for= or with two); when the entry it stops
// at is not an IP address ("unknown", an obfuscated identifier, garbage);
// past MaxHops trusted hops; and, with RequireForwardedClient, when no
// entry names a client outside the trusted networks. When proxies are
// trusted, a peer without an IP address (a proxy on a Unix socket) counts
// as a trusted proxy.
//
// ClientIP panics on an invalid option (see each option), and on
// RequireForwardedClient without a trusted network's header.
func ClientIP(opts ...IPOption) KeyFunc {
	c := &clientIP{}
	for _, o := range opts {
		o(c)
	}
	if c.require && c.header == "" {
		panic("spigot: httplimit: ClientIP: RequireForwardedClient without TrustXForwardedFor or TrustForwarded: no proxy is trusted")
	}
	return c.key
}

func (c *clientIP) key(r *http.Request) (string, error) {
	peer, err := clientaddr.ParseHost(r.RemoteAddr)
	if c.header == "" || (err == nil && !c.isTrusted(peer)) {
		if err != nil {
			return "", fmt.Errorf("%w: the peer's address %q is not an IP address", ErrNoKey, r.RemoteAddr)
		}
		host, _ := clientaddr.SplitHost(r.RemoteAddr)
		return c.format(peer, host), nil
	}
	// The peer is a trusted proxy: read its header back from the right
	// end, where the proxies append, line by line, entry by entry, and
	// stop at the first address outside the trusted networks. What lies
	// to the left of it was written by the client and is never read.
	values := r.Header.Values(c.header)
	hops := 0
	for i := len(values) - 1; i >= 0; i-- {
		for line := values[i]; ; {
			var (
				entry string
				a     netip.Addr
				err   error
			)
			if c.header == "Forwarded" {
				var value string
				line, entry, value, err = lastForwarded(line)
				if entry == "" && err == nil {
					break
				}
				if err == nil {
					a, err = forwardedNode(value)
				}
			} else {
				var ok bool
				if line, entry, ok = clientaddr.LastXForwardedFor(line); !ok {
					break
				}
				a, err = clientaddr.ParseHost(entry)
			}
			if hops++; hops > MaxHops {
				return "", fmt.Errorf("%w: the request came through more than %d trusted proxies", ErrNoKey, MaxHops)
			}
			if err != nil {
				return "", fmt.Errorf("%w: the %s header's entry %q %v", ErrNoKey, c.header, clientaddr.Clip(entry), err)
			}
			if !c.isTrusted(a) {
				return c.format(a, ""), nil
			}
			peer = a
		}
	}
	// Every hop is trusted: the request comes from inside, from the
	// leftmost address.
	switch {
	case c.require && hops == 0:
		return "", fmt.Errorf("%w: the trusted proxy %q sent no %s entry", ErrNoKey, clientaddr.Clip(r.RemoteAddr), c.header)
	case c.require:
		return "", fmt.Errorf("%w: every address of the %s header is in a trusted network", ErrNoKey, c.header)
	}
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

var (
	errMalformed = errors.New("is malformed")
	errNoFor     = errors.New("has no for= parameter")
	errTwoFor    = errors.New("has two for= parameters")
)

// lastForwarded reads the Forwarded line s (RFC 7239) back from its right
// end, past empty elements, and splits it before its last element: it
// returns that element, its for= value (a token, or a quoted string with
// its quotes), and the line before it (without the comma). The element is
// "" when s holds no more elements.
//
// The element must be well-formed on its own: forwarded-pairs token "="
// value, value a token or a quoted string, separated by ';' (with no space
// within the element), and before it only spaces and tabs, then a comma or
// the start of the line. Otherwise err is errMalformed (and the element is
// s up to its end): what precedes an element never changes how it is
// read, so an element a proxy appends to a line is read as it wrote it,
// whatever the client wrote before it. An element with two for=
// parameters is errTwoFor, one without is errNoFor.
func lastForwarded(s string) (rest, elem, forValue string, err error) {
	end := len(s)
	for {
		if end = clientaddr.TrimOWS(s, end); end == 0 {
			return "", "", "", nil
		}
		if s[end-1] != ',' {
			break
		}
		end-- // an empty element
	}
	// Read the pairs back, each ending at i.
	i := end
	for {
		if i > 0 && s[i-1] != ';' && s[i-1] != ',' && !clientaddr.IsOWS(s[i-1]) {
			v := valueStart(s, i)
			if v <= 0 || s[v-1] != '=' {
				return "", s[:end], "", errMalformed
			}
			n := tokenStart(s, v-1)
			if n == v-1 {
				return "", s[:end], "", errMalformed
			}
			if strings.EqualFold(s[n:v-1], "for") {
				if forValue != "" {
					return "", s[n:end], "", errTwoFor
				}
				forValue = s[v:i]
			}
			i = n
		}
		if i == 0 || s[i-1] != ';' {
			break
		}
		i--
	}
	elem = s[i:end]
	if j := clientaddr.TrimOWS(s, i); j > 0 {
		if s[j-1] != ',' {
			return "", s[:end], "", errMalformed
		}
		rest = s[:j-1]
	}
	if forValue == "" {
		return rest, elem, "", errNoFor
	}
	return rest, elem, forValue, nil
}

// valueStart returns the start of the value (RFC 7239: a token or a
// quoted string) that ends at s[i-1], or -1 when none does.
func valueStart(s string, i int) int {
	if s[i-1] != '"' {
		if j := tokenStart(s, i); j < i {
			return j
		}
		return -1
	}
	// A quoted string: its opening quote is the first quote to the left
	// that no backslash escapes. Within a quoted string every backslash
	// escapes the byte after it, so a quote is escaped when an odd number
	// of backslashes precede it.
	if escaped(s, i-1) {
		return -1
	}
	for j := i - 2; j >= 0; j-- {
		if s[j] == '"' && !escaped(s, j) {
			if !isQuotedString(s[j:i]) {
				return -1
			}
			return j
		}
	}
	return -1
}

// escaped reports whether an odd number of backslashes precede s[i].
func escaped(s string, i int) bool {
	n := 0
	for i > 0 && s[i-1] == '\\' {
		i--
		n++
	}
	return n%2 == 1
}

// isQuotedString reports whether q, which starts and ends with '"', is a
// quoted string (RFC 9110: qdtext and quoted-pairs between quotes).
func isQuotedString(q string) bool {
	for i := 1; i < len(q)-1; i++ {
		switch c := q[i]; {
		case c == '\\':
			if i++; i == len(q)-1 || !isQuotable(q[i]) {
				return false
			}
		case c == '"' || !isQuotable(c):
			return false
		}
	}
	return true
}

// isQuotable reports whether c may stand in a quoted string, after a
// backslash or (but for '"' and '\') on its own: HTAB, SP, VCHAR or
// obs-text.
func isQuotable(c byte) bool {
	return c == '\t' || c >= ' ' && c != 0x7f
}

// tokenStart returns the start of the run of token characters that ends
// at s[i-1] (i itself when there is none).
func tokenStart(s string, i int) int {
	for i > 0 && isTchar(s[i-1]) {
		i--
	}
	return i
}

// isTchar reports whether c may stand in a token (RFC 9110).
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// forwardedNode returns the address of a Forwarded for= value (RFC 7239
// section 6): an IPv4 address as a token, or in a quoted string an IPv4
// address or an IPv6 address in brackets, either optionally followed by
// ':' and a port (1 to 5 digits, or an obfuscated port, "_" then letters,
// digits, '.', '_' or '-'). It returns the address unmapped; "unknown", an
// obfuscated identifier, a zone, a quoted-pair or anything else is
// clientaddr.ErrNotIP.
func forwardedNode(v string) (netip.Addr, error) {
	if v[0] == '"' {
		v = v[1 : len(v)-1]
	}
	bracketed := strings.HasPrefix(v, "[")
	host, port := v, ""
	if bracketed {
		end := strings.IndexByte(v, ']')
		if end < 0 {
			return netip.Addr{}, clientaddr.ErrNotIP
		}
		host, port = v[1:end], v[end+1:]
	} else if i := strings.IndexByte(v, ':'); i >= 0 {
		host, port = v[:i], v[i:]
	}
	if port != "" && (port[0] != ':' || !clientaddr.IsPort(port[1:]) && !isObfPort(port[1:])) {
		return netip.Addr{}, clientaddr.ErrNotIP
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.Is4() == bracketed || a.Zone() != "" {
		return netip.Addr{}, clientaddr.ErrNotIP
	}
	return a.Unmap(), nil
}

// isObfPort reports whether s is an obfuscated port (RFC 7239): "_" then
// one or more letters, digits, '.', '_' or '-'.
func isObfPort(s string) bool {
	if len(s) < 2 || s[0] != '_' {
		return false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
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

// MaxFormBytes is the most of a request's body that FormValue reads.
const MaxFormBytes = 64 << 10

// FormValue returns the KeyFunc of the request's form value name, as
// Request.FormValue reads it (the query, then a URL-encoded or multipart
// body): the user name of a login form. It parses the form, which stays
// parsed for the handler, and reads at most MaxFormBytes of the body: a
// larger form has no key (ErrNoKey), and the handler is not called. Use it
// on routes whose bodies are small forms, not uploads. A request without
// the value, or with an empty one, has no key (ErrNoKey).
func FormValue(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if err := parseForm(r); err != nil {
			return "", fmt.Errorf("%w: the request's form: %w", ErrNoKey, err)
		}
		if v := r.FormValue(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: the request has no form value %q", ErrNoKey, name)
	}
}

// parseForm parses r's form once, reading at most MaxFormBytes of a form
// body, and fails only for a larger one; bodies of other types are left
// unread.
func parseForm(r *http.Request) error {
	if r.Form != nil {
		return nil
	}
	if r.Body != nil && r.Body != http.NoBody {
		switch ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.ToLower(strings.TrimSpace(ct)) {
		case "application/x-www-form-urlencoded", "multipart/form-data":
			r.Body = http.MaxBytesReader(nil, r.Body, MaxFormBytes)
		}
	}
	// Other errors leave out what could not be parsed, as
	// Request.FormValue does.
	var tooLarge *http.MaxBytesError
	if err := r.ParseMultipartForm(MaxFormBytes); errors.As(err, &tooLarge) {
		return fmt.Errorf("the body is larger than %d bytes", MaxFormBytes)
	}
	return nil
}
