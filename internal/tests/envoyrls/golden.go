package envoyrls

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// An Exchange is one ShouldRateLimit call: its request, and its response
// or its error.
type Exchange struct {
	Request  *pb.RateLimitRequest
	Response *pb.RateLimitResponse // nil when Err is not
	Err      error                 // a gRPC status error
}

// Record sends each request to c in turn and returns the exchanges.
func Record(ctx context.Context, c pb.RateLimitServiceClient, reqs []*pb.RateLimitRequest) []Exchange {
	xs := make([]Exchange, len(reqs))
	for i, req := range reqs {
		resp, err := c.ShouldRateLimit(ctx, req)
		xs[i] = Exchange{Request: req, Response: resp, Err: err}
	}
	return xs
}

// A golden file is a JSON array of exchanges, each an object of the
// request (in protojson, its set fields only) and either the response (in
// protojson as JSON writes it, every field) or the error's gRPC code and
// message:
//
//	[
//	  {"request": {…}, "response": {…}},
//	  {"request": {…}, "error": {"code": "Unknown", "message": "…"}}
//	]
//
// A response's duration_until_reset depends on the instant of the call,
// so a golden file holds none (null): WriteGolden clears it, and a test
// that compares a service's answers to a golden file clears it too
// (WithoutResets) and checks it on its own, by the clock.
type goldenExchange struct {
	Request  json.RawMessage `json:"request"`
	Response json.RawMessage `json:"response,omitempty"`
	Error    *goldenError    `json:"error,omitempty"`
}

type goldenError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// WriteGolden writes xs to the golden file at path, without the
// responses' duration_until_reset.
func WriteGolden(path string, xs []Exchange) error {
	gs := make([]goldenExchange, len(xs))
	for i, x := range xs {
		req, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(x.Request)
		if err != nil {
			return err
		}
		gs[i].Request = req
		if x.Err != nil {
			s := status.Convert(x.Err)
			gs[i].Error = &goldenError{Code: s.Code().String(), Message: s.Message()}
		} else {
			gs[i].Response = JSON(WithoutResets(x.Response))
		}
	}
	b, err := json.MarshalIndent(gs, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadGolden returns the exchanges of the golden file at path.
func ReadGolden(path string) ([]Exchange, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var gs []goldenExchange
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&gs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	xs := make([]Exchange, len(gs))
	for i, g := range gs {
		xs[i].Request = &pb.RateLimitRequest{}
		if err := protojson.Unmarshal(g.Request, xs[i].Request); err != nil {
			return nil, fmt.Errorf("%s: exchange %d: request: %w", path, i, err)
		}
		switch {
		case g.Error != nil:
			code, ok := codeOf[g.Error.Code]
			if !ok {
				return nil, fmt.Errorf("%s: exchange %d: unknown gRPC code %q", path, i, g.Error.Code)
			}
			xs[i].Err = status.Error(code, g.Error.Message)
		case g.Response != nil:
			xs[i].Response = &pb.RateLimitResponse{}
			if err := protojson.Unmarshal(g.Response, xs[i].Response); err != nil {
				return nil, fmt.Errorf("%s: exchange %d: response: %w", path, i, err)
			}
		default:
			return nil, fmt.Errorf("%s: exchange %d: neither a response nor an error", path, i)
		}
	}
	return xs, nil
}

// codeOf maps each gRPC code's name to the code.
var codeOf = func() map[string]codes.Code {
	m := make(map[string]codes.Code)
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		m[c.String()] = c
	}
	return m
}()

// WithoutResets returns a copy of resp whose statuses have no
// duration_until_reset, or nil for nil.
func WithoutResets(resp *pb.RateLimitResponse) *pb.RateLimitResponse {
	if resp == nil {
		return nil
	}
	resp = proto.Clone(resp).(*pb.RateLimitResponse)
	for _, s := range resp.GetStatuses() {
		s.DurationUntilReset = nil
	}
	return resp
}

// UnitSeconds returns the length of unit's window in seconds, as
// envoyproxy/ratelimit counts it (a month is 30 days, a year 365), or 0
// for UNKNOWN. Every window starts at a multiple of its length since the
// Unix epoch.
func UnitSeconds(unit pb.RateLimitResponse_RateLimit_Unit) int64 {
	switch unit {
	case pb.RateLimitResponse_RateLimit_SECOND:
		return 1
	case pb.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case pb.RateLimitResponse_RateLimit_HOUR:
		return 3600
	case pb.RateLimitResponse_RateLimit_DAY:
		return 86400
	case pb.RateLimitResponse_RateLimit_WEEK:
		return 7 * 86400
	case pb.RateLimitResponse_RateLimit_MONTH:
		return 30 * 86400
	case pb.RateLimitResponse_RateLimit_YEAR:
		return 365 * 86400
	}
	return 0
}
