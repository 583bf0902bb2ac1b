package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/spigot-go/spigot/grpclimit"
)

// peerCtx returns the context of a call from addr (a TCP address, or a
// Unix socket's path) with x-forwarded-for values xff.
func peerCtx(addr string, xff ...string) context.Context {
	var a net.Addr = &net.UnixAddr{Name: addr, Net: "unix"}
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		a = net.TCPAddrFromAddrPort(ap)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: a})
	md := metadata.MD{}
	for _, v := range xff {
		md.Append("x-forwarded-for", v)
	}
	return metadata.NewIncomingContext(ctx, md)
}

// TestPeerIP: the walk back through x-forwarded-for, as
// httplimit.ClientIP walks X-Forwarded-For: "" in want is ErrNoKey.
func TestPeerIP(t *testing.T) {
	lb := netip.MustParsePrefix("10.0.0.0/8")
	trust := grpclimit.TrustXForwardedFor(lb)
	require := grpclimit.RequireForwardedClient()
	many := strings.Repeat("10.0.0.1, ", grpclimit.MaxHops)
	for i, c := range []struct {
		opts []grpclimit.IPOption
		peer string
		xff  []string
		want string
	}{
		{nil, "192.0.2.1:5000", nil, "192.0.2.1"},
		{nil, "192.0.2.1:5000", []string{"203.0.113.1"}, "192.0.2.1"}, // untrusted: ignored
		{nil, "[::ffff:192.0.2.1]:5000", nil, "192.0.2.1"},
		{nil, "[2001:db8::1]:5000", nil, "2001:db8::1"},
		{[]grpclimit.IPOption{grpclimit.IPv6Prefix(64)}, "[2001:db8:1:2:3::1]:5000", nil, "2001:db8:1:2::/64"},
		{nil, "/run/grpc.sock", nil, ""},
		{[]grpclimit.IPOption{trust}, "192.0.2.1:5000", []string{"203.0.113.1"}, "192.0.2.1"}, // peer not trusted
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{"203.0.113.1"}, "203.0.113.1"},
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{"6.6.6.6, 203.0.113.1:4711"}, "203.0.113.1"},
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{"garbage, 203.0.113.1, 10.0.0.2"}, "203.0.113.1"},
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{"6.6.6.6", "[2001:db8::7]:80 , 10.9.9.9"}, "2001:db8::7"},
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{"203.0.113.1, garbage"}, ""},
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{"unknown"}, ""},
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", nil, "10.0.0.1"},
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{" \t "}, "10.0.0.1"}, // no entry
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{" , "}, ""},          // an empty entry
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{"10.0.0.3, 10.0.0.2"}, "10.0.0.3"},
		{[]grpclimit.IPOption{trust, require}, "10.0.0.1:5000", nil, ""},
		{[]grpclimit.IPOption{trust, require}, "10.0.0.1:5000", []string{"10.0.0.3, 10.0.0.2"}, ""},
		{[]grpclimit.IPOption{trust, require}, "10.0.0.1:5000", []string{"203.0.113.1"}, "203.0.113.1"},
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{"203.0.113.1, " + many[:len(many)-2]}, ""},
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{"203.0.113.1, " + strings.Repeat("10.0.0.1, ", grpclimit.MaxHops-1) + "10.0.0.1"}, ""},
		{[]grpclimit.IPOption{trust}, "10.0.0.1:5000", []string{"203.0.113.1, " + strings.Repeat("10.0.0.1, ", grpclimit.MaxHops-2) + "10.0.0.1"}, "203.0.113.1"},
		{[]grpclimit.IPOption{trust}, "/run/lb.sock", []string{"203.0.113.1"}, "203.0.113.1"}, // a proxy on a Unix socket
		{[]grpclimit.IPOption{trust}, "/run/lb.sock", nil, ""},
		{[]grpclimit.IPOption{grpclimit.TrustXForwardedFor(netip.MustParsePrefix("::ffff:10.0.0.0/104"))}, "10.0.0.1:5000", []string{"203.0.113.1"}, "203.0.113.1"},
	} {
		got, err := grpclimit.PeerIP(c.opts...)(peerCtx(c.peer, c.xff...), "/s/m", nil)
		if c.want == "" {
			if !errors.Is(err, grpclimit.ErrNoKey) {
				t.Errorf("step %d: from %s with %q: got %q, %v; want ErrNoKey", i, c.peer, c.xff, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("step %d: from %s with %q: got %q, %v; want %q", i, c.peer, c.xff, got, err, c.want)
		}
	}
	if _, err := grpclimit.PeerIP()(context.Background(), "/s/m", nil); !errors.Is(err, grpclimit.ErrNoKey) {
		t.Errorf("no peer: got %v; want ErrNoKey", err)
	}
}

// FuzzPeerIP: whatever a client sends in x-forwarded-for, behind a
// trusted proxy that appends the address it saw, the key is that
// address; and from an untrusted peer, the peer's.
func FuzzPeerIP(f *testing.F) {
	for _, s := range []string{"", "203.0.113.1", "10.0.0.1, 10.0.0.2", "[::1]:80,\t,", "\"for\"", strings.Repeat("1.1.1.1,", 40)} {
		f.Add(s)
	}
	trusted := grpclimit.PeerIP(grpclimit.TrustXForwardedFor(netip.MustParsePrefix("10.0.0.0/8")))
	f.Fuzz(func(t *testing.T, sent string) {
		if got, err := trusted(peerCtx("10.0.0.1:5000", sent, "198.51.100.7"), "/s/m", nil); err != nil || got != "198.51.100.7" {
			t.Errorf("behind the proxy, with %q: got %q, %v; want 198.51.100.7", sent, got, err)
		}
		if got, err := trusted(peerCtx("10.0.0.1:5000", sent+", 198.51.100.7"), "/s/m", nil); err != nil || got != "198.51.100.7" {
			t.Errorf("behind the proxy, with %q on one line: got %q, %v; want 198.51.100.7", sent, got, err)
		}
		if got, err := trusted(peerCtx("192.0.2.9:5000", sent), "/s/m", nil); err != nil || got != "192.0.2.9" {
			t.Errorf("from an untrusted peer, with %q: got %q, %v; want 192.0.2.9", sent, got, err)
		}
	})
}

// TestMetadataKeys: Metadata reads the first value of its key, in lower
// case; a call without it has no key. FullMethod and Message key by the
// method and the request.
func TestMetadataKeys(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "k1", "x-api-key", "k2", "x-empty", ""))
	for i, c := range []struct {
		f    grpclimit.KeyFunc
		req  any
		want string
	}{
		{grpclimit.Metadata("X-Api-Key"), nil, "k1"},
		{grpclimit.Metadata("x-tenant"), nil, ""},
		{grpclimit.Metadata("x-empty"), nil, ""},
		{grpclimit.FullMethod(), nil, "/s/m"},
		{grpclimit.Message(func(req any) (string, error) { return req.(string), nil }), "acct-1", "acct-1"},
		{grpclimit.Message(func(req any) (string, error) { return req.(string), nil }), nil, ""}, // a stream
		{grpclimit.Message(func(req any) (string, error) { return req.(string), nil }), "", ""},
	} {
		got, err := c.f(ctx, "/s/m", c.req)
		if c.want == "" {
			if !errors.Is(err, grpclimit.ErrNoKey) {
				t.Errorf("step %d: got %q, %v; want ErrNoKey", i, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("step %d: got %q, %v; want %q", i, got, err, c.want)
		}
	}
}

// stringAddr is a net.Addr that is only its text.
type stringAddr string

func (a stringAddr) Network() string { return "tcp" }
func (a stringAddr) String() string  { return string(a) }

// TestPeerIPOfTCPAddr: PeerIP keys a *net.TCPAddr peer, and fails on
// one, as it does the address of the same text: zones left out, IPv4 in
// IPv6 unmapped, an IP of a length no family has, a nil IP and a nil
// address failing alike, with the same error, trusted or not.
func TestPeerIPOfTCPAddr(t *testing.T) {
	trust := grpclimit.TrustXForwardedFor(netip.MustParsePrefix("10.0.0.0/8"))
	for i, a := range []*net.TCPAddr{
		{IP: net.IPv4(192, 0, 2, 1), Port: 5000},
		{IP: net.IPv4(192, 0, 2, 1).To4(), Port: 5000},
		{IP: net.IPv4(10, 0, 0, 1), Port: 5000},
		{IP: net.ParseIP("2001:db8::1"), Port: 5000},
		{IP: net.ParseIP("fe80::1"), Port: 5000, Zone: "eth0"},
		{IP: net.ParseIP("::ffff:10.0.0.1")},
		{IP: net.IP{1, 2, 3}, Port: 5000},
		{Port: 5000},
		nil,
	} {
		for _, opts := range [][]grpclimit.IPOption{nil, {trust}, {grpclimit.IPv6Prefix(64)}} {
			key := grpclimit.PeerIP(opts...)
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-forwarded-for", "203.0.113.1"))
			got, gotErr := key(peer.NewContext(ctx, &peer.Peer{Addr: a}), "/s/M", nil)
			want, wantErr := key(peer.NewContext(ctx, &peer.Peer{Addr: stringAddr(a.String())}), "/s/M", nil)
			if got != want || (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
				t.Errorf("step %d: %v: got %q, %v; want %q, %v as for its text %q", i, a, got, gotErr, want, wantErr, a.String())
			}
		}
	}
}
