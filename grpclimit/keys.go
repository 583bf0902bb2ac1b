package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/spigot-go/spigot/internal/clientaddr"
)

// A KeyFunc returns the key that a rule limits a call by: the client's
// address, an API key, a tenant. ctx is the call's context, which holds
// its peer and its incoming metadata; fullMethod is "/pkg.Service/Method";
// req is the request message of a unary call, nil for a stream's opening,
// and a stream's message for a PerMessage rule. When it fails, the
// Server charges nothing and returns its key error handler's error
// (codes.InvalidArgument by default, see WithKeyErrorHandler). A KeyFunc
// must be safe for concurrent use.
type KeyFunc func(ctx context.Context, fullMethod string, req any) (string, error)

// ErrNoKey is matched by the error of a KeyFunc of this package when the
// call lacks what it keys by: no such metadata, no request message, or no
// client address it can trust.
var ErrNoKey = errors.New("spigot: grpclimit: no key")

// MaxHops is the most proxies PeerIP walks back through, from the
// connection's peer: a call that came through more trusted proxies than
// this has no key.
const MaxHops = 16

// An IPOption configures PeerIP.
type IPOption func(*peerIP)

type peerIP struct {
	trusted []netip.Prefix // nil: x-forwarded-for is never read
	v6bits  int            // 0: the whole address
	require bool           // RequireForwardedClient
}

// xff is the metadata key of the forwarding header proxies write.
const xff = "x-forwarded-for"

// TrustXForwardedFor makes PeerIP read the client's address from the
// x-forwarded-for metadata that proxies in the given networks write; see
// PeerIP. It panics on an invalid prefix.
func TrustXForwardedFor(proxies ...netip.Prefix) IPOption {
	masked := make([]netip.Prefix, len(proxies))
	for i, p := range proxies {
		if !p.IsValid() {
			panic(fmt.Sprintf("spigot: grpclimit: TrustXForwardedFor: proxy network %d is not a valid prefix", i))
		}
		bits := p.Bits()
		if p.Addr().Is4In6() {
			bits -= 96
		}
		masked[i] = netip.PrefixFrom(p.Addr().Unmap(), bits).Masked()
	}
	return func(c *peerIP) { c.trusted = masked }
}

// RequireForwardedClient makes PeerIP fail, with an error matching
// ErrNoKey, when a call comes from a trusted proxy whose x-forwarded-for
// names no client outside the trusted networks: the metadata is missing,
// holds no entry, or holds only trusted addresses. Without it, such a
// call is keyed by the address of the proxy (or of the leftmost trusted
// hop), so a proxy that stops writing the metadata puts all its clients
// in one bucket; with it, they get the key error, and the key is never a
// trusted address. It panics in PeerIP without TrustXForwardedFor.
func RequireForwardedClient() IPOption {
	return func(c *peerIP) { c.require = true }
}

// IPv6Prefix makes PeerIP key an IPv6 client by the network of its first
// bits bits, such as 64, as in "2001:db8:1:2::/64". IPv4 clients are keyed
// by their address. It panics unless 1 ≤ bits ≤ 128.
func IPv6Prefix(bits int) IPOption {
	if bits < 1 || bits > 128 {
		panic(fmt.Sprintf("spigot: grpclimit: IPv6Prefix(%d): want 1 to 128 bits", bits))
	}
	return func(c *peerIP) { c.v6bits = bits }
}

// PeerIP returns the KeyFunc of the client's IP address: the address of
// the connection's peer (peer.FromContext) without its port, in its
// canonical form (IPv4 as 192.0.2.1, also when mapped in IPv6; IPv6 as in
// RFC 5952, without a zone), so that every connection of a client shares
// one key. It is the default key of By.
//
// Behind proxies, the peer is the proxy. Name the networks of your
// proxies with TrustXForwardedFor: when the peer is in one of them, PeerIP
// reads the call's x-forwarded-for metadata back from its right end,
// where proxies append, and skips every entry in a trusted network, up to
// MaxHops; the first address it meets outside them is the client. Several
// values of the metadata count as one list, in order. When every entry is
// in a trusted network, the leftmost is the client; when there is no
// entry, the client is the proxy itself (RequireForwardedClient makes both
// an error instead). What lies to the left of the client's entry was
// written by the client, or by proxies you do not trust, and is never
// read, so a client cannot choose its own key by sending the metadata.
// Without a trusted network the metadata is ignored. An entry is the text
// between two commas, without the spaces and tabs around it: an IPv4 or
// IPv6 address, optionally with a port ("192.0.2.1", "192.0.2.1:80",
// "2001:db8::1", "[2001:db8::1]:80"), as httplimit.ClientIP reads
// X-Forwarded-For.
//
// The key function fails, with an error that matches ErrNoKey, when the
// call has no peer, or its address is not an IP address (a Unix socket's
// peer, when no proxy is trusted); when the entry it stops at is not an
// IP address; past MaxHops trusted hops; and, with
// RequireForwardedClient, when no entry names a client outside the
// trusted networks. When proxies are trusted, a peer without an IP
// address (a proxy on a Unix socket) counts as a trusted proxy.
//
// PeerIP panics on an invalid option (see each option), and on
// RequireForwardedClient without TrustXForwardedFor.
func PeerIP(opts ...IPOption) KeyFunc {
	c := &peerIP{}
	for _, o := range opts {
		o(c)
	}
	if c.require && c.trusted == nil {
		panic("spigot: grpclimit: PeerIP: RequireForwardedClient without TrustXForwardedFor: no proxy is trusted")
	}
	return c.key
}

