package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/store/memory"
)

// A method 5 times as expensive as the others takes 5 tokens a call.
func ExampleWeight() {
	units := spigot.MustBucket("units", 10, spigot.PerMinute(10))
	policy := grpclimit.New(memory.New(),
		grpclimit.By(units, grpclimit.PeerIP(), grpclimit.Methods("/spigot.test.Echo/Echo"), grpclimit.Weight(5)),
		grpclimit.By(units, grpclimit.PeerIP(), grpclimit.Methods("/spigot.test.Other/Echo")),
	)
	conn, stop := start(policy)
	defer stop()

	echo(conn, "/spigot.test.Echo/Echo")
	echo(conn, "/spigot.test.Other/Echo")
	echo(conn, "/spigot.test.Echo/Echo")
	// Output:
	// OK ratelimit: "units";r=5;t=6
	// OK ratelimit: "units";r=4;t=6
	// ResourceExhausted ratelimit: "units";r=4;t=6 retry: 6s quota: units
}

// Behind a proxy that must name every client, a call it forwards
// without one is a key error, rather than a call keyed by the proxy's
// own address; IPv6 clients are keyed by their /64.
func ExampleRequireForwardedClient() {
	key := grpclimit.PeerIP(
		grpclimit.TrustXForwardedFor(netip.MustParsePrefix("10.0.0.0/8")),
		grpclimit.RequireForwardedClient(),
		grpclimit.IPv6Prefix(64),
	)
	from := func(xff ...string) context.Context {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 4000}})
		return metadata.NewIncomingContext(ctx, metadata.Pairs(append([]string{"x-forwarded-for"}, xff...)...))
	}
	for _, ctx := range []context.Context{from("2001:db8:1:2:3:4:5:6"), from("10.0.0.9")} {
		k, err := key(ctx, "/spigot.test.Echo/Echo", nil)
		fmt.Printf("%q %v\n", k, err)
	}
	// Output:
	// "2001:db8:1:2::/64" <nil>
	// "" spigot: grpclimit: no key: every address of x-forwarded-for is in a trusted network
}

// A call without the metadata its rule keys by gets the status you
// choose instead of InvalidArgument: here Unauthenticated.
func ExampleWithKeyErrorHandler() {
	perTenant := spigot.MustBucket("per-tenant", 10, spigot.PerSecond(10))
	policy := grpclimit.New(memory.New(),
		grpclimit.By(perTenant, grpclimit.Metadata("x-api-key")),
		grpclimit.WithKeyErrorHandler(func(ctx context.Context, fullMethod string, err error) error {
			return status.Error(codes.Unauthenticated, "an x-api-key is required")
		}),
	)
	conn, stop := start(policy)
	defer stop()

	echo(conn, "/spigot.test.Echo/Echo")
	echo(conn, "/spigot.test.Echo/Echo", "x-api-key", "k1")
	// Output:
	// Unauthenticated
	// OK ratelimit: "per-tenant";r=9;t=1
}

// An observer sees each decided call: its method, the limits that
// applied and how the store decided (for metrics, see
// otelspigot/otelgrpclimit). It never sees a call no rule applies to.
func ExampleWithObserver() {
	api := spigot.MustBucket("api", 1, spigot.PerMinute(1))
	policy := grpclimit.New(memory.New(),
		grpclimit.By(api, grpclimit.PeerIP(), grpclimit.Methods("/spigot.test.Echo/")),
		grpclimit.WithObserver(func(ctx context.Context, res *grpclimit.Result) {
			fmt.Println(res.FullMethod, res.Limits[res.Decision.By].Name(), res.Decision.Allowed(), res.Err)
		}),
	)
	conn, stop := start(policy)
	defer stop()

	for _, m := range []string{"/spigot.test.Echo/Echo", "/spigot.test.Echo/Echo", "/spigot.test.Other/Echo"} {
		err := conn.Invoke(context.Background(), m, wrapperspb.String("hi"), new(wrapperspb.StringValue))
		fmt.Println(status.Code(err))
	}
	// Output:
	// /spigot.test.Echo/Echo api true <nil>
	// OK
	// /spigot.test.Echo/Echo api false <nil>
	// ResourceExhausted
	// OK
}

// A batch call costs its client the items it carries: here the length
// of the request's string.
func ExampleWithClientCost() {
	items := spigot.MustBucket("items", 10, spigot.PerMinute(10))
	c := grpclimit.NewClient(spigot.New(memory.New(), items), grpclimit.WithoutWaiting(),
		grpclimit.WithClientCost(func(ctx context.Context, fullMethod string, req any) (int64, error) {
			return int64(len(req.(*wrapperspb.StringValue).GetValue())), nil
		}))
	conn, stop := start(nil, grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()))
	defer stop()

	for _, batch := range []string{"abcdef", "ghij", "k"} {
		err := conn.Invoke(context.Background(), "/spigot.test.Echo/Echo", wrapperspb.String(batch), new(wrapperspb.StringValue))
		fmt.Println(batch, status.Code(err))
	}
	// Output:
	// abcdef OK
	// ghij OK
	// k ResourceExhausted
}
