package envoyrls_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/spigot-go/spigot/internal/tests/envoyrls"
	"github.com/spigot-go/spigot/internal/testserver"
)

var update = flag.Bool("update", false, "rewrite testdata/envoyrls.golden.json with envoyproxy/ratelimit's answers")

// TestMain says how many tests were skipped for want of redis-server or
// the go command.
func TestMain(m *testing.M) { testserver.Main(m) }

const (
	configDir = "testdata/config"
	golden    = "testdata/envoyrls.golden.json"
)

// A wantStatus is what a step wants of one descriptor's status: its code, the
// requests_per_unit of its current_limit (0: none), and limit_remaining.
type wantStatus struct {
	code      pb.RateLimitResponse_Code
	limit     uint32
	remaining uint32
}

const (
	ok   = pb.RateLimitResponse_OK
	over = pb.RateLimitResponse_OVER_LIMIT
)

func req(hits uint32, ds ...*rlpb.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "envoyrls", Descriptors: ds, HitsAddend: hits}
}

func d(kv ...string) *rlpb.RateLimitDescriptor { return envoyrls.Descriptor(kv...) }

// hits sets a descriptor's own hits_addend, which overrides the request's.
func hits(n uint64, desc *rlpb.RateLimitDescriptor) *rlpb.RateLimitDescriptor {
	desc.HitsAddend = wrapperspb.UInt64(n)
	return desc
}

// override sets a limit in the descriptor, which replaces the
// configuration's.
func override(perHour uint32, desc *rlpb.RateLimitDescriptor) *rlpb.RateLimitDescriptor {
	desc.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perHour, Unit: typepb.RateLimitUnit_HOUR}
	return desc
}

