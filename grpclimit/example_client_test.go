package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/store/memory"
)

// invoke makes one unary Echo call through conn, with timeout (none when
// 0), and returns its error.
func invoke(conn *grpc.ClientConn, timeout time.Duration) error {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return conn.Invoke(ctx, "/spigot.test.Echo/Echo", wrapperspb.String("hi"), new(wrapperspb.StringValue))
}

// A client that sends a partner at most 2 calls at once, then 2 a
// minute: a call waits for its token, unless its deadline falls first.
// With a Redis store, every replica's Client shares the bucket.
func ExampleClient() {
	partner := spigot.MustBucket("partner", 2, spigot.PerMinute(2))
	c := grpclimit.NewClient(spigot.New(memory.New(), partner))
	conn, stop := start(nil,
		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()))
	defer stop()

	for range 2 {
		fmt.Println(status.Code(invoke(conn, time.Second)))
	}
	err := invoke(conn, time.Second) // the next token is 30s away: no wait
	var le *grpclimit.LimitedError
	if errors.As(err, &le) {
		fmt.Println(status.Code(err), le.RetryAfter.Round(time.Second))
	}
	// Output:
	// OK
	// OK
	// DeadlineExceeded 30s
}

// Without waiting, a call the bucket cannot admit fails at once, with
// the status the server would have sent.
func ExampleWithoutWaiting() {
	partner := spigot.MustBucket("partner", 1, spigot.PerMinute(1))
	c := grpclimit.NewClient(spigot.New(memory.New(), partner), grpclimit.WithoutWaiting())
	conn, stop := start(nil, grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()))
	defer stop()

	for range 2 {
		err := invoke(conn, 0)
		var le *grpclimit.LimitedError
		if errors.As(err, &le) {
			fmt.Println(status.Code(err), le.RetryAfter.Round(time.Second))
			continue
		}
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// ResourceExhausted 1m0s
}

// A server's RetryInfo holds the calls of its key back until it ends:
// here each method is its own key, and the server admits one call a
// minute per method.
func ExampleMethodKey() {
	perMethod := spigot.MustBucket("per-method", 1, spigot.PerMinute(1))
	server := grpclimit.New(memory.New(), grpclimit.By(perMethod, grpclimit.FullMethod()))
	plenty := spigot.MustBucket("plenty", 100, spigot.PerSecond(100))
	c := grpclimit.NewClient(spigot.New(memory.New(), plenty),
		grpclimit.WithClientKey(grpclimit.MethodKey), grpclimit.WithoutWaiting())
	conn, stop := start(server, grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()))
	defer stop()

	for range 3 {
		err := invoke(conn, 0)
		fmt.Println(status.Code(err), errors.Is(err, grpclimit.ErrLimited))
	}
	// Output:
	// OK false
	// ResourceExhausted false
	// ResourceExhausted true
}

// A stream whose messages each take from a limit: the third message of a
// stream is denied, and ends it.
func ExamplePerMessage() {
	messages := spigot.MustBucket("messages", 2, spigot.PerMinute(2))
	policy := grpclimit.New(memory.New(),
		grpclimit.By(messages, grpclimit.PeerIP(), grpclimit.Methods("/spigot.test.Echo/Chat"), grpclimit.PerMessage()))
	conn, stop := start(policy)
	defer stop()

	st, err := conn.NewStream(context.Background(), chatDesc, "/spigot.test.Echo/Chat")
	if err != nil {
		panic(err)
	}
	for _, m := range []string{"a", "b", "c"} {
		if err := st.SendMsg(wrapperspb.String(m)); err != nil && err != io.EOF {
			panic(err)
		}
		got := new(wrapperspb.StringValue)
		if err := st.RecvMsg(got); err != nil {
			printStatus(err, nil)
			break
		}
		fmt.Println("echo", got.GetValue())
	}
	// Output:
	// echo a
	// echo b
	// ResourceExhausted retry: 30s quota: messages
}
