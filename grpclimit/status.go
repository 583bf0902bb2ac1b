package grpclimit

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/ratefield"
)

// The keys of the rate-limit metadata, as gRPC writes header names: in
// lower case.
const (
	mdPolicy    = "ratelimit-policy"
	mdRateLimit = "ratelimit"
)

// header returns the rate-limit metadata of the decisions out on limits,
// the limits of the rules of the given indices: ratelimit-policy and
// ratelimit, each one value of one member per limit, as httplimit's IETF
// RateLimit-Policy and RateLimit fields. The values of both keys share
// one string and one array, of capacity 1 each.
func (s *Server) header(rules []int, limits []spigot.Limit, out []spigot.Decision) metadata.MD {
	var buf [512]byte
	b := buf[:0]
	made := true // every limit is its rule's, whose policy is made once, in New
	for i, l := range limits {
		made = made && l == s.rules[rules[i]].limit
	}
	if len(rules) > 1 || !made {
		for i, l := range limits {
			if i > 0 {
				b = append(b, ", "...)
			}
			if l == s.rules[rules[i]].limit {
				b = append(b, s.rules[rules[i]].policy...)
			} else { // another limit decided: a fallback's
				b = ratefield.AppendPolicy(b, l)
			}
		}
	}
	policyEnd := len(b)
	for i, d := range out {
		if d.Degraded() {
			continue
		}
		if len(b) > policyEnd {
			b = append(b, ", "...)
		}
		b = ratefield.AppendLimit(b, limits[i], d)
	}
	all := string(b)
	values := make([]string, 2)
	values[0], values[1] = all[:policyEnd], all[policyEnd:]
	if len(rules) == 1 && made {
		values[0] = s.rules[rules[0]].policy
	}
	md := make(metadata.MD, 2)
	md[mdPolicy] = values[0:1:1]
	if len(all) > policyEnd {
		md[mdRateLimit] = values[1:2:2]
	}
	return md
}

// denial returns the status error of the call that res denied:
// ResourceExhausted, with a RetryInfo of the exact RetryAfter unless no
// wait can admit the call, and a QuotaFailure naming each limit that
// denied it.
func denial(res *Result) error {
	d := res.Decision
	never := d.RetryAfter == spigot.Never
	var names []string
	each := res.Decision.Each
next:
	for i := range min(len(each), len(res.Limits)) {
		if each[i].Allowed() {
			continue
		}
		name := res.Limits[i].Name()
		for _, n := range names {
			if n == name {
				continue next
			}
		}
		names = append(names, name)
	}
	if len(names) == 0 && d.By >= 0 && d.By < len(res.Limits) {
		names = append(names, res.Limits[d.By].Name())
	}
	var buf [256]byte // the message of a few limits, without growing
	msg := buf[:0]
	if never {
		msg = append(msg, "call exceeds the limit ("...)
	} else {
		msg = append(msg, "too many requests ("...)
	}
	qf := &errdetails.QuotaFailure{Violations: make([]*errdetails.QuotaFailure_Violation, len(names))}
	for i, name := range names {
		if i > 0 {
			msg = append(msg, ", "...)
		}
		msg = append(msg, name...)
		v := &errdetails.QuotaFailure_Violation{QuotaId: name}
		for j, l := range res.Limits {
			if l.Name() == name && !each[j].Allowed() {
				v.QuotaValue = l.Capacity()
				if each[j].RetryAfter == spigot.Never {
					v.Description = "the call costs more than the limit " + strconv.Quote(name) + " ever holds"
				} else {
					v.Description = "the limit " + strconv.Quote(name) + " is exhausted"
				}
				break
			}
		}
		qf.Violations[i] = v
	}
	if never {
		msg = append(msg, "): the call costs more than the limit ever holds"...)
	} else {
		msg = append(msg, "): retry in "...)
		msg = append(msg, d.RetryAfter.String()...)
	}
	st := status.New(codes.ResourceExhausted, string(msg))
	if never {
		st, _ = st.WithDetails(qf) // fails only for a nil detail
	} else {
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}, qf)
	}
	return st.Err()
}

// keyError is the key error handler of WithKeyErrorHandler's doc.
func keyError(_ context.Context, _ string, err error) error {
	return status.Error(codes.InvalidArgument, requestDetail(err))
}

// requestDetail returns what a client is told of err, a key error: which
// part of the call could not be read, for which limit, in a
// *RequestError; never err's text, which may hold Go internals and the
// client's input.
func requestDetail(err error) string {
	var re *RequestError
	if !errors.As(err, &re) {
		return "the call has no key or cost that the rate limiter can read"
	}
	limit := " for the limit " + strconv.Quote(re.Limit)
	switch {
	case re.Part == "key" && errors.Is(re.Err, spigot.ErrInvalidKey):
		return "the call's key" + limit + " is too long"
	case re.Part == "key":
		return "the call has no key" + limit
	case errors.Is(re.Err, spigot.ErrInvalidCost):
		return "the call's cost" + limit + " is negative"
	default:
		return "the call's cost" + limit + " could not be read"
	}
}

// failSafe is the error handler of WithErrorHandler's doc.
func failSafe(context.Context, string, error) error {
	st := status.New(codes.Unavailable, "rate limiter unavailable: retry in 1s")
	st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	return st.Err()
}

// contextError returns the status error of ctx, which is done.
func contextError(ctx context.Context) error {
	return status.FromContextError(ctx.Err()).Err()
}
