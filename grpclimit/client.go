package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/outbound"
)

// ErrLimited is matched (errors.Is) by the error of an outgoing call that
// a Client did not send because of the limit: its spigot.Limiter denied
// it, or a server's RetryInfo held it back. That error is a *LimitedError.
var ErrLimited = errors.New("spigot: grpclimit: outgoing call limited")

// A LimitedError is the error of an outgoing call that a Client did not
// send because of the limit. It matches ErrLimited, and, through Err, what
// the wait ran into: spigot.ErrNeverAdmitted when the call's cost can
// never fit the bucket, context.DeadlineExceeded when the call's deadline
// falls before it could be sent.
//
// Its gRPC status (status.FromError, status.Code) is
// codes.DeadlineExceeded for a call that would have waited past its
// deadline, and otherwise codes.ResourceExhausted, with a RetryInfo of
// RetryAfter unless that is spigot.Never: what the server would have
// answered, without the call.
type LimitedError struct {
	// Key is the call's key: its connection's target, by default.
	Key string
	// RetryAfter is how long, from the moment the interceptor returned,
	// until the call could be sent if nothing else takes the tokens
	// meanwhile: until the bucket holds its cost, or until the server's
	// RetryInfo ends. It is spigot.Never when the call's cost is above
	// the bucket's capacity, so that no wait can admit it.
	RetryAfter time.Duration
	// Err is what the call ran into: an error that wraps
	// spigot.ErrNeverAdmitted (RetryAfter Never) or, for a call that
	// would have waited past its context's deadline,
	// context.DeadlineExceeded. It is nil for a call denied without a
	// wait (WithoutWaiting).
	Err error

	held bool // by the server's RetryInfo, not by the bucket
}

// Error describes the denial; it starts with "spigot: grpclimit: ".
func (e *LimitedError) Error() string {
	d := outbound.Denied{RetryAfter: e.RetryAfter, Held: e.held, Err: e.Err}
	return d.Describe("spigot: grpclimit: outgoing call", e.Key, "server's RetryInfo")
}

// Is reports whether target is ErrLimited.
func (e *LimitedError) Is(target error) bool { return target == ErrLimited }

// Unwrap returns Err.
func (e *LimitedError) Unwrap() error { return e.Err }

