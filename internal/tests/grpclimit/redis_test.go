// Package grpclimit_test runs grpclimit's interceptors on real gRPC
// servers that share one real redis-server.
package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
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
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	spigotredis "github.com/spigot-go/spigot/store/redis"
)

// TestMain turns off go-redis's logging and says how many tests were
// skipped for want of a server binary.
func TestMain(m *testing.M) { testclient.Main(m) }

const (
	service    = "spigot.test.Echo"
	echoMethod = "/spigot.test.Echo/Echo"
	chatMethod = "/spigot.test.Echo/Chat"
)

// echoService is a unary Echo and a bidirectional stream Chat over
// wrapperspb.StringValue, without generated code; served counts the calls
// that reached a handler.
func echoService(served *atomic.Int64) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Echo",
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(_ context.Context, req any) (any, error) {
					served.Add(1)
					return req, nil
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: echoMethod}, h)
			},
		}},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Chat",
			ServerStreams: true,
			ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				served.Add(1)
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

// replica starts a gRPC server on 127.0.0.1 behind l's interceptors, and
// returns a client of it and the count of calls it served.
func replica(t *testing.T, l *grpclimit.Server) (*grpc.ClientConn, *atomic.Int64) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(l.StreamServerInterceptor()),
	)
	served := new(atomic.Int64)
	srv.RegisterService(echoService(served), struct{}{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, served
}

func call(conn *grpc.ClientConn, kv ...string) (metadata.MD, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	var header metadata.MD
	err := conn.Invoke(ctx, echoMethod, wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Header(&header))
	return header, err
}

// TestSharedRedis: two server instances, each with its own Server on its
// own client of one redis-server, share each limit: 64 concurrent calls
// spread over both admit exactly the capacity, the per-tenant limit
// stops a tenant on either replica without charging the per-address
// limit, a denial's RetryInfo is the wait the server's clock gives, and
// streams opened on both replicas share their limit too.
func TestSharedRedis(t *testing.T) {
	srv := testserver.Start(t, testserver.Redis)
	perPeer := spigot.MustBucket("grpc-peer", 10, spigot.PerHour(10))
	perTenant := spigot.MustBucket("grpc-tenant", 4, spigot.PerHour(4))
	streams := spigot.MustBucket("grpc-streams", 3, spigot.PerHour(3))
	conns := make([]*grpc.ClientConn, 2)
	served := make([]*atomic.Int64, 2)
	for i := range conns {
		remote := spigotredis.New(testclient.GoRedis(t, srv.Addr), store.WithPrefix("grpclimit:"))
		conns[i], served[i] = replica(t, grpclimit.New(remote,
			grpclimit.By(perPeer, grpclimit.PeerIP(), grpclimit.Methods(echoMethod)),
			grpclimit.By(perTenant, grpclimit.Metadata("x-tenant"), grpclimit.Methods(echoMethod)),
			grpclimit.By(streams, grpclimit.PeerIP(), grpclimit.Methods(chatMethod)),
		))
	}

	// Tenant a: 4 of 16 calls over both replicas, concurrently; each of
	// its 12 denials names the tenant's limit alone.
	var (
		wg             sync.WaitGroup
		ok, denied     atomic.Int64
		wrongViolation atomic.Int64
	)
	for g := range 16 {
		wg.Go(func() {
			_, err := call(conns[g%2], "x-tenant", "a")
			switch st := status.Convert(err); st.Code() {
			case codes.OK:
				ok.Add(1)
			case codes.ResourceExhausted:
				denied.Add(1)
				for _, d := range st.Details() {
					if q, isQ := d.(*errdetails.QuotaFailure); isQ && (len(q.Violations) != 1 || q.Violations[0].GetQuotaId() != "grpc-tenant") {
						wrongViolation.Add(1)
					}
				}
			default:
				t.Errorf("got %v; want OK or ResourceExhausted", err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 4 || denied.Load() != 12 || wrongViolation.Load() != 0 {
		t.Errorf("tenant a: got %d admitted, %d denied, %d naming another limit; want 4, 12, 0", ok.Load(), denied.Load(), wrongViolation.Load())
	}

	// The peer's limit lost only those 4: 6 more, of 48 calls from many
	// tenants over both replicas.
	ok.Store(0)
	var retries []time.Duration
	var mu sync.Mutex
	for g := range 48 {
		wg.Go(func() {
			header, err := call(conns[g%2], "x-tenant", "t"+strconv.Itoa(g))
			if err == nil {
				ok.Add(1)
				return
			}
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("got %v; want OK or ResourceExhausted", err)
				return
			}
			for _, d := range status.Convert(err).Details() {
				if r, isR := d.(*errdetails.RetryInfo); isR {
					mu.Lock()
					retries = append(retries, r.GetRetryDelay().AsDuration())
					mu.Unlock()
				}
			}
			if len(header.Get("ratelimit")) != 1 {
				t.Errorf("a denial's header: %v; want one ratelimit value", header)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 6 || len(retries) != 42 {
		t.Errorf("48 tenants: got %d admitted, %d RetryInfo; want 6, 42", ok.Load(), len(retries))
	}
	// A token of the peer's limit every 6 minutes: the first comes back
	// at most 6 minutes after the first call took it, on the server's
	// clock, and the test ran for far less than a minute since.
	for _, r := range retries {
		if r > 6*time.Minute || r < 5*time.Minute {
			t.Errorf("got RetryInfo %v; want a little under 6m", r)
			break
		}
	}
	// Which replica serves which of the 10 is the scheduler's choice; that
	// they share the limits is shown above, by 4 of tenant a's calls over
	// both (each replica alone would have admitted 4).
	if n := served[0].Load() + served[1].Load(); n != 10 {
		t.Errorf("the replicas served %d and %d calls; want 10 in all", served[0].Load(), served[1].Load())
	}

	// Streams: 3 of 6 open over both replicas.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	desc := &echoService(nil).Streams[0]
	opened := 0
	for i := range 6 {
		st, err := conns[i%2].NewStream(ctx, desc, chatMethod)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(wrapperspb.String("m")); err == nil {
			err = st.RecvMsg(new(wrapperspb.StringValue))
			switch status.Code(err) {
			case codes.OK:
				opened++
			case codes.ResourceExhausted:
			default:
				t.Errorf("stream %d: got %v; want OK or ResourceExhausted", i, err)
			}
		}
		st.CloseSend()
	}
	if opened != 3 {
		t.Errorf("opened %d streams of 6; want 3", opened)
	}
}

// TestClientsShareRedis: two clients of one server, each a process of its
// own (its own connection, grpclimit.Client, spigot.Limiter and client of one
// redis-server), send together no more calls than their shared bucket
// holds: of 128 concurrent calls, exactly its capacity reach the server;
// one client does not wait, the other waits up to a deadline that falls
// before the next token, so both deny the rest at once.
func TestClientsShareRedis(t *testing.T) {
	srv := testserver.Start(t, testserver.Redis)
	partner := spigot.MustBucket("grpc-partner", 20, spigot.PerHour(20))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	arrived := new(atomic.Int64)
	pass := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		return h(ctx, req)
	}
	server := grpc.NewServer(grpc.UnaryInterceptor(pass))
	server.RegisterService(echoService(arrived), struct{}{})
	done := make(chan error, 1)
	go func() { done <- server.Serve(lis) }()
	t.Cleanup(func() {
		server.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	conns := make([]*grpc.ClientConn, 2)
	for i := range conns {
		remote := spigotredis.New(testclient.GoRedis(t, srv.Addr), store.WithPrefix("grpclimit-client:"))
		opts := []grpclimit.Option{}
		if i == 0 {
			opts = append(opts, grpclimit.WithoutWaiting())
		}
		c := grpclimit.NewClient(spigot.New(remote, partner), opts...)
		conns[i], err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conns[i].Close() })
	}

	var wg sync.WaitGroup
	var sent, limited atomic.Int64
	for g := range 64 {
		wg.Go(func() {
			for range 2 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := conns[g%2].Invoke(ctx, echoMethod, wrapperspb.String("hi"), new(wrapperspb.StringValue))
				cancel()
				switch {
				case err == nil:
					sent.Add(1)
				case errors.Is(err, grpclimit.ErrLimited):
					limited.Add(1)
				default:
					t.Errorf("client %d: got %v; want the call sent or a *LimitedError", g%2, err)
				}
			}
		})
	}
	wg.Wait()
	if sent.Load() != 20 || limited.Load() != 108 || arrived.Load() != 20 {
		t.Errorf("got %d sent, %d limited, %d reached the server; want 20, 108, 20", sent.Load(), limited.Load(), arrived.Load())
	}
}
