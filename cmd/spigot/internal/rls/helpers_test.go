package rls

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/store/memory"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// t0 is the instant the tests start at: a whole number of days after the
// Unix epoch, so that it starts a second, a minute, an hour and a day
// (but is 1 day into a week from the epoch's, 20 days into a month of 30
// days and 290 days into a year of 365).
var t0 = time.Unix(20_000*86400, 0).UTC()

// mapFS makes a file system of YAML files.
func mapFS(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data)}
	}
	return fsys
}

func mustLoad(t testing.TB, files map[string]string) *Config {
	t.Helper()
	cfg, err := Load(mapFS(files))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return cfg
}

// recorder is a store that records the keys of the ops it is given.
type recorder struct {
	spigot.Store
	mu   sync.Mutex
	keys []string
}

func (r *recorder) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	r.mu.Lock()
	r.keys = append(r.keys, op.Key)
	r.mu.Unlock()
	return r.Store.Do(ctx, op)
}

func (r *recorder) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	r.mu.Lock()
	for _, op := range ops {
		r.keys = append(r.keys, op.Key)
	}
	r.mu.Unlock()
	return r.Store.DoMulti(ctx, mode, ops, out)
}

// setup returns a service on a memory store whose clock reads t0.
func setup(t testing.TB, yaml string, opts ...Option) (*Service, *clocktest.Clock, *recorder) {
	t.Helper()
	clk := clocktest.New(t0)
	rec := &recorder{Store: memory.New(memory.WithClock(clk))}
	var cfg *Config
	if yaml != "" {
		cfg = mustLoad(t, map[string]string{"config.yaml": yaml})
	}
	return NewService(rec, cfg, append([]Option{WithClock(clk)}, opts...)...), clk, rec
}

// desc returns a descriptor of key, value pairs.
func desc(kv ...string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// hits sets d's own hits_addend.
func hits(n uint64, d *rlpb.RateLimitDescriptor) *rlpb.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// override sets d's limit override.
func override(rpu uint32, unit int32, d *rlpb.RateLimitDescriptor) *rlpb.RateLimitDescriptor {
	d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typepb.RateLimitUnit(unit)}
	return d
}

func request(domain string, ds ...*rlpb.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// show writes a status compactly: its code, then, when it has a current
// limit, rpu/unit and its name, r= its remaining (when not 0 or with a
// limit) and t= its duration_until_reset in seconds (when set).
func show(st *pb.RateLimitResponse_DescriptorStatus) string {
	var b strings.Builder
	b.WriteString(map[pb.RateLimitResponse_Code]string{pb.RateLimitResponse_OK: "OK", pb.RateLimitResponse_OVER_LIMIT: "OVER"}[st.Code])
	if l := st.CurrentLimit; l != nil {
		fmt.Fprintf(&b, " %d/%s", l.RequestsPerUnit, strings.ToLower(l.Unit.String()))
		if l.Name != "" {
			fmt.Fprintf(&b, " %s", l.Name)
		}
	}
	if st.CurrentLimit != nil || st.LimitRemaining != 0 {
		fmt.Fprintf(&b, " r=%d", st.LimitRemaining)
	}
	if st.DurationUntilReset != nil {
		d := st.DurationUntilReset.AsDuration()
		if d%time.Second == 0 {
			fmt.Fprintf(&b, " t=%d", d/time.Second)
		} else {
			fmt.Fprintf(&b, " t=%v", d)
		}
	}
	return b.String()
}

func showAll(resp *pb.RateLimitResponse) string {
	parts := []string{map[pb.RateLimitResponse_Code]string{pb.RateLimitResponse_OK: "OK", pb.RateLimitResponse_OVER_LIMIT: "OVER"}[resp.OverallCode] + ":"}
	for _, st := range resp.Statuses {
		parts = append(parts, show(st))
	}
	return strings.Join(parts, " | ")
}

// step is one request at an instant after t0.
type step struct {
	at   time.Duration
	req  *pb.RateLimitRequest
	want string // showAll of the response
}

func run(t *testing.T, svc *Service, clk *clocktest.Clock, steps []step) {
	t.Helper()
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		resp, err := svc.ShouldRateLimit(context.Background(), s.req)
		if err != nil {
			t.Errorf("step %d: got error %v, want %s", i, err, s.want)
			continue
		}
		if got := showAll(resp); got != s.want {
			t.Errorf("step %d: got\n\t%s\nwant\n\t%s", i, got, s.want)
		}
	}
}
