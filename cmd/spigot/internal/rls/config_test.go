package rls

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoadRefuses(t *testing.T) {
	const rl = "\n    rate_limit: {unit: minute, requests_per_unit: 1}"
	cases := []struct {
		name, yaml string
		want       []string // each in the error
	}{
		{"empty domain", "descriptors: []", []string{"f.yaml: config file cannot have empty domain"}},
		{"empty file", "", []string{"f.yaml: config file cannot have empty domain"}},
		{"empty key", "domain: d\ndescriptors:\n  - value: v" + rl, []string{"f.yaml:3: descriptor has empty key (under 'd')"}},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v", []string{"f.yaml:5: duplicate descriptor composite key 'd.k_v'"}},
		{"nested duplicate", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: k\n      - key: k", []string{"f.yaml:6: duplicate descriptor composite key 'd.a.k'"}},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: foo, requests_per_unit: 5}", []string{"f.yaml:4: descriptor 'd.k': invalid rate limit unit 'foo'"}},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 5}", []string{"descriptor 'd.k': invalid rate limit unit ''"}},
		{"unknown unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: unknown, requests_per_unit: 5}", []string{"invalid rate limit unit 'unknown'"}},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: day}", []string{"descriptor 'd.k': should not specify rate limit unit when unlimited"}},
		{"replaces self", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, name: n, replaces: [{name: n}]}", []string{"descriptor 'd.k': replaces should not contain name of same descriptor"}},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, replaces: [{name: }]}", []string{"descriptor 'd.k': should not have an empty replaces entry"}},
		{"bad yaml", "'''", []string{"f.yaml: error loading config file:"}},
		{"misspelled", "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: day}", []string{"f.yaml:4: config error, unknown key 'ratelimit'"}},
		{"misspelled nested", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requestsperunit: 5}", []string{"config error, unknown key 'requestsperunit'"}},
		{"non-string key", "0.25: d", []string{"config error, key is not of type string: 0.25"}},
		{"list of scalars", "domain: d\ndescriptors:\n  - a\n  - b", []string{"config error, yaml file contains list of type other than map: a"}},
		{"float", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1.5}", []string{"f.yaml:4: error checking config"}},
		{"negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: -1}", []string{"descriptor 'd.k': requests_per_unit -1"}},
		{"too many", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 4294967296}", []string{"requests_per_unit 4294967296"}},
		{"not a number", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: lots}", []string{`requests_per_unit "lots" is not an integer`}},
		{"not a boolean", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe", []string{`"maybe" is not a boolean`}},
		{"share_threshold", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true", []string{"descriptor 'd.k_v': share_threshold can only be used with wildcard values (ending with '*'), but found key 'k_v'"}},
		{"not a mapping", "- domain: d", []string{"the file is not a mapping"}},
		{"descriptors not a list", "domain: d\ndescriptors: {key: k}", []string{"descriptors: want a list"}},
		{"rate_limit not a mapping", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: [a]", []string{"list of type other than map"}},
		{"key twice", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day}\n    rate_limit: {unit: day}", []string{"f.yaml:5: config error, key 'rate_limit' is given twice (also on line 4)"}},
		// spigot's keys.
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, algorithm: gcra}", []string{"descriptor 'd.k': invalid algorithm 'gcra'"}},
		{"capacity of a window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, capacity: 5}", []string{"descriptor 'd.k': capacity is a bucket's"}},
		{"negative capacity", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, algorithm: token-bucket, capacity: -5}", []string{`capacity "-5"`}},
		{"log too long", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1001, algorithm: sliding-log}", []string{"descriptor 'd.k': spigot: invalid limit"}},
		{"bad charging", "domain: d\ncharging: sometimes", []string{"invalid charging 'sometimes'"}},
		{"charging misplaced", "domain: d\ndescriptors:\n  - key: k\n    charging: envoy", []string{"unknown key 'charging'"}},
		{"algorithm misplaced", "domain: d\nalgorithm: token-bucket", []string{"unknown key 'algorithm'"}},
		{"capacity misplaced", "domain: d\ndescriptors:\n  - key: k\n    capacity: 3", []string{"unknown key 'capacity'"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Load(mapFS(map[string]string{"f.yaml": c.yaml}))
			if err == nil {
				t.Fatalf("got %v, want an error", cfg.Domains())
			}
			if !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), "rls: invalid config: f.yaml") {
				t.Errorf("got %q, want an ErrConfig naming the file", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q, want %q in it", err, w)
				}
			}
		})
	}
}

