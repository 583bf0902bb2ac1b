package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/store/memory"
)

// start serves the test services (spigot.test.Echo's Echo and Chat,
// spigot.test.Other's Echo) on 127.0.0.1 behind l's interceptors (none
// when l is nil), and returns a client connection made with the options
// opts and a func that stops both.
func start(l *grpclimit.Server, opts ...grpc.DialOption) (*grpc.ClientConn, func()) {
	var srvOpts []grpc.ServerOption
	if l != nil {
		srvOpts = append(srvOpts,
			grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(l.StreamServerInterceptor()))
	}
	conn, stop := startServer(registerTest(&counter{}), srvOpts, opts...)
	return conn, func() { stop() }
}

// echo calls method with the metadata pairs kv, and prints the status
// code, the ratelimit metadata and the denial's details (RetryInfo to the
// second: the stores of the examples run on the system clock).
func echo(conn *grpc.ClientConn, method string, kv ...string) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
	var header metadata.MD
	err := conn.Invoke(ctx, method, wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Header(&header))
	printStatus(err, header)
}

func printStatus(err error, header metadata.MD) {
	st := status.Convert(err)
	fmt.Print(st.Code())
	if v := header.Get("ratelimit"); len(v) > 0 {
		fmt.Printf(" ratelimit: %s", v[0])
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			fmt.Printf(" retry: %v", d.GetRetryDelay().AsDuration().Round(time.Second))
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				fmt.Printf(" quota: %s", v.GetQuotaId())
			}
		}
	}
	fmt.Println()
}

// A service limited per client address: 3 calls at once, then 1 a
// second. Every connection of a client shares its key. A denial is
// ResourceExhausted, with the exact wait in RetryInfo and the limit in
// QuotaFailure; every limited call has the ratelimit metadata in its
// header. (The store runs on a fake clock here, so that the wait printed
// is exact.)
func Example() {
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	api := spigot.MustBucket("api", 3, spigot.PerSecond(1))
	policy := grpclimit.New(memory.New(memory.WithClock(clk)), grpclimit.By(api, grpclimit.PeerIP()))
	conn, stop := start(policy)
	defer stop()

	for range 4 {
		echo(conn, "/spigot.test.Echo/Echo")
	}
	clk.Advance(300 * time.Millisecond)
	err := conn.Invoke(context.Background(), "/spigot.test.Echo/Echo", wrapperspb.String("hi"), new(wrapperspb.StringValue))
	fmt.Println(status.Code(err), retryOf(err))
	fmt.Println(status.Convert(err).Message())
	// Output:
	// OK ratelimit: "api";r=2;t=1
	// OK ratelimit: "api";r=1;t=1
	// OK ratelimit: "api";r=0;t=1
	// ResourceExhausted ratelimit: "api";r=0;t=1 retry: 1s quota: api
	// ResourceExhausted 700ms
	// too many requests (api): retry in 700ms
}

// Rules for some methods only: a service's prefix, or one method. A call
// that no rule applies to passes untouched, without rate-limit metadata;
// one that several apply to takes from all of them, or from none.
func ExampleMethods() {
	orders := spigot.MustBucket("orders", 100, spigot.PerMinute(100))
	cancels := spigot.MustBucket("cancels", 1, spigot.PerHour(1))
	policy := grpclimit.New(memory.New(),
		grpclimit.By(orders, grpclimit.PeerIP(), grpclimit.Methods("/spigot.test.Echo/")),
		grpclimit.By(cancels, grpclimit.PeerIP(), grpclimit.Methods("/spigot.test.Echo/Echo")),
	)
	conn, stop := start(policy)
	defer stop()

	echo(conn, "/spigot.test.Echo/Echo")
	echo(conn, "/spigot.test.Echo/Echo")
	echo(conn, "/spigot.test.Other/Echo")
	// Output:
	// OK ratelimit: "orders";r=99;t=1, "cancels";r=0;t=3600
	// ResourceExhausted ratelimit: "orders";r=99;t=1, "cancels";r=0;t=3600 retry: 1h0m0s quota: cancels
	// OK
}

