package conformance_test

import (
	"testing"

	"github.com/spigot-go/spigot/conformance"
	"github.com/spigot-go/spigot/store/memory"
)

func BenchmarkMemory(b *testing.B) {
	conformance.RunBenchmarks(b, memory.New())
}
