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
// # Client addresses
//
// ClientIP keys by the connection's peer, without its port. It reads
// X-Forwarded-For or Forwarded only from proxies you name, walking back
// from the nearest hop, so a client cannot choose its own key by sending
// such a header; see ClientIP.
//
// # What clients see
//
// Every limited response, admitted or denied, carries the headers of
// Headers: by default the IETF RateLimit-Policy and RateLimit fields, one
// member per limit, and the legacy X-RateLimit-Limit, X-RateLimit-Remaining
// and X-RateLimit-Reset of the limit that decided. A denial is 429 Too
// Many Requests with Retry-After in whole seconds, rounded up and never 0;
// a request whose cost no wait can admit is 429 without Retry-After (or
// the status of WithNeverStatus). A decision that does not come from the
// bucket (store/hybrid's FailOpen and FailClosed) sends no remaining
// count. For example, the sixth request of a client within a second, on a
// limit of 5 at once and 1 a second:
//
//	HTTP/1.1 429 Too Many Requests
//	Ratelimit: "api";r=0;t=5
//	Ratelimit-Policy: "api";q=5;w=5
//	Retry-After: 1
//	X-Ratelimit-Limit: 5
//	X-Ratelimit-Remaining: 0
//	X-Ratelimit-Reset: 5
//
// On a request denied by one limit, the other limits' r and t count the
// request as if it had been admitted (the store decides the whole request
// before charging none of it): r may be below what they hold, and t above
// it, by the request's cost, never the other way.
//
// # Failures
//
// A request that has no key (a KeyFunc failed) is charged nothing and
// gets 400 (WithKeyErrorHandler), as does a key longer than
// spigot.MaxKeyLen. FormValue reads at most MaxFormBytes of a body. When
// the store fails, the request is not served: it gets 503 with
// Retry-After, and the error goes to the observer (WithErrorHandler,
// WithObserver; FailOpen serves it instead). Put a Redis store behind
// store/hybrid to choose per limit between failing open, failing closed
// and limiting in each process while Redis is down.
package httplimit
