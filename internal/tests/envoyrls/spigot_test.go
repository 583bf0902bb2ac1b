package envoyrls_test

import (
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/spigot-go/spigot/internal/tests/envoyrls"
)

// TestSideBySide: spigot serve and envoyproxy/ratelimit on the same
// configuration (nested descriptors, a wildcard value, share_threshold,
// unlimited, replaces, shadow mode, several descriptors per request,
// hits_addend, a limit in the request), each on a redis-server of its
// own, answer the steps' requests the same, field by field, in one window
// of their hour: spigot serve's default charging is envoyproxy/ratelimit's.
//
//	SPIGOT_REQUIRE_SERVERS=1 go test -run TestSideBySide -v ./envoyrls
func TestSideBySide(t *testing.T) {
	t.Parallel()
	envoy := envoyrls.Start(t, configDir)
	spigot := envoyrls.StartSpigot(t, configDir)
	inOneWindow(t)
	reqs := make([]*pb.RateLimitRequest, len(steps))
	for i, s := range steps {
		reqs[i] = s.req
	}
	envoyrls.Compare(t, envoy.Client, spigot.Client, reqs)
}
