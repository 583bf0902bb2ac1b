package rls

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spigot-go/spigot"
	"go.yaml.in/yaml/v3"
)

// ErrConfig is wrapped by every error of LoadDir and Load: a file that is
// not valid YAML, a key no version of the format knows, a descriptor that
// the format refuses.
var ErrConfig = errors.New("rls: invalid config")

// A Unit is the period of a rate limit, as envoyproxy/ratelimit fixes it:
// a month is 30 days and a year 365, whatever the calendar says.
type Unit int32

// The units, numbered as the v3 protocol numbers them.
const (
	Second Unit = 1
	Minute Unit = 2
	Hour   Unit = 3
	Day    Unit = 4
	Month  Unit = 5
	Year   Unit = 6
	Week   Unit = 7
)

var unitNames = map[string]Unit{
	"SECOND": Second, "MINUTE": Minute, "HOUR": Hour, "DAY": Day,
	"WEEK": Week, "MONTH": Month, "YEAR": Year,
}

// Duration returns the unit's length: 1 s, 60 s, 1 h, 24 h, 7 days,
// 30 days or 365 days, and 0 for a number that is no unit.
func (u Unit) Duration() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 30 * day
	case Year:
		return 365 * day
	}
	return 0
}

// String returns the unit's name in lower case, as a config writes it.
func (u Unit) String() string {
	for n, v := range unitNames {
		if v == u {
			return strings.ToLower(n)
		}
	}
	return "unit(" + strconv.Itoa(int(u)) + ")"
}

// An Algorithm is how a rate limit counts: spigot's addition to the format
// (the rate_limit key algorithm). The default, FixedWindow, is
// envoyproxy/ratelimit's own.
type Algorithm string

// The algorithms.
const (
	FixedWindow   Algorithm = "fixed-window"
	TokenBucket   Algorithm = "token-bucket"
	SlidingWindow Algorithm = "sliding-window"
	SlidingLog    Algorithm = "sliding-log"
	LeakyBucket   Algorithm = "leaky-bucket"
)

var algorithmShort = map[Algorithm]string{
	FixedWindow: "fw", TokenBucket: "tb", SlidingWindow: "sw", SlidingLog: "sl", LeakyBucket: "lb",
}

// Charging is what a domain charges when a request names several
// descriptors: spigot's addition to the format (the root key charging).
type Charging string

// The ways of charging.
const (
	// ChargeEnvoy is envoyproxy/ratelimit's default: every descriptor
	// that matched a limit is charged its hits, whether or not the
	// request is refused (a refused hit uses up what its limit had left),
	// and a descriptor named twice is charged twice.
	ChargeEnvoy Charging = "envoy"
	// ChargeStopWhenOver is envoyproxy/ratelimit with
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: each limit is first read;
	// when none would go over, every one is charged; when some would, only
	// those are charged (and refuse), and the others are not.
	ChargeStopWhenOver Charging = "stop-when-over"
	// ChargeAllOrNothing is spigot's: the enforced limits are charged in
	// one atomic step, and none of them is charged when one refuses.
	ChargeAllOrNothing Charging = "all-or-nothing"
)

// RateLimit is the rate limit of one descriptor of a Config. It is
// immutable once loaded.
type RateLimit struct {
	// RequestsPerUnit is what the limit admits in each Unit; 0 refuses
	// every hit.
	RequestsPerUnit uint32
	Unit            Unit
	// Unlimited marks a descriptor that is never limited (Unit is 0).
	Unlimited bool
	// Name is the limit's name, which other limits' Replaces may name.
	Name     string
	Replaces []string
	// Algorithm and Capacity are spigot's: Capacity is a bucket's, and
	// RequestsPerUnit for every other algorithm.
	Algorithm Algorithm
	Capacity  int64
	// Shared is spigot's shared_limit: the name of a limit that Go
	// services keep in the same store (an httplimit or grpclimit rule's),
	// whose key is then the value of the request's last entry, as theirs
	// is, so that both charge one limit.
	Shared string

	ShadowMode     bool
	QuotaMode      bool
	DetailedMetric bool

	// path names the descriptor in errors and fields: domain.key_value...
	path  string
	limit spigot.Limit // the zero Limit when RequestsPerUnit is 0 or Unlimited
	over  spigot.Limit // a fixed window's over-marker (see Service.charge)
}

