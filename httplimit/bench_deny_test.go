package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/store/memory"
)

// BenchmarkDeny measures a denied request through the middleware on the
// memory store, its body in plain text (accept=none) or in JSON
// (accept=json), against an admitted one (accept=none/op=admit): the
// difference is the denial's headers and body. Compare in one run:
//
//	go test -run='^$' -bench=Deny -benchmem -count=6 ./httplimit/ | tee /tmp/deny.txt
//	benchstat -col /op /tmp/deny.txt
func BenchmarkDeny(b *testing.B) {
	s := memory.New()
	closed := spigot.MustBucket("closed", 1, spigot.Per(1, time.Hour))
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for _, c := range []struct {
		name   string
		limit  spigot.Limit
		accept string
	}{
		{"accept=none/op=admit", roomy, ""},
		{"accept=none/op=deny", closed, ""},
		{"accept=json/op=deny", closed, "application/json"},
	} {
		h := httplimit.New(s, httplimit.By(c.limit, nil)).Wrap(ok)
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		if c.accept != "" {
			r.Header.Set("Accept", c.accept)
		}
		w := &sink{h: make(http.Header)}
		h.ServeHTTP(w, r) // the key's state exists, and closed is empty, before the timer starts
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := r.Clone(r.Context())
				w := &sink{h: make(http.Header)}
				for pb.Next() {
					clear(w.h)
					h.ServeHTTP(w, r)
				}
			})
		})
	}
}
