package lease_test

// A replica killed (SIGKILL) mid-lease: the test binary runs itself again
// as a child process, a replica of its own, which reports on its standard
// output every token the server grants it before it spends any of them.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/testserver"
	"github.com/spigot-go/spigot/store/lease"
)

// replicaEnv, when set, makes TestReplicaKilled the child replica; it holds
// the child's replicaConfig in JSON.
const replicaEnv = "SPIGOT_LEASE_REPLICA"

type replicaConfig struct {
	Addr, Client, Prefix string
	Keys                 int
	Capacity             int64
	Rate                 spigot.Rate
	Goroutines           int
}

func (c replicaConfig) limit() spigot.Limit { return spigot.MustBucket("kill", c.Capacity, c.Rate) }

// TestReplicaKilled: three replicas, one of them a child process, each with
// many goroutines taking one token at a time from one hot key or from 50
// keys, on a limit they drain. Once the child has reported holding a lease
// and the two others are busy too, the child is killed with SIGKILL. Each
// key then admits at most capacity + rate × the interval, on the server's
// clock, from before the first request to after the last, counting for the
// child every token the server granted it less those it sent back (it
// reports each grant before it spends it, and each Refund of a lease the
// refill overtook before it sends it, so whatever it admitted unreported
// is counted); each survivor
// admits no more than the server granted it; and the survivors keep
// admitting after the kill, at the refill's pace, with no error.
func TestReplicaKilled(t *testing.T) {
	if cfg := os.Getenv(replicaEnv); cfg != "" {
		runReplica(t, cfg)
		return
	}
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			srv := testserver.Start(t, kind)
			for _, c := range []struct {
				name     string
				keys     int
				capacity int64
				rate     spigot.Rate
			}{
				{"hot", 1, 3200, spigot.Per(3200, time.Second)},    // leases of up to 200
				{"keys=50", 50, 160, spigot.Per(160, time.Second)}, // leases of up to 10
			} {
				t.Run(c.name, func(t *testing.T) {
					testReplicaKilled(t, srv, replicaConfig{
						Addr: srv.Addr, Client: clients[0], Prefix: prefix(t),
						Keys: c.keys, Capacity: c.capacity, Rate: c.rate, Goroutines: 16,
					})
				})
			}
		})
	}
}

// childState is what the parent has read of the child's reports.
type childState struct {
	mu       sync.Mutex
	ready    bool
	granted  map[string]int64 // by key: every grant the child reported
	returned map[string]int64 // by key: every Refund the child reported sending
	admitted int64            // the child's last report of its admissions
	held     int64            // and of what it held: granted less admitted
	leased   bool             // a report showed a lease: held ≥ 2
	reports  int
	done     bool // its output ended
}

func (s *childState) get() childState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return childState{ready: s.ready, admitted: s.admitted, held: s.held, leased: s.leased, reports: s.reports, done: s.done}
}