// Path returns the descriptor's name, as envoyproxy/ratelimit names it in
// its statistics: the domain and each level's key, or key_value, joined
// by dots.
func (r *RateLimit) Path() string { return r.path }

// descriptor is one level of a domain's tree.
type descriptor struct {
	key, value     string
	limit          *RateLimit
	valueToMetric  bool
	shareThreshold bool
	children
}

// children are a level's descriptors: by exact key and value (the value
// "" for a key-only descriptor), and the wildcards, in the order listed.
type children struct {
	exact     map[[2]string]*descriptor
	wildcards []*descriptor
}

type domain struct {
	name     string
	file     string
	charging Charging
	children
}

// Config is a set of domains loaded from YAML files in the format of
// envoyproxy/ratelimit. It is immutable, and safe for concurrent use. The
// zero Config (and a nil *Config) has no domain: every descriptor is
// unmatched.
type Config struct {
	domains map[string]*domain
}

// Domains returns the names of the config's domains, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	names := make([]string, 0, len(c.domains))
	for n := range c.domains {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Charging returns how the domain charges (ChargeEnvoy for a domain the
// config lacks).
func (c *Config) Charging(domainName string) Charging {
	if c != nil {
		if d := c.domains[domainName]; d != nil {
			return d.charging
		}
	}
	return ChargeEnvoy
}

// LoadDir loads every file of dir whose name ends in .yaml or .yml (not
// those of its subdirectories, nor names that start with a dot), in the
// order of their names, as Load does.
func LoadDir(dir string) (*Config, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, configError(err)
	}
	return Load(os.DirFS(dir))
}

// Load loads every file at the root of fsys whose name ends in .yaml or
// .yml (but names that start with a dot), in the order of their names:
// one domain a file, as envoyproxy/ratelimit reads them. A domain in two
// files is refused. The error names the file, the line and the descriptor.
func Load(fsys fs.FS) (*Config, error) {
	files, err := readFiles(fsys)
	if err != nil {
		return nil, err
	}
	return load(files)
}

// readFiles reads the config files of fsys's top directory, in the order
// of their names (fs.ReadDir's).
func readFiles(fsys fs.FS) ([]file, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, configError(err)
	}
	var files []file
	for _, e := range entries {
		if !configFile(e.Name()) || e.IsDir() {
			continue
		}
		data, err := fs.ReadFile(fsys, e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the directory was read
		}
		if err != nil {
			return nil, configError(err)
		}
		files = append(files, file{e.Name(), data})
	}
	return files, nil
}

func configError(err error) error { return fmt.Errorf("%w: %w", ErrConfig, err) }

func configFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	ext := path.Ext(name)
	return ext == ".yaml" || ext == ".yml"
}

// loader holds what errors name.
type loader struct {
	file string
}

func (l *loader) errorf(n *yaml.Node, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if n != nil && n.Line > 0 {
		return fmt.Errorf("%w: %s:%d: %s", ErrConfig, l.file, n.Line, msg)
	}
	return fmt.Errorf("%w: %s: %s", ErrConfig, l.file, msg)
}

// The keys of envoyproxy/ratelimit's format. As it does, a file may use
// any of them at any level (where one does not belong, it is ignored);
// every other key is refused.
var envoyKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true,
	"unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true,
	"share_threshold": true,
}

// where spigot's own keys belong.
const (
	atRoot = iota
	atDescriptor
	atRateLimit
	elsewhere
)

var spigotKeys = map[string]int{"charging": atRoot, "algorithm": atRateLimit, "capacity": atRateLimit, "shared_limit": atRateLimit}