// GRPCStatus returns the error's gRPC status: see LimitedError.
func (e *LimitedError) GRPCStatus() *status.Status {
	if errors.Is(e.Err, context.DeadlineExceeded) {
		return status.New(codes.DeadlineExceeded, e.Error())
	}
	st := status.New(codes.ResourceExhausted, e.Error())
	if e.RetryAfter != spigot.Never {
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	return st
}

// A Client limits the calls a gRPC client sends, as httplimit.Transport
// limits HTTP requests: before a call goes out, its interceptors take the
// call's cost in tokens (1 by default) from a spigot.Limiter, for the
// call's key (its connection's target by default), waiting for them when
// the bucket is short; and they do not send a call for a key whose server
// answered codes.ResourceExhausted or codes.Unavailable with a
// google.rpc.RetryInfo before that retry delay ends. Install its
// interceptors on a connection:
//
//	partner := spigot.MustBucket("partner", 100, spigot.PerSecond(100))
//	c := grpclimit.NewClient(spigot.New(redis.New(rdb), partner)) // store/redis
//	conn, err := grpc.NewClient(target,
//		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
//		grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()),
//		…)
//
// The bucket lives in the Limiter's store, so it holds for every process
// that limits the same key with the same limit in the same store:
// replicas whose Clients share a Redis store send, together, no more than
// one bucket admits. In the memory store the bucket is the process's own.
//
// By default a call waits for its tokens, as spigot.Limiter.WaitN does:
// with no deadline on the call's context, as long as it takes; when the
// tokens (or a leaky bucket's turn) would come later than
// WithDeadlineMargin (100ms) before the deadline, not at all, and the
// call fails at once with a *LimitedError whose status is
// codes.DeadlineExceeded. Cancelling the context ends the wait with the
// context's status. With WithoutWaiting a call never waits, and fails at
// once with a *LimitedError whose status is codes.ResourceExhausted.
//
// A server's RetryInfo (a retry delay above 0 and at most a day, in the
// status details of a ResourceExhausted or Unavailable error) holds back
// the calls of that key until it ends, the later of two holds winning;
// the calls wait for it as they wait for tokens, and only then take their
// tokens. The holds are kept in the process's memory, for at most 10 000
// keys, as httplimit.Transport keeps its Retry-After holds.
// WithoutRetryInfo turns them off. A stream is limited when it opens; the
// RetryInfo of any of its errors holds its key back.
//
// A call that fails for a reason of the Client's own sends nothing: a
// *LimitedError (ErrLimited) when the limit holds it back; an error with
// codes.Internal when the key or cost function fails, and with
// codes.Unavailable when the store fails: a store error never lets a call
// through. These errors start with "spigot: grpclimit: " and wrap their
// cause.
//
// A Client is safe for concurrent use, and one may serve many
// connections. The zero Client is not usable; create one with NewClient.
type Client struct {
	key       func(ctx context.Context, target, fullMethod string) (string, error)
	cost      func(ctx context.Context, fullMethod string, req any) (int64, error)
	retryInfo bool
	gate      outbound.Gate
}

// NewClient returns a Client that sends the calls that l admits. The
// options that configure a Client are WithClientKey, WithClientCost,
// WithClock, WithoutWaiting and WithoutRetryInfo (see Option). It panics
// if l is nil, on a nil function or clock in opts, and on an option that
// configures only a Server (a rule, say), naming it.
func NewClient(l *spigot.Limiter, opts ...Option) *Client {
	if l == nil {
		panic("spigot: grpclimit: NewClient: nil Limiter")
	}
	c := &Client{
		key:       TargetKey,
		cost:      func(context.Context, string, any) (int64, error) { return 1, nil },
		retryInfo: true,
		gate:      outbound.Gate{Limiter: l, Clock: clock.System(), Wait: true, Margin: DefaultDeadlineMargin, HoldName: "RetryInfo"},
	}
	cf := config{C: c, Names: names}
	for _, o := range opts {
		o(&cf)
	}
	return c
}

// TargetKey is the default key of a Client's calls: the target of their
// connection, as grpc.NewClient was given it ("dns:///api.example.com:443").
func TargetKey(_ context.Context, target, _ string) (string, error) { return target, nil }

// MethodKey keys a Client's calls by their connection's target and their
// method, for a server that limits each method on its own:
// "dns:///api.example.com:443/pkg.Service/Method".
func MethodKey(_ context.Context, target, fullMethod string) (string, error) {
	return target + fullMethod, nil
}

// WithClientKey makes f the key of an outgoing call: the bucket it takes
// from and the hold it obeys. target is its connection's target and
// fullMethod its method ("/pkg.Service/Method"). The default is
// TargetKey; MethodKey is the other common choice. When f fails, the call
// is not sent. It panics if f is nil. It configures a Client only: a
// Server's rules have their own keys (By).
func WithClientKey(f func(ctx context.Context, target, fullMethod string) (string, error)) Option {
	if f == nil {
		panic("spigot: grpclimit: WithClientKey: nil func")
	}
	return func(c *config) { c.Client("WithClientKey").key = f }
}

// WithClientCost makes f the cost of an outgoing call in tokens, such as
// the number of items of a batch; req is the request message, nil for a
// stream. The default is 1. A call that costs 0 is sent without asking the
// store (it still obeys a hold); a negative cost is an error that matches
// spigot.ErrInvalidCost. When f fails, the call is not sent. It panics if
// f is nil. It configures a Client only: a Server's rules have their own
// costs (Cost, Weight).
func WithClientCost(f func(ctx context.Context, fullMethod string, req any) (int64, error)) Option {
	if f == nil {
		panic("spigot: grpclimit: WithClientCost: nil func")
	}
	return func(c *config) { c.Client("WithClientCost").cost = f }
}

// WithoutWaiting makes a Client fail a call at once with a *LimitedError,
// instead of waiting, when the limit lacks its tokens, a leaky bucket
// would hold it for a Delay (its turn is given back), or a RetryInfo
// holds it back.
func WithoutWaiting() Option {
	return func(c *config) { c.Client("WithoutWaiting").gate.Wait = false }
}

// DefaultDeadlineMargin is the least time a call that waited must have
// left before its deadline, unless WithDeadlineMargin says otherwise.
const DefaultDeadlineMargin = 100 * time.Millisecond

// WithDeadlineMargin makes a Client not wait for tokens, a leaky bucket's
// turn or a server's RetryInfo to end that would leave the call less than
// d before its deadline (DefaultDeadlineMargin by default; 0 waits up to
// the deadline): it gives the turn back and fails the call at once, as for
// a wait past the deadline, so that a call is not sent with no time left
// to be served. It configures a Client only, and panics if d is below 0.
func WithDeadlineMargin(d time.Duration) Option {
	if d < 0 {
		panic("spigot: grpclimit: WithDeadlineMargin: negative margin")
	}
	return func(c *config) { c.Client("WithDeadlineMargin").gate.Margin = d }
}

// WithoutRetryInfo makes a Client ignore the RetryInfo of the servers'
// errors: only the bucket holds calls back.
func WithoutRetryInfo() Option {
	return func(c *config) { c.Client("WithoutRetryInfo").retryInfo = false }
}

// UnaryClientInterceptor returns an interceptor that sends each unary
// call that the limit admits (see Client). Install it with
// grpc.WithChainUnaryInterceptor (or grpc.WithUnaryInterceptor).
func (c *Client) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		key, err := c.admit(ctx, cc.Target(), method, req)
		if err != nil {
			return err
		}
		err = invoker(ctx, method, req, reply, cc, opts...)
		c.learn(key, err)
		return err
	}
}

