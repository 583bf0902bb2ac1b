package store_test

// These tests cover the pure parts of package store: key naming here and
// prefixes in errors_test.go. The script's arguments and replies are
// internal/wire's tests; what the script does on a server is in
// servers_test.go and deploy_test.go.

import (
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

func TestKey(t *testing.T) {
	login := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	api := spigot.MustBucket("api", 100, spigot.PerSecond(10))
	tagged := spigot.MustBucket("{login}", 20, spigot.Per(1, 3*time.Second))
	for i, c := range []struct {
		prefix string
		b      spigot.Limit
		key    string
		want   string
	}{
		{store.DefaultPrefix, login, "alice", "spigot:login:alice"},
		{store.DefaultPrefix, api, "alice", "spigot:api:alice"},
		{store.DefaultPrefix, login, "", "spigot:login:"},
		{store.DefaultPrefix, login, "{user:42}:ip", "spigot:login:{}{user:42}:ip"},
		{store.DefaultPrefix, login, "{", "spigot:login:{}{"},
		{store.DefaultPrefix, login, "}{x}", "spigot:login:{}}{x}"},
		{store.DefaultPrefix, login, "}", "spigot:login:}"},
		{store.DefaultPrefix, tagged, "{x}", "spigot:{login}:{}{x}"},
		{store.DefaultPrefix, login, "a:b:c", "spigot:login:a:b:c"},
		{store.DefaultPrefix, login, "203.0.113.7", "spigot:login:203.0.113.7"},
		{"app1:", login, "alice", "app1:login:alice"},
		{"{app1}", login, "alice", "{app1}login:alice"},
		{"", login, "alice", "login:alice"},
		{"", login, "", "login:"},
	} {
		if got := store.Key(c.prefix, c.b, c.key); got != c.want {
			t.Errorf("step %d: Key(%q, %v, %q) = %q; want %q", i, c.prefix, c.b, c.key, got, c.want)
		}
	}
	if got := store.TaggedKey(store.DefaultPrefix, login, "{user:42}:ip"); got != "spigot:login:{user:42}:ip" {
		t.Errorf("TaggedKey: got %q; want the key as it is", got)
	}
	if store.DefaultPrefix != "spigot:" {
		t.Errorf("DefaultPrefix = %q; want %q", store.DefaultPrefix, "spigot:")
	}
}

// FuzzKeySlot: whatever the key, Key's name is hashed whole or by the
// limit's own tag, never by a tag the key chose; and two keys never share
// a name.
func FuzzKeySlot(f *testing.F) {
	for _, k := range []string{"", "a", "{a}", "}{a}", "{}", "{{a}}", "a{b}c", "{", "}"} {
		f.Add(k, k+"x")
	}
	limits := []spigot.Limit{
		spigot.MustBucket("login", 1, spigot.PerSecond(1)),
		spigot.MustBucket("{login}", 1, spigot.PerSecond(1)),
		spigot.MustBucket("a{}b", 1, spigot.PerSecond(1)),
	}
	f.Fuzz(func(t *testing.T, k1, k2 string) {
		for _, l := range limits {
			n1, n2 := store.Key(store.DefaultPrefix, l, k1), store.Key(store.DefaultPrefix, l, k2)
			if k1 != k2 && n1 == n2 {
				t.Fatalf("keys %q and %q of %v share the name %q", k1, k2, l, n1)
			}
			// Redis Cluster's rule: the text between the first '{' and
			// the next '}', when there is some, or else the whole name.
			head := store.DefaultPrefix + l.Name() + ":"
			if i := strings.IndexByte(n1, '{'); i >= 0 {
				if j := strings.IndexByte(n1[i+1:], '}'); j > 0 && i+1+j >= len(head) {
					t.Fatalf("the name %q of key %q is hashed by the tag %q, which the key chose", n1, k1, n1[i+1:i+1+j])
				}
			}
		}
	})
}
