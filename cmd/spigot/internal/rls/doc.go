// Package rls is the rate limit service of spigot serve: Envoy's v3
// RateLimitService (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit)
// and envoyproxy/ratelimit's HTTP /json endpoint, deciding in any
// spigot.Store by a directory of envoyproxy/ratelimit's YAML configs.
//
//	cfg, err := rls.LoadDir("/etc/ratelimit")
//	svc := rls.NewService(store, cfg)
//	pb.RegisterRateLimitServiceServer(grpcServer, svc)
//	mux.Handle("POST /json", svc.JSONHandler())
//	go rls.Watch(ctx, "/etc/ratelimit", func(c *rls.Config, err error) {
//		if err == nil {
//			svc.Reload(c)
//		} // else log err: the last good config stays
//	})
//
// # As envoyproxy/ratelimit does
//
// The config format: one domain a file; descriptors nested by key and
// optional value; rate_limit with unit (second, minute, hour, day, week,
// month of 30 days, year of 365 days, in any case), requests_per_unit (0
// refuses every hit), unlimited, name and replaces; shadow_mode,
// quota_mode, detailed_metric, value_to_metric and share_threshold (the
// two metric keys are read and checked, but name statistics that this
// package does not keep). What it
// refuses is refused, with the same words and the file, line and
// descriptor: an unknown key (any of the format's keys is accepted at any
// level, and ignored where it does not belong), a key that is not a
// string, a list of anything but mappings, a value that is a float, an
// empty domain or key, a duplicate descriptor or domain, a bad unit, a unit
// on an unlimited limit, an empty replaces entry or one naming its own
// limit, share_threshold on a value that is no wildcard.
//
// Matching: at each level, the descriptor of the entry's key and value,
// else the first wildcard listed that it matches (a value ending in '*'
// matches the values that start with what precedes it), else the
// descriptor of the key alone; a limit applies only at the level of the
// request's last entry; a limit override in the request (a fixed window)
// takes the place of the config's, in a domain the config has.
//
// Answers: one status for each request descriptor; an unknown domain or an
// unmatched or replaced descriptor is OK with no current_limit; unlimited
// is OK with limit_remaining 4294967295 and no current_limit; an over
// limit descriptor has limit_remaining 0; in shadow mode it is OK, in
// quota mode OK without duration_until_reset, and neither refuses the
// request. A descriptor's hits_addend (even 0, which checks without
// charging) takes the place of the request's, whose 0 means 1. The fixed
// window is laid from the Unix epoch, and its duration_until_reset is the
// seconds to its end. Charging (the domain's charging key) envoy and
// stop-when-over are its two behaviours, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
// off and on. The RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
// headers of LIMIT_RESPONSE_HEADERS_ENABLED (WithResponseHeaders), and
// SHADOW_MODE (WithShadowMode). The /json endpoint's request and answer.
//
// # spigot's
//
// The algorithm and capacity keys of rate_limit (token buckets, sliding
// windows and logs, leaky buckets besides the fixed window), its
// shared_limit (the name of a limit a Go service keeps in the same store,
// keyed by the request's last value, so that an httplimit or grpclimit
// rule and the gateway charge one limit), and charging all-or-nothing. Store keys that never collide: each is the domain and
// every entry's key and value, each written as its length, a colon and its
// bytes ("3:api6:tenant=4:free"), where envoyproxy/ratelimit joins them
// with '_' so that
// (k_a, b) and (k, a_b) would share a counter; a key longer than
// spigot.MaxKeyLen is its SHA-256. Descriptors are matched by key and value
// as a pair, so a config may have both (k, a_b) and (k_a, b), which
// envoyproxy/ratelimit refuses as a duplicate; a key-only wildcard (a key
// ending in '*') matches the keys that start with what precedes it. A
// fixed window's counter is capped at its limit (a hit past it counts what
// was left), and a refused hit marks the key's window over, so that a
// later check of 0 hits says OVER_LIMIT, as envoyproxy/ratelimit's
// counter, gone past the limit, says. Hits above a limit's capacity count
// as its capacity plus one (they are over it either way). The IETF
// RateLimit-Policy and RateLimit fields (WithRateLimitFields). Bounds on a
// request: MaxDescriptors, MaxEntries, MaxJSONBody. Errors: a request with
// no domain or no descriptors gets envoyproxy/ratelimit's answer (Unknown,
// and its words); InvalidArgument for any other request that cannot be
// decided, Unavailable for a failing store, with no detail of the store in
// either; is_negative_hits is refused. Files are read from one
// directory (not its subdirectories, nor dot files), *.yaml and *.yml
// only, and a domain in two files is refused (MERGE_DOMAIN_CONFIG is not
// offered). Watch notices a change by reading the files at an interval.
// A leaky bucket's Delay is not passed on: Envoy cannot make a request
// wait.
package rls