// StreamClientInterceptor returns an interceptor that opens each stream
// that the limit admits, at the cost of one call (see Client); the
// messages it sends then are not limited. Install it with
// grpc.WithChainStreamInterceptor (or grpc.WithStreamInterceptor).
func (c *Client) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		key, err := c.admit(ctx, cc.Target(), method, nil)
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			c.learn(key, err)
			return nil, err
		}
		if !c.retryInfo {
			return cs, nil
		}
		return &clientStream{ClientStream: cs, c: c, key: key}, nil
	}
}

// clientStream learns the RetryInfo of its stream's errors.
type clientStream struct {
	grpc.ClientStream
	c   *Client
	key string
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && err != io.EOF {
		s.c.learn(s.key, err)
	}
	return err
}

func (s *clientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if err != nil && err != io.EOF {
		s.c.learn(s.key, err)
	}
	return err
}

// admit decides whether a call of fullMethod on target, with request req
// (nil for a stream), may be sent, waiting as configured, and returns its
// key.
func (c *Client) admit(ctx context.Context, target, fullMethod string, req any) (string, error) {
	if c.gate.Limiter == nil {
		return "", status.Error(codes.Internal, "spigot: grpclimit: the zero Client sends nothing; create one with NewClient")
	}
	key, err := c.key(ctx, target, fullMethod)
	if err != nil {
		return "", clientErr(codes.Internal, fmt.Errorf("spigot: grpclimit: the key of the outgoing call %s: %w", fullMethod, err))
	}
	n, err := c.cost(ctx, fullMethod, req)
	if err == nil && n < 0 {
		err = fmt.Errorf("cost %d: %w", n, spigot.ErrInvalidCost)
	}
	if err != nil {
		return "", clientErr(codes.Internal, fmt.Errorf("spigot: grpclimit: the cost of the outgoing call %s for key %q: %w", fullMethod, key, err))
	}
	err = c.gate.Admit(ctx, key, n)
	var denied *outbound.Denied
	var failed *outbound.Failed
	switch {
	case err == nil:
		return key, nil
	case errors.As(err, &denied):
		return "", &LimitedError{Key: key, RetryAfter: denied.RetryAfter, Err: denied.Err, held: denied.Held}
	case errors.As(err, &failed) && failed.Waiting:
		return "", clientErr(status.FromContextError(failed.Err).Code(),
			fmt.Errorf("spigot: grpclimit: waiting for the server's RetryInfo for key %q: %w", key, failed.Err))
	case errors.As(err, &failed):
		err = failed.Err
	}
	code := codes.Unavailable
	if ctx.Err() != nil {
		code = status.FromContextError(ctx.Err()).Code()
	}
	return "", clientErr(code, fmt.Errorf("spigot: grpclimit: limiting the outgoing call for key %q: %w", key, err))
}

// learn holds key back for the RetryInfo of err, a call's error, if it
// is a server's ResourceExhausted or Unavailable status with one.
func (c *Client) learn(key string, err error) {
	if err == nil || !c.retryInfo || errors.Is(err, ErrLimited) {
		return
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable {
		return
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().IsValid() {
			c.gate.Hold(key, ri.GetRetryDelay().AsDuration())
			return
		}
	}
}

// clientError is an error of a Client's own, with its gRPC status code.
type clientError struct {
	code codes.Code
	err  error
}

func clientErr(code codes.Code, err error) error { return &clientError{code, err} }

func (e *clientError) Error() string { return e.err.Error() }
func (e *clientError) Unwrap() error { return e.err }

// GRPCStatus returns the error's status: its code and its message.
func (e *clientError) GRPCStatus() *status.Status { return status.New(e.code, e.err.Error()) }
