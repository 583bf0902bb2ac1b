package grpclimit_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
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

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestUnaryAtFixedInstants: calls from one peer at fixed instants on a
// fake clock: the admitted ones reach the handler, each denial's
// RetryInfo is the model's RetryAfter exactly (store.Apply on a State of
// our own, at the same instants), its QuotaFailure names the limit and
// never the key, and the ratelimit metadata is in the header of every
// call, admitted or denied.
func TestUnaryAtFixedInstants(t *testing.T) {
	clk := clocktest.New(t0)
	api := spigot.MustBucket("api", 2, spigot.PerSecond(1))
	conn, served := serve(t, grpclimit.New(memory.New(memory.WithClock(clk)), grpclimit.By(api, grpclimit.PeerIP())))

	var model store.State
	steps := []struct {
		at        time.Duration
		allowed   bool
		retry     time.Duration
		ratelimit string
	}{
		{0, true, 0, `"api";r=1;t=1`},
		{0, true, 0, `"api";r=0;t=1`},
		{0, false, time.Second, `"api";r=0;t=1`},
		{250 * time.Millisecond, false, 750 * time.Millisecond, `"api";r=0;t=1`},
		{999 * time.Millisecond, false, time.Millisecond, `"api";r=0;t=1`},
		{time.Second, true, 0, `"api";r=0;t=1`},
		{1500 * time.Millisecond, false, 500 * time.Millisecond, `"api";r=0;t=1`},
		{3 * time.Second, true, 0, `"api";r=1;t=1`},
		{10 * time.Second, true, 0, `"api";r=1;t=1`},
	}
	admitted := int64(0)
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		want, err := store.Apply(spigot.Op{Limit: api, Key: "127.0.0.1", N: 1}, &model, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		if want.Allowed() != s.allowed || want.RetryAfter != s.retry {
			t.Fatalf("step %d: the model decides allowed %v, retry %v; the table says %v, %v", i, want.Allowed(), want.RetryAfter, s.allowed, s.retry)
		}
		header, err := call(t, conn, echoMethod)
		if got := one(t, i, header, "ratelimit-policy"); got != `"api";q=2;w=2` {
			t.Errorf("step %d: got ratelimit-policy %q; want %q", i, got, `"api";q=2;w=2`)
		}
		if got := one(t, i, header, "ratelimit"); got != s.ratelimit {
			t.Errorf("step %d: got ratelimit %q; want %q", i, got, s.ratelimit)
		}
		if s.allowed {
			admitted++
			if err != nil {
				t.Errorf("step %d: got %v; want the call served", i, err)
			}
			continue
		}
		d := readStatus(err)
		if d.code != codes.ResourceExhausted || d.retry == nil || d.quota == nil || d.n != 2 {
			t.Errorf("step %d: got %v with RetryInfo %v, QuotaFailure %v, %d details; want ResourceExhausted with both", i, d.code, d.retry, d.quota, d.n)
			continue
		}
		if got := d.retry.GetRetryDelay().AsDuration(); got != want.RetryAfter {
			t.Errorf("step %d: got RetryInfo %v; want the model's RetryAfter %v", i, got, want.RetryAfter)
		}
		if ids := quotaIDs(d.quota); !slices.Equal(ids, []string{"api"}) || d.quota.Violations[0].GetQuotaValue() != 2 {
			t.Errorf("step %d: got QuotaFailure %v; want one violation of quota_id api, quota_value 2", i, d.quota)
		}
		if wantMsg := "too many requests (api): retry in " + s.retry.String(); d.msg != wantMsg {
			t.Errorf("step %d: got message %q; want %q", i, d.msg, wantMsg)
		}
		if p := status.Convert(err).Proto(); strings.Contains(p.String(), "127.0.0.1") {
			t.Errorf("step %d: the status shows the key: %v", i, p)
		}
	}
	if n := served.n.Load(); n != admitted {
		t.Errorf("the handler served %d calls; want %d", n, admitted)
	}
}

