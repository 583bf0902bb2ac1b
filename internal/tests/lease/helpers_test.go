package lease_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/tests/testclient"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store"
	"github.com/spigot-go/spigot/store/redis"
	"github.com/spigot-go/spigot/store/rueidis"
	"github.com/spigot-go/spigot/store/valkey"
)

// clients names the client library of each replica: replica i uses
// clients[i%3], so that three replicas run the three Redis-protocol
// stores side by side.
var clients = []string{"go-redis", "valkey-go", "rueidis"}

// newRemote returns the store of client (one of clients) on the server at
// addr, with prefix and group commit, as the stores' documentation advises.
func newRemote(tb testing.TB, client, addr, prefix string) spigot.Store {
	switch client {
	case "go-redis":
		return redis.New(testclient.GoRedis(tb, addr), store.WithPrefix(prefix), store.WithGroupCommit(true))
	case "valkey-go":
		return valkey.New(testclient.Valkey(tb, addr), store.WithPrefix(prefix), store.WithGroupCommit(true))
	case "rueidis":
		return rueidis.New(testclient.Rueidis(tb, addr), store.WithPrefix(prefix), store.WithGroupCommit(true))
	}
	tb.Fatalf("no client %q", client)
	return nil
}

// prefix returns a key prefix of t's own, as store.CheckPrefix wants it.
func prefix(t *testing.T) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, t.Name()) + ":"
}

// bound returns the most a token bucket with capacity and rate, full at
// first, can let take over elapsed µs: capacity + rate × elapsed.
func bound(capacity int64, rate spigot.Rate, elapsedMicros int64) int64 {
	return capacity + elapsedMicros*rate.Tokens/rate.Period.Microseconds()
}

// untilServerClock calls f, then checks cond and the server's clock every
// few milliseconds of real time, and returns the server's clock once cond
// holds and the clock has reached at (µs). It fails tb if that takes more
// than a minute. The ticker only paces the checks: what ends the wait is
// the state and the server's clock.
func untilServerClock(tb testing.TB, srv *testserver.Server, at int64, cond func() bool) int64 {
	tb.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(time.Minute)
	for {
		if cond() {
			if now := srv.Micros(tb); now >= at {
				return now
			}
		}
		select {
		case <-tick.C:
		case <-giveUp:
			tb.Fatalf("the condition did not hold, or the server's clock did not reach %d µs, within a minute", at)
		}
	}
}

// waitFor waits until cond holds, checking it every few milliseconds, and
// fails tb with what if that takes more than a minute (a hang, not a
// slow machine: every state waited for comes within seconds).
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(time.Minute)
	for !cond() {
		select {
		case <-tick.C:
		case <-giveUp:
			tb.Fatalf("%s: not within a minute", what)
		}
	}
}

// A ledger is a spigot.Store that records, key by key, the tokens the
// store it wraps took (Take and TakeUpTo) and gave back (Refund): what the
// server says a replica has had to spend. It is safe for concurrent use.
type ledger struct {
	spigot.Store
	// onGrant, when not nil, is called with each grant before the call
	// that brought it returns, so before any of its tokens is spent; it is
	// called with the ledger's lock held.
	onGrant func(key string, n int64)
	// onReturn, when not nil, is called with each Refund before it is
	// sent, with no lock held.
	onReturn func(key string, n int64)

	mu      sync.Mutex
	taken   map[string]int64
	given   map[string]int64
	refunds int
}

func newLedger(s spigot.Store) *ledger {
	return &ledger{Store: s, taken: make(map[string]int64), given: make(map[string]int64)}
}

func (l *ledger) record(op spigot.Op, d spigot.Decision) {
	if d.N == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch op.Action {
	case spigot.Take, spigot.TakeUpTo:
		l.taken[op.Key] += d.N
		if l.onGrant != nil {
			l.onGrant(op.Key, d.N)
		}
	case spigot.Refund:
		l.given[op.Key] += d.N
		l.refunds++
	}
}

func (l *ledger) returning(ops ...spigot.Op) {
	if l.onReturn == nil {
		return
	}
	for _, op := range ops {
		if op.Action == spigot.Refund {
			l.onReturn(op.Key, op.N)
		}
	}
}

func (l *ledger) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	l.returning(op)
	d, err := l.Store.Do(ctx, op)
	if err == nil {
		l.record(op, d)
	}
	return d, err
}

func (l *ledger) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	l.returning(ops...)
	err := l.Store.DoMulti(ctx, mode, ops, out)
	for i, op := range ops {
		if out[i].Remaining >= 0 { // a failed op's Decision is Undecided(): nothing moved
			l.record(op, out[i])
		}
	}
	return err
}

// net returns what the store took for key less what it gave back.
func (l *ledger) net(key string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.taken[key] - l.given[key]
}

// total returns what the store took less what it gave back, over every key.
func (l *ledger) total() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for k, v := range l.taken {
		n += v - l.given[k]
	}
	return n
}
