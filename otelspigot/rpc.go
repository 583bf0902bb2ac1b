package otelspigot

import (
	"context"

	"go.opentelemetry.io/otel"

	"github.com/spigot-go/spigot/otelspigot/internal/observe"
)

func init() { observe.RPC = rpcObserver }

// rpcObserver is observe.RPC: it records as HTTPObserver does, with the
// RPC system and the call's method in place of the route. otelgrpclimit's
// Observer is built on it.
func rpcObserver(c config, system string) func(ctx context.Context, method string, res observe.Result) {
	in, err := newInstruments(c.MeterProvider)
	if err != nil {
		otel.Handle(err)
	}
	return func(ctx context.Context, method string, res observe.Result) {
		in.observe(ctx, route{system: system, name: method}, res)
	}
}
