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

// Apply is the whole model as a pure function: a store for any database
// only has to read a State, call Apply and write the result atomically.
func ExampleApply() {
	api := spigot.MustBucket("api", 2, spigot.PerSecond(1))
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	var st store.State // the zero State is a full bucket
	for _, step := range []struct {
		at time.Duration
		op spigot.Op
	}{
		{0, spigot.Op{Limit: api, Key: "k", N: 1}},
		{0, spigot.Op{Limit: api, Key: "k", N: 1}},
		{0, spigot.Op{Limit: api, Key: "k", N: 1}},
		{1500 * time.Millisecond, spigot.Op{Limit: api, Key: "k", Action: spigot.TakeUpTo, N: 5}},
		{1500 * time.Millisecond, spigot.Op{Limit: api, Key: "k", Action: spigot.Refund, N: 1}},
	} {
		d, _ := store.Apply(step.op, &st, t0.Add(step.at)) // an error only for an invalid op
		fmt.Printf("t0+%v %v %d: allowed %v, %+v\n", step.at, step.op.Action, step.op.N, d.Allowed(), d)
	}
	// Output:
	// t0+0s Take 1: allowed true, {N:1 Remaining:1 RetryAfter:0s ResetAfter:1s RefillAfter:1s Delay:0s}
	// t0+0s Take 1: allowed true, {N:1 Remaining:0 RetryAfter:0s ResetAfter:2s RefillAfter:1s Delay:0s}
	// t0+0s Take 1: allowed false, {N:0 Remaining:0 RetryAfter:1s ResetAfter:2s RefillAfter:1s Delay:0s}
	// t0+1.5s TakeUpTo 5: allowed true, {N:1 Remaining:0 RetryAfter:0s ResetAfter:1.5s RefillAfter:500ms Delay:0s}
	// t0+1.5s Refund 1: allowed true, {N:1 Remaining:1 RetryAfter:0s ResetAfter:500ms RefillAfter:500ms Delay:0s}
}
