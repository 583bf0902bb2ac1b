package otelspigot_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
)

// Measure a limiter and its store: Wrap around the store and, for
// store/hybrid, its observer and the gauge of its breaker. They record
// through the global MeterProvider and TracerProvider, which the
// application sets (otel.SetMeterProvider, otel.SetTracerProvider) with
// the SDK and the exporter of its choice; until it does, they record
// nothing, and the limiter decides as it would unwrapped.
func Example() {
	h := hybrid.New(memory.New() /* in place of Redis */, memory.New(),
		hybrid.WithObserver(otelspigot.HybridObserver()))
	if _, err := otelspigot.ObserveCircuit(h); err != nil {
		panic(err)
	}
	limiter := spigot.New(otelspigot.Wrap(h), spigot.MustBucket("login", 2, spigot.PerMinute(1)))
	for range 3 {
		d, err := limiter.Allow(context.Background(), "10.0.0.1")
		fmt.Println(d.Allowed(), err)
	}
	// Output:
	// true <nil>
	// true <nil>
	// false <nil>
}

// Count an HTTP server's decisions by route: HTTPObserver on the
// middleware, whose store is not wrapped.
func ExampleHTTPObserver() {
	perAddress := spigot.MustBucket("per-address", 2, spigot.PerMinute(1))
	mw := httplimit.New(memory.New(),
		httplimit.By(perAddress, httplimit.ClientIP()),
		httplimit.WithObserver(otelspigot.HTTPObserver()))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	})))
	for _, path := range []string{"/items/1", "/items/2", "/items/3"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		fmt.Println("GET", path, rec.Code)
	}
	// Output:
	// GET /items/1 200
	// GET /items/2 200
	// GET /items/3 429
}

// ErrorType names the kind of a store's error, as spigot.store.errors
// counts it.
func ExampleErrorType() {
	for _, err := range []error{
		fmt.Errorf("cost -1: %w", spigot.ErrInvalidCost),
		fmt.Errorf("WRONGTYPE: %w", spigot.ErrRequestFailed),
		context.Canceled,
		errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"),
	} {
		fmt.Println(otelspigot.ErrorType(err))
	}
	// Output:
	// invalid
	// request
	// canceled
	// unavailable
}
