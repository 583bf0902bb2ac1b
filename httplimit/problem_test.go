package httplimit_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
)

// secret is in every error that the tests' key and cost funcs return: it
// must never reach a client.
const secret = "SECRET-b7e1"

const quotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// TestProblemBodies: every error body the middleware writes by default,
// over real connections, as problem details in JSON (RFC 9457) or as
// plain text by Accept; the JSON is decoded and compared member by
// member, and no body shows an error's text.
func TestProblemBodies(t *testing.T) {
	one := spigot.MustBucket("one", 1, spigot.PerMinute(1))
	wide := spigot.MustBucket("wide", 10, spigot.PerMinute(1))
	other := spigot.MustBucket("other", 1, spigot.Per(1, 2*time.Minute))
	costs := httplimit.WithCost(func(r *http.Request) (int64, error) {
		n := r.URL.Query().Get("n")
		if n == "" {
			return 1, nil
		}
		c, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return 0, errors.New(secret + ": " + err.Error())
		}
		return c, nil
	})
	noKey := func(*http.Request) (string, error) {
		return "", errors.New(secret + ": " + httplimit.ErrNoKey.Error())
	}
	noLimit := func(*http.Request) (spigot.Limit, error) { return spigot.Limit{}, errors.New(secret) }
	long := func(*http.Request) (string, error) { return secret + strings.Repeat("k", spigot.MaxKeyLen), nil }
	for _, c := range []struct {
		name    string
		store   spigot.Store
		opts    []httplimit.Option
		prime   int    // requests sent first
		query   string // of the request that fails
		status  int
		detail  string // and the plain-text body's line
		members map[string]any
		retry   string // Retry-After
	}{
		{
			name: "denied", opts: []httplimit.Option{httplimit.By(one, nil)}, prime: 1,
			status: 429, detail: "too many requests (one): retry in 60s", retry: "60",
			members: map[string]any{"type": quotaExceeded, "title": "Quota Exceeded", "violated-policies": []any{"one"}, "retry_after": 60.0},
		},
		{
			name: "denied by two limits", opts: []httplimit.Option{httplimit.By(one, nil), httplimit.By(other, httplimit.Const("all"))}, prime: 1,
			status: 429, detail: "too many requests (one, other): retry in 120s", retry: "120",
			members: map[string]any{"type": quotaExceeded, "title": "Quota Exceeded", "violated-policies": []any{"one", "other"}, "retry_after": 120.0},
		},
		{
			name: "denied by one of two limits", opts: []httplimit.Option{httplimit.By(wide, nil), httplimit.By(one, httplimit.Const("all"))}, prime: 1,
			status: 429, detail: "too many requests (one): retry in 60s", retry: "60",
			members: map[string]any{"type": quotaExceeded, "title": "Quota Exceeded", "violated-policies": []any{"one"}, "retry_after": 60.0},
		},
		{
			name: "a cost no wait admits", opts: []httplimit.Option{httplimit.By(one, nil), costs, httplimit.WithNeverAdmittedStatus(413)}, query: "?n=2",
			status: 413, detail: "request exceeds the limit (one): the request costs more than the limit ever holds",
			members: map[string]any{"type": quotaExceeded, "title": "Quota Exceeded", "violated-policies": []any{"one"}},
		},
		{
			name: "no key", opts: []httplimit.Option{httplimit.By(wide, nil), httplimit.By(one, noKey)},
			status: 400, detail: `the request has no key for the limit "one"`,
			members: map[string]any{"type": "about:blank", "title": "Bad Request"},
		},
		{
			name: "a key too long", opts: []httplimit.Option{httplimit.By(one, long)},
			status: 400, detail: `the request's key for the limit "one" is too long`,
			members: map[string]any{"type": "about:blank", "title": "Bad Request"},
		},
		{
			name: "a cost that cannot be read", opts: []httplimit.Option{httplimit.By(one, nil), costs}, query: "?n=abc",
			status: 400, detail: `the request's cost for the limit "one" could not be read`,
			members: map[string]any{"type": "about:blank", "title": "Bad Request"},
		},
		{
			name: "a negative cost", opts: []httplimit.Option{httplimit.By(one, nil), costs}, query: "?n=-3",
			status: 400, detail: `the request's cost for the limit "one" is negative`,
			members: map[string]any{"type": "about:blank", "title": "Bad Request"},
		},
		{
			name: "no limit chosen", opts: []httplimit.Option{httplimit.By(wide, nil), httplimit.ByFunc(noLimit, nil)},
			status: 400, detail: "no limit could be chosen for the request",
			members: map[string]any{"type": "about:blank", "title": "Bad Request"},
		},
		{
			name: "a store that fails", store: brokenStore{}, opts: []httplimit.Option{httplimit.By(one, nil)},
			status: 503, detail: "rate limiter unavailable: retry in 1s", retry: "1",
			members: map[string]any{"type": "about:blank", "title": "Service Unavailable", "retry_after": 1.0},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.store
			if s == nil {
				_, s = fixture()
			}
			next := &served{}
			srv := httptest.NewServer(httplimit.New(s, c.opts...).Wrap(next))
			t.Cleanup(srv.Close)
			get := func(query, accept string) (*http.Response, string) {
				t.Helper()
				req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/"+query, nil)
				if accept != "" {
					req.Header.Set("Accept", accept)
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				return resp, string(body)
			}
			for range c.prime {
				if resp, body := get("", ""); resp.StatusCode != 204 {
					t.Fatalf("a request to prime the limits got %d %q", resp.StatusCode, body)
				}
			}
			for i, v := range []struct{ accept, ctype string }{
				{"", "text/plain; charset=utf-8"},
				{"text/html,application/xhtml+xml,*/*;q=0.8", "text/plain; charset=utf-8"},
				{"application/problem+json", "application/problem+json"},
				{"application/json, text/plain, */*", "application/json"},
				{"text/html, application/*;q=0.5", "application/problem+json"},
			} {
				resp, body := get(c.query, v.accept)
				if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != v.ctype {
					t.Errorf("step %d: Accept %q: got %d %s; want %d %s", i+1, v.accept, resp.StatusCode, resp.Header.Get("Content-Type"), c.status, v.ctype)
				}
				if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
					t.Errorf("step %d: X-Content-Type-Options %q; want nosniff", i+1, got)
				}
				if got := resp.Header.Get("Retry-After"); got != c.retry {
					t.Errorf("step %d: Retry-After %q; want %q", i+1, got, c.retry)
				}
				if got, want := resp.Header.Get("Cache-Control"), map[bool]string{true: "no-store"}[c.status == 503]; got != want {
					t.Errorf("step %d: Cache-Control %q; want %q", i+1, got, want)
				}
				for _, internal := range []string{secret, "spigot", "strconv", "abc", "syntax", "%!", "connection refused"} {
					if strings.Contains(body, internal) {
						t.Errorf("step %d: the body shows %q: %q", i+1, internal, body)
					}
				}
				if !strings.Contains(v.ctype, "json") {
					if line, ok := strings.CutSuffix(body, "\n"); !ok || line != c.detail || strings.Contains(line, "\n") {
						t.Errorf("step %d: body %q; want the line %q", i+1, body, c.detail)
					}
					continue
				}
				var got map[string]any
				if err := json.Unmarshal([]byte(body), &got); err != nil {
					t.Errorf("step %d: the body %q is not JSON: %v", i+1, body, err)
					continue
				}
				want := map[string]any{"status": float64(c.status), "detail": c.detail}
				for k, v := range c.members {
					want[k] = v
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("step %d: got the problem %v; want %v", i+1, got, want)
				}
				if ra, ok := got["retry_after"]; ok && strconv.FormatFloat(ra.(float64), 'f', -1, 64) != resp.Header.Get("Retry-After") {
					t.Errorf("step %d: retry_after %v, Retry-After %q; want them equal", i+1, ra, resp.Header.Get("Retry-After"))
				}
			}
			if next.n.Load() != int64(c.prime) {
				t.Errorf("served %d requests; want %d, those that primed the limits", next.n.Load(), c.prime)
			}
		})
	}
}
