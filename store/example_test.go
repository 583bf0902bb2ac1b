package store_test

import (
	"fmt"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// A bucket's state lives under one key per bucket and caller's key. A
// {hash tag} in the key chooses the Redis Cluster slot, so that one user's
// buckets can share a slot.
func ExampleKey() {
	login := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	fmt.Println(store.Key(store.DefaultPrefix, login, "203.0.113.7"))
	fmt.Println(store.Key(store.DefaultPrefix, login, "{user:42}"))
	fmt.Println(store.Key("myapp:", login, "alice"))
	// Output:
	// spigot:login:203.0.113.7
	// spigot:login:{user:42}
	// myapp:login:alice
}

// A store sends EVALSHA store.SHA1 with one key and the arguments of Args,
// and decodes the script's reply: allowed, remaining, retry-after and
// reset-after in milliseconds, -1 meaning never.
func ExampleDecodeAcquire() {
	login := spigot.MustBucket("login", 20, spigot.Per(1, 3*time.Second))
	args := store.NewArgs(nil) // nil: the script reads the server's TIME
	fmt.Printf("EVALSHA <store.SHA1> 1 %s %q\n", store.Key(store.DefaultPrefix, login, "alice"), args.Acquire(login, 1))

	for _, reply := range []any{
		[]any{int64(1), int64(19), int64(0), int64(3000)},
		[]any{int64(0), int64(0), int64(2500), int64(60000)},
		[]any{int64(0), int64(20), int64(-1), int64(0)},
		"QUEUED", // what a command inside MULTI answers
	} {
		a, err := store.DecodeAcquire(reply)
		if err != nil {
			fmt.Println(err)
			continue
		}
		retry := a.RetryAfter.String()
		if a.RetryAfter == spigot.Never {
			retry = "never"
		}
		fmt.Printf("allowed %v, remaining %d, retry after %s, full after %v\n",
			a.Allowed, a.Remaining, retry, a.ResetAfter)
	}
	// Output:
	// EVALSHA <store.SHA1> 1 spigot:login:alice ["20" "3000000" "1" "1" "" "0"]
	// allowed true, remaining 19, retry after 0s, full after 3s
	// allowed false, remaining 0, retry after 2.5s, full after 1m0s
	// allowed false, remaining 20, retry after never, full after 0s
	// spigot: malformed reply from the script: want an array of 4 integers, got string: QUEUED
}
