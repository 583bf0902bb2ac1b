package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/memory"
)

// remote is a server for the client tests: it counts the calls that
// arrive (before its own limit, if any), and reaches is the number.
type remote struct {
	conn    *grpc.ClientConn
	arrived atomic.Int64
}

// dial starts a gRPC server on 127.0.0.1 that limits its calls by srv
// (nil: none), and connects to it through c's interceptors.
func dial(t *testing.T, srv *grpclimit.Server, c *grpclimit.Client) *remote {
	t.Helper()
	r := &remote{}
	unary := []grpc.UnaryServerInterceptor{func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		r.arrived.Add(1)
		return h(ctx, req)
	}}
	stream := []grpc.StreamServerInterceptor{func(s any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		r.arrived.Add(1)
		return h(s, ss)
	}}
	if srv != nil {
		unary = append(unary, srv.UnaryServerInterceptor())
		stream = append(stream, srv.StreamServerInterceptor())
	}
	var stop func() error
	r.conn, stop = startServer(registerTest(&counter{}),
		[]grpc.ServerOption{grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...)},
		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()))
	stopAtCleanup(t, stop)
	return r
}

// invoke makes one unary call of method through r's connection, on ctx.
func (r *remote) invoke(ctx context.Context, method string) error {
	return r.conn.Invoke(ctx, method, wrapperspb.String("hi"), new(wrapperspb.StringValue))
}

// outcome sums up a call's error: "ok", "limited " and the RetryAfter of
// a *LimitedError ("limited 1s", "limited never"), or the status code.
func outcome(err error) string {
	var le *grpclimit.LimitedError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &le) && le.RetryAfter == spigot.Never:
		return "limited never"
	case errors.As(err, &le):
		return "limited " + le.RetryAfter.String()
	}
	return status.Code(err).String()
}

// TestClientAtFixedInstants: a Client that does not wait sends the calls
// its bucket admits at fixed instants, and fails the others at once with
// a *LimitedError whose RetryAfter is the model's and whose status is
// ResourceExhausted with that RetryInfo; none of those reaches the server.
func TestClientAtFixedInstants(t *testing.T) {
	clk := clocktest.New(t0)
	partner := spigot.MustBucket("partner", 2, spigot.PerSecond(1))
	c := grpclimit.NewClient(spigot.New(memory.New(memory.WithClock(clk)), partner, spigot.WithClock(clk)),
		grpclimit.WithoutWaiting(), grpclimit.WithClock(clk))
	r := dial(t, nil, c)
	target := r.conn.Target()

	var model store.State
	steps := []struct {
		at   time.Duration
		want string
	}{
		{0, "ok"},
		{0, "ok"},
		{0, "limited 1s"},
		{250 * time.Millisecond, "limited 750ms"},
		{time.Second, "ok"},
		{1500 * time.Millisecond, "limited 500ms"},
		{5 * time.Second, "ok"},
	}
	sent := int64(0)
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		want, err := store.Apply(spigot.Op{Limit: partner, Key: target, N: 1}, &model, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		err = r.invoke(context.Background(), echoMethod)
		if got := outcome(err); got != s.want {
			t.Errorf("step %d (t0+%v): got %s (%v); want %s", i, s.at, got, err, s.want)
		}
		if want.Allowed() != (err == nil) {
			t.Errorf("step %d: the model decides allowed %v; the call got %v", i, want.Allowed(), err)
		}
		if err == nil {
			sent++
			continue
		}
		if !errors.Is(err, grpclimit.ErrLimited) {
			t.Errorf("step %d: %v does not match ErrLimited", i, err)
		}
		d := readStatus(err)
		if d.code != codes.ResourceExhausted || d.retry == nil || d.retry.GetRetryDelay().AsDuration() != want.RetryAfter {
			t.Errorf("step %d: got status %v with RetryInfo %v; want ResourceExhausted with RetryInfo %v", i, d.code, d.retry, want.RetryAfter)
		}
	}
	if n := r.arrived.Load(); n != sent {
		t.Errorf("%d calls reached the server; want %d", n, sent)
	}
}

