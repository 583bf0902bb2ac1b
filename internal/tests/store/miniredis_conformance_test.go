package store_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/conformance"
)

// TestConformanceMiniredis runs the conformance suite, every kind of
// limit, on each Redis-protocol store over miniredis (its Lua is
// gopher-lua, not the server's), on the suite's clock.
func TestConformanceMiniredis(t *testing.T) {
	for _, ps := range protoStores {
		t.Run(ps.name, func(t *testing.T) {
			m := miniredis.RunT(t)
			conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
				return ps.new(t, []string{m.Addr()}, storeOpts{clock: clk, prefix: prefix(t)})
			})
		})
	}
}
