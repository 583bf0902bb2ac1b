package store_test

import (
	"fmt"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// A limit's state lives under one key per limit and caller's key. A key
// with a '{' gets an empty hash tag in front, so that it never chooses its
// Redis Cluster slot; TaggedKey, for trusted keys (WithKeyHashTags), lets
// a tag put one user's limits in one slot.
func ExampleKey() {
	login := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	fmt.Println(store.Key(store.DefaultPrefix, login, "203.0.113.7"))
	fmt.Println(store.Key(store.DefaultPrefix, login, "{user:42}"))
	fmt.Println(store.TaggedKey(store.DefaultPrefix, login, "{user:42}"))
	fmt.Println(store.Key("myapp:", login, "alice"))
	// Output:
	// spigot:login:203.0.113.7
	// spigot:login:{}{user:42}
	// spigot:login:{user:42}
	// myapp:login:alice
}