// A per-tenant limit, keyed by the tenant the client names in its
// metadata, beside a per-address one against clients that make tenants
// up. A call without the metadata is InvalidArgument, and costs nothing.
func ExampleMetadata() {
	perAddress := spigot.MustBucket("ip", 100, spigot.PerMinute(100))
	perTenant := spigot.MustBucket("tenant", 2, spigot.PerHour(2))
	policy := grpclimit.New(memory.New(),
		grpclimit.By(perAddress, grpclimit.PeerIP()),
		grpclimit.By(perTenant, grpclimit.Metadata("x-tenant")),
	)
	conn, stop := start(policy)
	defer stop()

	echo(conn, "/spigot.test.Echo/Echo", "x-tenant", "acme")
	echo(conn, "/spigot.test.Echo/Echo", "x-tenant", "acme")
	echo(conn, "/spigot.test.Echo/Echo", "x-tenant", "acme")
	echo(conn, "/spigot.test.Echo/Echo", "x-tenant", "initech")
	err := conn.Invoke(context.Background(), "/spigot.test.Echo/Echo", wrapperspb.String("hi"), new(wrapperspb.StringValue))
	fmt.Println(status.Code(err), status.Convert(err).Message())
	// Output:
	// OK ratelimit: "ip";r=99;t=1, "tenant";r=1;t=1800
	// OK ratelimit: "ip";r=98;t=1, "tenant";r=0;t=1800
	// ResourceExhausted ratelimit: "ip";r=98;t=1, "tenant";r=0;t=1800 retry: 30m0s quota: tenant
	// OK ratelimit: "ip";r=97;t=1, "tenant";r=1;t=1800
	// InvalidArgument the call has no key for the limit "tenant"
}

// One budget per method, shared by every client: FullMethod keys each
// method's own bucket.
func ExampleFullMethod() {
	perMethod := spigot.MustBucket("method", 1, spigot.PerHour(1))
	policy := grpclimit.New(memory.New(), grpclimit.By(perMethod, grpclimit.FullMethod()))
	conn, stop := start(policy)
	defer stop()

	echo(conn, "/spigot.test.Echo/Echo")
	echo(conn, "/spigot.test.Other/Echo")
	echo(conn, "/spigot.test.Echo/Echo")
	// Output:
	// OK ratelimit: "method";r=0;t=3600
	// OK ratelimit: "method";r=0;t=3600
	// ResourceExhausted ratelimit: "method";r=0;t=3600 retry: 1h0m0s quota: method
}

// A key read from the request message: the account a unary call names.
// The func gets the message as the handler will.
func ExampleMessage() {
	perAccount := spigot.MustBucket("account", 1, spigot.PerHour(1))
	account := func(req any) (string, error) {
		account, _, _ := strings.Cut(req.(*wrapperspb.StringValue).GetValue(), ":")
		return account, nil
	}
	policy := grpclimit.New(memory.New(), grpclimit.By(perAccount, grpclimit.Message(account), grpclimit.Methods("/spigot.test.Echo/Echo")))
	conn, stop := start(policy)
	defer stop()

	for _, body := range []string{"alice:1", "bob:1", "alice:2"} {
		var header metadata.MD
		err := conn.Invoke(context.Background(), "/spigot.test.Echo/Echo", wrapperspb.String(body), new(wrapperspb.StringValue), grpc.Header(&header))
		fmt.Print(body, " ")
		printStatus(err, header)
	}
	// Output:
	// alice:1 OK ratelimit: "account";r=0;t=3600
	// bob:1 OK ratelimit: "account";r=0;t=3600
	// alice:2 ResourceExhausted ratelimit: "account";r=0;t=3600 retry: 1h0m0s quota: account
}

