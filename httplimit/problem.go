package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/spigot-go/spigot"
)

// A RequestError is what a key error handler (see WithKeyErrorHandler)
// receives when the middleware cannot read what a rule needs from a
// request: its key, its cost, or the limit its func chooses. Err is the
// cause, which may hold the client's input and Go internals: log it, do
// not send it to the client.
type RequestError struct {
	// Rule is the index of the rule, in the order of New's options.
	Rule int
	// Limit is the name of the rule's limit, or "" when it could not be
	// chosen.
	Limit string
	// Part is what could not be read: "key", "cost" or "limit".
	Part string
	// Err is why.
	Err error
}

func (e *RequestError) Error() string {
	if e.Limit == "" {
		return fmt.Sprintf("spigot: httplimit: rule %d: the request's %s: %v", e.Rule, e.Part, e.Err)
	}
	return fmt.Sprintf("spigot: httplimit: rule %d (%s): the request's %s: %v", e.Rule, e.Limit, e.Part, e.Err)
}

// Unwrap returns e.Err.
func (e *RequestError) Unwrap() error { return e.Err }

// keyError is the key error handler of WithKeyErrorHandler's doc.
func keyError(w http.ResponseWriter, _ *http.Request, err error) {
	http.Error(w, err.Error(), http.StatusBadRequest)
}

// failSafe is the error handler of WithErrorHandler's doc.
func failSafe(w http.ResponseWriter, r *http.Request, _ error) (serve bool) {
	const msg = "rate limiter unavailable"
	h := w.Header()
	h.Set("Retry-After", "1")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if wantsJSON(r) {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "{\"error\":%q,\"retry_after\":1}\n", msg)
		return false
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintf(w, "%s: retry in 1s\n", msg)
	return false
}

// wantsJSON reports whether r's Accept names a JSON type: the default
// answers then have a JSON body.
func wantsJSON(r *http.Request) bool { return strings.Contains(r.Header.Get("Accept"), "json") }

// defaultDeny is the deny handler of WithDenyHandler's doc.
func (m *Middleware) defaultDeny(w http.ResponseWriter, r *http.Request, res *Result) {
	d := res.Decisions
	status, msg := http.StatusTooManyRequests, "too many requests"
	if d.RetryAfter == spigot.Never {
		status, msg = m.never, "request exceeds the limit"
	}
	name := res.Limits[d.By].Name()
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	if wantsJSON(r) {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(status)
		body := struct {
			Error      string `json:"error"`
			Limit      string `json:"limit"`
			RetryAfter int64  `json:"retry_after,omitempty"`
		}{msg, name, 0}
		if d.RetryAfter != spigot.Never {
			body.RetryAfter = max(seconds(d.RetryAfter), 1)
		}
		json.NewEncoder(w).Encode(body)
		return
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	if d.RetryAfter == spigot.Never {
		fmt.Fprintf(w, "%s (%s): the request costs more than the limit ever holds\n", msg, name)
		return
	}
	fmt.Fprintf(w, "%s (%s): retry in %ds\n", msg, name, max(seconds(d.RetryAfter), 1))
}
