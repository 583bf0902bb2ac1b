package otelgrpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
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
			Handler: func(_ any, ss grpc.ServerStream) error {
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

// start serves the test services on 127.0.0.1 behind l's interceptors,
// and returns a client connection and a func that stops both.
func start(l *grpclimit.Server) (*grpc.ClientConn, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(l.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(l.StreamServerInterceptor()),
	)
	srv.RegisterService(serviceDesc("spigot.test.Echo"), nil)
	srv.RegisterService(serviceDesc("spigot.test.Other"), nil)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		<-done
		return nil, nil, err
	}
	return conn, func() {
		conn.Close()
		srv.Stop()
		<-done
	}, nil
}

// call makes one call of method, with the metadata pairs kv: a unary
// Echo, or a Chat stream that sends one message and reads its echo back.
func call(ctx context.Context, conn *grpc.ClientConn, method string, kv ...string) error {
	if len(kv) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	if method != chatMethod {
		return conn.Invoke(ctx, method, wrapperspb.String("hi"), new(wrapperspb.StringValue))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := conn.NewStream(ctx, chatDesc, chatMethod)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(wrapperspb.String("hi")); err != nil && err != io.EOF {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		return err
	}
	if err := cs.RecvMsg(new(wrapperspb.StringValue)); err != io.EOF {
		return errors.Join(errors.New("Chat: want io.EOF after the echo"), err)
	}
	return nil
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
