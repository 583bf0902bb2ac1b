// Package otelspigot_test tests otelspigot as an operator uses it, with
// what otelspigot's own module does not require: the Prometheus exporter
// that names the metrics of docs/grafana's dashboard, and a real Redis
// server killed and restarted behind store/hybrid.
package otelspigot_test

import (
	"testing"
	"time"

	"github.com/spigot-go/spigot/internal/tests/testclient"
)

// TestMain turns off go-redis's logging and says how many tests were
// skipped for want of a server binary.
func TestMain(m *testing.M) { testclient.Main(m) }

// t0 is the instant every fake clock starts at.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
