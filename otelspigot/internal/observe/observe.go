// Package observe is what package otelspigot shares with its subpackages
// (otelgrpclimit) without exporting it: the configuration that its
// Options set, and its instruments of decisions, which package otelspigot
// makes available through RPC when it is initialized. It lets
// otelgrpclimit record what otelspigot.HTTPObserver records while
// package otelspigot imports neither grpclimit nor gRPC.
package observe

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/spigot-go/spigot"
)

// Config is what otelspigot's Options set: an otelspigot.Option is a
// func(*Config).
type Config struct {
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// NewConfig returns the Config that opts set, with the global providers
// (otel.GetMeterProvider, otel.GetTracerProvider) in place of those they
// leave nil.
func NewConfig[O ~func(*Config)](opts []O) Config {
	var c Config
	for _, o := range opts {
		o(&c)
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}

// A Result is what a limiting middleware decided on one request (or
// call), as its observer sees it: for each limit that applied, the limit,
// the tokens asked of it and its decision; how long the store took; and
// the store's error, with which Each is not recorded.
type Result struct {
	Limits  []spigot.Limit
	Costs   []int64
	Each    []spigot.Decision
	Latency time.Duration
	Err     error
}

// RPC returns a function that records each call's Result as
// otelspigot.HTTPObserver records a request's, with the call's RPC system
// (rpc.system.name, "grpc") and method (rpc.method, "pkg.Service/Method")
// in place of the route. Package otelspigot sets it when it is
// initialized: it is set in every package that imports otelspigot.
var RPC func(c Config, system string) func(ctx context.Context, method string, res Result)