// check refuses what envoyproxy/ratelimit refuses before it reads a
// file: a key that is not a string or not of the format, a list of
// anything but mappings, a value that is not a string, an integer, a
// boolean or null. level says where spigot's keys may be.
func (l *loader) check(n *yaml.Node, level int) error {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := deref(n.Content[i]), n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				return l.errorf(k, "config error, key is not of type string: %v", k.Value)
			}
			if line, dup := seen[k.Value]; dup {
				return l.errorf(k, "config error, key '%s' is given twice (also on line %d)", k.Value, line)
			}
			seen[k.Value] = k.Line
			if !envoyKeys[k.Value] {
				if at, ok := spigotKeys[k.Value]; !ok || at != level {
					return l.errorf(k, "config error, unknown key '%s'", k.Value)
				}
			}
			next := elsewhere
			switch k.Value {
			case "descriptors":
				next = atDescriptor
			case "rate_limit":
				if level == atDescriptor {
					next = atRateLimit
				}
			}
			if err := l.check(v, next); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			if deref(e).Kind != yaml.MappingNode {
				return l.errorf(e, "config error, yaml file contains list of type other than map: %v", deref(e).Value)
			}
			if err := l.check(e, level); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str", "!!int", "!!bool", "!!null":
		default:
			return l.errorf(n, "error checking config: %q is a %s, not a string, an integer or a boolean", n.Value, strings.TrimPrefix(n.Tag, "!!"))
		}
	}
	return nil
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func (c *Config) add(file string, data []byte) error {
	l := &loader{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return l.errorf(nil, "error loading config file: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	root := &yaml.Node{Kind: yaml.MappingNode}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = deref(doc.Content[0])
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		root = &yaml.Node{Kind: yaml.MappingNode}
	}
	if root.Kind != yaml.MappingNode {
		return l.errorf(root, "error loading config file: the file is not a mapping")
	}
	if err := l.check(root, atRoot); err != nil {
		return err
	}
	d := &domain{file: file, charging: ChargeEnvoy}
	var descs *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i].Value, deref(root.Content[i+1])
		switch k {
		case "domain":
			s, err := l.str(v)
			if err != nil {
				return err
			}
			d.name = s
		case "descriptors":
			descs = v
		case "charging":
			s, err := l.str(v)
			if err != nil {
				return err
			}
			switch ch := Charging(s); ch {
			case ChargeEnvoy, ChargeStopWhenOver, ChargeAllOrNothing:
				d.charging = ch
			default:
				return l.errorf(v, "invalid charging '%s': want envoy, stop-when-over or all-or-nothing", s)
			}
		}
	}
	if d.name == "" {
		return l.errorf(nil, "config file cannot have empty domain")
	}
	if prev, ok := c.domains[d.name]; ok {
		return l.errorf(nil, "duplicate domain '%s' in config file (also in %s)", d.name, prev.file)
	}
	if err := l.descriptors(&d.children, d.name, descs); err != nil {
		return err
	}
	c.domains[d.name] = d
	return nil
}

func (l *loader) str(v *yaml.Node) (string, error) {
	v = deref(v)
	if v.Kind != yaml.ScalarNode {
		return "", l.errorf(v, "error loading config file: want a string, not a %s", kindName(v))
	}
	if v.Tag == "!!null" {
		return "", nil
	}
	return v.Value, nil
}

func (l *loader) boolean(v *yaml.Node) (bool, error) {
	v = deref(v)
	if v.Kind == yaml.ScalarNode {
		// The booleans of YAML 1.1, which envoyproxy/ratelimit's parser reads.
		switch v.Value {
		case "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "true", "True", "TRUE":
			return true, nil
		case "n", "N", "no", "No", "NO", "off", "Off", "OFF", "false", "False", "FALSE":
			return false, nil
		}
		if v.Tag == "!!null" {
			return false, nil
		}
	}
	return false, l.errorf(v, "error loading config file: %q is not a boolean", v.Value)
}

func kindName(v *yaml.Node) string {
	switch v.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "scalar"
}