// TestClientWaits: a waiting Client holds a call until its token is
// there, on its clock; a call whose deadline falls before that, or less
// than the margin after it, fails at once with DeadlineExceeded; a
// cancelled wait sends nothing.
func TestClientWaits(t *testing.T) {
	clk := clocktest.New(time.Now()) // deadlines are on the real clock
	partner := spigot.MustBucket("partner", 1, spigot.PerMinute(1))
	c := grpclimit.NewClient(spigot.New(memory.New(memory.WithClock(clk)), partner, spigot.WithClock(clk)),
		grpclimit.WithClock(clk))
	r := dial(t, nil, c)

	if err := r.invoke(context.Background(), echoMethod); err != nil {
		t.Fatalf("first call: %v", err)
	}

	// The deadline (10 s) falls before the token (1 min): no wait.
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(10*time.Second))
	err := r.invoke(ctx, echoMethod)
	cancel()
	var le *grpclimit.LimitedError
	if !errors.As(err, &le) || !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded || le.RetryAfter != time.Minute {
		t.Errorf("call with a 10 s deadline: got %v (status %v); want a *LimitedError of 1m0s, DeadlineExceeded", err, status.Code(err))
	}

	// Without a deadline, the call waits for the clock.
	done := make(chan error, 1)
	go func() { done <- r.invoke(context.Background(), echoMethod) }()
	awaitWaiter(t, clk, done)
	if n := r.arrived.Load(); n != 1 {
		t.Fatalf("%d calls reached the server while one waited; want 1", n)
	}
	clk.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Errorf("the call that waited: %v", err)
	}

	// The next token is a minute away, and the deadline half the margin
	// after it: no wait.
	ctx, cancel = context.WithDeadline(context.Background(), clk.Now().Add(time.Minute+grpclimit.DefaultDeadlineMargin/2))
	err = r.invoke(ctx, echoMethod)
	cancel()
	if !errors.As(err, &le) || status.Code(err) != codes.DeadlineExceeded || le.RetryAfter != time.Minute {
		t.Errorf("call with a deadline within the margin after its token: got %v (status %v); want a *LimitedError of 1m0s, DeadlineExceeded", err, status.Code(err))
	}

	// A wait that is cancelled sends nothing.
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- r.invoke(ctx, echoMethod) }()
	awaitWaiter(t, clk, done)
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("cancelled wait: got %v (status %v); want Canceled", err, status.Code(err))
	}
	if n := r.arrived.Load(); n != 2 {
		t.Errorf("%d calls reached the server; want 2", n)
	}
}

// awaitWaiter returns once a call waits on clk, and fails the test if the
// call returns first.
func awaitWaiter(t *testing.T, clk *clocktest.Clock, done <-chan error) {
	t.Helper()
	waiting := make(chan struct{})
	go func() {
		clk.BlockUntil(1)
		close(waiting)
	}()
	select {
	case <-waiting:
	case err := <-done:
		clk.After(time.Nanosecond) // lets the BlockUntil above return
		t.Fatalf("the call returned %v at once; want it to wait", err)
	}
}

// TestClientHonoursRetryInfo: a server's denial with RetryInfo holds the
// key back for exactly that delay: the Client sends nothing for it until
// then (another key is not held), and then sends again.
func TestClientHonoursRetryInfo(t *testing.T) {
	clk := clocktest.New(t0)
	// The server admits one call a minute per method; the Client's own
	// bucket never denies.
	perMethod := spigot.MustBucket("per-method", 1, spigot.PerMinute(1))
	srv := grpclimit.New(memory.New(memory.WithClock(clk)), grpclimit.By(perMethod, grpclimit.FullMethod()))
	plenty := spigot.MustBucket("plenty", 1000, spigot.PerSecond(1000))
	c := grpclimit.NewClient(spigot.New(memory.New(memory.WithClock(clk)), plenty, spigot.WithClock(clk)),
		grpclimit.WithoutWaiting(), grpclimit.WithClock(clk), grpclimit.WithClientKey(grpclimit.MethodKey))
	r := dial(t, srv, c)

	steps := []struct {
		at      time.Duration
		method  string
		want    string
		arrived int64
	}{
		{0, echoMethod, "ok", 1},
		{0, echoMethod, "ResourceExhausted", 2}, // the server's denial, RetryInfo 1m
		{0, echoMethod, "limited 1m0s", 2},      // held back by the Client
		{0, otherMethod, "ok", 3},               // another key
		{59 * time.Second, echoMethod, "limited 1s", 3},
		{time.Minute, echoMethod, "ok", 4},
	}
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		err := r.invoke(context.Background(), s.method)
		if got := outcome(err); got != s.want {
			t.Errorf("step %d (t0+%v %s): got %s (%v); want %s", i, s.at, s.method, got, err, s.want)
		}
		if n := r.arrived.Load(); n != s.arrived {
			t.Errorf("step %d: %d calls reached the server; want %d", i, n, s.arrived)
		}
	}

	// A Client without RetryInfo sends the calls the server denies.
	c2 := grpclimit.NewClient(spigot.New(memory.New(memory.WithClock(clk)), plenty, spigot.WithClock(clk)),
		grpclimit.WithoutWaiting(), grpclimit.WithClock(clk), grpclimit.WithoutRetryInfo())
	r2 := dial(t, srv, c2)
	for i := range 3 {
		if err := r2.invoke(context.Background(), echoMethod); i > 0 && status.Code(err) != codes.ResourceExhausted {
			t.Errorf("call %d without RetryInfo: got %v; want the server's ResourceExhausted", i, err)
		}
	}
	if n := r2.arrived.Load(); n != 3 {
		t.Errorf("without RetryInfo: %d calls reached the server; want 3", n)
	}
}

