package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/grpclimit"
)

// The test service, without generated code: a unary Echo and a
// bidirectional stream Chat over wrapperspb.StringValue, in
// spigot.test.Echo, and the same Echo in spigot.test.Other.
const (
	echoMethod  = "/spigot.test.Echo/Echo"
	chatMethod  = "/spigot.test.Echo/Chat"
	otherMethod = "/spigot.test.Other/Echo"
)

// counter counts the calls that reached a handler.
type counter struct{ n atomic.Int64 }

func serviceDesc(name string) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: name,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Echo",
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(_ context.Context, req any) (any, error) {
					srv.(*counter).n.Add(1)
					return wrapperspb.String(req.(*wrapperspb.StringValue).GetValue()), nil
				}
				if ic == nil {
					return h(ctx, in)
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + name + "/Echo"}, h)
			},
		}},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Chat",
			ServerStreams: true,
			ClientStreams: true,
			Handler: func(srv any, ss grpc.ServerStream) error {
				srv.(*counter).n.Add(1)
				for {
					m := new(wrapperspb.StringValue)
					if err := ss.RecvMsg(m); err == io.EOF {
						return nil
					} else if err != nil {
						return err
					}
					if err := ss.SendMsg(m); err != nil {
						return err
					}
				}
			},
		}},
	}
}

var chatDesc = &serviceDesc("spigot.test.Echo").Streams[0]

// startServer starts a gRPC server on 127.0.0.1, with the options opts
// and the services that register registers, and returns a client
// connection to it made with the options dialOpts, and a func that closes
// the connection, stops the server and returns Serve's error. It panics
// if it cannot listen or make the connection.
func startServer(register func(*grpc.Server), opts []grpc.ServerOption, dialOpts ...grpc.DialOption) (*grpc.ClientConn, func() error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(opts...)
	register(srv)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	return conn, func() error {
		conn.Close()
		srv.Stop()
		return <-done
	}
}

// registerTest registers the test services, spigot.test.Echo and
// spigot.test.Other, whose handlers count the calls they serve in c.
func registerTest(c *counter) func(*grpc.Server) {
	return func(srv *grpc.Server) {
		srv.RegisterService(serviceDesc("spigot.test.Echo"), c)
		srv.RegisterService(serviceDesc("spigot.test.Other"), c)
	}
}

// stopAtCleanup stops a server of startServer when tb ends.
func stopAtCleanup(tb testing.TB, stop func() error) {
	tb.Cleanup(func() {
		if err := stop(); err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
}

// serve starts a gRPC server on 127.0.0.1 with l's interceptors and the
// test services, and returns a client connected to it and the counter of
// the calls its handlers served.
// Interceptors of outer go before l's.
func serve(t *testing.T, l *grpclimit.Server, outer ...grpc.UnaryServerInterceptor) (*grpc.ClientConn, *counter) {
	t.Helper()
	c := &counter{}
	conn, stop := startServer(registerTest(c), []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(append(outer, l.UnaryServerInterceptor())...),
		grpc.ChainStreamInterceptor(l.StreamServerInterceptor()),
	})
	stopAtCleanup(t, stop)
	return conn, c
}

// call makes one unary call of method with the metadata pairs kv, and
// returns its error and its response header.
func call(t *testing.T, conn *grpc.ClientConn, method string, kv ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	var header metadata.MD
	out := new(wrapperspb.StringValue)
	err := conn.Invoke(ctx, method, wrapperspb.String("hi"), out, grpc.Header(&header))
	if err == nil && out.GetValue() != "hi" {
		t.Fatalf("%s: got %q; want the echo of %q", method, out.GetValue(), "hi")
	}
	return header, err
}

// denial is what a client reads of a denial's status: its code, message,
// RetryInfo (nil without one) and QuotaFailure (nil without one).
type denial struct {
	code  codes.Code
	msg   string
	retry *errdetails.RetryInfo
	quota *errdetails.QuotaFailure
	n     int // details
}

func readStatus(err error) denial {
	st := status.Convert(err)
	d := denial{code: st.Code(), msg: st.Message(), n: len(st.Details())}
	for _, x := range st.Details() {
		switch x := x.(type) {
		case *errdetails.RetryInfo:
			d.retry = x
		case *errdetails.QuotaFailure:
			d.quota = x
		}
	}
	return d
}

// quotaIDs returns the quota_id of each violation of q.
func quotaIDs(q *errdetails.QuotaFailure) []string {
	var ids []string
	for _, v := range q.GetViolations() {
		ids = append(ids, v.GetQuotaId())
	}
	return ids
}

// one returns the only value of md[key], or "" with a test error.
func one(t *testing.T, step int, md metadata.MD, key string) string {
	t.Helper()
	if v := md.Get(key); len(v) == 1 {
		return v[0]
	} else if len(v) > 1 {
		t.Errorf("step %d: %s has %d values %q; want 1", step, key, len(v), v)
	}
	return ""
}

// brokenStore fails every call, as a store whose server is down.
type brokenStore struct{}

var errDown = errors.New("spigot: test: the store is down at 10.1.2.3:6379")

func (brokenStore) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	return spigot.Decision{}, errDown
}

func (brokenStore) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return errDown
}
