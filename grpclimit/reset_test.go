package grpclimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/store/memory"
)

const loginMethod = "/spigot.test.Login/Login"

// loginDesc is a unary Login whose handler, by the request's value,
// fails ("bad"), succeeds and resets the per-user limit ("ok"), or fails
// before doing the work and refunds the call ("busy").
func loginDesc(lim *grpclimit.Server, perUser spigot.Limit, errs chan<- error) *grpc.ServiceDesc {
	handle := func(ctx context.Context, req any) (any, error) {
		switch v := req.(*wrapperspb.StringValue).GetValue(); v {
		case "ok":
			if _, err := lim.Reset(ctx, req, perUser); err != nil {
				errs <- err
			}
			return wrapperspb.String(v), nil
		case "busy":
			if err := lim.Refund(ctx, req); err != nil {
				errs <- err
			}
			return nil, status.Error(codes.Unavailable, "busy")
		}
		return nil, status.Error(codes.Unauthenticated, "wrong password")
	}
	return loginService(handle)
}

// loginService is spigot.test.Login with handle as its unary Login,
// behind the server's interceptors when it has any.
func loginService(handle grpc.UnaryHandler) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "spigot.test.Login",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Login",
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				if ic == nil {
					return handle(ctx, in)
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: loginMethod}, handle)
			},
		}},
	}
}

// TestResetAndRefund: a handler resets the per-user limit after a
// successful login and refunds a call it could not serve, from the call's
// context, with the keys the rules read from it; each step's code is what
// the client sees.
func TestResetAndRefund(t *testing.T) {
	store := memory.New()
	perUser := spigot.MustBucket("login-user", 3, spigot.Per(3, time.Hour))
	perIP := spigot.MustBucket("login-ip", 8, spigot.Per(8, time.Hour))
	lim := grpclimit.New(store,
		grpclimit.By(perUser, grpclimit.Metadata("user"), grpclimit.Methods(loginMethod)),
		grpclimit.By(perIP, grpclimit.PeerIP()),
	)
	errs := make(chan error, 16)
	conn, stop := startServer(func(srv *grpc.Server) {
		srv.RegisterService(loginDesc(lim, perUser, errs), nil)
	}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor())})
	stopAtCleanup(t, stop)

	login := func(user, password string) codes.Code {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "user", user)
		err := conn.Invoke(ctx, loginMethod, wrapperspb.String(password), new(wrapperspb.StringValue))
		return status.Code(err)
	}
	for i, st := range []struct {
		user, password string
		want           codes.Code
	}{
		{"ann", "bad", codes.Unauthenticated},
		{"ann", "bad", codes.Unauthenticated},
		{"ann", "ok", codes.OK}, // the third of ann's 3: and her limit is full again
		{"ann", "bad", codes.Unauthenticated},
		{"ann", "bad", codes.Unauthenticated},
		{"ann", "bad", codes.Unauthenticated},
		{"ann", "bad", codes.ResourceExhausted}, // 3 failures since the reset
		// The per-address limit has counted ann's 6 admitted calls (all or
		// nothing: not the denied one).
		{"bob", "busy", codes.Unavailable}, // refunded: bob's and the address's
		{"bob", "busy", codes.Unavailable},
		{"bob", "bad", codes.Unauthenticated}, // the address's 7th of 8
		{"bob", "bad", codes.Unauthenticated},
		{"bob", "bad", codes.ResourceExhausted}, // the address's 8 are spent
	} {
		if got := login(st.user, st.password); got != st.want {
			t.Errorf("step %d: %s %q: got %v; want %v", i, st.user, st.password, got, st.want)
		}
	}
	close(errs)
	for err := range errs {
		t.Errorf("handler: %v", err)
	}
	// bob's two refunded calls were given back: his two failures count.
	d, err := store.Do(context.Background(), spigot.Op{Limit: perUser, Key: "bob", Action: spigot.Peek})
	if err != nil || d.Remaining != 1 {
		t.Errorf("bob's limit: %+v, %v; want 1 remaining", d, err)
	}
}

// TestResetErrors: Reset and Refund outside a gRPC call, and Reset of a
// limit that no rule applies to the call, are errors that change nothing.
func TestResetErrors(t *testing.T) {
	perUser := spigot.MustBucket("errs-user", 3, spigot.PerSecond(1))
	other := spigot.MustBucket("errs-other", 3, spigot.PerSecond(1))
	lim := grpclimit.New(memory.New(), grpclimit.By(perUser, grpclimit.Metadata("user"), grpclimit.Methods(loginMethod)))
	ctx := context.Background()
	if _, err := lim.Reset(ctx, wrapperspb.String("x"), perUser); err == nil || !strings.HasPrefix(err.Error(), "spigot: grpclimit: Reset:") {
		t.Errorf("Reset outside a call: %v; want a grpclimit error", err)
	}
	if err := lim.Refund(ctx, wrapperspb.String("x")); err == nil || !strings.HasPrefix(err.Error(), "spigot: grpclimit: Refund:") {
		t.Errorf("Refund outside a call: %v; want a grpclimit error", err)
	}

	errs := make(chan error, 4)
	handle := func(ctx context.Context, req any) (any, error) {
		_, err := lim.Reset(ctx, req, other)
		errs <- err
		_, err = lim.Reset(ctx, req, perUser) // no user metadata: a key error
		errs <- err
		return wrapperspb.String("done"), nil
	}
	conn, stop := startServer(func(srv *grpc.Server) {
		srv.RegisterService(loginService(handle), nil)
	}, nil)
	stopAtCleanup(t, stop)
	if err := conn.Invoke(ctx, loginMethod, wrapperspb.String("x"), new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err == nil || !strings.Contains(err.Error(), "no rule applies") {
		t.Errorf("Reset of a limit no rule has: %v; want an error saying no rule applies it", err)
	}
	var re *grpclimit.RequestError
	if err := <-errs; !errors.As(err, &re) || re.Part != "key" {
		t.Errorf("Reset of a call without the rule's key: %v; want a RequestError of its key", err)
	}
}
