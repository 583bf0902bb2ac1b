package rls

import (
	"errors"
	"io"
	"net/http"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// MaxJSONBody is the largest request body JSONHandler reads.
const MaxJSONBody = 1 << 20

// JSONHandler returns the handler of envoyproxy/ratelimit's /json
// endpoint: a POST whose body is a RateLimitRequest in the protobuf JSON
// mapping ({"domain": "d", "descriptors": [{"entries": [{"key": "k",
// "value": "v"}]}], "hitsAddend": 1}) is answered with the
// RateLimitResponse in that mapping (application/json), status 200 when
// its overallCode is OK and 429 when it is OVER_LIMIT. A body that is not
// such a request, or a request the service refuses (see ShouldRateLimit),
// is answered 400 Bad Request; a failure of the store 503; a method other
// than POST 405. Error bodies are the status text alone.
func (s *Service) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			httpError(w, http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				httpError(w, http.StatusRequestEntityTooLarge)
				return
			}
			httpError(w, http.StatusBadRequest)
			return
		}
		var req pb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			httpError(w, http.StatusBadRequest)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			switch status.Code(err) {
			case codes.InvalidArgument, codes.Unknown: // Unknown: envoyproxy/ratelimit's code for no domain or no descriptors
				httpError(w, http.StatusBadRequest)
			default:
				httpError(w, http.StatusServiceUnavailable)
			}
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			httpError(w, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}

func httpError(w http.ResponseWriter, code int) {
	http.Error(w, http.StatusText(code), code)
}