// TestClientStream: a stream takes its token when it opens; a stream that
// the server denies holds its key back by its RetryInfo.
func TestClientStream(t *testing.T) {
	clk := clocktest.New(t0)
	perMinute := spigot.MustBucket("per-minute", 1, spigot.PerMinute(1))
	srv := grpclimit.New(memory.New(memory.WithClock(clk)), grpclimit.By(perMinute, grpclimit.FullMethod()))
	two := spigot.MustBucket("two", 2, spigot.PerHour(2))
	c := grpclimit.NewClient(spigot.New(memory.New(memory.WithClock(clk)), two, spigot.WithClock(clk)),
		grpclimit.WithoutWaiting(), grpclimit.WithClock(clk))
	r := dial(t, srv, c)

	chat := func() error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cs, err := r.conn.NewStream(ctx, chatDesc, chatMethod)
		if err != nil {
			return err
		}
		if err := cs.SendMsg(wrapperspb.String("a")); err != nil && err != io.EOF {
			return err
		}
		if err := cs.CloseSend(); err != nil {
			return err
		}
		for {
			if err := cs.RecvMsg(new(wrapperspb.StringValue)); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
	for i, want := range []string{"ok", "ResourceExhausted", "limited 1m0s"} {
		if got := outcome(chat()); got != want {
			t.Errorf("stream %d: got %s; want %s", i, got, want)
		}
	}
	if n := r.arrived.Load(); n != 2 {
		t.Errorf("%d streams reached the server; want 2", n)
	}
	// The Client's own bucket (2 an hour, a token every 30 minutes) is
	// empty after two streams.
	clk.Advance(time.Minute)
	if got := outcome(chat()); got != "limited 29m0s" {
		t.Errorf("third stream: got %s; want limited 29m0s", got)
	}
}

// TestClientFailures: a cost that never fits, a key or cost function that
// fails, a negative cost and a failing store send nothing, each with its
// own status.
func TestClientFailures(t *testing.T) {
	clk := clocktest.New(t0)
	small := spigot.MustBucket("small", 3, spigot.PerSecond(1))
	l := spigot.New(memory.New(memory.WithClock(clk)), small, spigot.WithClock(clk))
	bad := errors.New("no tenant")
	cases := []struct {
		name string
		c    *grpclimit.Client
		code codes.Code
		is   error
	}{
		{"never fits", grpclimit.NewClient(l, grpclimit.WithClientCost(func(context.Context, string, any) (int64, error) { return 4, nil })),
			codes.ResourceExhausted, spigot.ErrNeverAdmitted},
		{"key fails", grpclimit.NewClient(l, grpclimit.WithClientKey(func(context.Context, string, string) (string, error) { return "", bad })),
			codes.Internal, bad},
		{"cost fails", grpclimit.NewClient(l, grpclimit.WithClientCost(func(context.Context, string, any) (int64, error) { return 0, bad })),
			codes.Internal, bad},
		{"negative cost", grpclimit.NewClient(l, grpclimit.WithClientCost(func(context.Context, string, any) (int64, error) { return -1, nil })),
			codes.Internal, spigot.ErrInvalidCost},
		{"store down", grpclimit.NewClient(spigot.New(brokenStore{}, small)), codes.Unavailable, errDown},
	}
	for _, tc := range cases {
		r := dial(t, nil, tc.c)
		err := r.invoke(context.Background(), echoMethod)
		if status.Code(err) != tc.code || !errors.Is(err, tc.is) {
			t.Errorf("%s: got %v (status %v); want status %v, matching %v", tc.name, err, status.Code(err), tc.code, tc.is)
		}
		if d := readStatus(err); tc.code == codes.ResourceExhausted && d.retry != nil {
			t.Errorf("%s: got RetryInfo %v; want none", tc.name, d.retry)
		}
		if n := r.arrived.Load(); n != 0 {
			t.Errorf("%s: %d calls reached the server; want 0", tc.name, n)
		}
	}

	// A cost of 0 asks nothing of the store.
	free := grpclimit.NewClient(spigot.New(brokenStore{}, small), grpclimit.WithClientCost(func(context.Context, string, any) (int64, error) { return 0, nil }))
	if err := dial(t, nil, free).invoke(context.Background(), echoMethod); err != nil {
		t.Errorf("cost 0 with the store down: %v; want the call sent", err)
	}
}