func (c *peerIP) key(ctx context.Context, _ string, _ any) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", fmt.Errorf("%w: the call has no peer", ErrNoKey)
	}
	addr, err := peerAddr(p.Addr)
	if c.trusted == nil || (err == nil && !c.isTrusted(addr)) {
		if err != nil {
			return "", fmt.Errorf("%w: the peer's address %q is not an IP address", ErrNoKey, clientaddr.Clip(p.Addr.String()))
		}
		return c.format(addr), nil
	}
	// The peer is a trusted proxy: read x-forwarded-for back from the
	// right end, where proxies append, value by value, entry by entry,
	// and stop at the first address outside the trusted networks. What
	// lies to the left of it was written by the client and is never read.
	md, _ := metadata.FromIncomingContext(ctx)
	values := md[xff]
	hops := 0
	for i := len(values) - 1; i >= 0; i-- {
		for line := values[i]; ; {
			var entry string
			var ok bool
			if line, entry, ok = clientaddr.LastXForwardedFor(line); !ok {
				break
			}
			a, err := clientaddr.ParseHost(entry)
			if hops++; hops > MaxHops {
				return "", fmt.Errorf("%w: the call came through more than %d trusted proxies", ErrNoKey, MaxHops)
			}
			if err != nil {
				return "", fmt.Errorf("%w: the %s entry %q is not an IP address", ErrNoKey, xff, clientaddr.Clip(entry))
			}
			if !c.isTrusted(a) {
				return c.format(a), nil
			}
			addr = a
		}
	}
	// Every hop is trusted: the call comes from inside, from the leftmost
	// address.
	switch {
	case c.require && hops == 0:
		return "", fmt.Errorf("%w: the trusted proxy %q sent no %s entry", ErrNoKey, clientaddr.Clip(p.Addr.String()), xff)
	case c.require:
		return "", fmt.Errorf("%w: every address of %s is in a trusted network", ErrNoKey, xff)
	}
	if !addr.IsValid() {
		return "", fmt.Errorf("%w: the peer's address %q is not an IP address, and %s names no client", ErrNoKey, clientaddr.Clip(p.Addr.String()), xff)
	}
	return c.format(addr), nil
}

// peerAddr returns the IP address of a peer's address a, unmapped and
// without its zone, as clientaddr.ParseHost reads a.String(): a TCP
// peer's is read as it is, without writing it out.
func peerAddr(a net.Addr) (netip.Addr, error) {
	if t, ok := a.(*net.TCPAddr); ok && t != nil {
		if ip, ok := netip.AddrFromSlice(t.IP); ok {
			return ip.Unmap(), nil
		}
	}
	return clientaddr.ParseHost(a.String())
}

// isTrusted reports whether a is in a trusted network.
func (c *peerIP) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// format returns the key of a: its canonical form, or its network under
// IPv6Prefix.
func (c *peerIP) format(a netip.Addr) string {
	if c.v6bits > 0 && a.Is6() {
		p, _ := a.Prefix(c.v6bits)
		return p.String()
	}
	return a.String()
}

// Metadata returns the KeyFunc of the first value of the call's incoming
// metadata name, such as an API key's: "x-api-key". gRPC sends metadata
// keys in lower case, and Metadata reads name in lower case too. A call
// without it, or whose first value is empty, has no key (ErrNoKey), and
// gets the key error (codes.InvalidArgument by default), as
// httplimit.Header's request without the header gets 400. Metadata is what
// the client says: use it for what the client has to present anyway, and
// keep a PeerIP rule beside it against clients that make up values.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string, _ any) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md[name]; len(v) > 0 && v[0] != "" {
			return v[0], nil
		}
		return "", fmt.Errorf("%w: the call has no %s metadata", ErrNoKey, name)
	}
}

// FullMethod returns the KeyFunc of the call's full method name,
// "/pkg.Service/Method": for a limit per method, shared by every client.
// The methods are those the server's services define, unless it has a
// grpc.UnknownServiceHandler (a proxy): there a client names any method
// it likes, and so chooses its own key, a fresh bucket per name. Narrow
// such a rule with Methods to the methods you know.
func FullMethod() KeyFunc {
	return func(_ context.Context, fullMethod string, _ any) (string, error) {
		return fullMethod, nil
	}
}

// Message returns the KeyFunc of what f reads from a call's request
// message: a tenant or account field, say. f receives the message as the
// handler will (a *pb.Request of the method, or a stream's message for a
// PerMessage rule), must not change it, and must be safe for concurrent
// use. A stream has no request message when it opens, so there the KeyFunc
// fails with ErrNoKey: narrow a rule keyed by Message to unary methods
// with Methods, or make it PerMessage. An error of f, or an empty
// key, is a key error. It panics if f is nil.
func Message(f func(req any) (string, error)) KeyFunc {
	if f == nil {
		panic("spigot: grpclimit: Message: nil func")
	}
	return func(_ context.Context, _ string, req any) (string, error) {
		if req == nil {
			return "", fmt.Errorf("%w: the call has no request message (a stream, when it opens)", ErrNoKey)
		}
		k, err := f(req)
		if err != nil {
			return "", err
		}
		if k == "" {
			return "", fmt.Errorf("%w: the request message gave an empty key", ErrNoKey)
		}
		return k, nil
	}
}
