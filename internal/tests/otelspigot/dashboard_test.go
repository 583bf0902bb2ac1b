package otelspigot_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/clock/clocktest"
	"github.com/spigot-go/spigot/otelspigot"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/lease"
	"github.com/spigot-go/spigot/store/memory"
)

// dashboardPath is the Grafana dashboard of docs/grafana.
const dashboardPath = "../../../docs/grafana/spigot.json"

// scrapeLabels are the labels Prometheus adds to every series it scrapes,
// which the exporter does not: a query may group by them.
var scrapeLabels = []string{"instance", "job"}

// TestDashboardNames loads the Grafana dashboard and checks every PromQL
// expression in it against what otelspigot exports through the
// OpenTelemetry Prometheus exporter, as Prometheus names it: every metric
// it names is exported, every label it matches or groups by is one of
// those metrics' labels, every label a legend shows is one the query
// keeps, and every metric otelspigot exports has a panel.
func TestDashboardNames(t *testing.T) {
	series := exportedSeries(t)
	queries := dashboardQueries(t)
	if len(queries) < 10 {
		t.Fatalf("found %d queries in %s, want a dozen or more", len(queries), dashboardPath)
	}
	used := map[string]bool{}
	for _, q := range queries {
		p := parsePromQL(q.expr)
		if len(p.metrics) == 0 {
			t.Errorf("%s: %q names no metric", q.where, q.expr)
		}
		labels := slices.Clone(scrapeLabels)
		for _, m := range p.metrics {
			ls, ok := series[m]
			if !ok {
				t.Errorf("%s: %q names %s, which is not exported (exported: %v)", q.where, q.expr, m, sortedKeys(series))
				continue
			}
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")] = true
			labels = append(labels, ls...)
		}
		for _, l := range p.labels {
			if !slices.Contains(labels, l) {
				t.Errorf("%s: %q uses label %s, which none of %v has (they have %v)", q.where, q.expr, l, p.metrics, labels)
			}
		}
		kept := labels
		if p.outer != nil {
			kept = append(slices.Clone(p.outer), scrapeLabels...)
		}
		for _, l := range q.legend {
			if !slices.Contains(kept, l) {
				t.Errorf("%s: legend shows {{%s}}, which %q does not keep (it keeps %v)", q.where, l, q.expr, kept)
			}
		}
	}
	for name := range series {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if !used[base] {
			t.Errorf("%s is exported, but no panel of the dashboard shows it", base)
		}
	}
}

// exportedSeries returns the name of every series otelspigot exports
// through the Prometheus exporter, with its labels (the instrumentation
// scope's left out): a counter's or a gauge's name, a histogram's with
// _bucket (and the label le), _sum and _count. It registers the
// instruments of Wrap, HybridObserver, ObserveCircuit and LeaseObserver
// on a fresh registry, and drives decisions, store errors, remote errors,
// a breaker that opens and closes, and leases (exportLease), so that
// every instrument has data.
func exportedSeries(t *testing.T) map[string][]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatalf("otelprom.New: %v", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	with := otelspigot.WithMeterProvider(mp)

	ctx := context.Background()
	clk := clocktest.New(t0)
	remote := &switchStore{Store: memory.New(memory.WithClock(clk))}
	h := hybrid.New(remote, memory.New(memory.WithClock(clk)), hybrid.WithClock(clk), hybrid.WithTimeout(time.Minute),
		hybrid.WithBreaker(1, time.Second), hybrid.WithObserver(otelspigot.HybridObserver(with)))
	if _, err := otelspigot.ObserveCircuit(h, with); err != nil {
		t.Fatalf("ObserveCircuit: %v", err)
	}
	s := otelspigot.Wrap(h, with)
	login := spigot.MustBucket("login", 2, spigot.PerMinute(1))
	for i, step := range []struct {
		down    bool
		advance time.Duration
		op      spigot.Op
	}{
		{op: spigot.Op{Limit: login, Key: "10.0.0.1", N: 1}},
		{op: spigot.Op{Limit: login, Key: "10.0.0.1", N: 2}},  // denied
		{op: spigot.Op{Limit: login, Key: "10.0.0.1", N: -1}}, // invalid: a store error
		{down: true, op: spigot.Op{Limit: login, Key: "10.0.0.2", N: 1}},
		{advance: time.Second, op: spigot.Op{Limit: login, Key: "10.0.0.2", N: 1}},
	} {
		remote.down.Store(step.down)
		clk.Advance(step.advance)
		if _, err := s.Do(ctx, step.op); (err != nil) != (step.op.N < 0) {
			t.Fatalf("step %d: got error %v", i, err)
		}
	}
	if got := h.Circuit(); got != hybrid.CircuitClosed {
		t.Fatalf("got circuit %v, want closed again", got)
	}
	exportLease(t, with)

	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	series := map[string][]string{}
	for _, f := range families {
		name := f.GetName()
		if name == "target_info" {
			continue // the resource's, not otelspigot's
		}
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !strings.HasPrefix(l.GetName(), "otel_scope_") && !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			series[name+"_bucket"] = append(slices.Clone(labels), "le")
			series[name+"_sum"] = labels
			series[name+"_count"] = labels
		default:
			series[name] = labels
		}
	}
	// What the dashboard relies on, whatever else is exported.
	for _, name := range []string{
		"spigot_decisions_total", "spigot_store_errors_total", "spigot_hybrid_remote_errors_total",
		"spigot_hybrid_circuit_transitions_total", "spigot_hybrid_circuit", "spigot_hybrid_remote_duration_seconds_bucket",
		"spigot_lease_hits_total", "spigot_lease_takes_total", "spigot_lease_tokens_taken_total", "spigot_lease_tokens_returned_total",
	} {
		if _, ok := series[name]; !ok {
			t.Fatalf("%s is not exported (exported: %v)", name, sortedKeys(series))
		}
	}
	return series
}