// TestExactCounts: 20 calls at one instant on a limit of 7 admit exactly
// 7, and a method no rule applies to is served every time, without
// rate-limit metadata.
func TestExactCounts(t *testing.T) {
	clk := clocktest.New(t0)
	api := spigot.MustBucket("api", 7, spigot.PerMinute(7))
	conn, served := serve(t, grpclimit.New(memory.New(memory.WithClock(clk)),
		grpclimit.By(api, grpclimit.PeerIP(), grpclimit.Methods("/spigot.test.Echo/"))))
	ok, denied := 0, 0
	for range 20 {
		_, err := call(t, conn, echoMethod)
		switch status.Code(err) {
		case codes.OK:
			ok++
		case codes.ResourceExhausted:
			denied++
		default:
			t.Fatalf("got %v; want OK or ResourceExhausted", err)
		}
	}
	if ok != 7 || denied != 13 || served.n.Load() != 7 {
		t.Errorf("got %d admitted, %d denied, %d served; want 7, 13, 7", ok, denied, served.n.Load())
	}
	for i := range 10 {
		header, err := call(t, conn, otherMethod)
		if err != nil || len(header.Get("ratelimit")) != 0 || len(header.Get("ratelimit-policy")) != 0 {
			t.Errorf("step %d: %s: got %v, header %v; want it served, without rate-limit metadata", i, otherMethod, err, header)
		}
	}
	if n := served.n.Load(); n != 17 {
		t.Errorf("served %d calls; want 17", n)
	}
}

// TestAllOrNothing: a per-peer and a per-tenant limit on every call: a
// call the tenant's limit denies costs the peer's limit nothing, and one
// the peer's limit denies costs the tenant nothing.
func TestAllOrNothing(t *testing.T) {
	clk := clocktest.New(t0)
	perPeer := spigot.MustBucket("peer", 5, spigot.PerHour(5))
	perTenant := spigot.MustBucket("tenant", 2, spigot.PerHour(2))
	var keys []string
	l := grpclimit.New(memory.New(memory.WithClock(clk)),
		grpclimit.By(perPeer, grpclimit.PeerIP()),
		grpclimit.By(perTenant, grpclimit.Metadata("X-Tenant")),
		grpclimit.WithObserver(func(_ context.Context, res *grpclimit.Result) { keys = append(keys, strings.Join(res.Keys, " ")) }),
	)
	conn, served := serve(t, l)
	for i, s := range []struct {
		tenant    string
		ok        bool
		violated  []string
		ratelimit string
	}{
		{"a", true, nil, `"peer";r=4;t=720, "tenant";r=1;t=1800`},
		{"a", true, nil, `"peer";r=3;t=720, "tenant";r=0;t=1800`},
		{"a", false, []string{"tenant"}, `"peer";r=3;t=720, "tenant";r=0;t=1800`}, // peer: what it holds
		{"b", true, nil, `"peer";r=2;t=720, "tenant";r=1;t=1800`},
		{"b", true, nil, `"peer";r=1;t=720, "tenant";r=0;t=1800`},
		{"c", true, nil, `"peer";r=0;t=720, "tenant";r=1;t=1800`},
		{"d", false, []string{"peer"}, `"peer";r=0;t=720, "tenant";r=2;t=1800`}, // d's tenant: what it holds
		{"d", false, []string{"peer"}, `"peer";r=0;t=720, "tenant";r=2;t=1800`},
	} {
		header, err := call(t, conn, echoMethod, "x-tenant", s.tenant)
		if got := one(t, i, header, "ratelimit-policy"); got != `"peer";q=5;w=3600, "tenant";q=2;w=3600` {
			t.Errorf("step %d: got ratelimit-policy %q", i, got)
		}
		if got := one(t, i, header, "ratelimit"); got != s.ratelimit {
			t.Errorf("step %d: got ratelimit %q; want %q", i, got, s.ratelimit)
		}
		if s.ok != (err == nil) {
			t.Errorf("step %d: got %v; want served %v", i, err, s.ok)
			continue
		}
		if !s.ok {
			d := readStatus(err)
			if ids := quotaIDs(d.quota); d.code != codes.ResourceExhausted || !slices.Equal(ids, s.violated) {
				t.Errorf("step %d: got %v naming %q; want ResourceExhausted naming %q", i, d.code, ids, s.violated)
			}
		}
	}
	if n := served.n.Load(); n != 5 {
		t.Errorf("served %d calls; want 5", n)
	}
	if want := "127.0.0.1 a"; len(keys) != 8 || keys[0] != want {
		t.Errorf("the observer saw keys %q; want 8 calls, the first %q", keys, want)
	}
}

