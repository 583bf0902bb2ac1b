package otelspigot_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// The tests of this module need no SDK. Those that read what otelspigot
// records through the SDK are in otelspigot/test, a module of its own,
// so that this one requires neither the SDK nor an exporter.

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestErrorType(t *testing.T) {
	for i, c := range []struct {
		err  error
		want string
	}{
		{spigot.ErrInvalidLimit, "invalid"},
		{fmt.Errorf("bucket: %w", spigot.ErrInvalidLimit), "invalid"},
		{fmt.Errorf("cost -1: %w", spigot.ErrInvalidCost), "invalid"},
		{errors.ErrUnsupported, "unsupported"},
		{fmt.Errorf("several ops: %w", errors.ErrUnsupported), "unsupported"},
		{context.Canceled, "canceled"},
		{fmt.Errorf("redis: %w", context.Canceled), "canceled"},
		{spigot.ErrRequestFailed, "request"},
		{fmt.Errorf("WRONGTYPE: %w", spigot.ErrRequestFailed), "request"},
		{errors.Join(spigot.ErrRequestFailed, context.Canceled), "canceled"},
		{errors.Join(spigot.ErrInvalidCost, spigot.ErrRequestFailed), "invalid"},
		{context.DeadlineExceeded, "unavailable"},
		{io.EOF, "unavailable"},
		{hybrid.ErrUnavailable, "unavailable"},
		{errors.New("dial tcp 127.0.0.1:6379: connection refused"), "unavailable"},
	} {
		if got := otelspigot.ErrorType(c.err); got != c.want {
			t.Errorf("step %d: ErrorType(%v): got %q, want %q", i, c.err, got, c.want)
		}
	}
}

// TestNoopAllocs checks that the wrapper allocates nothing with a no-op
// MeterProvider, on a key that already has state.
func TestNoopAllocs(t *testing.T) {
	ctx := context.Background()
	w := otelspigot.Wrap(memory.New(memory.WithClock(clocktest.New(t0))), otelspigot.WithMeterProvider(noop.NewMeterProvider()))
	op := spigot.Op{Limit: spigot.MustBucket("big", 1<<30, spigot.PerSecond(1)), Key: "10.0.0.1", N: 1}
	if _, err := w.Do(ctx, op); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { w.Do(ctx, op) }); n != 0 {
		t.Errorf("got %v allocations per Do, want 0", n)
	}
}

func TestWrapNil(t *testing.T) {
	for i, s := range []spigot.Store{nil, (*memory.Store)(nil)} {
		func() {
			defer func() {
				if got, want := fmt.Sprint(recover()), "spigot: otelspigot: Wrap: nil Store"; got != want {
					t.Errorf("step %d: got panic %q, want %q", i, got, want)
				}
			}()
			otelspigot.Wrap(s)
		}()
	}
}