func testReplicaKilled(t *testing.T, srv *testserver.Server, cfg replicaConfig) {
	b := cfg.limit()
	key := func(k int) string { return "k" + strconv.Itoa(k) }

	// The child: started first, alone, so that it takes its leases while
	// the limit is still full; the survivors join once it holds one.
	js, _ := json.Marshal(cfg)
	cmd := exec.Command(os.Args[0], "-test.run=^TestReplicaKilled$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), replicaEnv+"="+string(js))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := srv.Micros(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	child := &childState{granted: make(map[string]int64), returned: make(map[string]int64)}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 || f[0] != "replica:" {
				continue
			}
			child.mu.Lock()
			switch {
			case f[1] == "ready":
				child.ready = true
			case f[1] == "grant" && len(f) == 4:
				n, _ := strconv.ParseInt(f[3], 10, 64)
				child.granted[f[2]] += n
			case f[1] == "return" && len(f) == 4:
				n, _ := strconv.ParseInt(f[3], 10, 64)
				child.returned[f[2]] += n
			case f[1] == "admitted" && len(f) == 5:
				child.admitted, _ = strconv.ParseInt(f[2], 10, 64)
				child.held, _ = strconv.ParseInt(f[4], 10, 64)
				child.leased = child.leased || child.held >= 2
				child.reports++
			}
			child.mu.Unlock()
		}
		child.mu.Lock()
		child.done = true
		child.mu.Unlock()
	}()
	waitFor(t, "the child replica ready", func() bool {
		s := child.get()
		if s.done {
			t.Fatalf("the child replica ended before it was ready:\n%s", stderr.String())
		}
		return s.ready
	})
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the child replica holding a lease", func() bool { return child.get().leased })

	// The survivors.
	const survivors = 2
	var (
		ledgers  [survivors]*ledger
		stores   [survivors]*lease.Store
		admitted [survivors][]atomic.Int64 // by key
		served   [survivors]atomic.Int64   // every decision
		wins     [survivors]atomic.Int64   // admissions, every key
		errs     atomic.Int64
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	for i := range survivors {
		ledgers[i] = newLedger(newRemote(t, clients[i+1], srv.Addr, cfg.Prefix))
		stores[i] = lease.New(ledgers[i])
		admitted[i] = make([]atomic.Int64, cfg.Keys)
		for g := range cfg.Goroutines {
			wg.Go(func() {
				for r := g; !stop.Load(); r++ {
					k := r % cfg.Keys
					d, err := stores[i].Do(context.Background(), spigot.Op{Limit: b, Key: key(k), N: 1})
					if err != nil {
						if errs.Add(1) <= 3 {
							t.Errorf("survivor %d: %v", i, err)
						}
						continue
					}
					served[i].Add(1)
					if d.Allowed() {
						admitted[i][k].Add(1)
						wins[i].Add(1)
					}
				}
			})
		}
	}
	t.Cleanup(func() { // when the test ends early
		stop.Store(true)
		wg.Wait()
	})
	// The kill, at the child's next report once both survivors have
	// admitted requests: the child is busy, its goroutines in the midst of
	// their requests.
	reports := child.get().reports
	waitFor(t, "the survivors admitting and the child reporting again", func() bool {
		return wins[0].Load() > 0 && wins[1].Load() > 0 && child.get().reports > reports
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = true
	<-readDone // every report the child wrote before it died
	cmd.Wait()
	if strings.Contains(stderr.String(), "DATA RACE") {
		t.Errorf("the child replica reported a data race:\n%s", stderr.String())
	}
	atKill := child.get()
	killedAt := srv.Micros(t)
	var before [survivors]int64
	for i := range survivors {
		before[i] = wins[i].Load()
	}

	// The survivors go on, not held up by the dead replica: each admits
	// more, and the server's clock runs 300ms past the kill.
	end := untilServerClock(t, srv, killedAt+300_000, func() bool {
		return wins[0].Load() > before[0] && wins[1].Load() > before[1]
	})
	stop.Store(true)
	wg.Wait()
	if e := srv.Micros(t); e > end {
		end = e
	}

	elapsed := end - start
	limit := bound(cfg.Capacity, cfg.Rate, elapsed)
	var total, childTotal, childBack, lost int64
	child.mu.Lock()
	defer child.mu.Unlock()
	for k := range cfg.Keys {
		// All the child could have admitted: what it was granted, less
		// what it sent back (a lease's tokens leave it before the Refund
		// that gives them back is sent, whether it arrives or not).
		n := child.granted[key(k)] - child.returned[key(k)]
		childTotal += n
		childBack += child.returned[key(k)]
		for i := range survivors {
			a := admitted[i][k].Load()
			n += a
			if net := ledgers[i].net(key(k)); a > net {
				t.Errorf("survivor %d, key %s: admitted %d; the server granted it %d", i, key(k), a, net)
			}
		}
		total += n
		if n > limit {
			t.Errorf("key %s: the replicas admitted %d (the child counted at the %d tokens it was granted and kept) in %v of the server's clock; want at most capacity + rate × interval = %d",
				key(k), n, child.granted[key(k)]-child.returned[key(k)], time.Duration(elapsed)*time.Microsecond, limit)
		}
	}
	lost = childTotal - atKill.admitted
	for i, s := range stores {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("survivor %d: Close: %v", i, err)
		}
	}
	t.Logf("%v on the server's clock; child: granted %d less %d sent back, last reported %d admitted and %d held (%d reports), so at most %d admitted unreported or lost with it; survivors: %d and %d admitted before the kill, %d and %d after; %d admitted on %d keys, at most %d each",
		time.Duration(elapsed)*time.Microsecond, childTotal+childBack, childBack, atKill.admitted, atKill.held, atKill.reports, lost,
		before[0], before[1], wins[0].Load()-before[0], wins[1].Load()-before[1], total, cfg.Keys, limit)
}

// runReplica is the child replica: a lease Store on cfg's server, whose
// every grant from the server is written to standard output ("replica:
// grant KEY N") before the call that brought it returns, so before any of
// its tokens can be admitted, and every Refund ("replica: return KEY N")
// before it is sent, when its tokens have left the lease. Once told "go" on its standard input, its
// goroutines take one token at a time from cfg's keys until the process is
// killed, and it reports every 32nd admission with what it held then
// ("replica: admitted A held H"). It ends when its standard input closes.
func runReplica(t *testing.T, js string) {
	var cfg replicaConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewWriter(os.Stdout) // flushed at each line, with mu held
	var (
		mu       sync.Mutex
		granted  int64
		admitted atomic.Int64
	)
	report := func(format string, args ...any) {
		fmt.Fprintf(out, "replica: "+format+"\n", args...)
		out.Flush()
	}
	l := newLedger(newRemote(t, cfg.Client, cfg.Addr, cfg.Prefix))
	l.onGrant = func(key string, n int64) {
		mu.Lock()
		defer mu.Unlock()
		granted += n
		report("grant %s %d", key, n)
	}
	l.onReturn = func(key string, n int64) {
		mu.Lock()
		defer mu.Unlock()
		granted -= n
		report("return %s %d", key, n)
	}
	// No sweeps while the replica lives: only the leases the remote's
	// refill overtakes go back.
	s := lease.New(l, lease.WithIdle(time.Hour))
	b := cfg.limit()
	mu.Lock()
	report("ready")
	mu.Unlock()
	in := bufio.NewReader(os.Stdin)
	if line, err := in.ReadString('\n'); err != nil || line != "go\n" {
		return
	}
	go func() {
		io.Copy(io.Discard, in)
		os.Exit(0) // the parent is gone
	}()
	for g := range cfg.Goroutines {
		go func() {
			for r := g; ; r++ {
				d, err := s.Do(context.Background(), spigot.Op{Limit: b, Key: "k" + strconv.Itoa(r%cfg.Keys), N: 1})
				if err != nil || !d.Allowed() {
					continue
				}
				if a := admitted.Add(1); a%32 == 0 {
					mu.Lock()
					// granted includes every grant whose tokens were
					// admitted, so held ≥ 0.
					a := admitted.Load()
					report("admitted %d held %d", a, granted-a)
					mu.Unlock()
				}
			}
		}()
	}
	select {}
}
