package rls

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const basic = `
domain: d
descriptors:
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: open
    rate_limit: {unlimited: true}
  - key: zero
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 1, name: weekly}
  - key: month
    rate_limit: {unit: Month, requests_per_unit: 1}
  - key: year
    rate_limit: {unit: YEAR, requests_per_unit: 1}
  - key: parent
    value: p
    descriptors:
      - key: child
        rate_limit: {unit: minute, requests_per_unit: 1}
`

func TestFixedWindows(t *testing.T) {
	svc, clk, _ := setup(t, basic)
	run(t, svc, clk, []step{
		{0, request("d", desc("k", "v")), "OK: | OK 3/minute r=2 t=60"},
		{10 * time.Second, request("d", desc("k", "v")), "OK: | OK 3/minute r=1 t=50"},
		{10 * time.Second, request("d", desc("k", "v")), "OK: | OK 3/minute r=0 t=50"},
		{59500 * time.Millisecond, request("d", desc("k", "v")), "OVER: | OVER 3/minute r=0 t=1"},
		{time.Minute, request("d", desc("k", "v")), "OK: | OK 3/minute r=2 t=60"},
		// An unknown domain, an unmatched value, a key-only descriptor
		// counting each value apart.
		{time.Minute, request("x", desc("k", "v")), "OK: | OK"},
		{time.Minute, request("d", desc("k", "w")), "OK: | OK"},
		{time.Minute, request("d", desc("user", "a")), "OK: | OK 1/second r=0 t=1"},
		{time.Minute, request("d", desc("user", "a")), "OVER: | OVER 1/second r=0 t=1"},
		{time.Minute, request("d", desc("user", "b")), "OK: | OK 1/second r=0 t=1"},
		{time.Minute + time.Second, request("d", desc("user", "a")), "OK: | OK 1/second r=0 t=1"},
		// Unlimited, 0 a unit, the long units (30 and 365 days, from the epoch).
		{time.Minute, request("d", desc("open", "x")), "OK: | OK r=4294967295"},
		{time.Minute, request("d", desc("zero", "x")), "OVER: | OVER 0/hour r=0 t=3540"},
		{time.Minute, request("d", hits(0, desc("zero", "x"))), "OK: | OK 0/hour r=0 t=3540"},
		{time.Minute, request("d", desc("week", "x")), "OK: | OK 1/week weekly r=0 t=518340"},
		{time.Minute, request("d", desc("month", "x")), "OK: | OK 1/month r=0 t=863940"},
		{time.Minute, request("d", desc("year", "x")), "OK: | OK 1/year r=0 t=6479940"},
		// A limit applies at the depth of the request's last entry only.
		{time.Minute, request("d", desc("parent", "p")), "OK: | OK"},
		{time.Minute, request("d", desc("parent", "p", "child", "c")), "OK: | OK 1/minute r=0 t=60"},
		{time.Minute, request("d", desc("parent", "p", "child", "c", "extra", "e")), "OK: | OK"},
		{time.Minute, request("d", desc("parent", "q", "child", "c")), "OK: | OK"},
		// Several descriptors, one status each, in order.
		{time.Minute, request("d", desc("k", "v"), desc("open", "x"), desc("nothing", "x"), desc("parent", "p", "child", "c")),
			"OVER: | OK 3/minute r=1 t=60 | OK r=4294967295 | OK | OVER 1/minute r=0 t=60"},
	})
}

const charging = `
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: sh
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: h
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: z
    rate_limit: {unit: minute, requests_per_unit: 0}
`

func chargingService(t *testing.T, opts ...Option) (*Service, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(t0)
	cfg := mustLoad(t, map[string]string{
		"e.yaml": "domain: e\n" + charging,
		"s.yaml": "domain: s\ncharging: stop-when-over\n" + charging,
		"a.yaml": "domain: a\ncharging: all-or-nothing\n" + charging,
	})
	return NewService(memory.New(memory.WithClock(clk)), cfg, append([]Option{WithClock(clk)}, opts...)...), clk
}