// exportLease records LeaseObserver's instruments with opts: a lease
// Store over a memory store, on a fake clock of its own, decides a busy
// key's requests from leases, fails a take while its remote is down, and
// loses the tokens its leases hold at a Close while the remote is down
// again, so that every instrument has data, the failed ones error.type.
func exportLease(t *testing.T, opts ...otelspigot.Option) {
	t.Helper()
	ctx := context.Background()
	clk := clocktest.New(t0)
	remote := &switchStore{Store: memory.New(memory.WithClock(clk))}
	s := lease.New(remote, lease.WithClock(clk), lease.WithObserver(otelspigot.LeaseObserver(opts...)))
	api := spigot.MustBucket("api", 10_000, spigot.Per(10_000, time.Hour))
	take := func() error {
		clk.Advance(time.Microsecond)
		_, err := s.Do(ctx, spigot.Op{Limit: api, Key: "tenant-7", N: 1})
		return err
	}
	busy := func(step string) {
		for i := range 100 {
			if err := take(); err != nil {
				t.Fatalf("%s: request %d: %v", step, i, err)
			}
		}
	}
	busy("before the outage")
	remote.down.Store(true)
	failed := false
	for range 1000 { // until the lease is spent
		if failed = take() != nil; failed {
			break
		}
	}
	if !failed {
		t.Fatal("no take failed while the remote was down")
	}
	remote.down.Store(false)
	busy("after the outage")
	remote.down.Store(true)
	if err := s.Close(ctx); !errors.Is(err, errDown) {
		t.Fatalf("Close: got %v, want the refunds' error %v: tokens lost", err, errDown)
	}
}

// switchStore is a remote store that fails while down is set.
type switchStore struct {
	spigot.Store
	down atomic.Bool
}

var errDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (s *switchStore) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	if s.down.Load() {
		return spigot.Decision{}, errDown
	}
	return s.Store.Do(ctx, op)
}

func (s *switchStore) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	if s.down.Load() {
		return errDown
	}
	return s.Store.DoMulti(ctx, mode, ops, out)
}

// A query is one PromQL expression of the dashboard.
type query struct {
	where  string   // the panel's title and the target's refId, or the variable
	expr   string   // the PromQL expression
	legend []string // the labels its legend shows ({{label}})
}

// dashboardQueries returns every PromQL expression of the dashboard: each
// target of each panel (and of the panels in rows), and each variable's
// label_values query, as a selector of its metric and label.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		RefID  string `json:"refId"`
		Expr   string `json:"expr"`
		Legend string `json:"legendFormat"`
	}
	type panel struct {
		Title   string   `json:"title"`
		Type    string   `json:"type"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var d struct {
		Title     string  `json:"title"`
		UID       string  `json:"uid"`
		Panels    []panel `json:"panels"`
		Templates struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("%s: title %q, uid %q: want both", dashboardPath, d.Title, d.UID)
	}
	legendLabel := regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	var qs []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q, target %s: no expr", p.Title, tg.RefID)
					continue
				}
				q := query{where: "panel " + p.Title + "/" + tg.RefID, expr: tg.Expr}
				for _, m := range legendLabel.FindAllStringSubmatch(tg.Legend, -1) {
					q.legend = append(q.legend, m[1])
				}
				qs = append(qs, q)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)
	for _, v := range d.Templates.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
			}
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(q.Query))
		if m == nil {
			t.Errorf("variable %s: query %q: want label_values(metric, label)", v.Name, q.Query)
			continue
		}
		qs = append(qs, query{where: "variable " + v.Name, expr: m[1] + `{` + m[2] + `!=""}`})
	}
	return qs
}

// A promQL is what parsePromQL finds in an expression.
type promQL struct {
	metrics []string // the metrics it selects
	labels  []string // the labels it matches, groups or joins by
	// outer is the labels the outermost aggregation keeps (by), nil if
	// the expression does not end in one.
	outer []string
}

var (
	stringLit   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	matchers    = regexp.MustCompile(`\{([^{}]*)\}`)
	matcherName = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	rangeSel    = regexp.MustCompile(`\[[^\]]*\]`)
	grouping    = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)`)
	identifier  = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	keywords    = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan", "Inf", "NaN"}
)