// TestSpoofedForwarding: x-forwarded-for is read only from a trusted
// peer. From 127.0.0.1, untrusted, every call is keyed by 127.0.0.1
// whatever it sends; with 127.0.0.0/8 trusted, the call is keyed by the
// first untrusted address from the right, and what the client wrote to
// its left is never read.
func TestSpoofedForwarding(t *testing.T) {
	for i, c := range []struct {
		trusted string
		xff     []string
		want    []string
	}{
		{"10.0.0.0/8", []string{"203.0.113.1", "203.0.113.2", "10.0.0.1"}, []string{"127.0.0.1", "127.0.0.1", "127.0.0.1"}},
		{"127.0.0.0/8", []string{"203.0.113.1", "6.6.6.6, 203.0.113.1", "garbage, 203.0.113.2, 127.0.0.9"}, []string{"203.0.113.1", "203.0.113.1", "203.0.113.2"}},
		{"127.0.0.0/8", []string{"127.0.0.2, 127.0.0.3"}, []string{"127.0.0.2"}},
	} {
		clk := clocktest.New(t0)
		var got []string
		l := grpclimit.New(memory.New(memory.WithClock(clk)),
			grpclimit.By(spigot.MustBucket("ip", 100, spigot.PerSecond(1)), grpclimit.PeerIP(grpclimit.TrustXForwardedFor(netip.MustParsePrefix(c.trusted)))),
			grpclimit.WithObserver(func(_ context.Context, res *grpclimit.Result) { got = append(got, res.Keys[0]) }),
		)
		conn, _ := serve(t, l)
		for _, x := range c.xff {
			if _, err := call(t, conn, echoMethod, "x-forwarded-for", x); err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("case %d: trusting %s, got keys %q; want %q", i, c.trusted, got, c.want)
		}
	}

	// Counts: an untrusted client that sends a fresh x-forwarded-for
	// each call still has one bucket.
	clk := clocktest.New(t0)
	conn, served := serve(t, grpclimit.New(memory.New(memory.WithClock(clk)),
		grpclimit.By(spigot.MustBucket("ip", 3, spigot.PerHour(3)), grpclimit.PeerIP(grpclimit.TrustXForwardedFor(netip.MustParsePrefix("10.0.0.0/8"))))))
	for i := range 10 {
		call(t, conn, echoMethod, "x-forwarded-for", netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}).String())
	}
	if n := served.n.Load(); n != 3 {
		t.Errorf("served %d calls of 10 with spoofed x-forwarded-for; want 3", n)
	}
}

// TestStreamLimitedOnOpen: a stream takes from the limit once, when it
// opens: on a limit of 2, two streams open and carry any number of
// messages, and the third gets the header and ResourceExhausted with the
// exact RetryInfo, before its handler runs.
func TestStreamLimitedOnOpen(t *testing.T) {
	clk := clocktest.New(t0)
	streams := spigot.MustBucket("streams", 2, spigot.PerMinute(1))
	conn, served := serve(t, grpclimit.New(memory.New(memory.WithClock(clk)),
		grpclimit.By(streams, nil, grpclimit.Methods(chatMethod))))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, s := range []struct {
		ok        bool
		ratelimit string
	}{
		{true, `"streams";r=1;t=60`},
		{true, `"streams";r=0;t=60`},
		{false, `"streams";r=0;t=60`},
	} {
		st, err := conn.NewStream(ctx, chatDesc, chatMethod)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 5 {
			if err := st.SendMsg(wrapperspb.String("m")); err != nil {
				break // the server ended the stream: RecvMsg says why
			}
			m := new(wrapperspb.StringValue)
			err := st.RecvMsg(m)
			if s.ok && (err != nil || m.GetValue() != "m") {
				t.Fatalf("step %d: message %d: got %q, %v; want the echo", i, j, m.GetValue(), err)
			}
			if !s.ok {
				d := readStatus(err)
				if d.code != codes.ResourceExhausted || d.retry.GetRetryDelay().AsDuration() != time.Minute || !slices.Equal(quotaIDs(d.quota), []string{"streams"}) {
					t.Errorf("step %d: got %v, RetryInfo %v, QuotaFailure %v; want ResourceExhausted, 1m0s, streams", i, d.code, d.retry, d.quota)
				}
				break
			}
		}
		// The header comes with the first message, or with the status.
		header, err := st.Header()
		if err != nil {
			t.Fatalf("step %d: Header: %v", i, err)
		}
		if got := one(t, i, header, "ratelimit"); got != s.ratelimit {
			t.Errorf("step %d: got ratelimit %q; want %q", i, got, s.ratelimit)
		}
		if s.ok {
			st.CloseSend()
		}
	}
	if n := served.n.Load(); n != 2 {
		t.Errorf("served %d streams; want 2", n)
	}
	// The unary method has no rule: served, without rate-limit metadata.
	if header, err := call(t, conn, echoMethod); err != nil || len(header.Get("ratelimit")) != 0 {
		t.Errorf("%s: got %v, header %v; want it served, untouched", echoMethod, err, header)
	}
}

