package store_test

// These tests cover the pure parts of package store: key naming here and
// prefixes in errors_test.go. The script's arguments and replies are
// internal/wire's tests; what the script does on a server is in
// servers_test.go and deploy_test.go.

import (
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

func TestKey(t *testing.T) {
	login := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	api := spigot.MustBucket("api", 100, spigot.PerSecond(10))
	for i, c := range []struct {
		prefix string
		b      spigot.Limit
		key    string
		want   string
	}{
		{store.DefaultPrefix, login, "alice", "spigot:login:alice"},
		{store.DefaultPrefix, api, "alice", "spigot:api:alice"},
		{store.DefaultPrefix, login, "", "spigot:login:"},
		{store.DefaultPrefix, login, "{user:42}:ip", "spigot:login:{user:42}:ip"},
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
	if store.DefaultPrefix != "spigot:" {
		t.Errorf("DefaultPrefix = %q; want %q", store.DefaultPrefix, "spigot:")
	}
}
