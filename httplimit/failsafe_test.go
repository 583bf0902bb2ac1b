package httplimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/httplimit"
	"github.com/spigot-go/spigot/internal/countstore"
	"github.com/spigot-go/spigot/store/memory"
)

// TestStoreErrorFailsSafe: by default a store error serves nothing: 503
// with Retry-After and a body that does not show the error, in text or
// JSON; FailOpen serves the request, as an explicit choice.
func TestStoreErrorFailsSafe(t *testing.T) {
	api := spigot.MustBucket("api", 5, spigot.PerSecond(1))
	for i, c := range []struct {
		opts   []httplimit.Option
		accept string
		status int
		body   string
		served int64
	}{
		{nil, "", 503, "rate limiter unavailable: retry in 1s\n", 0},
		{nil, "application/json", 503, `{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"rate limiter unavailable: retry in 1s","retry_after":1}` + "\n", 0},
		{[]httplimit.Option{httplimit.By(api, httplimit.Const("all"))}, "text/html", 503, "rate limiter unavailable: retry in 1s\n", 0},
		{[]httplimit.Option{httplimit.WithErrorHandler(httplimit.FailOpen)}, "", 204, "", 1},
	} {
		next := &served{}
		h := httplimit.New(brokenStore{}, append([]httplimit.Option{httplimit.By(api, nil)}, c.opts...)...).Wrap(next)
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Accept", c.accept)
		h.ServeHTTP(w, r)
		if w.Code != c.status || w.Body.String() != c.body || next.n.Load() != c.served {
			t.Errorf("step %d: got %d %q, served %d; want %d %q, served %d", i, w.Code, w.Body.String(), next.n.Load(), c.status, c.body, c.served)
		}
		wantRetry := ""
		if c.status == 503 {
			wantRetry = "1"
		}
		if got := w.Header().Get("Retry-After"); got != wantRetry {
			t.Errorf("step %d: got Retry-After %q; want %q", i, got, wantRetry)
		}
		if strings.Contains(w.Body.String(), errDown.Error()) {
			t.Errorf("step %d: the body shows the store's error: %q", i, w.Body.String())
		}
	}
}

// TestLongKey: a key longer than spigot.MaxKeyLen is a key error (400,
// ErrInvalidKey), and the store never sees it; one of MaxKeyLen bytes is
// limited as any other.
func TestLongKey(t *testing.T) {
	login := spigot.MustBucket("login", 5, spigot.PerMinute(1))
	s := countstore.New(memory.New())
	var keyErr error
	next := &served{}
	h := httplimit.New(s, httplimit.By(login, httplimit.Header("X-User")),
		httplimit.WithKeyErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			keyErr = err
			http.Error(w, "bad key", http.StatusBadRequest)
		})).Wrap(next)
	for i, c := range []struct {
		key    string
		status int
		ops    int64
	}{
		{strings.Repeat("u", spigot.MaxKeyLen), 204, 1},
		{strings.Repeat("u", spigot.MaxKeyLen+1), 400, 1},
		{strings.Repeat("u", 1<<20), 400, 1},
	} {
		keyErr = nil
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User", c.key)
		h.ServeHTTP(w, r)
		if w.Code != c.status || s.Calls() != c.ops {
			t.Errorf("step %d: a key of %d bytes: got %d, %d ops in the store; want %d, %d", i, len(c.key), w.Code, s.Calls(), c.status, c.ops)
		}
		if c.status == 400 && !errors.Is(keyErr, spigot.ErrInvalidKey) {
			t.Errorf("step %d: key error %v; want one matching spigot.ErrInvalidKey", i, keyErr)
		}
	}
}

