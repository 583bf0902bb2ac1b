package rueidis_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/rueidis"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/scriptstore/storetest"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	spigotrueidis "github.com/spigot-go/spigot/store/rueidis"
)

func TestStore(t *testing.T) { storetest.Run(t, harness()) }

func BenchmarkDo(b *testing.B) { storetest.BenchmarkDo(b, harness()) }

// harness gives the shared tests rueidis clients, which can send
// read-only commands to a replica and whose calls return when their
// context ends.
func harness() storetest.Harness {
	h := storetest.Harness{Name: "rueidis", Kind: testserver.Redis, Routes: true, Detached: true}
	h.ServerError = func(err error) bool { _, ok := errors.AsType[*rueidis.RedisError](err); return ok }
	h.Dial = dial
	return h
}

// dial returns a rueidis client of addr set as o says, for the harness.
func dial(tb testing.TB, addr string, o storetest.Options) storetest.Client {
	var opt rueidis.ClientOption
	storetest.SetOptions(&opt, addr, o)
	client, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatalf("rueidis.NewClient(%s): %v", addr, err)
	}
	tb.Cleanup(client.Close)
	var c storetest.Client
	c.New = func(opts ...store.Option) spigot.Store { return spigotrueidis.New(client, opts...) }
	c.Do = func(ctx context.Context, args ...string) error {
		_, err := client.Do(ctx, client.B().Arbitrary(args...).Build()).ToAny() // the reply read whole
		return err
	}
	return c
}
