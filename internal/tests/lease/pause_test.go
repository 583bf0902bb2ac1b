package lease_test

// The server paused (SIGSTOP) under three busy replicas: what they admit
// meanwhile comes from the leases they held, every other request fails by
// its deadline, and service resumes with the server.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/lease"
)

// TestServerPaused: three replicas (go-redis, valkey-go, rueidis) × 16
// goroutines take one token at a time from one hot key, each request with
// a deadline of 200ms. Once each replica holds a lease, the server is
// stopped with SIGSTOP; each goroutine goes on until one of its requests
// fails, then waits for the server. While the server is stopped:
//
//   - every failure is the request's deadline (go-redis's: a network
//     timeout), and comes within 2s of it;
//   - each replica admits no more than the tokens the server had granted
//     it and it had not admitted when the server stopped (its leases, and
//     the answers the server sent before it stopped), and so no more than
//     its largest lease (capacity/16) plus the one request whose lease
//     was on its way: capacity/16 + 1.
//
// Once the server runs again each replica admits again; over the whole
// run, on the server's clock, the key admits at most capacity + rate ×
// interval, and each replica no more than the server granted it.
func TestServerPaused(t *testing.T) {
	const (
		replicas   = 3
		goroutines = 16 // at most capacity/16 + 1: see passThrough below
		deadline   = 200 * time.Millisecond
		capacity   = 32000
		maxLease   = capacity / 16
	)
	// The 2s beyond the deadline is the time a loaded machine may take to
	// run a goroutine whose context has expired; the Store itself returns
	// as soon as the context is done.
	const late = 2 * time.Second
	rate := spigot.Per(capacity, time.Second)
	b := spigot.MustBucket("pause", capacity, rate)
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			info, err := srv.Info("server")
			if err != nil {
				t.Fatal(err)
			}
			pid := info["process_id"]
			op := spigot.Op{Limit: b, Key: "hot", N: 1}

			const (
				running = iota
				paused
				resumed
			)
			var (
				phase      atomic.Int32
				resume     = make(chan struct{})
				resumeOnce sync.Once
				stop       atomic.Bool
				ledgers    [replicas]*ledger
				stores     [replicas]*lease.Store
				wins       [replicas][3]atomic.Int64 // admitted, by the phase in which the decision returned
				failedOnce [replicas][goroutines]atomic.Bool
				fails      [3]atomic.Int64 // failures, by phase
				wrongErr   atomic.Pointer[error]
				longest    atomic.Int64 // the longest failed call beyond its deadline, in ns
				wg         sync.WaitGroup
			)
			start := srv.Micros(t)
			for i := range replicas {
				ledgers[i] = newLedger(newRemote(t, clients[i], srv.Addr, prefix(t)))
				stores[i] = lease.New(ledgers[i])
				for g := range goroutines {
					wg.Go(func() {
						for !stop.Load() {
							if phase.Load() == paused && failedOnce[i][g].Load() {
								<-resume
								continue
							}
							ctx, cancel := context.WithTimeout(context.Background(), deadline)
							d, err := stores[i].Do(ctx, op)
							over := time.Since(deadlineOf(ctx))
							cancel()
							p := phase.Load() // the phase in which the call returned
							if err != nil {
								if fails[p].Add(1) == 1 {
									t.Logf("phase %d: first failure: %v (%v past the deadline)", p, err, over)
								}
								if p == paused {
									if !isTimeout(err) {
										wrongErr.CompareAndSwap(nil, &err)
									}
									if over > time.Duration(longest.Load()) {
										longest.Store(int64(over))
									}
									failedOnce[i][g].Store(true)
								}
								continue
							}
							if d.Allowed() {
								wins[i][p].Add(1)
							}
						}
					})
				}
			}
			t.Cleanup(func() { // when the test ends early
				stop.Store(true)
				resumeOnce.Do(func() { close(resume) })
				wg.Wait()
			})
			admittedBy := func(i int) int64 { return wins[i][0].Load() + wins[i][1].Load() + wins[i][2].Load() }

			// Stop the server once each replica has been seen holding a
			// lease.
			var leased [replicas]bool
			waitFor(t, "every replica holding a lease", func() bool {
				all := true
				for i := range replicas {
					leased[i] = leased[i] || ledgers[i].total()-admittedBy(i) >= 2
					all = all && leased[i]
				}
				return all
			})
			srv.Pause()
			// SIGSTOP is delivered, and the server stopped, once its
			// process's state is T: from then on it sends nothing.
			waitFor(t, "the server stopped", func() bool { return processState(pid) == 'T' })
			phase.Store(paused)
			var heldAtPause [replicas]int64
			var grantedAtPause [replicas]int64
			for i := range replicas {
				a := wins[i][running].Load()
				grantedAtPause[i] = ledgers[i].total()
				heldAtPause[i] = grantedAtPause[i] - a
			}
			// Every goroutine has failed once, so none has a request in
			// flight: what the replicas admitted while stopped is final.
			waitFor(t, "every goroutine failing once while the server is stopped", func() bool {
				for i := range replicas {
					for g := range goroutines {
						if !failedOnce[i][g].Load() {
							return false
						}
					}
				}
				return true
			})
			var duringPause, grantedInPause [replicas]int64
			for i := range replicas {
				duringPause[i] = wins[i][paused].Load()
				grantedInPause[i] = ledgers[i].total() - grantedAtPause[i]
			}
			srv.Resume()
			phase.Store(resumed)
			resumeOnce.Do(func() { close(resume) })
			var afterPause [replicas]int64
			waitFor(t, "every replica admitting after the server runs again", func() bool {
				for i := range replicas {
					if wins[i][resumed].Load() == 0 {
						return false
					}
				}
				return true
			})
			stop.Store(true)
			wg.Wait()
			end := srv.Micros(t)
			for i := range replicas {
				afterPause[i] = wins[i][resumed].Load()
			}

			if p := wrongErr.Load(); p != nil {
				t.Errorf("a request failed while the server was stopped with %v; want its deadline (context.DeadlineExceeded or a network timeout)", *p)
			}
			if l := time.Duration(longest.Load()); l > late {
				t.Errorf("a request failed %v after its deadline while the server was stopped; want within %v", l, late)
			}
			for i := range replicas {
				// What a replica can admit once the server stops: the
				// tokens its lease holds (at most capacity/16), or, when
				// its lease is on its way (the answer sent before the
				// stop), that lease and the request that asked for it; or,
				// when the key's lease has size 0, the requests sent on to
				// the server as they are, one per goroutine (passThrough).
				passThrough := int64(goroutines)
				if most := max(int64(maxLease+1), passThrough); duringPause[i] > most {
					t.Errorf("replica %d (%s) admitted %d while the server was stopped; want at most its largest lease and one request, %d", i, clients[i], duringPause[i], most)
				}
				if duringPause[i] > heldAtPause[i]+grantedInPause[i] {
					t.Errorf("replica %d (%s) admitted %d while the server was stopped; it held %d when it stopped and the server's last answers brought %d",
						i, clients[i], duringPause[i], heldAtPause[i], grantedInPause[i])
				}
				if a, net := admittedBy(i), ledgers[i].total(); a > net {
					t.Errorf("replica %d (%s) admitted %d; the server granted it %d", i, clients[i], a, net)
				}
			}
			var total int64
			for i := range replicas {
				total += admittedBy(i)
			}
			elapsed := end - start
			if limit := bound(capacity, rate, elapsed); total > limit {
				t.Errorf("the replicas admitted %d in %v of the server's clock; want at most capacity + rate × interval = %d", total, time.Duration(elapsed)*time.Microsecond, limit)
			}
			var per []string
			for i := range replicas {
				per = append(per, fmt.Sprintf("%s held %d (+%d on the way), admitted %d while stopped, %d after", clients[i], heldAtPause[i], grantedInPause[i], duringPause[i], afterPause[i]))
			}
			t.Logf("%v on the server's clock, %d admitted (at most %d); failures: %d before the stop, %d while stopped (at most %v late), %d after; %s",
				time.Duration(elapsed)*time.Microsecond, total, bound(capacity, rate, elapsed), fails[running].Load(), fails[paused].Load(), time.Duration(longest.Load()), fails[resumed].Load(), strings.Join(per, "; "))
			for i, s := range stores {
				if err := s.Close(context.Background()); err != nil {
					t.Errorf("replica %d: Close: %v", i, err)
				}
			}
		})
	}
}

// isTimeout reports whether err is a context's deadline, or a network
// timeout: go-redis with ContextTimeoutEnabled sets the context's
// deadline on its connection and returns the read's "i/o timeout".
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// deadlineOf returns ctx's deadline.
func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// processState returns the state letter of process pid in /proc (R, S, T
// for stopped, …), or 0 when it cannot be read.
func processState(pid string) byte {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state …: comm may hold spaces, so look after its ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2]
	}
	return 0
}