// parsePromQL finds the metric names and labels of a PromQL expression
// such as Grafana's panels hold: selectors with label matchers, range
// selectors (Grafana's $__rate_interval among them), functions,
// aggregations with by or without, and binary operators with on or
// ignoring. A metric name is an identifier that is neither a function or
// aggregation (followed by a parenthesis), a keyword, a number's exponent,
// nor a Grafana variable ($name).
func parsePromQL(expr string) promQL {
	var p promQL
	e := stringLit.ReplaceAllString(expr, `""`)
	for _, m := range matchers.FindAllStringSubmatch(e, -1) {
		for _, part := range strings.Split(m[1], ",") {
			if n := matcherName.FindStringSubmatch(part); n != nil {
				p.labels = append(p.labels, n[1])
			}
		}
	}
	e = matchers.ReplaceAllString(e, " ")
	e = rangeSel.ReplaceAllString(e, " ")
	groups := grouping.FindAllStringSubmatchIndex(e, -1)
	for i, g := range groups {
		var ls []string
		for _, l := range strings.Split(e[g[4]:g[5]], ",") {
			if l = strings.TrimSpace(l); l != "" {
				ls = append(ls, l)
			}
		}
		p.labels = append(p.labels, ls...)
		// The outermost aggregation's by: the first grouping, when the
		// expression starts with its aggregation.
		if i == 0 && e[g[2]:g[3]] == "by" && regexp.MustCompile(`^\s*[a-z_]+\s*$`).MatchString(e[:g[0]]) {
			p.outer = ls
		}
	}
	e = grouping.ReplaceAllString(e, " ")
	for _, loc := range identifier.FindAllStringIndex(e, -1) {
		name := e[loc[0]:loc[1]]
		before := byte(' ')
		if loc[0] > 0 {
			before = e[loc[0]-1]
		}
		after := strings.TrimLeft(e[loc[1]:], " \t\n")
		switch {
		case before == '$' || before == '.' || (before >= '0' && before <= '9'):
			continue // a variable, or a number's exponent
		case strings.HasPrefix(after, "("):
			continue // a function or an aggregation
		case slices.Contains(keywords, name):
			continue
		}
		if !slices.Contains(p.metrics, name) {
			p.metrics = append(p.metrics, name)
		}
	}
	return p
}

// TestParsePromQL: what parsePromQL finds, step by step.
func TestParsePromQL(t *testing.T) {
	for i, c := range []struct {
		expr    string
		metrics []string
		labels  []string
		outer   []string
	}{
		{`up`, []string{"up"}, nil, nil},
		{`sum by (a, b) (rate(x_total{c="1,2", d=~"$v"}[$__rate_interval]))`, []string{"x_total"}, []string{"c", "d", "a", "b"}, []string{"a", "b"}},
		{`histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m])))`, []string{"h_bucket"}, []string{"le"}, nil},
		{"sum(rate(a{p=~\"x|y\"}[1m]))\n/\nsum(rate(b[1m])) * 1e3", []string{"a", "b"}, []string{"p"}, nil},
		{`max by (instance) (g) > bool 1 and on (job) h offset 5m`, []string{"g", "h"}, []string{"instance", "job"}, []string{"instance"}},
		{`sum without (x) (m)`, []string{"m"}, []string{"x"}, nil},
	} {
		p := parsePromQL(c.expr)
		if !slices.Equal(p.metrics, c.metrics) || !slices.Equal(p.labels, c.labels) || !slices.Equal(p.outer, c.outer) {
			t.Errorf("step %d: %q: got metrics %v, labels %v, outer %v; want %v, %v, %v",
				i, c.expr, p.metrics, p.labels, p.outer, c.metrics, c.labels, c.outer)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestDocNames: the names otelspigot's package doc gives as Prometheus's
// are those the exporter produces, all of them.
func TestDocNames(t *testing.T) {
	src, err := os.ReadFile("../../../otelspigot/otelspigot.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "// # Prometheus\n")
	section, _, ok2 := strings.Cut(section, "// # Traces\n")
	if !ok || !ok2 {
		t.Fatal("otelspigot.go: no section # Prometheus followed by # Traces in the package doc")
	}
	var doc []string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "//\t") {
			doc = append(doc, strings.Fields(strings.TrimPrefix(line, "//\t"))...)
		}
	}
	sort.Strings(doc)
	var want []string
	for name := range exportedSeries(t) {
		if !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") {
			want = append(want, strings.TrimSuffix(name, "_bucket"))
		}
	}
	sort.Strings(want)
	if !slices.Equal(doc, want) {
		t.Errorf("the package doc names %v, the exporter %v", doc, want)
	}
}