// descriptors loads a list of descriptors into level, whose path is parent.
func (l *loader) descriptors(level *children, parent string, list *yaml.Node) error {
	if list == nil {
		return nil
	}
	list = deref(list)
	if list.Kind == yaml.ScalarNode && list.Tag == "!!null" {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		return l.errorf(list, "error loading config file: descriptors: want a list, not a %s", kindName(list))
	}
	level.exact = map[[2]string]*descriptor{}
	for _, n := range list.Content {
		n = deref(n)
		d := &descriptor{}
		var rl, sub *yaml.Node
		var shadow, quota, detailed bool
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, deref(n.Content[i+1])
			var err error
			switch k {
			case "key":
				d.key, err = l.str(v)
			case "value":
				d.value, err = l.str(v)
			case "rate_limit":
				rl = v
			case "descriptors":
				sub = v
			case "shadow_mode":
				shadow, err = l.boolean(v)
			case "quota_mode":
				quota, err = l.boolean(v)
			case "detailed_metric":
				detailed, err = l.boolean(v)
			case "value_to_metric":
				d.valueToMetric, err = l.boolean(v)
			case "share_threshold":
				d.shareThreshold, err = l.boolean(v)
			}
			if err != nil {
				return err
			}
		}
		if d.key == "" {
			return l.errorf(n, "descriptor has empty key (under '%s')", parent)
		}
		final := d.key
		if d.value != "" {
			final += "_" + d.value
		}
		p := parent + "." + final
		id := [2]string{d.key, d.value}
		if level.exact[id] != nil {
			return l.errorf(n, "duplicate descriptor composite key '%s'", p)
		}
		if rl != nil && !(rl.Kind == yaml.ScalarNode && rl.Tag == "!!null") {
			r, err := l.rateLimit(rl, p)
			if err != nil {
				return err
			}
			r.ShadowMode, r.QuotaMode, r.DetailedMetric = shadow, quota, detailed
			d.limit = r
		}
		wildcard := strings.HasSuffix(final, "*")
		if d.shareThreshold && !wildcard {
			return l.errorf(n, "descriptor '%s': share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", p, final)
		}
		if err := l.descriptors(&d.children, p, sub); err != nil {
			return err
		}
		level.exact[id] = d
		if wildcard {
			level.wildcards = append(level.wildcards, d)
		}
	}
	return nil
}

