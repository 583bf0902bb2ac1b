package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/ratefield"
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

// The problem types of the default error bodies (RFC 9457).
const (
	// quotaExceeded is the problem type of a denial, as
	// draft-ietf-httpapi-ratelimit-headers-11 section 5.1 defines it,
	// with its registered title.
	quotaExceeded      = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	quotaExceededTitle = "Quota Exceeded"
	// aboutBlank is the problem type of the other errors, titled by
	// their status.
	aboutBlank = "about:blank"
)

// defaultDeny is the deny handler of WithDenyHandler's doc.
func (m *Middleware) defaultDeny(w http.ResponseWriter, r *http.Request, res *Result) {
	d := res.Decision
	never := d.RetryAfter == spigot.Never
	status, retry := http.StatusTooManyRequests, int64(-1)
	if never {
		status = m.neverAdmitted
	} else {
		retry = retryAfter(w.Header(), d)
	}
	var dbuf [128]byte
	detail := dbuf[:0]
	if never {
		detail = append(detail, "request exceeds the limit ("...)
	} else {
		detail = append(detail, "too many requests ("...)
	}
	detail = appendViolated(detail, res, false)
	if never {
		detail = append(detail, "): the request costs more than the limit ever holds"...)
	} else {
		detail = append(detail, "): retry in "...)
		detail = strconv.AppendInt(detail, retry, 10)
		detail = append(detail, 's')
	}
	mt := negotiate(r.Header.Values("Accept"))
	if mt == textPlain {
		writeText(w, status, detail)
		return
	}
	b := make([]byte, 0, 192+2*len(detail))
	b = appendProblem(b, quotaExceeded, quotaExceededTitle, status, detail)
	b = append(b, `,"violated-policies":[`...)
	b = appendViolated(b, res, true)
	b = append(b, ']')
	b = appendRetry(b, retry)
	writeJSON(w, mt, status, b)
}

// retryAfter returns the seconds of the Retry-After field that the
// middleware set in h for the denial d: the body says what the field
// says.
func retryAfter(h http.Header, d spigot.GroupDecision) int64 {
	if v := h.Get("Retry-After"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return max(ratefield.Seconds(d.RetryAfter), 1)
}

// appendViolated appends the names of the limits that denied res, once
// each and in the order of the rules: separated by ", ", or as JSON
// strings separated by commas.
func appendViolated(b []byte, res *Result, asJSON bool) []byte {
	n := 0
	add := func(name string) {
		if n++; n > 1 {
			if asJSON {
				b = append(b, ',')
			} else {
				b = append(b, ", "...)
			}
		}
		if asJSON {
			b = appendJSONString(b, name)
		} else {
			b = append(b, name...)
		}
	}
	each := res.Decision.Each
next:
	for i := range min(len(each), len(res.Limits)) {
		if each[i].Allowed() {
			continue
		}
		name := res.Limits[i].Name()
		for j := range i {
			if !each[j].Allowed() && res.Limits[j].Name() == name {
				continue next
			}
		}
		add(name)
	}
	if by := res.Decision.By; n == 0 && by >= 0 && by < len(res.Limits) {
		add(res.Limits[by].Name())
	}
	return b
}

// keyError is the key error handler of WithKeyErrorHandler's doc.
func keyError(w http.ResponseWriter, r *http.Request, err error) {
	var dbuf [128]byte
	detail := appendRequestDetail(dbuf[:0], err)
	mt := negotiate(r.Header.Values("Accept"))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if mt == textPlain {
		writeText(w, http.StatusBadRequest, detail)
		return
	}
	b := make([]byte, 0, 96+2*len(detail))
	b = appendProblem(b, aboutBlank, http.StatusText(http.StatusBadRequest), http.StatusBadRequest, detail)
	writeJSON(w, mt, http.StatusBadRequest, b)
}

// appendRequestDetail appends what a client is told of err, a key error:
// which part of the request could not be read, for which limit, in a
// *RequestError; never err's text, which may hold Go internals and the
// client's input.
func appendRequestDetail(b []byte, err error) []byte {
	var re *RequestError
	if !errors.As(err, &re) {
		return append(b, "the request has no key or cost that the rate limiter can read"...)
	}
	limit := func(b []byte, prefix string) []byte {
		if re.Limit == "" {
			return b
		}
		b = append(b, prefix...)
		return strconv.AppendQuote(b, re.Limit)
	}
	switch re.Part {
	case "key":
		if errors.Is(re.Err, spigot.ErrInvalidKey) {
			b = append(b, "the request's key"...)
			b = limit(b, " for the limit ")
			return append(b, " is too long"...)
		}
		b = append(b, "the request has no key"...)
		return limit(b, " for the limit ")
	case "cost":
		b = append(b, "the request's cost"...)
		b = limit(b, " for the limit ")
		if errors.Is(re.Err, spigot.ErrInvalidCost) {
			return append(b, " is negative"...)
		}
		return append(b, " could not be read"...)
	case "limit":
		return append(b, "no limit could be chosen for the request"...)
	}
	return append(b, "the request has no key or cost that the rate limiter can read"...)
}

// failSafe is the error handler of WithErrorHandler's doc.
func failSafe(w http.ResponseWriter, r *http.Request, _ error) (serve bool) {
	const detail = "rate limiter unavailable: retry in 1s"
	h := w.Header()
	h.Set("Retry-After", "1")
	h.Set("Cache-Control", "no-store")
	mt := negotiate(r.Header.Values("Accept"))
	if mt == textPlain {
		writeText(w, http.StatusServiceUnavailable, []byte(detail))
		return false
	}
	b := make([]byte, 0, 160)
	b = appendProblem(b, aboutBlank, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable, []byte(detail))
	b = appendRetry(b, 1)
	writeJSON(w, mt, http.StatusServiceUnavailable, b)
	return false
}

// writeText answers status with detail, on a line of plain text. It
// copies detail, which may stay on its caller's stack.
func writeText(w http.ResponseWriter, status int, detail []byte) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	b := make([]byte, 0, len(detail)+1)
	w.Write(append(append(b, detail...), '\n'))
}

