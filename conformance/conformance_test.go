package conformance_test

import (
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock"
	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/store/memory"
)

func TestMemory(t *testing.T) {
	conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
		return memory.New(memory.WithClock(clk))
	})
}

func TestMemoryRealTime(t *testing.T) {
	conformance.RunRealTime(t, func(t *testing.T) spigot.Store { return memory.New() })
}

func TestMapStore(t *testing.T) {
	conformance.Run(t, func(t *testing.T, clk clock.Clock) spigot.Store {
		return &MapStore{Clock: clk}
	})
}

func TestMapStoreRealTime(t *testing.T) {
	conformance.RunRealTime(t, func(t *testing.T) spigot.Store {
		return &MapStore{Clock: clock.System()}
	})
}