// TestStreamPerMessage: a PerMessage rule limits each message a stream
// sends, by a key and a cost read from the message, and unary calls as
// any rule; the rule without it limits the stream's opening alone, and is
// the only one in the header. A denied message never reaches the handler:
// the stream ends with ResourceExhausted and the model's RetryAfter.
func TestStreamPerMessage(t *testing.T) {
	clk := clocktest.New(t0)
	streams := spigot.MustBucket("streams", 5, spigot.PerMinute(1))
	messages := spigot.MustBucket("messages", 10, spigot.PerMinute(10))
	// A message "t1:abcd" is tenant t1's, and costs 4.
	tenant := grpclimit.Message(func(req any) (string, error) {
		k, _, _ := strings.Cut(req.(*wrapperspb.StringValue).GetValue(), ":")
		return k, nil
	})
	size := grpclimit.Cost(func(_ context.Context, _ string, req any) (int64, error) {
		_, v, _ := strings.Cut(req.(*wrapperspb.StringValue).GetValue(), ":")
		return int64(len(v)), nil
	})
	conn, _ := serve(t, grpclimit.New(memory.New(memory.WithClock(clk)),
		grpclimit.By(streams, nil, grpclimit.Methods(chatMethod)),
		grpclimit.By(messages, tenant, size, grpclimit.PerMessage())))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	model := map[string]*store.State{"t1": {}, "t2": {}}
	st, err := conn.NewStream(ctx, chatDesc, chatMethod)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range []string{"t1:aaaa", "t1:bbbb", "t2:cccccc", "t1:ccc"} {
		k, v, _ := strings.Cut(m, ":")
		want, err := store.Apply(spigot.Op{Limit: messages, Key: k, N: int64(len(v))}, model[k], clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(wrapperspb.String(m)); err != nil {
			t.Fatalf("message %d: SendMsg: %v", i, err)
		}
		got := new(wrapperspb.StringValue)
		err = st.RecvMsg(got)
		if want.Allowed() {
			if err != nil || got.GetValue() != m {
				t.Fatalf("message %d (%s): got %q, %v; want the echo", i, m, got.GetValue(), err)
			}
			continue
		}
		d := readStatus(err)
		if d.code != codes.ResourceExhausted || d.retry.GetRetryDelay().AsDuration() != want.RetryAfter || !slices.Equal(quotaIDs(d.quota), []string{"messages"}) {
			t.Errorf("message %d (%s): got %v, RetryInfo %v, QuotaFailure %v; want ResourceExhausted, %v, messages", i, m, d.code, d.retry, d.quota, want.RetryAfter)
		}
		if want.RetryAfter != 6*time.Second {
			t.Errorf("message %d: the model's RetryAfter is %v; the test expects 6s", i, want.RetryAfter)
		}
	}
	header, err := st.Header()
	if err != nil {
		t.Fatal(err)
	}
	if got := one(t, 0, header, "ratelimit-policy"); got != `"streams";q=5;w=300` {
		t.Errorf("got ratelimit-policy %q; want the opening's limit alone", got)
	}
	if got := one(t, 0, header, "ratelimit"); got != `"streams";r=4;t=60` {
		t.Errorf("got ratelimit %q; want the opening's decision", got)
	}

	// A unary call is one message: t2 has 4 tokens left, then none.
	if _, err := call2(t, conn, "t2:dddd"); err != nil {
		t.Errorf("unary t2:dddd: %v; want it served", err)
	}
	if _, err := call2(t, conn, "t2:e"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("unary t2:e: got %v; want ResourceExhausted", err)
	}
}

// TestStreamPerMessageKeyError: a message that has no key for a
// PerMessage rule is not handed to the handler and charges nothing: the
// stream ends with InvalidArgument, and a later stream of the same tenant
// finds its budget less only the one message it sent before.
func TestStreamPerMessageKeyError(t *testing.T) {
	clk := clocktest.New(t0)
	messages := spigot.MustBucket("messages", 2, spigot.PerMinute(2))
	tenant := grpclimit.Message(func(req any) (string, error) {
		k, _, _ := strings.Cut(req.(*wrapperspb.StringValue).GetValue(), ":")
		return k, nil
	})
	conn, _ := serve(t, grpclimit.New(memory.New(memory.WithClock(clk)),
		grpclimit.By(messages, tenant, grpclimit.Methods(chatMethod), grpclimit.PerMessage())))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	chat := func(msgs ...string) (echoed int, err error) {
		st, err := conn.NewStream(ctx, chatDesc, chatMethod)
		if err != nil {
			t.Fatal(err)
		}
		defer st.CloseSend()
		for _, m := range msgs {
			if err := st.SendMsg(wrapperspb.String(m)); err != nil {
				break // the server ended the stream: RecvMsg says why
			}
			if err := st.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				return echoed, err
			}
			echoed++
		}
		return echoed, nil
	}
	if n, err := chat("t1:a", ":no tenant", "t1:b"); n != 1 || status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(status.Convert(err).Message(), `no key for the limit "messages"`) {
		t.Errorf("got %d echoed, then %v; want 1, then InvalidArgument naming the limit", n, err)
	}
	if n, err := chat("t1:c", "t1:d", "t1:e"); n != 1 || status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second stream: got %d echoed, then %v; want 1 (t1 took 1 of 2 before), then ResourceExhausted", n, err)
	}
}

