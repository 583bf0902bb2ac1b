package peers

import (
	"context"
	"testing"

	"github.com/spigot-go/spigot/internal/testserver"
)

// TestQuotas checks that every peer applies the matrix's quotas as the
// benchmarks expect: the admitted quota admits, the denied one admits one
// request on a key and denies the next, on that key alone.
func TestQuotas(t *testing.T) {
	srv := testserver.Start(t, testserver.Redis)
	redisPeers, flush := redisPeers(t, srv)
	all := append(append([]peer(nil), memoryPeers...), redisPeers...)
	ctx := context.Background()
	for _, p := range all {
		t.Run(p.name, func(t *testing.T) {
			steps := []struct {
				q    quota
				key  string
				want bool
			}{
				{admitted, "a", true},
				{admitted, "a", true},
				{denied, "a", true},
				{denied, "a", false},
				{denied, "b", true},
				{denied, "a", false},
			}
			var allow allowFunc
			var last quota
			for i, s := range steps {
				if allow == nil || s.q != last {
					flush(t)
					allow, last = p.start(t, s.q), s.q
				}
				got, err := allow(ctx, s.key)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got != s.want {
					t.Errorf("step %d: got allowed %v, want %v", i, got, s.want)
				}
			}
		})
	}
}
