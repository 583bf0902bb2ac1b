package envoyrls

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Descriptor returns the descriptor of the entries key0=value0,
// key1=value1, …; it panics if kv has an odd length.
func Descriptor(kv ...string) *rlpb.RateLimitDescriptor {
	if len(kv)%2 != 0 {
		panic("envoyrls: Descriptor: odd number of arguments: " + strings.Join(kv, ", "))
	}
	d := &rlpb.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// marshal is the JSON of JSON, Diff and the golden files: protojson with
// the .proto file's field names and every field, so that an unset message
// is null and a zero number is 0.
var marshal = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// JSON returns m in protojson, as Diff compares it, indented. Unlike
// protojson's own output, it is the same bytes for the same message.
func JSON(m proto.Message) []byte {
	b, err := marshal.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("envoyrls: protojson: %v", err))
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		panic(fmt.Sprintf("envoyrls: protojson: %v", err))
	}
	return out.Bytes()
}

// ResetHeader is the name of the response header whose value (seconds
// until the window resets) Diff allows to differ by one.
const ResetHeader = "RateLimit-Reset"

// Diff returns one line for each field of b's protojson that differs from
// a's, such as
//
//	statuses[1].limit_remaining: 2 != 3
//
// and nothing when they are the same. It ignores nothing but the time of
// the two calls: a status's duration_until_reset, and the value of a
// RateLimit-Reset header, at the same index in both may differ by up to
// one second, because each service counts the whole seconds to the end of
// the window at its own instant, and the two calls are not made at the
// same instant.
func Diff(a, b *pb.RateLimitResponse) []string {
	b = proto.Clone(b).(*pb.RateLimitResponse)
	for i, sb := range b.GetStatuses() {
		if i >= len(a.GetStatuses()) {
			break
		}
		da, db := a.GetStatuses()[i].GetDurationUntilReset(), sb.GetDurationUntilReset()
		if da != nil && db != nil {
			if d := da.AsDuration() - db.AsDuration(); d >= -time.Second && d <= time.Second {
				sb.DurationUntilReset = proto.Clone(da).(*durationpb.Duration)
			}
		}
	}
	for i, hb := range b.GetResponseHeadersToAdd() {
		if i >= len(a.GetResponseHeadersToAdd()) {
			break
		}
		ha := a.GetResponseHeadersToAdd()[i]
		if !strings.EqualFold(ha.GetKey(), ResetHeader) || !strings.EqualFold(hb.GetKey(), ResetHeader) {
			continue
		}
		va, errA := strconv.ParseInt(ha.GetValue(), 10, 64)
		vb, errB := strconv.ParseInt(hb.GetValue(), 10, 64)
		if errA == nil && errB == nil && va-vb >= -1 && va-vb <= 1 {
			hb.Value = ha.GetValue()
		}
	}
	return diffJSON(JSON(a), JSON(b))
}

// diffJSON returns the lines of Diff for two JSON documents.
func diffJSON(a, b []byte) []string {
	var x, y any
	if err := unmarshalJSON(a, &x); err != nil {
		return []string{fmt.Sprintf("first: %v", err)}
	}
	if err := unmarshalJSON(b, &y); err != nil {
		return []string{fmt.Sprintf("second: %v", err)}
	}
	var out []string
	walk("", x, y, &out)
	return out
}

func unmarshalJSON(b []byte, v *any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// missing stands for a field one side lacks (a key of a
// google.protobuf.Struct, an element beyond the end of a list).
const missing = "(missing)"

func walk(path string, x, y any, out *[]string) {
	switch x := x.(type) {
	case map[string]any:
		if y, ok := y.(map[string]any); ok {
			keys := make([]string, 0, len(x)+len(y))
			for k := range x {
				keys = append(keys, k)
			}
			for k := range y {
				if _, ok := x[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				p := k
				if path != "" {
					p = path + "." + k
				}
				xv, xok := x[k]
				yv, yok := y[k]
				switch {
				case !xok:
					*out = append(*out, fmt.Sprintf("%s: %s != %s", p, missing, leaf(yv)))
				case !yok:
					*out = append(*out, fmt.Sprintf("%s: %s != %s", p, leaf(xv), missing))
				default:
					walk(p, xv, yv, out)
				}
			}
			return
		}
	case []any:
		if y, ok := y.([]any); ok {
			for i := range max(len(x), len(y)) {
				p := fmt.Sprintf("%s[%d]", path, i)
				switch {
				case i >= len(x):
					*out = append(*out, fmt.Sprintf("%s: %s != %s", p, missing, leaf(y[i])))
				case i >= len(y):
					*out = append(*out, fmt.Sprintf("%s: %s != %s", p, leaf(x[i]), missing))
				default:
					walk(p, x[i], y[i], out)
				}
			}
			return
		}
	}
	if lx, ly := leaf(x), leaf(y); lx != ly {
		if path == "" {
			path = "(response)"
		}
		*out = append(*out, fmt.Sprintf("%s: %s != %s", path, lx, ly))
	}
}

// leaf returns v in compact JSON.
func leaf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}

// Compare sends each request to a, then to b, and reports with tb.Errorf
// every field of b's response that differs from a's, as Diff finds them,
// or any difference in their errors (gRPC code and message). Each request
// goes to a and b one after the other, so that two services whose windows
// are aligned on the same clock see the same window, unless the request
// crosses a window's end: a test of windows shorter than an hour should
// start its requests just after a boundary, as the clock tells.
func Compare(tb testing.TB, a, b pb.RateLimitServiceClient, reqs []*pb.RateLimitRequest) {
	tb.Helper()
	for i, req := range reqs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ra, errA := a.ShouldRateLimit(ctx, req)
		rb, errB := b.ShouldRateLimit(ctx, req)
		cancel()
		if d := DiffExchange(ra, errA, rb, errB); len(d) > 0 {
			tb.Errorf("request %d %s:\n\t%s", i, compact(req), strings.Join(d, "\n\t"))
		}
	}
}

// DiffExchange is Diff for two calls, each of which returned a response
// or an error: two errors differ when their gRPC code or message differ.
func DiffExchange(ra *pb.RateLimitResponse, errA error, rb *pb.RateLimitResponse, errB error) []string {
	switch {
	case errA == nil && errB == nil:
		return Diff(ra, rb)
	case errA != nil && errB != nil:
		sa, sb := status.Convert(errA), status.Convert(errB)
		var d []string
		if sa.Code() != sb.Code() {
			d = append(d, fmt.Sprintf("error code: %v != %v", sa.Code(), sb.Code()))
		}
		if sa.Message() != sb.Message() {
			d = append(d, fmt.Sprintf("error message: %q != %q", sa.Message(), sb.Message()))
		}
		return d
	case errA != nil:
		return []string{fmt.Sprintf("error %v != response %s", errA, compact(rb))}
	default:
		return []string{fmt.Sprintf("response %s != error %v", compact(ra), errB)}
	}
}

// compact returns m in one line of protojson.
func compact(m proto.Message) string {
	var out bytes.Buffer
	json.Compact(&out, JSON(m))
	return out.String()
}