// call2 makes one unary Echo call of the message m.
func call2(t *testing.T, conn *grpc.ClientConn, m string) (*wrapperspb.StringValue, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := new(wrapperspb.StringValue)
	return out, conn.Invoke(ctx, echoMethod, wrapperspb.String(m), out)
}

// TestNeverFits: a call whose cost is more than the capacity is
// ResourceExhausted without RetryInfo, and costs nothing.
func TestNeverFits(t *testing.T) {
	clk := clocktest.New(t0)
	rows := spigot.MustBucket("rows", 100, spigot.PerMinute(100))
	cost := func(_ context.Context, _ string, req any) (int64, error) {
		return int64(len(req.(*wrapperspb.StringValue).GetValue()))*50 + 1, nil // "hi": 101
	}
	l := grpclimit.New(memory.New(memory.WithClock(clk)), grpclimit.By(rows, nil, grpclimit.Cost(cost)))
	conn, served := serve(t, l)
	header, err := call(t, conn, echoMethod)
	d := readStatus(err)
	if d.code != codes.ResourceExhausted || d.retry != nil || !slices.Equal(quotaIDs(d.quota), []string{"rows"}) {
		t.Errorf("got %v, RetryInfo %v, QuotaFailure %v; want ResourceExhausted without RetryInfo, naming rows", d.code, d.retry, d.quota)
	}
	if want := "call exceeds the limit (rows): the call costs more than the limit ever holds"; d.msg != want {
		t.Errorf("got message %q; want %q", d.msg, want)
	}
	if got := one(t, 0, header, "ratelimit"); got != `"rows";r=100;t=1` {
		t.Errorf("got ratelimit %q; want the limit whole", got)
	}
	if served.n.Load() != 0 {
		t.Errorf("served the call")
	}
}

// TestKeyError: a call without the metadata a rule keys by is
// InvalidArgument, names the limit, never shows the error's text, and
// is charged to no rule; a negative cost likewise.
func TestKeyError(t *testing.T) {
	clk := clocktest.New(t0)
	perPeer := spigot.MustBucket("peer", 1, spigot.PerHour(1))
	perTenant := spigot.MustBucket("tenant", 5, spigot.PerHour(5))
	conn, served := serve(t, grpclimit.New(memory.New(memory.WithClock(clk)),
		grpclimit.By(perPeer, nil),
		grpclimit.By(perTenant, grpclimit.Metadata("x-tenant"), grpclimit.Methods(echoMethod)),
		grpclimit.By(perTenant, grpclimit.Metadata("x-tenant"), grpclimit.Methods(otherMethod), grpclimit.Cost(func(context.Context, string, any) (int64, error) { return -1, nil })),
	))
	for i, c := range []struct {
		method, msg string
	}{
		{echoMethod, `the call has no key for the limit "tenant"`},
		{otherMethod, `the call's cost for the limit "tenant" is negative`},
	} {
		for range 3 {
			header, err := call(t, conn, c.method)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != c.msg || len(header.Get("ratelimit")) != 0 {
				t.Errorf("step %d: got %v, header %v; want InvalidArgument %q, no rate-limit metadata", i, err, header, c.msg)
			}
		}
	}
	// The peer's one token is still there.
	if _, err := call(t, conn, echoMethod, "x-tenant", "a"); err != nil {
		t.Errorf("got %v; want the peer's first call served", err)
	}
	if n := served.n.Load(); n != 1 {
		t.Errorf("served %d calls; want 1", n)
	}
}

