package grpclimit_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/store/memory"
)

// The limits of the benchmarks: roomy admits every call, and tight,
// drained before the timer starts, denies every one.
var (
	roomy = spigot.MustBucket("bench", 1_000_000_000, spigot.Per(1_000_000, time.Microsecond))
	tight = spigot.MustBucket("tight", 1, spigot.PerHour(1))
)

// Their ratelimit-policy metadata, as a person writes it by hand.
var policies = map[spigot.Limit]string{
	roomy: `"bench";q=1000000000;w=1`,
	tight: `"tight";q=1;w=3600`,
}

// byHand returns a unary handler that limits its calls by limit in s, by
// hand, before it calls next: it keys them by the peer's address, takes
// a token, and denies with ResourceExhausted and a RetryInfo. With md,
// it also sets the rate-limit metadata that the interceptor sets.
// With quota, its denial says what the interceptor's does: the message
// names the limit and the wait, and a QuotaFailure follows the RetryInfo.
func byHand(s spigot.Store, limit spigot.Limit, md, quota bool, next grpc.UnaryHandler) grpc.UnaryHandler {
	policy := policies[limit]
	prefix := strconv.Quote(limit.Name()) + ";r="
	return func(ctx context.Context, req any) (any, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return nil, status.Error(codes.InvalidArgument, "no peer")
		}
		ap, err := netip.ParseAddrPort(p.Addr.String())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, "no peer address")
		}
		d, err := s.Do(ctx, spigot.Op{Limit: limit, Key: ap.Addr().Unmap().String(), Action: spigot.Take, N: 1})
		if err != nil {
			return nil, status.Error(codes.Unavailable, "rate limiter unavailable")
		}
		if md {
			b := make([]byte, 0, 64)
			b = append(b, prefix...)
			b = strconv.AppendInt(b, d.Remaining, 10)
			if d.RefillAfter > 0 {
				b = append(b, ";t="...)
				b = strconv.AppendInt(b, int64((d.RefillAfter+time.Second-1)/time.Second), 10)
			}
			_ = grpc.SetHeader(ctx, metadata.MD{"ratelimit-policy": {policy}, "ratelimit": {string(b)}})
		}
		if !d.Allowed() && quota {
			st, _ := status.New(codes.ResourceExhausted, "too many requests ("+limit.Name()+"): retry in "+d.RetryAfter.String()).WithDetails(
				&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)},
				&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
					QuotaId: limit.Name(), QuotaValue: limit.Capacity(), Description: "the limit " + strconv.Quote(limit.Name()) + " is exhausted",
				}}})
			return nil, st.Err()
		}
		if !d.Allowed() {
			st, _ := status.New(codes.ResourceExhausted, "too many requests").WithDetails(
				&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
			return nil, st.Err()
		}
		return next(ctx, req)
	}
}

// withoutR returns a ratelimit member without the digits of its r.
func withoutR(s string) string {
	i := strings.Index(s, ";r=")
	if i < 0 {
		return s
	}
	j := i + 3
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	return s[:i+3] + s[j:]
}

// benchEcho is the handler the benchmarks limit.
func benchEcho(_ context.Context, req any) (any, error) { return req, nil }

// A benchCase is one way to limit a call in process.
type benchCase struct {
	op   string
	call grpc.UnaryHandler
}

// inProcess returns the ways to limit a call by limit in s: by hand
// without metadata, by hand, with the interceptor, and, when limit is
// tight, by hand with the interceptor's denial. The last one answers as
// the interceptor does.
func inProcess(s spigot.Store, limit spigot.Limit) []benchCase {
	ic := grpclimit.New(s, grpclimit.By(limit, grpclimit.PeerIP())).UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: echoMethod}
	cases := []benchCase{
		{"hand-nomd", byHand(s, limit, false, false, benchEcho)},
		{"hand", byHand(s, limit, true, false, benchEcho)},
		{"interceptor", func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, benchEcho) }},
	}
	if limit == tight {
		cases = append(cases, benchCase{"hand-quota", byHand(s, limit, true, true, benchEcho)})
	}
	return cases
}

// transportStream is what the benchmarks' contexts hold for
// grpc.SetHeader: it joins the header as gRPC's transport stream does.
type transportStream struct{ header metadata.MD }

func (s *transportStream) Method() string { return echoMethod }

func (s *transportStream) SetHeader(md metadata.MD) error {
	if md.Len() > 0 {
		s.header = metadata.Join(s.header, md)
	}
	return nil
}

func (s *transportStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *transportStream) SetTrailer(metadata.MD) error    { return nil }

