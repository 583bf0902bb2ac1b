package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/store/memory"
)

// roomy admits every request of the benchmarks.
var roomy = spigot.MustBucket("bench", 1_000_000_000, spigot.Per(1_000_000, time.Microsecond))

// sink is a ResponseWriter that keeps nothing: its header map is cleared,
// not remade, between requests, so that allocs/op is the handler's own.
type sink struct{ h http.Header }

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) Write(b []byte) (int, error) { return len(b), nil }
func (s *sink) WriteHeader(int)             {}

// BenchmarkMiddleware measures a request through the middleware on the
// memory store (op=middleware, one limit; op=middleware2, two;
// op=policy, one of three rules, the two others for routes that the
// request is not on; op=observed, one with an observer that counts) against the
// same handler calling the limiter by hand (op=hand: the store's cost, and
// no headers): the difference is the middleware's own cost, keys and
// headers. Compare in one run:
//
//	go test -run='^$' -bench=Middleware -benchmem -count=6 ./httplimit/ | tee /tmp/mw.txt
//	benchstat -col /op /tmp/mw.txt
func BenchmarkMiddleware(b *testing.B) {
	s := memory.New()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	limiter := spigot.New(s, roomy)
	hand := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := limiter.Allow(r.Context(), "192.0.2.1")
		if err != nil || !d.Allowed() {
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		ok(w, r)
	})
	var allowed atomic.Int64
	other := spigot.MustBucket("bench-route", 1_000_000_000, spigot.Per(1_000_000, time.Microsecond))
	for _, c := range []struct {
		name string
		h    http.Handler
	}{
		{"hand", hand},
		{"middleware", httplimit.New(s, httplimit.By(roomy, nil)).Wrap(ok)},
		{"middleware2", httplimit.New(s, httplimit.By(roomy, nil), httplimit.By(other, httplimit.Const("GET /"))).Wrap(ok)},
		{"policy", httplimit.New(s, httplimit.By(roomy, nil),
			httplimit.By(other, httplimit.FormValue("user"), httplimit.On("POST /login")),
			httplimit.By(other, httplimit.Header("X-Api-Key"), httplimit.On("GET /export"), httplimit.Weight(10))).Wrap(ok)},
		{"observed", httplimit.New(s, httplimit.By(roomy, nil), httplimit.WithObserver(func(_ *http.Request, res *httplimit.Result) {
			if res.Decision.Allowed() {
				allowed.Add(1)
			}
		})).Wrap(ok)},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		w := &sink{h: make(http.Header)}
		c.h.ServeHTTP(w, r) // the key's state exists before the timer starts
		b.Run("goroutines=1/op="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				c.h.ServeHTTP(w, r)
			}
		})
		b.Run("goroutines=parallel/op="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := r.Clone(r.Context())
				w := &sink{h: make(http.Header)}
				for pb.Next() {
					clear(w.h)
					c.h.ServeHTTP(w, r)
				}
			})
		})
	}
}