// TestFormValueBounded: FormValue reads at most MaxFormBytes of a form
// body; a larger one has no key and never reaches the store or the
// handler. A body of another type is not read.
func TestFormValueBounded(t *testing.T) {
	login := spigot.MustBucket("login", 5, spigot.PerMinute(1))
	s := countstore.New(memory.New())
	next := &served{}
	h := httplimit.New(s, httplimit.By(login, httplimit.FormValue("user"))).Wrap(next)
	small := url.Values{"user": {"alice"}, "password": {"x"}}.Encode()
	big := url.Values{"user": {"bob"}, "pad": {strings.Repeat("p", httplimit.MaxFormBytes)}}.Encode()
	for i, c := range []struct {
		ctype, body string
		status      int
		ops, served int64
	}{
		{"application/x-www-form-urlencoded", small, 204, 1, 1},
		{"application/x-www-form-urlencoded", big, 400, 1, 1},
		{"application/x-www-form-urlencoded; charset=utf-8", "user=" + strings.Repeat("u", 10<<20), 400, 1, 1},
		{"multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\n" + strings.Repeat("u", 2*httplimit.MaxFormBytes) + "\r\n--b--\r\n", 400, 1, 1},
	} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/login", strings.NewReader(c.body))
		r.Header.Set("Content-Type", c.ctype)
		h.ServeHTTP(w, r)
		if w.Code != c.status || s.Calls() != c.ops || next.n.Load() != c.served {
			t.Errorf("step %d: a %s body of %d bytes: got %d, %d ops, %d served; want %d, %d, %d", i, c.ctype, len(c.body), w.Code, s.Calls(), next.n.Load(), c.status, c.ops, c.served)
		}
	}
	// A JSON body is left for the handler, whole.
	var read int
	h = httplimit.New(memory.New(), httplimit.By(login, httplimit.FormValue("user"))).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 4<<20)
		for {
			n, err := r.Body.Read(b)
			read += n
			if err != nil {
				break
			}
		}
	}))
	body := `{"pad":"` + strings.Repeat("p", 2<<20) + `"}`
	r := httptest.NewRequest("POST", "/login?user=carol", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if read != len(body) {
		t.Errorf("the handler read %d bytes of a JSON body of %d", read, len(body))
	}
}

// TestOptionPanics: an invalid option panics where it is written, naming
// itself, not at the first request.
func TestOptionPanics(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"WithNeverAdmittedStatus(0)", func() { httplimit.WithNeverAdmittedStatus(0) }},
		{"WithNeverAdmittedStatus(200)", func() { httplimit.WithNeverAdmittedStatus(200) }},
		{"WithNeverAdmittedStatus(1000)", func() { httplimit.WithNeverAdmittedStatus(1000) }},
		{"WithHeaders(8)", func() { httplimit.WithHeaders(8) }},
		{"WithHeaders(IETF|IETFDraft10)", func() { httplimit.WithHeaders(httplimit.IETF | httplimit.IETFDraft10) }},
		{"WithCost", func() { httplimit.WithCost(nil) }},
		{"WithDenyHandler", func() { httplimit.WithDenyHandler(nil) }},
		{"WithKeyErrorHandler", func() { httplimit.WithKeyErrorHandler(nil) }},
		{"WithErrorHandler", func() { httplimit.WithErrorHandler(nil) }},
		{"WithObserver", func() { httplimit.WithObserver(nil) }},
		{"WithClock", func() { httplimit.WithClock(nil) }},
	} {
		func() {
			defer func() {
				msg := fmt.Sprint(recover())
				option, _, _ := strings.Cut(c.name, "(")
				if !strings.HasPrefix(msg, "spigot: httplimit: "+option) {
					t.Errorf("%s: panic %q; want one naming the option", c.name, msg)
				}
			}()
			c.f()
		}()
	}
	// The valid edges do not panic.
	httplimit.WithNeverAdmittedStatus(400)
	httplimit.WithNeverAdmittedStatus(599)
	httplimit.WithHeaders(0)
	httplimit.WithHeaders(httplimit.IETF | httplimit.Legacy)
	httplimit.WithHeaders(httplimit.IETFDraft10 | httplimit.Legacy)
}
