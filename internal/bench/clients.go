package bench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/resp"
	"github.com/spigot-go/spigot/internal/wire"
	"github.com/spigot-go/spigot/store"
	redisstore "github.com/spigot-go/spigot/store/redis"
	rueidisstore "github.com/spigot-go/spigot/store/rueidis"
	valkeystore "github.com/spigot-go/spigot/store/valkey"
)

// A Call sends one request on the i-th key and reports whether the limit
// admitted it.
type Call func(ctx context.Context, i int) (admitted bool, err error)

// NoopScript is the baseline's script: it takes the key and arguments of
// spigot's script and does nothing with them (it admits, with a reply of
// as many integers as spigot's script's), so that what a call costs above
// it is the server's work on the bucket.
var NoopScript = "return {1" + strings.Repeat(",0", wire.Fields-1) + "}"

// NoopSHA1 is NoopScript's name for EVALSHA.
var NoopSHA1 = func() string {
	sum := sha1.Sum([]byte(NoopScript))
	return hex.EncodeToString(sum[:])
}()

// A Client is one client library of a Redis-protocol store: the store on
// it, and the same client sending EVALSHA of a script itself (Raw), with
// the keys and arguments built once: the cheapest call the library
// offers, so that the store's own cost is the difference.
type Client struct {
	// Name is the library's: go-redis, valkey-go, rueidis.
	Name  string
	Store spigot.Store
	// Grouped and Ungrouped are stores on the same client with group
	// commit on and off (WithGroupCommit).
	Grouped, Ungrouped spigot.Store
	// Raw returns the call of EVALSHA of the script named sha on keys[i],
	// with the arguments of a Take of cost from limit on the server's
	// clock, as the store sends it; its reply is decoded as the store
	// decodes spigot's script's.
	Raw func(sha string, limit spigot.Limit, cost int64, keys []string) Call
}

// rawArgs are a raw call's keys and arguments, built once.
type rawArgs struct {
	full    []string   // the names the stores give keys
	keysets [][]string // each alone, for go-redis
	argv    wire.Argv
	args    []any
}

func newRawArgs(limit spigot.Limit, cost int64, keys []string) *rawArgs {
	r := &rawArgs{full: make([]string, len(keys)), keysets: make([][]string, len(keys))}
	for i, k := range keys {
		r.full[i] = store.Key(store.DefaultPrefix, limit, k)
		r.keysets[i] = []string{r.full[i]}
	}
	r.argv = wire.NewArgs(nil).Op(spigot.Op{Limit: limit, N: cost})
	r.args = make([]any, len(r.argv))
	for i, a := range r.argv {
		r.args[i] = a
	}
	return r
}

// Clients returns the three client libraries connected to the server, or
// cluster (seed nodes), at addrs with the settings their stores' docs
// advise (go-redis as a ClusterClient when cluster is true), with their
// stores and raw calls, and a func that closes them. The clients are not
// checked: the first call fails if the server is not there.
func Clients(addrs []string, cluster bool) ([]Client, func(), error) {
	var gr goredis.UniversalClient
	if cluster {
		gr = goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, ClusterStateReloadInterval: time.Second})
	} else {
		gr = goredis.NewClient(&goredis.Options{Addr: addrs[0], ContextTimeoutEnabled: true})
	}
	vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		gr.Close()
		return nil, nil, fmt.Errorf("spigot: bench: valkey-go on %v: %w", addrs, err)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		gr.Close()
		vk.Close()
		return nil, nil, fmt.Errorf("spigot: bench: rueidis on %v: %w", addrs, err)
	}
	closeAll := func() {
		gr.Close()
		vk.Close()
		rc.Close()
	}
	return []Client{
		{"go-redis", redisstore.New(gr), redisstore.New(gr, store.WithGroupCommit(true)), redisstore.New(gr, store.WithGroupCommit(false)), func(sha string, limit spigot.Limit, cost int64, keys []string) Call {
			r := newRawArgs(limit, cost, keys)
			return func(ctx context.Context, i int) (bool, error) {
				v, err := gr.EvalSha(ctx, sha, r.keysets[i], r.args...).Slice()
				if err != nil {
					return false, err
				}
				d, err := wire.Decode(v)
				return d.Allowed(), err
			}
		}},
		{"valkey-go", valkeystore.New(vk), valkeystore.New(vk, store.WithGroupCommit(true)), valkeystore.New(vk, store.WithGroupCommit(false)), func(sha string, limit spigot.Limit, cost int64, keys []string) Call {
			r := newRawArgs(limit, cost, keys)
			return func(ctx context.Context, i int) (bool, error) {
				return decodeInts(vk.Do(ctx, vk.B().Evalsha().Sha1(sha).Numkeys(1).Key(r.full[i]).Arg(r.argv[:]...).Build()).ToArray())
			}
		}},
		{"rueidis", rueidisstore.New(rc), rueidisstore.New(rc, store.WithGroupCommit(true)), rueidisstore.New(rc, store.WithGroupCommit(false)), func(sha string, limit spigot.Limit, cost int64, keys []string) Call {
			r := newRawArgs(limit, cost, keys)
			return func(ctx context.Context, i int) (bool, error) {
				return decodeInts(rc.Do(ctx, rc.B().Evalsha().Sha1(sha).Numkeys(1).Key(r.full[i]).Arg(r.argv[:]...).Build()).ToArray())
			}
		}},
	}, closeAll, nil
}

// decodeInts decodes a raw reply of valkey-go or rueidis as the stores
// decode it, without allocating.
func decodeInts[M any, P interface {
	*M
	wire.IntMessage
}](v []M, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, ok := wire.Ints[M, P](v)
	if !ok {
		return false, fmt.Errorf("spigot: bench: EVALSHA replied %d values; want %d integers", len(v), wire.Fields)
	}
	d, err := wire.DecodeInts(n)
	return d.Allowed(), err
}

// Take returns the call of a Take of cost from limit on keys[i] in s.
func Take(s spigot.Store, limit spigot.Limit, cost int64, keys []string) Call {
	return func(ctx context.Context, i int) (bool, error) {
		d, err := s.Do(ctx, spigot.Op{Limit: limit, Key: keys[i], Action: spigot.Take, N: cost})
		return d.Allowed(), err
	}
}

// LoadScripts loads spigot's script and NoopScript on the server at addr,
// so that no call meets a NOSCRIPT reply, and checks that the server
// names them by the SHA-1s that the stores and the raw calls send.
func LoadScripts(addr string) error {
	for _, sc := range []struct{ src, sha string }{{wire.Script(), wire.SHA1()}, {NoopScript, NoopSHA1}} {
		sha, err := resp.Do(addr, "SCRIPT", "LOAD", sc.src)
		if err != nil {
			return fmt.Errorf("spigot: bench: SCRIPT LOAD on %s: %w", addr, err)
		}
		if sha != sc.sha {
			return fmt.Errorf("spigot: bench: SCRIPT LOAD on %s = %q; want %s", addr, sha, sc.sha)
		}
	}
	return nil
}

// ErrDenied is the error of a call that must be admitted and was not.
var ErrDenied = errors.New("spigot: bench: a request that must be admitted was denied")