// steps is the sequence of TestEnvoyRateLimitRuns: each request, and what
// envoyproxy/ratelimit answers in its default mode, as its source
// (src/service/ratelimit.go, src/limiter/base_limiter.go,
// src/redis/fixed_cache_impl.go, src/config/config_impl.go) has it. A
// hits_addend of 0 counts as 1.
var steps = []struct {
	req     *pb.RateLimitRequest
	overall pb.RateLimitResponse_Code
	want    []wantStatus
	err     string // the error's message, instead of a response
}{
	// A nested descriptor: each level that has a limit counts on its own.
	0: {req: req(0, d("tenant", "acme")), overall: ok, want: []wantStatus{{ok, 3, 2}}},
	1: {req: req(0, d("tenant", "acme"), d("tenant", "acme", "path", "/upload")), overall: ok, want: []wantStatus{{ok, 3, 1}, {ok, 2, 1}}},
	2: {req: req(0, d("tenant", "acme"), d("tenant", "acme", "path", "/upload")), overall: ok, want: []wantStatus{{ok, 3, 0}, {ok, 2, 0}}},
	// Over the limit after requests_per_unit hits in the window.
	3: {req: req(0, d("tenant", "acme"), d("tenant", "acme", "path", "/upload")), overall: over, want: []wantStatus{{over, 3, 0}, {over, 2, 0}}},
	// A key that no limit matches: OK, no current_limit, nothing remaining;
	// so is a descriptor deeper than the configuration, or one that stops
	// at a level without a limit.
	4: {req: req(0, d("unknown", "x"), d("tenant", "acme", "path", "/other"), d("tenant", "other")), overall: ok, want: []wantStatus{{ok, 0, 0}, {ok, 0, 0}, {ok, 0, 0}}},
	// An unlimited key: OK with MaxUint32 remaining and no current_limit;
	// the request's hits_addend applies to each of its descriptors.
	5: {req: req(2, d("internal", "yes"), d("user", "alice")), overall: ok, want: []wantStatus{{ok, 0, math.MaxUint32}, {ok, 4, 2}}},
	// A wildcard value: each value that matches counts on its own.
	6: {req: req(2, d("user", "bot-1")), overall: ok, want: []wantStatus{{ok, 2, 0}}},
	7: {req: req(0, d("user", "bot-1")), overall: over, want: []wantStatus{{over, 2, 0}}},
	8: {req: req(0, d("user", "bot-2")), overall: ok, want: []wantStatus{{ok, 2, 1}}},
	// share_threshold: every value of the wildcard shares one counter.
	9:  {req: req(0, d("crawler", "x-1")), overall: ok, want: []wantStatus{{ok, 2, 1}}},
	10: {req: req(0, d("crawler", "x-2")), overall: ok, want: []wantStatus{{ok, 2, 0}}},
	11: {req: req(0, d("crawler", "x-3")), overall: over, want: []wantStatus{{over, 2, 0}}},
	// shadow_mode: over the limit it answers OK, with current_limit and
	// nothing remaining.
	12: {req: req(0, d("shadow", "s")), overall: ok, want: []wantStatus{{ok, 1, 0}}},
	13: {req: req(5, d("shadow", "s")), overall: ok, want: []wantStatus{{ok, 1, 0}}},
	// replaces: premium in the same request drops basic's limit (no
	// current_limit, no count); basic alone counts again.
	14: {req: req(0, d("plan", "basic"), d("plan", "premium")), overall: ok, want: []wantStatus{{ok, 0, 0}, {ok, 5, 4}}},
	15: {req: req(0, d("plan", "basic")), overall: ok, want: []wantStatus{{ok, 2, 1}}},
	// A descriptor's own hits_addend overrides the request's; 0 only
	// checks.
	16: {req: req(0, hits(0, d("user", "carol"))), overall: ok, want: []wantStatus{{ok, 4, 4}}},
	17: {req: req(3, hits(1, d("user", "carol")), d("user", "dave")), overall: ok, want: []wantStatus{{ok, 4, 3}, {ok, 4, 1}}},
	18: {req: req(0, hits(0, d("user", "carol")), hits(0, d("user", "dave"))), overall: ok, want: []wantStatus{{ok, 4, 3}, {ok, 4, 1}}},
	// More hits at once than the limit: over at once, and counted.
	19: {req: req(5, d("user", "erin")), overall: over, want: []wantStatus{{over, 4, 0}}},
	20: {req: req(0, hits(0, d("user", "erin"))), overall: over, want: []wantStatus{{over, 4, 0}}},
	// A limit in the descriptor replaces the configuration's.
	21: {req: req(0, override(1, d("tenant", "zeta"))), overall: ok, want: []wantStatus{{ok, 1, 0}}},
	22: {req: req(0, override(1, d("tenant", "zeta"))), overall: over, want: []wantStatus{{over, 1, 0}}},
	// An unknown domain: no limits.
	23: {req: &pb.RateLimitRequest{Domain: "nowhere", Descriptors: []*rlpb.RateLimitDescriptor{d("tenant", "acme")}}, overall: ok, want: []wantStatus{{ok, 0, 0}}},
	// Errors.
	24: {req: &pb.RateLimitRequest{Descriptors: []*rlpb.RateLimitDescriptor{d("tenant", "acme")}}, err: "rate limit domain must not be empty"},
	25: {req: &pb.RateLimitRequest{Domain: "envoyrls"}, err: "rate limit descriptor list must not be empty"},
}

