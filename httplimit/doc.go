// Package httplimit puts spigot's limits at the HTTP front door: a
// middleware for net/http (New, Wrap) that limits requests by their
// client address, API key, user or route, sends the standard headers, and
// answers 429 with Retry-After; and a RoundTripper (NewTransport) that
// limits outgoing calls, so that every replica of a service shares one
// budget with a partner's API.
//
// A Middleware is one policy: rules, each a limit, a key, the requests it
// applies to and what they cost it. Put it around a whole mux, for a
// service, or around one handler, for a route. A request takes from every
// rule that applies to it, all or nothing, in one round trip to the
// store; a request that no rule applies to passes through untouched:
//
//	policy := httplimit.New(store,
//		httplimit.By(perAddress, httplimit.ClientIP()),
//		httplimit.By(perAccount, httplimit.FormValue("user"), httplimit.On("POST /login")),
//		httplimit.By(perAPIKey, httplimit.Header("X-Api-Key"), httplimit.On("GET /export"), httplimit.Cost(rows)),
//	)
//	http.ListenAndServe(addr, policy.Wrap(mux))
//
// On matches a request as http.ServeMux would match the pattern, wherever
// the middleware sits; Methods and If narrow a rule further; Cost and
// Weight set what a request costs one rule, WithCost what it costs the
// others (1 by default). A login that the per-account limit denies costs
// the address nothing, and an export of 0 rows costs the API key nothing.
// Middlewares nested anyway (one per router group, say) each decide on
// their own rules, and merge their rate-limit headers.
//
// On a store/lease Store, the rules on token buckets and fixed windows
// are decided from the leases the replica holds, in memory, and the rest
// at the store behind it, in one call: a request is still taken all or
// nothing, and a denied one is charged nowhere.
//
// # Client addresses
//
// ClientIP keys by the connection's peer, without its port. It reads
// X-Forwarded-For or Forwarded only from proxies you name, walking back
// from the nearest hop, so a client cannot choose its own key by sending
// such a header; see ClientIP. A request from a named proxy that sends no
// such header is keyed by the proxy's own address, and one whose every
// hop is in a named network by the leftmost hop: a proxy that drops the
// header puts all its clients in one bucket. RequireForwardedClient makes
// such a request a key error (400) instead, so that no key is ever a
// proxy's address; name only your proxies' networks with it:
//
//	httplimit.ClientIP(httplimit.TrustXForwardedFor(lb), httplimit.RequireForwardedClient())
//
// # What clients see
//
// Every limited response, admitted or denied, carries the headers of
// Headers: by default the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-12), one member per limit, and the
// legacy X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset of
// the limit that decided. A RateLimit member's r is what a request may
// take now, and its t the effective window: the seconds, rounded up, until
// the limit admits more than r (if r were taken now, a token bucket's next
// token, a fixed window's next window); X-RateLimit-Reset is the seconds
// until it is whole again. A denial is 429 Too Many Requests with
// Retry-After in whole seconds, rounded up and never 0, and never before
// the end of the deciding limit's t; a request whose cost no wait can
// admit is 429 without Retry-After (or the status of
// WithNeverAdmittedStatus). A decision that does not come from the bucket
// (store/hybrid's FailOpen and FailClosed) sends no remaining count. For
// example, the sixth request of a client within a second, on a limit of 5
// at once and 1 a second:
//
//	HTTP/1.1 429 Too Many Requests
//	Ratelimit: "api";r=0;t=1
//	Ratelimit-Policy: "api";q=5;w=5
//	Retry-After: 1
//	X-Ratelimit-Limit: 5
//	X-Ratelimit-Remaining: 0
//	X-Ratelimit-Reset: 5
//
// On a request denied by one limit, nothing is charged, and each other
// limit's member says what it holds then, with its own t: a client that
// honours any one member is never denied for that member's reason. Counts
// are capped at 15 digits, as
// structured fields require. WithHeaders(IETFDraft10|Legacy) sends
// draft 10's t instead, the seconds until the limit is whole again.
//
// A middleware nested in another (one on the mux, one on a route) adds its
// members to the RateLimit-Policy and RateLimit that the outer one set, in
// one field line, replacing a member of the same name with its own; the
// legacy fields are those of the limit that decided across both (see
// Headers). Each middleware still charges its own rules: only the rules of
// one middleware are taken all or nothing.
//
// # Failures
//
// A request that has no key (a KeyFunc failed), no cost (WithCost's func
// failed) or no limit (a ByFunc's func failed) is charged nothing and
// gets 400 (WithKeyErrorHandler), as does a key longer than
// spigot.MaxKeyLen. FormValue reads at most MaxFormBytes of a body. When
// the store fails, the request is not served: it gets 503 with
// Retry-After: 1 and Cache-Control: no-store, and the error goes to the
// observer (WithErrorHandler, WithObserver; FailOpen serves it instead).
// Put a Redis store behind store/hybrid to choose per limit between
// failing open, failing closed and limiting in each process while Redis
// is down.
//
// Every error body the middleware writes by default, a denial's
// included, is problem details (RFC 9457) in JSON when the request's
// Accept prefers JSON, and otherwise one line of plain text, the
// problem's detail. No body shows an error's text, a key, or what the
// client sent. A denial is of the RateLimit draft's problem type
// quota-exceeded, with the names of the limits that denied the request
// in violated-policies and, when a wait can admit it, Retry-After's
// seconds in retry_after:
//
//	HTTP/1.1 429 Too Many Requests
//	Content-Type: application/problem+json
//	Retry-After: 60
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"too many requests (login-user): retry in 60s","violated-policies":["login-user"],"retry_after":60}
//
// or, in plain text:
//
//	too many requests (login-user): retry in 60s
//
// A request whose cost no wait can admit has the same type, without
// retry_after, the status of WithNeverAdmittedStatus, and the detail
// "request exceeds the limit (rows): the request costs more than the limit
// ever holds". A key error and a store failure are about:blank, titled by
// their status; a key error's detail says what the request lacks, and for
// which limit, when the error is a *RequestError:
//
//	{"type":"about:blank","title":"Bad Request","status":400,"detail":"the request has no key for the limit \"login-user\""}
//	{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"rate limiter unavailable: retry in 1s","retry_after":1}
//
// Each body has X-Content-Type-Options: nosniff. The JSON is sent as
// application/problem+json, or as application/json to a client that
// accepts only that. Each of text/plain, application/problem+json and
// application/json takes the weight (q) of the most specific media range
// of Accept that matches it (application/*+json matches problem+json;
// q=0 refuses a type); JSON wins when its weight is higher than plain
// text's, or equal and by a range at least as specific that is not */*
// alone. So "application/json" and "application/json, text/plain, */*"
// get JSON, and no Accept, "*/*" or a browser's Accept gets plain text, as
// does a list that accepts none of them. Only the first 32 elements of
// Accept are read, and a malformed one is ignored.
package httplimit