// writeJSON answers status with the problem object b, which it closes, as
// mt.
func writeJSON(w http.ResponseWriter, mt media, status int, b []byte) {
	h := w.Header()
	if mt == problemJSON {
		h.Set("Content-Type", "application/problem+json")
	} else {
		h.Set("Content-Type", "application/json")
	}
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, "}\n"...))
}

// appendProblem appends the opening of a problem details object (RFC
// 9457) and its members type, title, status and detail.
func appendProblem(b []byte, typ, title string, status int, detail []byte) []byte {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"title":`...)
	b = appendJSONString(b, title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"detail":`...)
	return appendJSONString(b, detail)
}

// appendRetry appends the member retry_after, the seconds of Retry-After,
// unless seconds is negative (no wait admits the request).
func appendRetry(b []byte, seconds int64) []byte {
	if seconds < 0 {
		return b
	}
	b = append(b, `,"retry_after":`...)
	return strconv.AppendInt(b, seconds, 10)
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it: quotes, backslashes, control characters, '<', '>', '&',
// U+2028 and U+2029; invalid UTF-8 becomes U+FFFD.
func appendJSONString[S string | []byte](b []byte, s S) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// A media is the media type of a default error body.
type media uint8

const (
	textPlain   media = iota // text/plain; charset=utf-8
	problemJSON              // application/problem+json
	plainJSON                // application/json, with the same object
)

// maxRanges is the most elements of Accept that negotiate reads: a
// client's list beyond them is ignored.
const maxRanges = 32

// negotiate chooses the media of an error body from the request's Accept
// lines (RFC 9110 section 12.5.1): each of text/plain,
// application/problem+json and application/json takes the weight of the
// most specific media range that matches it (type/subtype, then
// application/*+json for problem+json, then type/*, then */*; at one
// specificity, the highest weight), 0 when none does. The JSON types win
// when their weight is higher than text/plain's, or equal and matched by
// a range at least as specific and not */* alone; between them,
// application/problem+json wins a tie. Anything else is plain text: no
// Accept, */* alone, a list that accepts none of the three. Media type
// parameters other than q are ignored, and so is an element that is not
// a well-formed media range with a valid weight; only the first
// maxRanges elements are read. It never allocates.
func negotiate(lines []string) media {
	// The weights, in thousandths, and the specificity (-1: no range
	// matched) of text/plain, application/problem+json and
	// application/json.
	var q [3]int
	spec := [3]int{-1, -1, -1}
	n := 0
	for _, line := range lines {
		for {
			if n++; n > maxRanges {
				break
			}
			var elem string
			elem, line = nextElement(line)
			if typ, sub, w, ok := mediaRange(elem); ok {
				for i := range q {
					if s := matches(media(i), typ, sub); s >= 0 && (s > spec[i] || s == spec[i] && w > q[i]) {
						q[i], spec[i] = w, s
					}
				}
			}
			if line == "" {
				break
			}
		}
	}
	j := problemJSON
	if q[plainJSON] > q[problemJSON] || q[plainJSON] == q[problemJSON] && spec[plainJSON] > spec[problemJSON] {
		j = plainJSON
	}
	switch {
	case q[j] == 0:
		return textPlain
	case q[textPlain] > q[j]:
		return textPlain
	case q[textPlain] == q[j] && (spec[textPlain] > spec[j] || spec[j] == 0):
		return textPlain
	}
	return j
}

// nextElement splits the list s at its first comma outside a quoted
// string: it returns the element before it and the rest after it. An
// unterminated quoted string runs to the end of s.
func nextElement(s string) (elem, rest string) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// mediaRange parses the Accept element s: a media range (type/subtype,
// type/* or */*) and its parameters, of which it returns the weight q in
// thousandths (1000 when there is none). ok is false when s is not
// well-formed (spaces and tabs may stand around s and around each ';').
func mediaRange(s string) (typ, sub string, q int, ok bool) {
	s = strings.Trim(s, " \t")
	i := tokenEnd(s, 0)
	if i == 0 || i == len(s) || s[i] != '/' {
		return "", "", 0, false
	}
	typ = s[:i]
	j := tokenEnd(s, i+1)
	if j == i+1 {
		return "", "", 0, false
	}
	sub = s[i+1 : j]
	if typ == "*" && sub != "*" {
		return "", "", 0, false
	}
	q, weighted := 1000, false
	for rest := s[j:]; rest != ""; {
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" || rest[0] != ';' {
			return "", "", 0, false
		}
		rest = strings.TrimLeft(rest[1:], " \t")
		k := tokenEnd(rest, 0)
		if k == 0 || k == len(rest) || rest[k] != '=' {
			return "", "", 0, false
		}
		name := rest[:k]
		rest = rest[k+1:]
		var value string
		if rest != "" && rest[0] == '"' {
			end := quotedEnd(rest)
			if end < 0 {
				return "", "", 0, false
			}
			value, rest = rest[:end], rest[end:]
		} else {
			v := tokenEnd(rest, 0)
			if v == 0 {
				return "", "", 0, false
			}
			value, rest = rest[:v], rest[v:]
		}
		if (name == "q" || name == "Q") && !weighted {
			// The first q is the weight; what follows it are accept
			// extensions, ignored.
			if q, ok = qvalue(value); !ok {
				return "", "", 0, false
			}
			weighted = true
		}
	}
	return typ, sub, q, true
}