// BenchmarkInterceptor measures a unary call through the server
// interceptor on the memory store, one rule keyed by PeerIP
// (op=interceptor), against the same handler limiting itself by hand
// with the same metadata (op=hand) and without it (op=hand-nomd), and
// for a denial with the same message and details (op=hand-quota), in
// process (a call of the interceptor's function, as the server makes it,
// with a peer and a stream in its context), admitted and denied, and
// over gRPC on loopback (admitted; op=none serves unlimited). Compare in
// one run:
//
//	go test -run='^$' -bench=Interceptor -benchmem -count=6 github.com/spigot-go/spigot/grpclimit | tee /tmp/ic.txt
//	benchstat -col /op /tmp/ic.txt
func BenchmarkInterceptor(b *testing.B) {
	ts := &transportStream{}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 54321}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, ts)
	req := wrapperspb.String("hi")
	for _, c := range []struct {
		name  string
		limit spigot.Limit
	}{{"admitted", roomy}, {"denied", tight}} {
		// Check, on a store at a fixed instant, that by hand and the
		// interceptor answer alike: the same metadata (but for
		// remaining tokens), and the same denial.
		check := inProcess(memory.New(memory.WithClock(clocktest.New(t0))), c.limit)
		var headers [2]metadata.MD
		var errs [2]error
		for i, h := range []func(context.Context, any) (any, error){check[len(check)-1].call, check[2].call} {
			_, _ = h(ctx, req)
			ts.header = nil
			_, errs[i] = h(ctx, req)
			headers[i] = ts.header
		}
		for _, k := range []string{"ratelimit-policy", "ratelimit"} {
			if hand, ic := headers[0].Get(k), headers[1].Get(k); len(hand) != 1 || len(ic) != 1 || withoutR(hand[0]) != withoutR(ic[0]) {
				b.Fatalf("%s: by hand %s %q; the interceptor's %q", c.name, k, hand, ic)
			}
		}
		if hand, ic := status.Convert(errs[0]).Proto(), status.Convert(errs[1]).Proto(); !proto.Equal(hand, ic) {
			b.Fatalf("%s: by hand %v; the interceptor %v", c.name, hand, ic)
		}

		for _, h := range inProcess(memory.New(), c.limit) {
			_, _ = h.call(ctx, req) // the key's state exists (tight is drained) before the timer starts
			b.Run("inprocess/"+c.name+"/op="+h.op, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					ts.header = nil
					_, _ = h.call(ctx, req)
				}
			})
		}
	}

	// Over gRPC on loopback, each way on a server of its own, connected
	// before the timer starts; the order turns from one run to the next,
	// so that none is always the first or the last of a round.
	s := memory.New()
	l := grpclimit.New(s, grpclimit.By(roomy, grpclimit.PeerIP()))
	type server struct {
		op   string
		conn *grpc.ClientConn
	}
	servers := []server{
		{"none", benchServe(b, benchEcho)},
		{"hand", benchServe(b, byHand(s, roomy, true, false, benchEcho))},
		{"interceptor", benchServe(b, benchEcho, grpc.UnaryInterceptor(l.UnaryServerInterceptor()))},
	}
	for _, sv := range servers {
		if err := sv.conn.Invoke(context.Background(), echoMethod, req, new(wrapperspb.StringValue)); err != nil {
			b.Fatal(err)
		}
	}
	rounds++
	for i := range servers {
		sv := servers[(i+rounds)%len(servers)]
		b.Run("loopback/admitted/op="+sv.op, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(4) // calls in flight: 4 per core
			b.RunParallel(func(pb *testing.PB) {
				req, out := wrapperspb.String("hi"), new(wrapperspb.StringValue)
				for pb.Next() {
					if err := sv.conn.Invoke(context.Background(), echoMethod, req, out); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// rounds counts the runs of BenchmarkInterceptor.
var rounds int

// benchServe starts a gRPC server on 127.0.0.1 whose Echo method is h,
// and returns a client connected to it.
func benchServe(b *testing.B, h grpc.UnaryHandler, opts ...grpc.ServerOption) *grpc.ClientConn {
	b.Helper()
	conn, stop := startServer(func(srv *grpc.Server) {
		srv.RegisterService(&grpc.ServiceDesc{
			ServiceName: "spigot.test.Echo",
			HandlerType: (*any)(nil),
			Methods: []grpc.MethodDesc{{
				MethodName: "Echo",
				Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
					in := new(wrapperspb.StringValue)
					if err := dec(in); err != nil {
						return nil, err
					}
					if ic == nil {
						return h(ctx, in)
					}
					return ic(ctx, in, &grpc.UnaryServerInfo{FullMethod: echoMethod}, h)
				},
			}},
		}, nil)
	}, opts)
	stopAtCleanup(b, stop)
	return conn
}
