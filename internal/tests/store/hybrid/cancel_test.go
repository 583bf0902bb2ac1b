package hybrid_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/hybrid"
	"github.com/spigot-go/spigot/store/memory"
	spigotrueidis "github.com/spigot-go/spigot/store/rueidis"
	spigotvalkey "github.com/spigot-go/spigot/store/valkey"
)

// TestPausedRemote: with a remote on valkey-go or rueidis whose server is
// paused (SIGSTOP: it accepts connections and never answers), every call
// returns by the first of the caller's cancellation and WithTimeout,
// whatever the client is doing then, including connecting again, many
// times, after its connections timed out. A cancelled call returns the
// caller's error; a call that reaches the timeout is decided locally.
func TestPausedRemote(t *testing.T) {
	testserver.SkipShort(t, "pauses a server for seconds")
	// The clients ping every KeepAlive and drop a connection that answers
	// nothing for ConnWriteTimeout; the next call then connects again,
	// and the new connection's handshake meets the same silence. Short,
	// so that the calls below meet many of them.
	const keepAlive, connTimeout = 100 * time.Millisecond, time.Second
	for _, c := range []struct {
		name   string
		kind   testserver.Kind
		remote func(t *testing.T, addr string, dials *atomic.Int32) spigot.Store
	}{
		{"valkey-go", testserver.Valkey, func(t *testing.T, addr string, dials *atomic.Int32) spigot.Store {
			c, err := valkey.NewClient(valkey.ClientOption{
				InitAddress:      []string{addr},
				Dialer:           net.Dialer{KeepAlive: keepAlive},
				ConnWriteTimeout: connTimeout,
				DialCtxFn: func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
					dials.Add(1)
					return d.DialContext(ctx, "tcp", addr)
				},
			})
			if err != nil {
				t.Fatalf("valkey.NewClient: %v", err)
			}
			t.Cleanup(c.Close)
			return spigotvalkey.New(c)
		}},
		{"rueidis", testserver.Redis, func(t *testing.T, addr string, dials *atomic.Int32) spigot.Store {
			c, err := rueidis.NewClient(rueidis.ClientOption{
				InitAddress:      []string{addr},
				Dialer:           net.Dialer{KeepAlive: keepAlive},
				ConnWriteTimeout: connTimeout,
				DialCtxFn: func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
					dials.Add(1)
					return d.DialContext(ctx, "tcp", addr)
				},
			})
			if err != nil {
				t.Fatalf("rueidis.NewClient: %v", err)
			}
			t.Cleanup(c.Close)
			return spigotrueidis.New(c)
		}},
	} {
		t.Run("client="+c.name, func(t *testing.T) {
			srv := testserver.Start(t, c.kind)
			var dials atomic.Int32
			remote := c.remote(t, srv.Addr, &dials)
			// No breaker in the way: it would open at the first failures
			// and keep the calls from the remote. The timeout is what
			// bounds the calls that are not cancelled.
			const timeout = 300 * time.Millisecond
			s := hybrid.New(remote, memory.New(), hybrid.WithTimeout(timeout), hybrid.WithBreaker(1_000_000, time.Hour))
			b := spigot.MustBucket("paused", 1_000, spigot.PerSecond(1))
			take := spigot.Op{Limit: b, Key: "k", N: 1}
			if _, err := remote.Do(t.Context(), take); err != nil { // loads the script
				t.Fatal(err)
			}

			// Seven calls in eight are cancelled at 20 ms; the eighth has
			// no deadline of its own, and WithTimeout ends its remote
			// call. Each must return within bound of the first of the
			// two (of when the cancellation came, however late its timer
			// fired), not counting the time the test process stalled
			// meanwhile on a loaded machine: well before the client's
			// ConnWriteTimeout or the second its handshake can take to
			// give up.
			const (
				cancelAt = 20 * time.Millisecond
				bound    = 250 * time.Millisecond
				calls    = 150 // at least,
				redials  = 10  // and until the client connected again this often
			)
			srv.Pause()
			resumed := false
			defer func() {
				if !resumed {
					srv.Resume()
				}
			}()
			// When a cancellation came, and how long the test had
			// stalled then.
			type mark struct {
				at      time.Time
				stalled time.Duration
			}
			stalls := testserver.MeasureStalls(t)
			before, failed := dials.Load(), 0
			for i := 0; i < calls || dials.Load()-before < redials; i++ {
				if i == 20*calls {
					t.Fatalf("%d calls and the client connected again %d times; want %d", i, dials.Load()-before, redials)
				}
				if failed == 10 {
					t.Fatalf("stopped at call %d after %d failures", i, failed)
				}
				ctx, cancel := context.WithCancel(t.Context())
				end, stalled, cancels := time.Now().Add(timeout), stalls.Stalled(), i%8 != 7
				cancelled := make(chan mark, 1)
				if cancels {
					time.AfterFunc(cancelAt, func() { cancelled <- mark{time.Now(), stalls.Stalled()}; cancel() })
				}
				d, err := s.Do(ctx, take)
				returned := time.Now()
				if cancels {
					m := <-cancelled
					end, stalled = m.at, m.stalled
				}
				late := returned.Sub(end) - (stalls.Stalled() - stalled)
				cancel()
				switch {
				case late > bound:
					failed++
					t.Errorf("call %d returned %v after its %s, the test's stalls aside: %+v, %v; want at most %v", i, late.Round(time.Millisecond),
						map[bool]string{true: "cancellation", false: "timeout"}[cancels], d, err, bound)
				case cancels && !errors.Is(err, context.Canceled) && (err != nil || !d.Allowed()):
					// A remote call may also fail at once (the client
					// failing it with the timeout of a connection another
					// call was opening), and the local store decide.
					failed++
					t.Errorf("call %d, cancelled: got %+v, %v; want an error matching context.Canceled, or the local store's admission", i, d, err)
				case !cancels && (err != nil || !d.Allowed()):
					failed++
					t.Errorf("call %d, timed out: got %+v, %v; want the local store's admission", i, d, err)
				}
			}
			srv.Resume()
			resumed = true
			// The remote answers again: a call or a few may first meet
			// a connection from before the pause.
			for i := 0; ; i++ {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				_, err := remote.Do(ctx, take)
				cancel()
				if err == nil {
					break
				}
				if i == 100 {
					t.Fatalf("remote Take %d after the pause: %v", i, err)
				}
			}
		})
	}
}
