package valkey_test

import (
	"context"
	"errors"
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/scriptstore/storetest"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	spigotvalkey "github.com/spigot-go/spigot/store/valkey"
)

// harness gives the shared tests valkey-go clients.
var harness = storetest.Harness{
	Name:     "valkey",
	Kind:     testserver.Valkey,
	Routes:   true,
	Detached: true,
	Dial: func(tb testing.TB, addr string, o storetest.Options) storetest.Client {
		var opt valkey.ClientOption
		storetest.SetOptions(&opt, addr, o)
		c, err := valkey.NewClient(opt)
		if err != nil {
			tb.Fatalf("valkey.NewClient(%v): %v", opt.InitAddress, err)
		}
		tb.Cleanup(c.Close)
		return storetest.Client{
			New: func(opts ...store.Option) spigot.Store { return spigotvalkey.New(c, opts...) },
			Do: func(ctx context.Context, args ...string) error {
				_, err := c.Do(ctx, c.B().Arbitrary(args...).Build()).ToAny()
				return err
			},
		}
	},
	ServerError: func(err error) bool {
		var e *valkey.ValkeyError
		return errors.As(err, &e)
	},
}

func TestStore(t *testing.T) { storetest.Run(t, harness) }

func BenchmarkDo(b *testing.B) { storetest.BenchmarkDo(b, harness) }