func TestLoadAccepts(t *testing.T) {
	cfg, err := Load(mapFS(map[string]string{
		"a.yaml": `
domain: a
unit: ignored where it does not belong, as envoyproxy/ratelimit ignores it
descriptors:
  - key: k
    value: v
    shadow_mode: yes
    detailed_metric: true
    value_to_metric: On
    rate_limit:
      unit: Minute
      requests_per_unit: 0x10
      name: n
  - key: u
    rate_limit:
      unlimited: true
  - key: none
    rate_limit:
  - key: wild*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: a_b
  - key: k_a
    value: b
`,
		"b.yml":        "domain: b\ncharging: all-or-nothing\n",
		".hidden.yaml": "not: yaml: at all",
		"notes.txt":    "not: yaml: at all",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Domains(), []string{"a", "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("domains: got %v, want %v", got, want)
	}
	if cfg.Charging("a") != ChargeEnvoy || cfg.Charging("b") != ChargeAllOrNothing || cfg.Charging("c") != ChargeEnvoy {
		t.Errorf("charging: got %s, %s, %s", cfg.Charging("a"), cfg.Charging("b"), cfg.Charging("c"))
	}
	m := cfg.lookup("a", []Entry{{"k", "v"}})
	if r := m.limit; r == nil || r.RequestsPerUnit != 16 || r.Unit != Minute || !r.ShadowMode || !r.DetailedMetric || r.Name != "n" || r.Path() != "a.k_v" {
		t.Errorf("a.k_v: got %+v", r)
	}
	if r := cfg.lookup("a", []Entry{{"u", "x"}}).limit; r == nil || !r.Unlimited {
		t.Errorf("a.u: got %+v", r)
	}
	if r := cfg.lookup("a", []Entry{{"none", "x"}}).limit; r != nil {
		t.Errorf("a.none: got %+v, want no limit", r)
	}
	if m := cfg.lookup("a", []Entry{{"wildcat", "x"}}); m.limit == nil || !reflect.DeepEqual(m.shared, []string{"wild*"}) {
		t.Errorf("a.wildcat: got %+v", m)
	}
}

func TestLoadDomains(t *testing.T) {
	_, err := Load(mapFS(map[string]string{"a.yaml": "domain: d", "b.yaml": "domain: d"}))
	if err == nil || !strings.Contains(err.Error(), "b.yaml: duplicate domain 'd' in config file (also in a.yaml)") {
		t.Errorf("got %v, want a duplicate domain", err)
	}
	if _, err := LoadDir(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrConfig) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing directory: got %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(basic), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadDir(dir)
	if err != nil || !reflect.DeepEqual(cfg.Domains(), []string{"d"}) {
		t.Errorf("LoadDir: got %v, %v", cfg.Domains(), err)
	}
	var nilConfig *Config
	if nilConfig.Domains() != nil || nilConfig.lookup("d", []Entry{{"k", "v"}}).limit != nil {
		t.Error("a nil Config has domains")
	}
}

func TestUnits(t *testing.T) {
	for u, want := range map[Unit]string{Second: "second", Minute: "minute", Hour: "hour", Day: "day", Week: "week", Month: "month", Year: "year", 0: "unit(0)"} {
		if got := u.String(); got != want {
			t.Errorf("%d: got %s, want %s", u, got, want)
		}
	}
	if Month.Duration() != 30*24*3600e9 || Year.Duration() != 365*24*3600e9 || Unit(9).Duration() != 0 {
		t.Error("durations")
	}
}
