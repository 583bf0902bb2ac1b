package rls

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// serve runs svc on a gRPC server on 127.0.0.1, and returns a client.
func serve(t *testing.T, svc *Service) pb.RateLimitServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

func TestGRPC(t *testing.T) {
	svc, _, _ := setup(t, basic, WithResponseHeaders(HeaderNames{Reset: "X-Reset"}))
	client := serve(t, svc)
	ctx := context.Background()
	for i, want := range []string{
		"OK: | OK 3/minute r=2 t=60 | OK",
		"OK: | OK 3/minute r=1 t=60 | OK",
		"OK: | OK 3/minute r=0 t=60 | OK",
		"OVER: | OVER 3/minute r=0 t=60 | OK",
	} {
		resp, err := client.ShouldRateLimit(ctx, request("d", desc("k", "v"), desc("nothing", "1")))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := showAll(resp); got != want {
			t.Errorf("step %d: got %s, want %s", i, got, want)
		}
		if h := resp.ResponseHeadersToAdd; len(h) != 3 || h[2].Key != "X-Reset" || h[2].Value != "60" {
			t.Errorf("step %d: headers %v", i, h)
		}
	}
	_, err := client.ShouldRateLimit(ctx, request("", desc("k", "v")))
	if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "rate limit domain must not be empty" { // envoyproxy/ratelimit's
		t.Errorf("no domain: got %v", err)
	}
}

func TestJSON(t *testing.T) {
	svc, _, _ := setup(t, basic)
	h := svc.JSONHandler()
	post := func(method, body string) (int, string, string) {
		req := httptest.NewRequest(method, "/json", strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, rec.Header().Get("Content-Type"), string(b)
	}
	type status struct {
		Code           string `json:"code"`
		LimitRemaining uint32 `json:"limitRemaining"`
		CurrentLimit   *struct {
			RequestsPerUnit uint32 `json:"requestsPerUnit"`
			Unit            string `json:"unit"`
		} `json:"currentLimit"`
		DurationUntilReset string `json:"durationUntilReset"`
	}
	type response struct {
		OverallCode string   `json:"overallCode"`
		Statuses    []status `json:"statuses"`
	}
	const body = `{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}], "hitsAddend": 2}`
	for i, want := range []struct {
		code    int
		overall string
		rem     uint32
	}{{200, "OK", 1}, {429, "OVER_LIMIT", 0}} {
		code, ctype, b := post(http.MethodPost, body)
		var r response
		if err := json.Unmarshal([]byte(b), &r); err != nil {
			t.Fatalf("step %d: %v in %s", i, err, b)
		}
		if code != want.code || ctype != "application/json" || r.OverallCode != want.overall || len(r.Statuses) != 1 ||
			r.Statuses[0].LimitRemaining != want.rem || r.Statuses[0].CurrentLimit == nil ||
			r.Statuses[0].CurrentLimit.RequestsPerUnit != 3 || r.Statuses[0].CurrentLimit.Unit != "MINUTE" || r.Statuses[0].DurationUntilReset != "60s" {
			t.Errorf("step %d: got %d %s %s", i, code, ctype, b)
		}
	}
	for i, c := range []struct {
		method, body string
		code         int
	}{
		{http.MethodPost, `{"domain": "d"`, 400},
		{http.MethodPost, `{"domain": "d", "descriptors": []}`, 400},
		{http.MethodPost, `{"domain": "", "descriptors": [{"entries": [{"key": "k"}]}]}`, 400},
		{http.MethodPost, `{"domain": "d", "unknown": 1}`, 400},
		{http.MethodPost, `{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "` + strings.Repeat("v", MaxJSONBody) + `"}]}]}`, 413},
		{http.MethodGet, ``, 405},
	} {
		code, _, b := post(c.method, c.body)
		if code != c.code || strings.Contains(b, "rls") || len(b) > 40 {
			t.Errorf("case %d: got %d %q, want %d and the status text", i, code, b, c.code)
		}
	}
}