// TestStoreErrorFailsSafe: by default a store error serves nothing:
// Unavailable with a RetryInfo of a second, and a message that does not
// show the error; FailOpen serves the call, as an explicit choice. The
// observer sees the error either way.
func TestStoreErrorFailsSafe(t *testing.T) {
	api := spigot.MustBucket("api", 5, spigot.PerSecond(1))
	for i, c := range []struct {
		opts   []grpclimit.Option
		code   codes.Code
		served int64
	}{
		{nil, codes.Unavailable, 0},
		{[]grpclimit.Option{grpclimit.By(api, grpclimit.FullMethod())}, codes.Unavailable, 0},
		{[]grpclimit.Option{grpclimit.WithErrorHandler(grpclimit.FailOpen)}, codes.OK, 1},
	} {
		var seen error
		opts := append([]grpclimit.Option{grpclimit.By(api, nil), grpclimit.WithObserver(func(_ context.Context, res *grpclimit.Result) { seen = res.Err })}, c.opts...)
		conn, served := serve(t, grpclimit.New(brokenStore{}, opts...))
		header, err := call(t, conn, echoMethod)
		d := readStatus(err)
		if d.code != c.code || served.n.Load() != c.served || len(header.Get("ratelimit")) != 0 {
			t.Errorf("step %d: got %v, served %d, header %v; want %v, served %d, no rate-limit metadata", i, err, served.n.Load(), header, c.code, c.served)
		}
		if c.code == codes.Unavailable && (d.retry.GetRetryDelay().AsDuration() != time.Second || d.msg != "rate limiter unavailable: retry in 1s") {
			t.Errorf("step %d: got %q, RetryInfo %v; want a retry in 1s", i, d.msg, d.retry)
		}
		if seen != errDown {
			t.Errorf("step %d: the observer saw %v; want %v", i, seen, errDown)
		}
	}
}

// TestLeakyDelay: a call that a leaky bucket admits with a Delay waits
// that long on the Server's clock before its handler runs; one whose
// client gives up first is refunded and not served.
func TestLeakyDelay(t *testing.T) {
	clk := clocktest.New(t0)
	queue := spigot.Must(spigot.NewLeakyBucket("queue", 3, spigot.PerSecond(1)))
	store := memory.New(memory.WithClock(clk))
	returned := make(chan struct{}, 3)
	outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		defer func() { returned <- struct{}{} }()
		return h(ctx, req)
	}
	conn, served := serve(t, grpclimit.New(store, grpclimit.By(queue, grpclimit.FullMethod()), grpclimit.WithClock(clk)), outer)
	if _, err := call(t, conn, echoMethod); err != nil { // no one ahead: no delay
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := call(t, conn, echoMethod); done <- err }()
	clk.BlockUntil(1) // the second call waits its turn, a second
	if served.n.Load() != 1 {
		t.Fatalf("served %d calls before the delay; want 1", served.n.Load())
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil || served.n.Load() != 2 {
		t.Fatalf("after the delay: got %v, served %d; want served 2", err, served.n.Load())
	}

	// A client that gives up while held is refunded.
	callCtx, callCancel := context.WithCancel(context.Background())
	go func() {
		done <- conn.Invoke(callCtx, echoMethod, wrapperspb.String("hi"), new(wrapperspb.StringValue))
	}()
	clk.BlockUntil(1)
	before, _ := store.Do(context.Background(), spigot.Op{Limit: queue, Key: echoMethod, Action: spigot.Peek, N: 1})
	callCancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("got %v; want Canceled", err)
	}
	<-returned // the interceptor returned on the server: it refunded first
	<-returned
	<-returned
	after, _ := store.Do(context.Background(), spigot.Op{Limit: queue, Key: echoMethod, Action: spigot.Peek, N: 1})
	if after.Remaining != before.Remaining+1 {
		t.Errorf("got %d places free after the cancelled call; want %d, its place given back", after.Remaining, before.Remaining+1)
	}
	if n := served.n.Load(); n != 2 {
		t.Errorf("served %d calls; want 2", n)
	}
}
