package rls

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/spigot-go/spigot"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func FuzzLoad(f *testing.F) {
	for _, s := range []string{basic, "domain: d\n" + charging, "'''", "0.25: d", "domain: d\ndescriptors:\n  - a",
		"domain: &a d\ndescriptors: *a", "domain: d\ndescriptors:\n  - key: k*\n    share_threshold: true\n    rate_limit: {unit: day, requests_per_unit: 1, algorithm: leaky-bucket, capacity: 9}"} {
		f.Add([]byte(s), "k", "v")
	}
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		cfg, err := Load(mapFS(map[string]string{"f.yaml": string(data)}))
		if err != nil {
			if !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), "rls: invalid config: f.yaml") {
				t.Fatalf("the error %q is not an ErrConfig naming the file", err)
			}
			return
		}
		for _, d := range cfg.Domains() {
			m := cfg.lookup(d, []Entry{{key, value}, {value, key}})
			cfg.lookup(d, []Entry{{key, value}})
			if m.limit != nil && m.limit.RequestsPerUnit > 0 && !m.limit.Unlimited && m.limit.limit.Capacity() < 0 {
				t.Fatalf("limit %v", m.limit.limit)
			}
		}
	})
}

// FuzzRequest sends random requests to a config with every kind of
// descriptor, and checks that every store key is the encoding of the
// request's domain and a descriptor's entries.
func FuzzRequest(f *testing.F) {
	f.Add([]byte("d\x00k\x01v\x02user\x01a\x02\x02zero\x01x"), uint32(0), uint64(1), false)
	f.Add([]byte("w\x00path\x01/api/v1/x\x02files\x01f/a"), uint32(3), uint64(0), true)
	f.Add([]byte("alg\x00tb\x011\x02sw\x011\x02sl\x011\x02lb\x011"), uint32(1<<31), uint64(1<<63), false)
	f.Add([]byte("a\x00a\x011\x02b\x011\x02sh\x011"), uint32(1), uint64(5), true)
	cfg := mustLoad(f, map[string]string{
		"d.yaml":   basic,
		"e.yaml":   "domain: e\n" + charging,
		"s.yaml":   "domain: s\ncharging: stop-when-over\n" + charging,
		"a.yaml":   "domain: a\ncharging: all-or-nothing\n" + charging,
		"alg.yaml": "domain: alg\ndescriptors:\n  - key: tb\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token-bucket, capacity: 2}\n  - key: sw\n    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding-window}\n  - key: sl\n    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding-log}\n  - key: lb\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky-bucket}\n",
		"w.yaml":   "domain: w\ndescriptors:\n  - key: path\n    value: /api/*\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 9}\n  - key: files\n    value: f/*\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: '*'\n    share_threshold: true\n    descriptors:\n      - key: '*'\n        rate_limit: {unit: hour, requests_per_unit: 3}\n",
	})
	f.Fuzz(func(t *testing.T, data []byte, hitsAddend uint32, own uint64, useOwn bool) {
		svc, _, rec := setup(t, "", WithResponseHeaders(HeaderNames{}), WithRateLimitFields())
		svc.Reload(cfg)
		// data is domain \x00 descriptors, split by \x02, entries by \x03,
		// key and value by \x01; a \x04 in a descriptor sets an override.
		domain, rest, _ := strings.Cut(string(data), "\x00")
		req := &pb.RateLimitRequest{Domain: domain, HitsAddend: hitsAddend}
		for _, ds := range strings.Split(rest, "\x02") {
			d := &rlpb.RateLimitDescriptor{}
			if strings.Contains(ds, "\x04") {
				d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(len(ds) % 5), Unit: typepb.RateLimitUnit(len(ds) % 8)}
			}
			for _, es := range strings.Split(ds, "\x03") {
				k, v, _ := strings.Cut(es, "\x01")
				d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: k, Value: v})
			}
			if useOwn {
				d.HitsAddend = wrapperspb.UInt64(own)
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v", err)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		for _, k := range rec.keys {
			if len(k) > spigot.MaxKeyLen {
				t.Fatalf("a key of %d bytes", len(k))
			}
			if strings.HasPrefix(k, "#") {
				if _, err := hex.DecodeString(k[1:]); err != nil || len(k) != 65 {
					t.Fatalf("key %q", k)
				}
				continue
			}
			dom, entries, _, ok := parseKey(k)
			if !ok || dom != req.Domain {
				t.Fatalf("key %q is not of the domain %q", k, req.Domain)
			}
			found := false
			for _, d := range req.Descriptors {
				if len(d.Entries) != len(entries) {
					continue
				}
				same := true
				for i, e := range d.Entries {
					if e.Key != entries[i].Key {
						same = false
					}
				}
				found = found || same
			}
			if !found {
				t.Fatalf("key %q names no descriptor of the request", k)
			}
		}
	})
}
