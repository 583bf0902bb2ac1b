package httplimit_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/store/memory"
)

// A client that sends at most 2 requests an hour to a partner. Every
// replica that builds its Limiter on the same store (store/redis, say;
// the memory store here) shares the bucket. WithoutWaiting makes a
// request that finds the bucket empty fail at once instead of waiting for
// its token.
func ExampleNewTransport() {
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer partner.Close()

	l := spigot.New(memory.New(), spigot.MustBucket("partner", 2, spigot.PerHour(2)))
	client := &http.Client{Transport: httplimit.NewTransport(nil, l, httplimit.WithoutWaiting())}

	for i := range 3 {
		resp, err := client.Get(partner.URL)
		var limited *httplimit.LimitedError
		switch {
		case errors.As(err, &limited):
			// The next token comes in half an hour, less the moment the
			// requests took.
			fmt.Printf("request %d: not sent, retry in %v\n", i, limited.RetryAfter.Round(time.Minute))
			continue
		case err != nil:
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("request %d: %s %s\n", i, resp.Status, body)
	}
	// Output:
	// request 0: 200 OK hello
	// request 1: 200 OK hello
	// request 2: not sent, retry in 30m0s
}

// A partner that answers 429 Too Many Requests with a Retry-After: the
// Transport sends nothing more to that host until it ends. (By default it
// would wait; WithoutWaiting shows the hold instead.)
func ExampleNewTransport_retryAfter() {
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "120")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	}))
	defer partner.Close()

	l := spigot.New(memory.New(), spigot.MustBucket("partner", 100, spigot.PerSecond(100)))
	client := &http.Client{Transport: httplimit.NewTransport(nil, l, httplimit.WithoutWaiting())}

	resp, err := client.Get(partner.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status, "Retry-After:", resp.Header.Get("Retry-After"))

	_, err = client.Get(partner.URL)
	var limited *httplimit.LimitedError
	if errors.As(err, &limited) {
		fmt.Println("held back, retry in", limited.RetryAfter.Round(time.Minute))
	}
	fmt.Println(errors.Is(err, httplimit.ErrLimited))
	// Output:
	// 429 Too Many Requests Retry-After: 120
	// held back, retry in 2m0s
	// true
}
