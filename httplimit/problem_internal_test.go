package httplimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spigot-go/spigot"
)

var mediaNames = [...]string{textPlain: "text/plain", problemJSON: "application/problem+json", plainJSON: "application/json"}

func (mt media) String() string {
	if int(mt) < len(mediaNames) {
		return mediaNames[mt]
	}
	return "media(" + strconv.Itoa(int(mt)) + ")"
}

// TestNegotiate is the table of Accept lines and the media of the error
// body they get.
func TestNegotiate(t *testing.T) {
	many := strings.Repeat("text/html, ", maxRanges-1)
	for i, c := range []struct {
		lines []string
		want  media
	}{
		{nil, textPlain},
		{[]string{""}, textPlain},
		{[]string{"*/*"}, textPlain},
		{[]string{"text/plain"}, textPlain},
		{[]string{"text/html"}, textPlain}, // nothing acceptable: plain text anyway
		{[]string{"application/json"}, plainJSON},
		{[]string{"application/problem+json"}, problemJSON},
		{[]string{"Application/Problem+JSON"}, problemJSON},
		{[]string{"application/*"}, problemJSON},
		{[]string{"application/*+json"}, problemJSON},
		{[]string{"application/json, application/problem+json"}, problemJSON},
		{[]string{"application/problem+json;q=0.5, application/json"}, plainJSON},
		{[]string{"application/problem+json, */*"}, problemJSON},
		{[]string{"application/json, text/plain, */*"}, plainJSON},                               // as axios sends it
		{[]string{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}, textPlain}, // a browser
		{[]string{"text/plain, application/*"}, textPlain},
		{[]string{"text/*, application/json"}, plainJSON},
		{[]string{"application/json;q=0.9, text/plain"}, textPlain},
		{[]string{"application/json;q=0.5, text/plain;q=0.5"}, plainJSON},
		{[]string{"application/json;q=0"}, textPlain},
		{[]string{"application/json;q=0, */*"}, textPlain},
		{[]string{"application/json;q=0.001"}, plainJSON},
		{[]string{"application/json; q=0.001"}, plainJSON},
		{[]string{"application/json ;\tQ=1.000"}, plainJSON},
		{[]string{"application/json;charset=utf-8;q=1"}, plainJSON},
		{[]string{`application/json;x="a,b;q=0";q=1`}, plainJSON},
		{[]string{"application/json;q=1;q=0"}, plainJSON},                       // the second q is an extension
		{[]string{"application/json;q=0.5, application/json;q=0.7"}, plainJSON}, // the higher weight
		{[]string{"text/plain;q=0.6, application/json;q=0.5, application/json;q=0.7"}, plainJSON},
		{[]string{"text/plain", "application/json;q=0.5"}, textPlain}, // several lines are one list
		{[]string{"text/plain;q=0.1", "application/json"}, plainJSON},
		{[]string{"*/*;q=0.5, application/problem+json;q=0.4"}, textPlain},

		// Malformed elements are ignored, the others read.
		{[]string{"application/json;q=2"}, textPlain},
		{[]string{"application/json;q=1.5"}, textPlain},
		{[]string{"application/json;q=0.1234"}, textPlain},
		{[]string{"application/json;q=-1"}, textPlain},
		{[]string{"application/json;q="}, textPlain},
		{[]string{"application/json;q"}, textPlain},
		{[]string{"application/json;q=0.5;x=\"unterminated"}, textPlain},
		{[]string{"application/json;x=\"unterminated, application/json"}, textPlain}, // one element up to the end
		{[]string{"application/json q=0"}, textPlain},
		{[]string{"application json"}, textPlain},
		{[]string{"/json"}, textPlain},
		{[]string{"application/"}, textPlain},
		{[]string{"*/json"}, textPlain},
		{[]string{"json"}, textPlain},
		{[]string{"garbage, application/json;q=0.9"}, plainJSON},
		{[]string{",,, application/json"}, plainJSON},
		{[]string{"application/json;;q=1"}, textPlain},
		{[]string{"application/json\x00"}, textPlain},

		// Only the first maxRanges elements count.
		{[]string{many + "application/json"}, plainJSON},
		{[]string{many + "text/html, application/json"}, textPlain},
		{[]string{many, "application/json"}, textPlain},
	} {
		if got := negotiate(c.lines); got != c.want {
			t.Errorf("step %d: negotiate(%q) = %v; want %v", i+1, c.lines, got, c.want)
		}
	}
}

// TestNegotiateAllocs: reading Accept allocates nothing.
func TestNegotiateAllocs(t *testing.T) {
	lines := []string{`text/html,application/xhtml+xml;x="a,b",application/xml;q=0.9,*/*;q=0.8`, "application/problem+json;q=0.85"}
	if n := testing.AllocsPerRun(100, func() { negotiate(lines) }); n != 0 {
		t.Errorf("negotiate allocates %v times; want 0", n)
	}
}