// Behind a load balancer, the client's address comes from the
// x-forwarded-for entries that the trusted proxies wrote; what the client
// wrote itself is never read, and a peer outside the trusted networks is
// keyed by its own address whatever it sends.
func ExamplePeerIP() {
	key := grpclimit.PeerIP(grpclimit.TrustXForwardedFor(netip.MustParsePrefix("10.0.0.0/8")))
	from := func(addr string, xff string) context.Context {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))})
		return metadata.NewIncomingContext(ctx, metadata.Pairs("x-forwarded-for", xff))
	}
	for _, c := range []struct{ peer, xff string }{
		{"10.0.0.5:4000", "203.0.113.7"},           // the proxy saw 203.0.113.7
		{"10.0.0.5:4000", "6.6.6.6, 203.0.113.7"},  // the client wrote 6.6.6.6
		{"10.0.0.5:4000", "203.0.113.7, 10.0.0.9"}, // two trusted hops
		{"198.51.100.1:4000", "203.0.113.7"},       // no proxy: ignored
		{"[::ffff:10.0.0.5]:4000", "unknown"},      // not an address: no key
	} {
		k, err := key(from(c.peer, c.xff), "/spigot.test.Echo/Echo", nil)
		fmt.Printf("%q %v\n", k, err)
	}
	// Output:
	// "203.0.113.7" <nil>
	// "203.0.113.7" <nil>
	// "203.0.113.7" <nil>
	// "198.51.100.1" <nil>
	// "" spigot: grpclimit: no key: the x-forwarded-for entry "unknown" is not an IP address
}

// What a call costs: Weight for a method that is n times as expensive,
// Cost for one whose price the request says. A call that costs more than
// the limit ever holds is ResourceExhausted without RetryInfo.
func ExampleCost() {
	units := spigot.MustBucket("units", 10, spigot.PerMinute(10))
	size := func(_ context.Context, _ string, req any) (int64, error) {
		return int64(len(req.(*wrapperspb.StringValue).GetValue())), nil
	}
	policy := grpclimit.New(memory.New(),
		grpclimit.By(units, grpclimit.PeerIP(), grpclimit.Methods("/spigot.test.Echo/Echo"), grpclimit.Cost(size)),
		grpclimit.By(units, grpclimit.PeerIP(), grpclimit.Methods("/spigot.test.Other/"), grpclimit.Weight(5)),
	)
	conn, stop := start(policy)
	defer stop()

	for _, c := range []struct{ method, body string }{
		{"/spigot.test.Echo/Echo", "four"},
		{"/spigot.test.Other/Echo", ""},
		{"/spigot.test.Echo/Echo", "eleven char"},
	} {
		var header metadata.MD
		err := conn.Invoke(context.Background(), c.method, wrapperspb.String(c.body), new(wrapperspb.StringValue), grpc.Header(&header))
		printStatus(err, header)
	}
	// Output:
	// OK ratelimit: "units";r=6;t=6
	// OK ratelimit: "units";r=1;t=6
	// ResourceExhausted ratelimit: "units";r=1;t=6 quota: units
}

// A stream takes from its limit once, when it opens, before its handler
// runs; a denied stream's header and status come with its first
// RecvMsg.
func ExampleServer_StreamServerInterceptor() {
	streams := spigot.MustBucket("streams", 1, spigot.PerMinute(1))
	policy := grpclimit.New(memory.New(), grpclimit.By(streams, grpclimit.PeerIP(), grpclimit.Methods("/spigot.test.Echo/Chat")))
	conn, stop := start(policy)
	defer stop()

	for range 2 {
		st, err := conn.NewStream(context.Background(), chatDesc, "/spigot.test.Echo/Chat")
		if err != nil {
			panic(err)
		}
		st.SendMsg(wrapperspb.String("hi"))
		err = st.RecvMsg(new(wrapperspb.StringValue))
		st.CloseSend()
		header, _ := st.Header()
		printStatus(err, header)
	}
	// Output:
	// OK ratelimit: "streams";r=0;t=60
	// ResourceExhausted ratelimit: "streams";r=0;t=60 retry: 1m0s quota: streams
}

// retryOf returns the RetryInfo delay of err's status, or 0.
func retryOf(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			return r.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// When the store fails, calls are refused by default (Unavailable, retry
// in a second); FailOpen serves them instead, unlimited, for limits whose
// job is fairness alone.
func ExampleWithErrorHandler() {
	api := spigot.MustBucket("api", 10, spigot.PerSecond(10))
	for _, opts := range [][]grpclimit.Option{
		{grpclimit.By(api, grpclimit.PeerIP())},
		{grpclimit.By(api, grpclimit.PeerIP()), grpclimit.WithErrorHandler(grpclimit.FailOpen)},
	} {
		conn, stop := start(grpclimit.New(brokenStore{}, opts...))
		echo(conn, "/spigot.test.Echo/Echo")
		stop()
	}
	// Output:
	// Unavailable retry: 1s
	// OK
}
