package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/internal/outbound"
)

// ErrLimited is matched (errors.Is) by the error of a request that a
// Transport did not send because of the limit: its Limiter denied it, or
// the server's Retry-After held it back. That error is a *LimitedError.
var ErrLimited = errors.New("spigot: httplimit: outgoing request limited")

// A LimitedError is the error of a request that a Transport did not send
// because of the limit. It matches ErrLimited, and, through Err, what the
// wait ran into: spigot.ErrNeverAdmitted when the request's cost can never
// fit the bucket, context.DeadlineExceeded when the request's deadline
// falls before it could be sent.
type LimitedError struct {
	// Key is the request's key: its host, by default.
	Key string
	// RetryAfter is how long, from the moment RoundTrip returned, until
	// the request could be sent if nothing else takes the tokens
	// meanwhile: until the bucket holds its cost, or until the server's
	// Retry-After ends. It is spigot.Never when the request's cost is
	// above the bucket's capacity, so that no wait can admit it.
	RetryAfter time.Duration
	// Err is what the request ran into: an error that wraps
	// spigot.ErrNeverAdmitted (RetryAfter Never) or, for a request that
	// would have waited past its context's deadline,
	// context.DeadlineExceeded. It is nil for a request denied without a
	// wait (WithoutWaiting).
	Err error

	held bool // by the server's Retry-After, not by the bucket
}

// Error describes the denial; it starts with "spigot: httplimit: ".
func (e *LimitedError) Error() string {
	d := outbound.Denied{RetryAfter: e.RetryAfter, Held: e.held, Err: e.Err}
	return d.Describe("spigot: httplimit: outgoing request", e.Key, "server's Retry-After")
}

// Is reports whether target is ErrLimited.
func (e *LimitedError) Is(target error) bool { return target == ErrLimited }

// Unwrap returns Err.
func (e *LimitedError) Unwrap() error { return e.Err }

// A Transport is an http.RoundTripper that limits outgoing requests.
// Before it sends a request through its base RoundTripper it takes the
// request's cost in tokens (1 by default) from its Limiter, for the
// request's key (its host by default), waiting for them when the bucket
// is short; and it does not send a request to a key whose server answered
// 429 Too Many Requests or 503 Service Unavailable with a Retry-After
// before that Retry-After ends. Use it as an http.Client's Transport:
//
//	partner := spigot.MustBucket("partner", 100, spigot.PerSecond(100))
//	l := spigot.New(redis.New(rdb), partner) // store/redis
//	client := &http.Client{Transport: httplimit.NewTransport(nil, l)}
//
// The bucket lives in the Limiter's store, so it holds for every process
// that limits the same key with the same limit in the same store: 20
// replicas whose Transports share a Redis store send, together, no more to
// the partner than one bucket admits (100 at once, then 100 a second),
// however the requests fall between them. In the memory store the bucket
// is the process's own.
//
// By default RoundTrip waits for the tokens, as spigot.Limiter.WaitN does:
// with no deadline on the request's context, as long as it takes; when
// the tokens (or a leaky bucket's turn) would come later than
// WithDeadlineMargin (100ms) before the deadline, not at all, and it
// returns at once a *LimitedError that matches context.DeadlineExceeded.
// Cancelling the context ends the wait with the context's error. With
// WithoutWaiting it never waits, and returns the *LimitedError at once.
//
// A Retry-After (delta-seconds, or an HTTP-date read against the
// Transport's clock) holds back the requests of the response's key until
// it ends, the later of two holds winning; the requests wait for it as
// they wait for tokens, and only then take their tokens. A Retry-After
// that cannot be parsed, is not in the future, or is longer than a day is
// ignored. The holds are kept in the process's memory, not in the store:
// a replica does not see the holds of the others, each learns of the
// server's Retry-After from its own responses. A Transport keeps the holds
// of at most 10 000 keys: it forgets the holds that have ended, and beyond
// that the ones that end first. WithoutRetryAfter turns the holds off.
// Responses are returned to the caller as they came, Retry-After and all.
//
// RoundTrip sends nothing, and closes the request's body, when it returns
// an error of its own: a *LimitedError (ErrLimited) when the limit holds
// the request back, and an error that wraps the cause when the key or cost
// function fails, or when the store fails: a store error never lets a
// request through. Its errors start with "spigot: httplimit: ".
// http.Client returns them inside a *url.Error; errors.Is and errors.As
// see through it. It never modifies the request.
//
// A Transport is safe for concurrent use. The zero Transport is not
// usable: its RoundTrip sends nothing and returns an error; create one
// with NewTransport.
type Transport struct {
	base       http.RoundTripper
	key        func(*http.Request) (string, error)
	cost       func(*http.Request) (int64, error)
	retryAfter bool
	gate       outbound.Gate
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport that sends through base the requests
// that l admits; a nil base is http.DefaultTransport. The options that
// configure a Transport are WithTransportKey, WithCost, WithClock,
// WithoutWaiting, WithDeadlineMargin and WithoutRetryAfter (see Option). It panics if l is
// nil, on a nil function or clock in opts, and on an option that
// configures only a Middleware (a rule, say), naming it.
func NewTransport(base http.RoundTripper, l *spigot.Limiter, opts ...Option) *Transport {
	if l == nil {
		panic("spigot: httplimit: NewTransport: nil Limiter")
	}
	t := &Transport{
		base:       base,
		key:        hostKey,
		cost:       costOne,
		retryAfter: true,
		gate:       outbound.Gate{Limiter: l, Clock: clock.System(), Wait: true, Margin: DefaultDeadlineMargin, HoldName: "Retry-After"},
	}
	c := config{C: t, Names: names}
	for _, o := range opts {
		o(&c)
	}
	return t
}

// WithTransportKey makes f the key of a request: the bucket it takes from
// and the Retry-After hold it obeys, such as a tenant for a partner that
// limits each tenant, or one name for every host of a partner. The
// default is the request's host, as in its URL (req.URL.Host), lowercased,
// with its port when the URL has one: "api.example.com",
// "api.example.com:8443". A KeyFunc of this package, such as Header or
// Const, is such a function. When f fails, RoundTrip sends nothing and
// returns its error, wrapped. It panics if f is nil. It configures a
// Transport only: a Middleware's rules have their own keys (By).
func WithTransportKey(f func(*http.Request) (string, error)) Option {
	if f == nil {
		panic("spigot: httplimit: WithTransportKey: nil func")
	}
	return func(c *config) { c.Client("WithTransportKey").key = f }
}

// WithoutWaiting makes RoundTrip return a *LimitedError at once, instead
// of waiting, when the limit lacks the request's tokens, a leaky bucket
// would hold it for a Delay (its turn is given back), or a Retry-After
// holds the request back. It configures a Transport only.
func WithoutWaiting() Option {
	return func(c *config) { c.Client("WithoutWaiting").gate.Wait = false }
}

// DefaultDeadlineMargin is the least time a request that waited must have
// left before its context's deadline, unless WithDeadlineMargin says
// otherwise.
const DefaultDeadlineMargin = 100 * time.Millisecond

// WithDeadlineMargin makes RoundTrip not wait for tokens, a leaky
// bucket's turn or a Retry-After's end that would leave the request less
// than d before its context's deadline (DefaultDeadlineMargin by default;
// 0 waits up to the deadline): it gives the turn back and returns at once
// a *LimitedError that matches context.DeadlineExceeded, as for a wait
// past the deadline, so that a request is not sent with no time left to
// be served. A request without a deadline waits as long as it takes. It
// configures a Transport only, and panics if d is below 0.
func WithDeadlineMargin(d time.Duration) Option {
	if d < 0 {
		panic("spigot: httplimit: WithDeadlineMargin: negative margin")
	}
	return func(c *config) { c.Client("WithDeadlineMargin").gate.Margin = d }
}

// WithoutRetryAfter makes the Transport ignore the Retry-After of 429 and
// 503 responses: only the bucket holds requests back. It configures a
// Transport only.
func WithoutRetryAfter() Option {
	return func(c *config) { c.Client("WithoutRetryAfter").retryAfter = false }
}

// hostKey is the default key: the request's host, lowercased.
func hostKey(req *http.Request) (string, error) {
	if req.URL == nil {
		return "", errors.New("nil Request.URL")
	}
	if req.URL.Host == "" {
		return "", errors.New("no Host in request URL")
	}
	return strings.ToLower(req.URL.Host), nil
}

func costOne(*http.Request) (int64, error) { return 1, nil }

// RoundTrip implements http.RoundTripper: it takes the request's tokens,
// waiting for them and for the end of its key's Retry-After unless
// WithoutWaiting, and then sends the request through the base
// RoundTripper; see Transport.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	key, err := t.admit(req)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err == nil && t.retryAfter && resp != nil &&
		(resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if d, ok := retryAfterDelay(resp.Header.Get("Retry-After"), t.gate.Clock.Now()); ok {
			t.gate.Hold(key, d)
		}
	}
	return resp, err
}

