// Package grpclimit puts spigot's limits in front of gRPC services, and on
// the calls a gRPC client sends. Its server interceptors (Server), unary
// and streaming, limit calls by their client address, metadata (an API
// key, a tenant), method or request message, answer a denial with the
// status and details gRPC clients understand, and send the rate-limit
// fields in the response header. Its client interceptors (Client) hold
// outgoing calls to a partner's limit, and to the retry delays its servers
// send. It is a module of its own, so that users of httplimit never
// download gRPC.
//
// A Server is one policy: rules, each a limit, a key, the methods it
// applies to and what their calls cost it. A call takes from every rule
// that applies to it, all or nothing, in one round trip to the store; a
// call that no rule applies to passes through untouched:
//
//	policy := grpclimit.New(store,
//		grpclimit.By(perAddress, grpclimit.PeerIP()),
//		grpclimit.By(perTenant, grpclimit.Metadata("x-tenant"), grpclimit.Methods("/shop.Orders/")),
//		grpclimit.By(perExport, grpclimit.Metadata("x-tenant"), grpclimit.Methods("/shop.Orders/Export"), grpclimit.Cost(rows)),
//	)
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(policy.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(policy.StreamServerInterceptor()),
//	)
//
// Methods narrows a rule to some methods or services; Cost and Weight set
// what a call costs one rule (1 by default). A stream is limited once,
// when it opens, before its handler runs; a rule with PerMessage limits
// instead each message the stream's client sends.
//
// On a store/lease Store, the rules on token buckets and fixed windows
// are decided from the leases the replica holds, in memory, and the rest
// at the store behind it, in one call: a call is still taken all or
// nothing, and a denied one is charged nowhere.
//
// # Client addresses
//
// PeerIP keys by the connection's peer, without its port. It reads
// x-forwarded-for metadata only from proxies you name, walking back from
// the nearest hop, so a client cannot choose its own key by sending it;
// see PeerIP. RequireForwardedClient makes a call from a named proxy that
// names no client a key error, so that no key is ever a proxy's address.
//
// # What clients see
//
// Every limited call, admitted or denied, gets in its response header the
// ratelimit-policy and ratelimit metadata, with the values that httplimit
// sends in its IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-12), one member per limit:
//
//	ratelimit-policy: "api";q=5;w=5
//	ratelimit: "api";r=0;t=1
//
// On a call denied by one limit, nothing is charged, and each other
// limit's member says what it holds then.
//
// A client reads them with grpc.Header. A denial is a status of
// codes.ResourceExhausted whose details are a google.rpc.RetryInfo, whose
// retry_delay is the decision's exact RetryAfter, and a
// google.rpc.QuotaFailure with one violation per limit that denied the
// call: its quota_id is the limit's name, its quota_value the limit's
// capacity. No detail holds the key. The message says the same:
//
//	too many requests (api): retry in 1.5s
//
// A call whose cost no wait can admit is ResourceExhausted without
// RetryInfo ("call exceeds the limit (rows): the call costs more than the
// limit ever holds").
//
// A handler resets a rule's limit for its call (Server.Reset: the
// per-user limit after a successful login) or refunds what the call cost
// (Server.Refund: a call it could not serve), from the call's context and
// request, with the keys the rules read from them.
//
// # Failures
//
// A call that has no key (a KeyFunc failed) or no cost (a Cost's func
// failed) is charged nothing and gets codes.InvalidArgument
// (WithKeyErrorHandler), as does a key longer than spigot.MaxKeyLen. When
// the store fails, the call is not served: it gets codes.Unavailable with
// a RetryInfo of one second, and the error goes to the observer
// (WithErrorHandler, WithObserver; FailOpen serves it instead). No status
// message shows an error's text, a key, or what the client sent.
//
// # Outgoing calls
//
// A Client takes each outgoing call's cost from a spigot.Limiter before
// the call is sent, by the connection's target (or MethodKey, or a key of
// your own), waiting for its tokens up to the call's deadline, or not at
// all (WithoutWaiting):
//
//	c := grpclimit.NewClient(spigot.New(store, partner))
//	conn, err := grpc.NewClient(target,
//		grpc.WithChainUnaryInterceptor(c.UnaryClientInterceptor()),
//		grpc.WithChainStreamInterceptor(c.StreamClientInterceptor()),
//		…)
//
// A call the limit holds back fails with a *LimitedError, whose gRPC
// status is the ResourceExhausted (with RetryInfo) that the server would
// have sent, or DeadlineExceeded when the wait would outlast the call.
// When a server answers ResourceExhausted or Unavailable with a
// RetryInfo, the Client sends nothing more for that key until the delay
// ends. In a store shared by replicas, such as Redis, their Clients
// together send no more than one bucket admits.
package grpclimit