func TestCharging(t *testing.T) {
	svc, clk := chargingService(t)
	run(t, svc, clk, []step{
		// envoy: every matched descriptor is charged, the refused too,
		// and one named twice is charged twice.
		{0, request("e", desc("a", "1"), desc("b", "1")), "OK: | OK 1/minute r=0 t=60 | OK 5/minute r=4 t=60"},
		{0, request("e", desc("a", "1"), desc("b", "1")), "OVER: | OVER 1/minute r=0 t=60 | OK 5/minute r=3 t=60"},
		{0, request("e", desc("b", "1")), "OK: | OK 5/minute r=2 t=60"},
		{0, request("e", desc("b", "1"), desc("b", "1")), "OK: | OK 5/minute r=1 t=60 | OK 5/minute r=0 t=60"},
		{0, request("e", desc("z", "1"), desc("b", "2")), "OVER: | OVER 0/minute r=0 t=60 | OK 5/minute r=4 t=60"},
		// stop-when-over: when one would go over, only it is charged.
		{0, request("s", desc("a", "1"), desc("b", "1")), "OK: | OK 1/minute r=0 t=60 | OK 5/minute r=4 t=60"},
		{0, request("s", desc("a", "1"), desc("b", "1")), "OVER: | OVER 1/minute r=0 t=60 | OK 5/minute r=4 t=60"},
		{0, request("s", desc("b", "1")), "OK: | OK 5/minute r=3 t=60"},
		{0, request("s", hits(2, desc("b", "1"))), "OK: | OK 5/minute r=1 t=60"},
		{0, request("s", hits(2, desc("b", "1"))), "OVER: | OVER 5/minute r=0 t=60"},
		{0, request("s", hits(0, desc("b", "1"))), "OVER: | OVER 5/minute r=0 t=60"}, // the refused hits were counted
		{0, request("s", desc("z", "1"), desc("b", "2")), "OVER: | OVER 0/minute r=0 t=60 | OK 5/minute r=5 t=60"},
		// all-or-nothing: nothing is charged on a refusal.
		{0, request("a", desc("a", "1"), desc("b", "1")), "OK: | OK 1/minute r=0 t=60 | OK 5/minute r=4 t=60"},
		{0, request("a", desc("a", "1"), desc("b", "1")), "OVER: | OVER 1/minute r=0 t=60 | OK 5/minute r=4 t=60"},
		{0, request("a", desc("b", "1")), "OK: | OK 5/minute r=3 t=60"},
		{0, request("a", desc("b", "1"), desc("b", "1")), "OK: | OK 5/minute r=2 t=60 | OK 5/minute r=1 t=60"},
		{0, request("a", hits(2, desc("b", "1")), desc("b", "2")), "OVER: | OVER 5/minute r=0 t=60 | OK 5/minute r=5 t=60"},
		{0, request("a", desc("z", "1"), desc("b", "2")), "OVER: | OVER 0/minute r=0 t=60 | OK 5/minute r=5 t=60"},
		// A shadow mode limit never refuses, and is charged when the
		// request is not refused.
		{0, request("a", desc("sh", "1"), desc("b", "2")), "OK: | OK 1/minute r=0 t=60 | OK 5/minute r=4 t=60"},
		{0, request("a", desc("sh", "1"), desc("b", "2")), "OK: | OK 1/minute r=0 t=60 | OK 5/minute r=3 t=60"},
		{0, request("a", desc("sh", "2"), desc("a", "1")), "OVER: | OK 1/minute r=1 t=60 | OVER 1/minute r=0 t=60"},
		{0, request("a", desc("sh", "2")), "OK: | OK 1/minute r=0 t=60"},
		// Quota mode: over is OK, without duration_until_reset.
		{0, request("e", desc("q", "1")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("e", desc("q", "1")), "OK: | OK 1/minute r=0"},
		{0, request("e", desc("sh", "1")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("e", desc("sh", "1")), "OK: | OK 1/minute r=0 t=60"},
	})
}

func TestHitsAddend(t *testing.T) {
	svc, clk := chargingService(t)
	withHits := func(n uint32, r *pb.RateLimitRequest) *pb.RateLimitRequest { r.HitsAddend = n; return r }
	run(t, svc, clk, []step{
		{0, withHits(3, request("e", desc("h", "1"))), "OK: | OK 10/minute r=7 t=60"},
		{0, withHits(3, request("e", hits(0, desc("h", "1")))), "OK: | OK 10/minute r=7 t=60"},
		{0, withHits(3, request("e", hits(5, desc("h", "1")))), "OK: | OK 10/minute r=2 t=60"},
		{0, withHits(0, request("e", desc("h", "1"))), "OK: | OK 10/minute r=1 t=60"},
		{0, request("e", hits(math.MaxUint64, desc("h", "1"))), "OVER: | OVER 10/minute r=0 t=60"},
		{0, request("e", hits(1, desc("h", "1"))), "OVER: | OVER 10/minute r=0 t=60"},
		// A check after refused hits is over, as envoyproxy/ratelimit's
		// counter, past the limit, says.
		{0, request("e", hits(0, desc("h", "1"))), "OVER: | OVER 10/minute r=0 t=60"},
		{time.Minute, withHits(math.MaxUint32, request("e", desc("h", "1"))), "OVER: | OVER 10/minute r=0 t=60"},
		{2 * time.Minute, request("a", hits(1<<63, desc("h", "1")), hits(1<<62, desc("h", "2"))), "OVER: | OVER 10/minute r=0 t=60 | OVER 10/minute r=0 t=60"},
		{2 * time.Minute, request("a", desc("h", "1")), "OK: | OK 10/minute r=9 t=60"},
	})
}

func TestReplacesAndOverrides(t *testing.T) {
	svc, clk, _ := setup(t, `
domain: r
descriptors:
  - key: small
    rate_limit: {unit: minute, requests_per_unit: 1, name: small}
  - key: big
    rate_limit:
      unit: minute
      requests_per_unit: 10
      replaces: [{name: small}]
  - key: free
    rate_limit:
      unlimited: true
      replaces: [{name: small}]
  - key: x
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	run(t, svc, clk, []step{
		{0, request("r", desc("small", "1")), "OK: | OK 1/minute small r=0 t=60"},
		{0, request("r", desc("small", "1")), "OVER: | OVER 1/minute small r=0 t=60"},
		{0, request("r", desc("small", "1"), desc("big", "1")), "OK: | OK | OK 10/minute r=9 t=60"},
		{0, request("r", desc("big", "1"), desc("small", "1")), "OK: | OK 10/minute r=8 t=60 | OK"},
		{0, request("r", desc("small", "1"), desc("free", "1")), "OK: | OK | OK r=4294967295"},
		// A limit override in the request, a fixed window of its own
		// unit, in place of the config's.
		{0, request("r", override(2, 1, desc("x", "1"))), "OK: | OK 2/second r=1 t=1"},
		{0, request("r", override(2, 1, desc("x", "1"))), "OK: | OK 2/second r=0 t=1"},
		{0, request("r", override(2, 1, desc("x", "1"))), "OVER: | OVER 2/second r=0 t=1"},
		{0, request("r", override(5, 2, desc("unknown", "1"))), "OK: | OK 5/minute r=4 t=60"},
		{0, request("r", override(0, 3, desc("unknown", "1"))), "OVER: | OVER 0/hour r=0 t=3600"},
		{0, request("nowhere", override(5, 2, desc("x", "1"))), "OK: | OK"},
		{0, request("r", desc("x", "1")), "OK: | OK 1/minute r=0 t=60"},
	})
}

func TestWildcards(t *testing.T) {
	svc, clk, _ := setup(t, `
domain: w
descriptors:
  - key: path
    value: /api/v1/exact
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api/v1/*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 9}
  - key: files
    value: f/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: nosh
    value: f/*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: mid
    value: a*b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: dir
    value: d/*
    share_threshold: true
    descriptors:
      - key: op
        rate_limit: {unit: minute, requests_per_unit: 1}
`)
	run(t, svc, clk, []step{
		{0, request("w", desc("path", "/api/v1/exact")), "OK: | OK 5/minute r=4 t=60"},
		{0, request("w", desc("path", "/api/v1/x")), "OK: | OK 2/minute r=1 t=60"},
		{0, request("w", desc("path", "/api/v1/y")), "OK: | OK 2/minute r=1 t=60"},
		{0, request("w", desc("path", "/other")), "OK: | OK 9/minute r=8 t=60"},
		{0, request("w", desc("files", "f/a")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("w", desc("files", "f/b")), "OVER: | OVER 1/minute r=0 t=60"},
		{0, request("w", desc("nosh", "f/a")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("w", desc("nosh", "f/b")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("w", desc("mid", "a*b")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("w", desc("mid", "axb")), "OK: | OK"},
		{0, request("w", desc("dir", "d/1", "op", "get")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("w", desc("dir", "d/2", "op", "get")), "OVER: | OVER 1/minute r=0 t=60"},
		{0, request("w", desc("dir", "d/2", "op", "put")), "OK: | OK 1/minute r=0 t=60"},
	})
}

func TestKeysDoNotCollide(t *testing.T) {
	svc, clk, rec := setup(t, `
domain: c
descriptors:
  - key: k_a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: long
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	long := strings.Repeat("x", 2*spigot.MaxKeyLen)
	run(t, svc, clk, []step{
		{0, request("c", desc("k_a", "b")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("c", desc("k", "a_b")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("c", desc("k_a", "b")), "OVER: | OVER 1/minute r=0 t=60"},
		{0, request("c", desc("long", long+"1")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("c", desc("long", long+"2")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("c", desc("long", long+"1")), "OVER: | OVER 1/minute r=0 t=60"},
	})
	for i, k := range rec.keys {
		if len(k) > spigot.MaxKeyLen {
			t.Errorf("key %d is %d bytes long", i, len(k))
		}
	}
	pairs := [][2]string{
		{storeKey("d", []Entry{{"k_a", "b"}}, nil), storeKey("d", []Entry{{"k", "a_b"}}, nil)},
		{storeKey("d_k", []Entry{{"a", "b"}}, nil), storeKey("d", []Entry{{"k_a", "b"}}, nil)},
		{storeKey("d", []Entry{{"a", "b"}, {"c", ""}}, nil), storeKey("d", []Entry{{"a", "b_c"}}, nil)},
		{storeKey("d", []Entry{{"f", "x*"}}, nil), storeKey("d", []Entry{{"f", "x"}}, []string{"x*"})},
		{storeKey("1:d", nil, nil), storeKey("1", []Entry{{"d", ""}}, nil)},
	}
	for i, p := range pairs {
		if p[0] == p[1] {
			t.Errorf("pair %d: both keys are %q", i, p[0])
		}
	}
	if got, want := storeKey("dom", []Entry{{"k", "v"}, {"a", ""}}, nil), "3:dom1:k=1:v1:a=0:"; got != want {
		t.Errorf("storeKey: got %q, want %q", got, want)
	}
}

func TestAlgorithms(t *testing.T) {
	svc, clk, _ := setup(t, `
domain: alg
descriptors:
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token-bucket, capacity: 2}
  - key: sw
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding-window}
  - key: sl
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding-log}
  - key: lb
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky-bucket}
`)
	run(t, svc, clk, []step{
		// A bucket of 2 refilled 1 a second.
		{0, request("alg", desc("tb", "1")), "OK: | OK 1/second r=1 t=1"},
		{0, request("alg", desc("tb", "1")), "OK: | OK 1/second r=0 t=2"},
		{500 * time.Millisecond, request("alg", desc("tb", "1")), "OVER: | OVER 1/second r=0 t=2"},
		{time.Second, request("alg", desc("tb", "1")), "OK: | OK 1/second r=0 t=2"},
		// A sliding window counts the last window's hits, weighted.
		{0, request("alg", desc("sw", "1")), "OK: | OK 2/minute r=1 t=120"},
		{0, request("alg", desc("sw", "1")), "OK: | OK 2/minute r=0 t=120"},
		{time.Minute, request("alg", desc("sw", "1")), "OVER: | OVER 2/minute r=0 t=60"},
		{90 * time.Second, request("alg", desc("sw", "1")), "OK: | OK 2/minute r=0 t=90"},
		// A sliding log: at most 2 in any minute. duration_until_reset is,
		// but for a fixed window, the time until the limit is whole again.
		{0, request("alg", desc("sl", "1")), "OK: | OK 2/minute r=1 t=60"},
		{30 * time.Second, request("alg", desc("sl", "1")), "OK: | OK 2/minute r=0 t=60"},
		{time.Minute, request("alg", desc("sl", "1")), "OK: | OK 2/minute r=0 t=60"},
		{time.Minute, request("alg", desc("sl", "1")), "OVER: | OVER 2/minute r=0 t=60"},
		// A leaky bucket of 1 place.
		{0, request("alg", desc("lb", "1")), "OK: | OK 1/second r=0 t=1"},
		{0, request("alg", desc("lb", "1")), "OVER: | OVER 1/second r=0 t=1"},
	})
}

func TestResponseHeaders(t *testing.T) {
	svc, clk := chargingService(t, WithResponseHeaders(HeaderNames{}), WithRateLimitFields())
	headers := func(resp *pb.RateLimitResponse) string {
		var parts []string
		for _, h := range resp.ResponseHeadersToAdd {
			parts = append(parts, h.Key+": "+h.Value)
		}
		return strings.Join(parts, "\n")
	}
	cases := []struct {
		at   time.Duration
		req  *pb.RateLimitRequest
		want string
	}{
		{0, request("e", desc("b", "1"), desc("h", "1")), `RateLimit-Limit: 5
RateLimit-Remaining: 4
RateLimit-Reset: 60
RateLimit-Policy: "e.b";q=5;w=60, "e.h";q=10;w=60
RateLimit: "e.b";r=4;t=60, "e.h";r=9;t=60`},
		{15 * time.Second, request("e", desc("a", "1"), desc("h", "1"), desc("nothing", "1"), desc("z", "1")), `RateLimit-Limit: 0
RateLimit-Remaining: 0
RateLimit-Reset: 45
RateLimit-Policy: "e.a";q=1;w=60, "e.h";q=10;w=60, "e.z";q=0;w=60
RateLimit: "e.a";r=0;t=45, "e.h";r=8;t=45, "e.z";r=0`},
		{20 * time.Second, request("e", desc("a", "1"), desc("h", "1")), `RateLimit-Limit: 1
RateLimit-Remaining: 0
RateLimit-Reset: 40
RateLimit-Policy: "e.a";q=1;w=60, "e.h";q=10;w=60
RateLimit: "e.a";r=0;t=40, "e.h";r=7;t=40`},
		{0, request("e", desc("nothing", "1")), ``},
	}
	for i, c := range cases {
		clk.Set(t0.Add(c.at))
		resp, err := svc.ShouldRateLimit(context.Background(), c.req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := headers(resp); got != c.want {
			t.Errorf("step %d: got\n%s\nwant\n%s", i, got, c.want)
		}
	}
	// Off by default.
	svc, _ = chargingService(t)
	resp, err := svc.ShouldRateLimit(context.Background(), request("e", desc("a", "1")))
	if err != nil || len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("default: got %v, %v; want no headers", resp.GetResponseHeadersToAdd(), err)
	}
}

func TestShadowModeOption(t *testing.T) {
	svc, clk := chargingService(t, WithShadowMode())
	run(t, svc, clk, []step{
		{0, request("e", desc("a", "1")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("e", desc("a", "1")), "OK: | OVER 1/minute r=0 t=60"},
	})
}

func TestQuotaModeOption(t *testing.T) {
	svc, clk := chargingService(t, WithQuotaMode())
	run(t, svc, clk, []step{
		{0, request("a", desc("a", "1"), desc("b", "1")), "OK: | OK 1/minute r=0 t=60 | OK 5/minute r=4 t=60"},
		{0, request("a", desc("a", "1"), desc("b", "1")), "OK: | OK 1/minute r=0 | OK 5/minute r=3 t=60"},
		{0, request("e", desc("sh", "1")), "OK: | OK 1/minute r=0 t=60"},
		{0, request("e", desc("sh", "1")), "OK: | OK 1/minute r=0 t=60"},
	})
}

func TestBadRequests(t *testing.T) {
	svc, clk, _ := setup(t, basic)
	many := request("d")
	for range MaxDescriptors + 1 {
		many.Descriptors = append(many.Descriptors, desc("k", "v"))
	}
	deep := desc()
	for range MaxEntries + 1 {
		deep.Entries = append(deep.Entries, &rlpb.RateLimitDescriptor_Entry{Key: "k"})
	}
	negative := desc("k", "v")
	negative.IsNegativeHits = true
	// envoyproxy/ratelimit's answers, code and message.
	for i, c := range []struct {
		req *pb.RateLimitRequest
		msg string
	}{
		{nil, "rate limit domain must not be empty"},
		{request("", desc("k", "v")), "rate limit domain must not be empty"},
		{request("d"), "rate limit descriptor list must not be empty"},
	} {
		_, err := svc.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.Unknown || status.Convert(err).Message() != c.msg {
			t.Errorf("request %d: got %v, want Unknown: %s", i, err, c.msg)
		}
	}
	for i, req := range []*pb.RateLimitRequest{
		many,
		request("d", deep),
		request("d", override(1, 0, desc("k", "v"))),
		request("d", override(1, 99, desc("k", "v"))),
		request("d", negative),
	} {
		_, err := svc.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), "rls: ") {
			t.Errorf("request %d: got %v, want an InvalidArgument starting rls:", i, err)
		}
	}
	// What is odd but can be decided is decided.
	run(t, svc, clk, []step{
		{0, request("d", desc()), "OK: | OK"},
		{0, request("d", nil), "OK: | OK"},
		{0, request("d", desc("", "v")), "OK: | OK"},
		{0, request("d", desc("k", "")), "OK: | OK"},
		{0, request("d", desc("\x00", "\xff")), "OK: | OK"},
	})
}

// failing is a store that fails, saying what a Redis client says.
type failing struct{}

var errRedis = errors.New(`spigot: redis: EVALSHA 3f2a… 1 "rls-fw-minute:1:d1:k=1:v": connection refused`)

func (failing) Do(context.Context, spigot.Op) (spigot.Decision, error) {
	return spigot.Undecided(), errRedis
}

func (failing) DoMulti(context.Context, spigot.Mode, []spigot.Op, []spigot.Decision) error {
	return errRedis
}

func TestStoreErrors(t *testing.T) {
	var seen []error
	cfg := mustLoad(t, map[string]string{"d.yaml": basic})
	svc := NewService(failing{}, cfg, WithErrorHandler(func(err error) { seen = append(seen, err) }))
	_, err := svc.ShouldRateLimit(context.Background(), request("d", desc("k", "v")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want Unavailable", err)
	}
	if msg := status.Convert(err).Message(); strings.Contains(msg, "EVALSHA") || strings.Contains(msg, "k=") || !strings.HasPrefix(msg, "rls: ") {
		t.Errorf("the message %q shows the store's detail", msg)
	}
	if len(seen) != 1 || !errors.Is(seen[0], errRedis) {
		t.Errorf("the error handler saw %v", seen)
	}
	// A request that needs no store is answered.
	if resp, err := svc.ShouldRateLimit(context.Background(), request("d", desc("open", "1"))); err != nil || showAll(resp) != "OK: | OK r=4294967295" {
		t.Errorf("unlimited: got %v, %v", resp, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := svc.ShouldRateLimit(ctx, request("d", desc("k", "v"))); status.Code(err) != codes.Canceled {
		t.Errorf("cancelled: got %v, want Canceled", err)
	}
}

func TestReload(t *testing.T) {
	svc, clk, _ := setup(t, basic)
	run(t, svc, clk, []step{
		{0, request("d", desc("k", "v")), "OK: | OK 3/minute r=2 t=60"},
	})
	svc.Reload(mustLoad(t, map[string]string{"d.yaml": `
domain: d
descriptors:
  - key: k
    value: v
    rate_limit: {unit: minute, requests_per_unit: 5}
`}))
	run(t, svc, clk, []step{
		{0, request("d", desc("k", "v")), "OK: | OK 5/minute r=3 t=60"},
		{0, request("d", desc("open", "v")), "OK: | OK"},
	})
	svc.Reload(nil)
	run(t, svc, clk, []step{{0, request("d", desc("k", "v")), "OK: | OK"}})
}