// admit decides whether req may be sent, waiting as configured, and
// returns its key.
func (t *Transport) admit(req *http.Request) (string, error) {
	if t.gate.Limiter == nil {
		return "", errors.New("spigot: httplimit: the zero Transport sends nothing; create one with NewTransport")
	}
	key, err := t.key(req)
	if err != nil {
		return "", fmt.Errorf("spigot: httplimit: the key of the outgoing request: %w", err)
	}
	n, err := t.cost(req)
	if err != nil {
		return "", fmt.Errorf("spigot: httplimit: the cost of the outgoing request for key %q: %w", key, err)
	}
	if n < 0 {
		return "", fmt.Errorf("spigot: httplimit: cost %d of the outgoing request for key %q: %w", n, key, spigot.ErrInvalidCost)
	}
	err = t.gate.Admit(req.Context(), key, n)
	var denied *outbound.Denied
	var failed *outbound.Failed
	switch {
	case err == nil:
		return key, nil
	case errors.As(err, &denied):
		return "", &LimitedError{Key: key, RetryAfter: denied.RetryAfter, Err: denied.Err, held: denied.Held}
	case errors.As(err, &failed) && failed.Waiting:
		return "", fmt.Errorf("spigot: httplimit: waiting for the server's Retry-After for key %q: %w", key, failed.Err)
	case errors.As(err, &failed):
		err = failed.Err
	}
	return "", fmt.Errorf("spigot: httplimit: limiting the outgoing request for key %q: %w", key, err)
}

// CloseIdleConnections closes the idle connections of the base
// RoundTripper when it has such a method, as *http.Transport does, so
// that http.Client.CloseIdleConnections reaches them.
func (t *Transport) CloseIdleConnections() {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	if c, ok := base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// retryAfterDelay returns the wait that the Retry-After value v asks for,
// at now, and whether to honour it: delta-seconds or an HTTP-date, above 0
// and at most holdMax.
func retryAfterDelay(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if strings.Trim(v, "0123456789") == "" { // delta-seconds: 1*DIGIT
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || n > int64(outbound.HoldMax/time.Second) {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := at.Sub(now)
	return d, d > 0 && d <= outbound.HoldMax
}