// tokenEnd returns the end of the run of token characters in s from i.
func tokenEnd(s string, i int) int {
	for i < len(s) && isTchar(s[i]) {
		i++
	}
	return i
}

// quotedEnd returns the end of the quoted string (RFC 9110) at the start
// of s, just after its closing quote, or -1 when it is not one.
func quotedEnd(s string) int {
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i++; i == len(s) || !isQuotable(s[i]) {
				return -1
			}
		case !isQuotable(c):
			return -1
		}
	}
	return -1
}

// qvalue parses a weight (RFC 9110 section 12.4.2: 0 to 1, with at most
// three decimals) in thousandths.
func qvalue(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] != '0' && s[0] != '1' || len(s) > 1 && s[1] != '.' {
		return 0, false
	}
	q := int(s[0]-'0') * 1000
	scale := 100
	for i := 2; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' || s[0] == '1' && c != '0' {
			return 0, false
		}
		q += int(c-'0') * scale
		scale /= 10
	}
	return q, true
}

// matches returns how specifically the media range typ/sub matches mt:
// 3 for its type and subtype, 2 for application/*+json and
// application/problem+json, 1 for its type and *, 0 for */*, and -1 when
// the range does not match it.
func matches(mt media, typ, sub string) int {
	wantType, wantSub := "application", "json"
	switch mt {
	case textPlain:
		wantType, wantSub = "text", "plain"
	case problemJSON:
		wantSub = "problem+json"
	}
	switch {
	case typ == "*":
		return 0
	case !strings.EqualFold(typ, wantType):
		return -1
	case sub == "*":
		return 1
	case strings.EqualFold(sub, wantSub):
		return 3
	case mt == problemJSON && strings.EqualFold(sub, "*+json"):
		return 2
	}
	return -1
}
