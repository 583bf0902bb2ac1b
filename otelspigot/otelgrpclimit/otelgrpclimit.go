// Package otelgrpclimit records OpenTelemetry metrics of grpclimit's
// decisions: what otelspigot.HTTPObserver records of httplimit's, with
// the call's gRPC method where it has the HTTP route. It is a module of
// its own, github.com/spigot-go/spigot/otelspigot/otelgrpclimit, so that
// a program that imports otelspigot for HTTP alone has no gRPC in its
// module graph. Like otelspigot, it records through the OpenTelemetry
// API: the SDK and the exporter that read what it records are the
// application's choice.
//
// Give Observer to grpclimit.WithObserver, in front of a store that
// otelspigot.Wrap does not wrap (or every decision counts twice):
//
//	policy := grpclimit.New(store,
//		grpclimit.By(perAddress, grpclimit.PeerIP()),
//		grpclimit.WithObserver(otelgrpclimit.Observer()),
//	)
//
// It records, in otelspigot's instruments (see its package doc),
//
//	spigot.decisions         counter    {decision}  spigot.limit, spigot.outcome, rpc.system.name, rpc.method
//	spigot.tokens.requested  counter    {token}     spigot.limit, rpc.system.name, rpc.method
//	spigot.store.duration    histogram  s           spigot.operation (do, do_multi)
//	spigot.store.errors      counter    {error}     error.type
//
// as the OpenTelemetry semantic conventions for gRPC name a call:
// rpc.system.name is "grpc", rpc.method the method without its leading
// slash ("pkg.Service/Method"). A call that rules of several limits
// decide counts once in each, and so does each message of a stream that
// a grpclimit.PerMessage rule limits; a call whose store failed counts
// its error, not its decisions. A call that no rule applies to, that
// costs nothing or that has no key is not recorded. Keys (client
// addresses, tenants) never become attribute values.
//
// The methods are those that the server's services define, whose number
// your code bounds. A server with grpc.UnknownServiceHandler (a proxy)
// passes on calls of any method a client names, and its interceptors see
// that name: there, rules that apply to every method make the number of
// rpc.method values the clients'. Narrow those rules with
// grpclimit.Methods, or call Observer's function from an observer of your
// own that names the methods you do not know "/_OTHER", as the
// conventions do.
package otelgrpclimit

import (
	"context"
	"strings"

	"github.com/spigot-go/spigot/grpclimit"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/otelspigot/internal/observe"
)

// Observer returns a grpclimit observer that records the decisions on
// each limited call (and message) in spigot.decisions and
// spigot.tokens.requested, with its method as rpc.method (and
// rpc.system.name "grpc"), its store errors in spigot.store.errors and
// the store's latency in spigot.store.duration, each in the call's
// context. Give it to grpclimit.WithObserver; to combine it with an
// observer of your own, call it from yours. It is safe for concurrent
// use, and recording allocates nothing once the attributes of a limit and
// method are built. An instrument the MeterProvider refuses is left out
// (the provider reports why to otel's error handler). It makes no spans.
func Observer(opts ...otelspigot.Option) func(ctx context.Context, res *grpclimit.Result) {
	record := observe.RPC(observe.NewConfig(opts), "grpc")
	return func(ctx context.Context, res *grpclimit.Result) {
		record(ctx, strings.TrimPrefix(res.FullMethod, "/"), observe.Result{
			Limits: res.Limits, Costs: res.Costs, Each: res.Decision.Each, Latency: res.Latency, Err: res.Err,
		})
	}
}
