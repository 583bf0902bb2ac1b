package otelspigot_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/memory"
)

// globalEnv marks the process that runs TestGlobalTracerProvider's steps:
// they set the global TracerProvider, which no other test of the process
// may see, and which nothing can unset.
const globalEnv = "OTELSPIGOT_TEST_GLOBAL_TRACER"

// TestGlobalTracerProvider: by default the Store makes its spans through
// the global TracerProvider, once one is set, even if it was set after
// Wrap; until then it starts none and allocates nothing; with the no-op
// provider it starts none either. The steps run in a process of their
// own.
func TestGlobalTracerProvider(t *testing.T) {
	if os.Getenv(globalEnv) != "1" {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestGlobalTracerProvider$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), globalEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestGlobalTracerProvider") {
			t.Fatalf("the steps' process: %v\n%s", err, out)
		}
		return
	}

	ctx := context.Background()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	mem := memory.New(memory.WithClock(clocktest.New(t0)))
	op := spigot.Op{Limit: spigot.MustBucket("big", 1<<30, spigot.PerSecond(1)), Key: "10.0.0.1", N: 1}
	quiet := otelspigot.WithMeterProvider(noop.NewMeterProvider())
	before := otelspigot.Wrap(mem, quiet)
	off := otelspigot.Wrap(mem, quiet, otelspigot.WithTracerProvider(tracenoop.NewTracerProvider()))

	// Step 0: no global provider yet: no span, even under a recording
	// parent, and no allocation.
	pctx, parent := tp.Tracer("test").Start(ctx, "parent")
	before.Do(pctx, op)
	parent.End()
	if got := spanNames(sr); got != "parent" {
		t.Errorf("step 0: got spans %q, want parent", got)
	}
	if n := testing.AllocsPerRun(1000, func() { before.Do(ctx, op) }); n != 0 {
		t.Errorf("step 0: got %v allocations per Do, want 0", n)
	}

	// Step 1: once the global provider is set, both the Store wrapped
	// before and one wrapped after make spans through it, children of the
	// request's; the no-op provider's Store still makes none.
	otel.SetTracerProvider(tp)
	after := otelspigot.Wrap(mem, quiet)
	for _, s := range []*otelspigot.Store{before, after, off} {
		pctx, parent := tp.Tracer("test").Start(ctx, "parent")
		s.Do(pctx, op)
		parent.End()
	}
	if got, want := spanNames(sr), "parent spigot.Do parent spigot.Do parent parent"; got != want {
		t.Errorf("step 1: got spans %q, want %q", got, want)
	}
	for _, sp := range sr.Ended()[1:5] {
		if sp.Name() == "spigot.Do" && !sp.Parent().IsValid() {
			t.Errorf("step 1: span %s has no parent", sp.Name())
		}
	}
	if n := testing.AllocsPerRun(1000, func() { off.Do(ctx, op) }); n != 0 {
		t.Errorf("step 1: no-op provider: got %v allocations per Do, want 0", n)
	}
}

// spanNames returns the names of the ended spans, in the order they ended.
func spanNames(sr *tracetest.SpanRecorder) string {
	var names []string
	for _, s := range sr.Ended() {
		names = append(names, s.Name())
	}
	return strings.Join(names, " ")
}