// FuzzNegotiate: whatever Accept holds (its lines separated by '\n'),
// negotiate never panics and returns one of the three media; JSON only
// when a line names json or a wildcard; and problem details whenever the
// list starts with application/problem+json.
func FuzzNegotiate(f *testing.F) {
	for _, s := range []string{
		"", "*/*", "application/json", "application/problem+json, */*", "application/*+json",
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
		"application/json;q=0.5, text/plain;q=0.5", "application/json;q=0",
		`application/json;x="a,b\"c";q=1`, `text/plain;x="`, "application/json;q=1.000;q=0",
		"a/b\ntext/plain;q=0.1", ";;;,,,", "\\\"", "application/json;q=0.", "*/*;q=1.",
		strings.Repeat("text/plain,", 40),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, accept string) {
		lines := strings.Split(accept, "\n")
		got := negotiate(lines)
		if got != textPlain && got != problemJSON && got != plainJSON {
			t.Fatalf("negotiate(%q) = %v", lines, got)
		}
		if got != textPlain && !strings.Contains(strings.ToLower(accept), "json") && !strings.Contains(accept, "*") {
			t.Fatalf("negotiate(%q) = %v; want text/plain without a JSON type or a wildcard", lines, got)
		}
		lines[0] = "application/problem+json, " + lines[0]
		if got := negotiate(lines); got != problemJSON {
			t.Fatalf("negotiate(%q) = %v; want %v, named first", lines, got, problemJSON)
		}
	})
}

// TestRequestDetail: what the client is told of a key error, in product
// words, and never the cause's text.
func TestRequestDetail(t *testing.T) {
	const secret = "SECRET-strconv.ParseInt"
	cause := errors.New(secret)
	for i, c := range []struct {
		err  error
		want string
	}{
		{&RequestError{Rule: 1, Limit: "login-user", Part: "key", Err: fmt.Errorf("%w: %w", ErrNoKey, cause)}, `the request has no key for the limit "login-user"`},
		{&RequestError{Rule: 0, Part: "key", Err: cause}, "the request has no key"},
		{&RequestError{Limit: "login-user", Part: "key", Err: fmt.Errorf("%w: %w", spigot.ErrInvalidKey, cause)}, `the request's key for the limit "login-user" is too long`},
		{&RequestError{Limit: "export", Part: "cost", Err: cause}, `the request's cost for the limit "export" could not be read`},
		{&RequestError{Part: "cost", Err: cause}, "the request's cost could not be read"},
		{&RequestError{Limit: "export", Part: "cost", Err: fmt.Errorf("%w -1", spigot.ErrInvalidCost)}, `the request's cost for the limit "export" is negative`},
		{&RequestError{Part: "limit", Err: cause}, "no limit could be chosen for the request"},
		{&RequestError{Limit: "x", Part: "body", Err: cause}, "the request has no key or cost that the rate limiter can read"},
		{fmt.Errorf("spigot: httplimit: wrapped: %w", &RequestError{Limit: "a\"b", Part: "key", Err: cause}), `the request has no key for the limit "a\"b"`},
		{cause, "the request has no key or cost that the rate limiter can read"},
		{nil, "the request has no key or cost that the rate limiter can read"},
	} {
		if got := string(appendRequestDetail(nil, c.err)); got != c.want {
			t.Errorf("step %d: detail of %v = %q; want %q", i+1, c.err, got, c.want)
		}
		for _, accept := range []string{"", "application/json"} {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/", nil)
			r.Header.Set("Accept", accept)
			keyError(w, r, c.err)
			if strings.Contains(w.Body.String(), "SECRET") || strings.Contains(w.Body.String(), "spigot") {
				t.Errorf("step %d: Accept %q: the body %q shows the error", i+1, accept, w.Body)
			}
			var p struct{ Detail string }
			if accept == "" && w.Body.String() != c.want+"\n" || accept != "" && (json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Detail != c.want) {
				t.Errorf("step %d: Accept %q: body %q; want the detail %q", i+1, accept, w.Body, c.want)
			}
		}
	}
}

// FuzzAppendJSONString: any string, valid UTF-8 or not, is written as a
// JSON string that decodes to what encoding/json decodes its own encoding
// to.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "login-user", `a"b\c`, "<&>", "\u2028\u2029", "\x00\x1f\x7f", "\xff\xfe", "é\xc3", "\t\r\n", "\b\f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendJSONString([]byte("x"), s)
		if !utf8.Valid(b) || b[0] != 'x' {
			t.Fatalf("appendJSONString(%q) = %q", s, b)
		}
		var got string
		if err := json.Unmarshal(b[1:], &got); err != nil {
			t.Fatalf("appendJSONString(%q) = %q: %v", s, b[1:], err)
		}
		want, _ := json.Marshal(s)
		if string(b[1:]) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s; encoding/json writes %s", s, b[1:], want)
		}
		if string(appendJSONString(nil, []byte(s))) != string(want) {
			t.Fatalf("appendJSONString([]byte(%q)) differs from its string form", s)
		}
	})
}