// TestEnvoyRateLimitRuns runs envoyproxy/ratelimit, checks its answers to
// the steps, and keeps them in the golden file (go test -update rewrites
// it) for spigot's own service to be compared against.
func TestEnvoyRateLimitRuns(t *testing.T) {
	t.Parallel()
	start := time.Now()
	svc := envoyrls.Start(t, configDir)
	t.Logf("envoyproxy/ratelimit answers on %s after %v", svc.GRPCAddr, time.Since(start).Round(time.Millisecond))

	window := inOneWindow(t)
	ctx := context.Background()
	var xs []envoyrls.Exchange
	for i, step := range steps {
		before := time.Now().Unix()
		resp, err := svc.Client.ShouldRateLimit(ctx, step.req)
		after := time.Now().Unix()
		xs = append(xs, envoyrls.Exchange{Request: step.req, Response: resp, Err: err})
		if step.err != "" {
			if err == nil || status.Convert(err).Message() != step.err {
				t.Errorf("step %d: got error %v, want %q", i, err, step.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("step %d: %v", i, err)
			continue
		}
		if resp.GetOverallCode() != step.overall {
			t.Errorf("step %d: got overall_code %v, want %v", i, resp.GetOverallCode(), step.overall)
		}
		if len(resp.GetStatuses()) != len(step.want) {
			t.Errorf("step %d: got %d statuses, want %d", i, len(resp.GetStatuses()), len(step.want))
			continue
		}
		for j, s := range resp.GetStatuses() {
			w := step.want[j]
			got := wantStatus{s.GetCode(), s.GetCurrentLimit().GetRequestsPerUnit(), s.GetLimitRemaining()}
			if got != w {
				t.Errorf("step %d: status %d: got {code %v, requests_per_unit %d, remaining %d}, want {%v, %d, %d}",
					i, j, got.code, got.limit, got.remaining, w.code, w.limit, w.remaining)
			}
			checkReset(t, i, j, s, before, after)
		}
	}
	if w := time.Now().Unix() / 3600; w != window {
		t.Fatalf("the steps crossed the end of an hour: their counts span two windows")
	}

	// The HTTP endpoint answers as gRPC does.
	checkJSON(t, svc, steps[4].req)

	if *update {
		if err := envoyrls.WriteGolden(golden, xs); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := envoyrls.ReadGolden(golden)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if len(want) != len(xs) {
		t.Fatalf("%s has %d exchanges, the steps %d (go test -update rewrites it)", golden, len(want), len(xs))
	}
	for i, x := range xs {
		if !proto.Equal(x.Request, want[i].Request) {
			t.Errorf("step %d: request %s, %s has %s (go test -update rewrites it)", i, envoyrls.JSON(x.Request), golden, envoyrls.JSON(want[i].Request))
			continue
		}
		if diff := envoyrls.DiffExchange(want[i].Response, want[i].Err, envoyrls.WithoutResets(x.Response), x.Err); len(diff) > 0 {
			t.Errorf("step %d: %s differs (go test -update rewrites it):\n\t%s", i, golden, strings.Join(diff, "\n\t"))
		}
	}
}

// inOneWindow returns the hour of the steps' window, first waiting for the
// next hour when this one ends within 15 s, so that every step (its
// limits are per hour or per day, whose windows end on the hour) falls in
// one window.
func inOneWindow(t *testing.T) int64 {
	t.Helper()
	now := time.Now()
	if end := now.Truncate(time.Hour).Add(time.Hour); end.Sub(now) < 15*time.Second {
		t.Logf("waiting %v for the hour to end", end.Sub(now).Round(time.Millisecond))
		time.Sleep(time.Until(end) + 10*time.Millisecond)
	}
	return time.Now().Unix() / 3600
}

// checkReset checks the duration_until_reset of a status: with a
// current_limit it is the whole seconds from the instant of the call to the
// end of its window; without, none.
func checkReset(t *testing.T, step, j int, s *pb.RateLimitResponse_DescriptorStatus, before, after int64) {
	t.Helper()
	if s.GetCurrentLimit() == nil {
		if s.GetDurationUntilReset() != nil {
			t.Errorf("step %d: status %d: got duration_until_reset %v without a current_limit, want none", step, j, s.GetDurationUntilReset().AsDuration())
		}
		return
	}
	u := envoyrls.UnitSeconds(s.GetCurrentLimit().GetUnit())
	lo, hi := u-after%u, u-before%u
	if got := s.GetDurationUntilReset(); got == nil || got.GetNanos() != 0 || got.GetSeconds() < lo || got.GetSeconds() > hi {
		t.Errorf("step %d: status %d: got duration_until_reset %v, want whole seconds in [%ds, %ds]", step, j, got.AsDuration(), lo, hi)
	}
}

// checkJSON sends req, which must change no count, to the service's
// /json endpoint and to its gRPC service, and compares the answers.
func checkJSON(t *testing.T, svc *envoyrls.Service, req *pb.RateLimitRequest) {
	t.Helper()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+svc.HTTPAddr+"/json", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST /json: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /json: %s: %s", resp.Status, b)
	}
	var viaHTTP pb.RateLimitResponse
	if err := protojson.Unmarshal(b, &viaHTTP); err != nil {
		t.Fatalf("POST /json: %v: %s", err, b)
	}
	viaGRPC, err := svc.Client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := envoyrls.Diff(viaGRPC, &viaHTTP); len(diff) > 0 {
		t.Errorf("POST /json answers otherwise than gRPC:\n\t%s", strings.Join(diff, "\n\t"))
	}
}

// TestCompare runs two envoyproxy/ratelimit services of the same
// configuration, each with its own Redis, and compares their answers to
// the steps' requests: they must be the same.
func TestCompare(t *testing.T) {
	t.Parallel()
	a := envoyrls.Start(t, configDir)
	b := envoyrls.Start(t, configDir, envoyrls.LogLevel("info"))
	inOneWindow(t)
	reqs := make([]*pb.RateLimitRequest, len(steps))
	for i, s := range steps {
		reqs[i] = s.req
	}
	envoyrls.Compare(t, a.Client, b.Client, reqs)

	// And a difference shows: b has counted one more hit of user=bot-9.
	if _, err := b.Client.ShouldRateLimit(context.Background(), req(0, d("user", "bot-9"))); err != nil {
		t.Fatal(err)
	}
	ft := &fakeTB{TB: t}
	envoyrls.Compare(ft, a.Client, b.Client, []*pb.RateLimitRequest{req(0, d("user", "bot-9"))})
	want := "statuses[0].limit_remaining: 1 != 0"
	if len(ft.errors) != 1 || !strings.Contains(ft.errors[0], want) {
		t.Errorf("Compare after one more hit on b: got errors %q, want one with %q", ft.errors, want)
	}
}

// fakeTB records what Errorf reports.
type fakeTB struct {
	testing.TB
	errors []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.errors = append(f.errors, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func TestDiff(t *testing.T) {
	limit := &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 3, Unit: pb.RateLimitResponse_RateLimit_HOUR}
	st := func(remaining uint32, reset time.Duration) *pb.RateLimitResponse_DescriptorStatus {
		return &pb.RateLimitResponse_DescriptorStatus{Code: ok, CurrentLimit: limit, LimitRemaining: remaining, DurationUntilReset: durationpb.New(reset)}
	}
	resp := func(ss ...*pb.RateLimitResponse_DescriptorStatus) *pb.RateLimitResponse {
		return &pb.RateLimitResponse{OverallCode: ok, Statuses: ss}
	}
	for i, tc := range []struct {
		a, b *pb.RateLimitResponse
		want []string
	}{
		0: {resp(st(2, 10*time.Second)), resp(st(2, 10*time.Second)), nil},
		1: {resp(st(2, 10*time.Second)), resp(st(2, 9*time.Second)), nil}, // one second apart
		2: {resp(st(2, 10*time.Second)), resp(st(2, 8*time.Second)), []string{`statuses[0].duration_until_reset: "10s" != "8s"`}},
		3: {resp(st(2, 10*time.Second)), resp(st(1, 10*time.Second)), []string{`statuses[0].limit_remaining: 2 != 1`}},
		4: {resp(st(2, 10*time.Second)), resp(st(2, 10*time.Second), st(1, 10*time.Second)), []string{
			`statuses[1]: (missing) != {"code":"OK","current_limit":{"name":"","requests_per_unit":3,"unit":"HOUR","unit_multiplier":null},"duration_until_reset":"10s","limit_remaining":1,"quota":null}`,
		}},
		5: {resp(&pb.RateLimitResponse_DescriptorStatus{Code: ok}), resp(st(0, 10*time.Second)), []string{
			`statuses[0].current_limit: null != {"name":"","requests_per_unit":3,"unit":"HOUR","unit_multiplier":null}`,
			`statuses[0].duration_until_reset: null != "10s"`,
		}},
	} {
		got := envoyrls.Diff(tc.a, tc.b)
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("step %d: got %q, want %q", i, got, tc.want)
		}
	}
}

// TestEnvoyRateLimitOptions checks that Start's options reach the
// service: each changes an answer, or what the service keeps in Redis, as
// envoyproxy/ratelimit's source has it.
func TestEnvoyRateLimitOptions(t *testing.T) {
	t.Parallel()
	window := inOneWindow(t)
	ctx := context.Background()
	call := func(t *testing.T, svc *envoyrls.Service, step int, r *pb.RateLimitRequest) *pb.RateLimitResponse {
		t.Helper()
		resp, err := svc.Client.ShouldRateLimit(ctx, r)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		return resp
	}
	remaining := func(resp *pb.RateLimitResponse) []uint32 {
		var r []uint32
		for _, s := range resp.GetStatuses() {
			r = append(r, s.GetLimitRemaining())
		}
		return r
	}

	t.Run("StopIncrementWhenOverLimit", func(t *testing.T) {
		t.Parallel()
		svc := envoyrls.Start(t, configDir, envoyrls.StopIncrementWhenOverLimit(true))
		both := req(2, d("user", "frank"), d("user", "bot-5"))
		// bot-5 would go over: it alone is counted, frank is not.
		for i, want := range []struct {
			overall   pb.RateLimitResponse_Code
			remaining []uint32
		}{
			0: {ok, []uint32{2, 0}},
			1: {over, []uint32{2, 0}},
		} {
			resp := call(t, svc, i, both)
			if got := remaining(resp); resp.GetOverallCode() != want.overall || !slices.Equal(got, want.remaining) {
				t.Errorf("step %d: got %v %v, want %v %v", i, resp.GetOverallCode(), got, want.overall, want.remaining)
			}
		}
		// frank has 2 hits, not 4.
		if got := remaining(call(t, svc, 2, req(0, d("user", "frank")))); !slices.Equal(got, []uint32{1}) {
			t.Errorf("step 2: got remaining %v, want [1]", got)
		}
	})

	t.Run("LocalCacheSize", func(t *testing.T) {
		t.Parallel()
		svc := envoyrls.Start(t, configDir, envoyrls.LocalCacheSize(1<<20))
		for i, want := range []pb.RateLimitResponse_Code{ok, ok, over, over, over} {
			if got := call(t, svc, i, req(0, d("user", "bot-7"))).GetOverallCode(); got != want {
				t.Errorf("step %d: got %v, want %v", i, got, want)
			}
		}
		// Once over the limit, the key is in the local cache: the
		// requests after it leave Redis's count alone.
		key := "envoyrls_user_bot-7_" + strconv.FormatInt(window*3600, 10)
		if got, err := svc.Redis.Do("GET", key); err != nil || got != "3" {
			t.Errorf("GET %s: got %q, %v, want 3", key, got, err)
		}
	})

	t.Run("ResponseHeaders", func(t *testing.T) {
		t.Parallel()
		svc := envoyrls.Start(t, configDir, envoyrls.ResponseHeaders(true))
		before := time.Now().Unix()
		resp := call(t, svc, 0, req(0, d("tenant", "acme"), d("user", "gina")))
		after := time.Now().Unix()
		// The descriptor closest to its limit: tenant=acme, 2 of 3 left.
		h := resp.GetResponseHeadersToAdd()
		if len(h) != 3 || h[0].GetKey() != "RateLimit-Limit" || h[0].GetValue() != "3" ||
			h[1].GetKey() != "RateLimit-Remaining" || h[1].GetValue() != "2" || h[2].GetKey() != envoyrls.ResetHeader {
			t.Fatalf("step 0: got headers %s", envoyrls.JSON(resp))
		}
		reset, err := strconv.ParseInt(h[2].GetValue(), 10, 64)
		if lo, hi := 3600-after%3600, 3600-before%3600; err != nil || reset < lo || reset > hi {
			t.Errorf("step 0: got %s %q, want seconds in [%d, %d]", envoyrls.ResetHeader, h[2].GetValue(), lo, hi)
		}
	})
}