func (l *loader) rateLimit(n *yaml.Node, p string) (*RateLimit, error) {
	if n.Kind != yaml.MappingNode {
		return nil, l.errorf(n, "descriptor '%s': rate_limit: want a mapping, not a %s", p, kindName(n))
	}
	r := &RateLimit{path: p, Algorithm: FixedWindow}
	var unit string
	var capacity *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, deref(n.Content[i+1])
		var err error
		switch k {
		case "requests_per_unit":
			if v.Tag == "!!null" {
				break
			}
			if v.Tag != "!!int" {
				return nil, l.errorf(v, "descriptor '%s': requests_per_unit %q is not an integer", p, v.Value)
			}
			if err := v.Decode(&r.RequestsPerUnit); err != nil {
				return nil, l.errorf(v, "descriptor '%s': requests_per_unit %s: want an integer from 0 to %d", p, v.Value, uint32(1<<32-1))
			}
		case "unit":
			unit, err = l.str(v)
		case "unlimited":
			r.Unlimited, err = l.boolean(v)
		case "name":
			r.Name, err = l.str(v)
		case "replaces":
			if v.Tag == "!!null" {
				break
			}
			if v.Kind != yaml.SequenceNode {
				return nil, l.errorf(v, "descriptor '%s': replaces: want a list, not a %s", p, kindName(v))
			}
			for _, e := range v.Content {
				e = deref(e)
				name := ""
				for j := 0; j+1 < len(e.Content); j += 2 {
					if e.Content[j].Value == "name" {
						if name, err = l.str(e.Content[j+1]); err != nil {
							return nil, err
						}
					}
				}
				r.Replaces = append(r.Replaces, name)
			}
		case "algorithm":
			var s string
			if s, err = l.str(v); err == nil {
				a := Algorithm(s)
				if _, ok := algorithmShort[a]; !ok {
					return nil, l.errorf(v, "descriptor '%s': invalid algorithm '%s': want fixed-window, token-bucket, sliding-window, sliding-log or leaky-bucket", p, s)
				}
				r.Algorithm = a
			}
		case "capacity":
			capacity = v
		case "shared_limit":
			if r.Shared, err = l.str(v); err == nil && r.Shared == "" {
				return nil, l.errorf(v, "descriptor '%s': shared_limit: want a limit's name", p)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	u, valid := unitNames[strings.ToUpper(unit)]
	if r.Unlimited {
		if valid {
			return nil, l.errorf(n, "descriptor '%s': should not specify rate limit unit when unlimited", p)
		}
	} else if !valid {
		return nil, l.errorf(n, "descriptor '%s': invalid rate limit unit '%s'", p, unit)
	} else {
		r.Unit = u
	}
	for _, name := range r.Replaces {
		if name == "" {
			return nil, l.errorf(n, "descriptor '%s': should not have an empty replaces entry", p)
		}
		if name == r.Name {
			return nil, l.errorf(n, "descriptor '%s': replaces should not contain name of same descriptor", p)
		}
	}
	r.Capacity = int64(r.RequestsPerUnit)
	if capacity != nil && capacity.Tag != "!!null" {
		if r.Algorithm != TokenBucket && r.Algorithm != LeakyBucket {
			return nil, l.errorf(capacity, "descriptor '%s': capacity is a bucket's: it needs algorithm token-bucket or leaky-bucket", p)
		}
		if capacity.Tag != "!!int" || capacity.Decode(&r.Capacity) != nil || r.Capacity < 0 {
			return nil, l.errorf(capacity, "descriptor '%s': capacity %q: want an integer of at least 0", p, capacity.Value)
		}
	}
	if r.Shared != "" && r.Unlimited {
		return nil, l.errorf(n, "descriptor '%s': shared_limit: an unlimited descriptor has no limit to share", p)
	}
	if !r.Unlimited && r.RequestsPerUnit > 0 {
		lim, err := newLimit(r.Algorithm, r.RequestsPerUnit, r.Unit, r.Capacity, r.Shared)
		if err != nil {
			return nil, l.errorf(n, "descriptor '%s': %v", p, err)
		}
		r.limit, r.over = lim, overMarker(r.Algorithm, r.Unit, lim.Name())
	}
	return r, nil
}

// overMarker returns the over-marker of a fixed window of unit u named
// name: a window of one hit per unit, aligned as the window is, under a
// name of its own; the zero Limit for the other algorithms.
func overMarker(a Algorithm, u Unit, name string) spigot.Limit {
	if a != FixedWindow {
		return spigot.Limit{}
	}
	return spigot.Must(spigot.NewFixedWindow("rls-over-"+name, spigot.Per(1, u.Duration()), 0))
}

// newLimit returns the spigot.Limit of a rate limit of rpu > 0 requests
// per unit. Limits of one algorithm and unit share a name, and so share a
// key's state (as envoyproxy/ratelimit's counters do, whose keys name the
// window but not the limit).
func newLimit(a Algorithm, rpu uint32, u Unit, capacity int64, shared string) (spigot.Limit, error) {
	name := "rls-" + algorithmShort[a] + "-" + u.String()
	if shared != "" {
		name = shared
	}
	rate := spigot.Per(int64(rpu), u.Duration())
	switch a {
	case TokenBucket:
		return spigot.NewBucket(name, capacity, rate)
	case LeakyBucket:
		return spigot.NewLeakyBucket(name, capacity, rate)
	case SlidingWindow:
		return spigot.NewSlidingWindow(name, rate)
	case SlidingLog:
		return spigot.NewSlidingLog(name, rate)
	}
	return spigot.NewFixedWindow(name, rate, 0)
}
