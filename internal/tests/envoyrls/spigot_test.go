package envoyrls_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/spigot-go/spigot/internal/tests/envoyrls"
)

// TestSideBySide: spigot serve and envoyproxy/ratelimit on the same
// configuration (nested descriptors, a wildcard value, share_threshold,
// unlimited, replaces, shadow mode, several descriptors per request,
// hits_addend, a limit in the request), each on a redis-server of its
// own (through each of the three clients), answer the steps' requests the
// same, field by field, in one window of their hour: spigot serve's
// default charging is envoyproxy/ratelimit's.
// spigot serve's /metrics then counts the hits by domain and descriptor,
// beside otelspigot's metrics of its store.
//
//	SPIGOT_REQUIRE_SERVERS=1 go test -run TestSideBySide -v ./envoyrls
func TestSideBySide(t *testing.T) {
	t.Parallel()
	reqs := make([]*pb.RateLimitRequest, len(steps))
	for i, s := range steps {
		reqs[i] = s.req
	}
	// Through each of the three clients (spigot serve's -client).
	for _, client := range []string{"valkey-go", "rueidis"} {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			envoy := envoyrls.Start(t, configDir)
			spigot := envoyrls.StartSpigot(t, configDir, "-client", client)
			inOneWindow(t)
			envoyrls.Compare(t, envoy.Client, spigot.Client, reqs)
		})
	}
	envoy := envoyrls.Start(t, configDir)
	spigot := envoyrls.StartSpigot(t, configDir) // go-redis
	inOneWindow(t)
	envoyrls.Compare(t, envoy.Client, spigot.Client, reqs)

	// Its statistics, per domain and descriptor, as Prometheus counters.
	resp, err := http.Get("http://" + spigot.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`ratelimit_service_rate_limit_total_hits{descriptor="envoyrls.`,
		`ratelimit_service_rate_limit_over_limit{descriptor="envoyrls.`,
		`ratelimit_service_rate_limit_within_limit{descriptor="envoyrls.`,
		`ratelimit_service_rate_limit_shadow_mode{descriptor="envoyrls.`,
		`spigot_decisions_total{`, // otelspigot's, of the store
		`spigot_store_duration_seconds_bucket{`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("GET /metrics: no %s in\n%s", want, body)
		}
	}
}
