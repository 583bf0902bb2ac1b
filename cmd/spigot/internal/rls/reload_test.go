package rls

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type loaded struct {
	cfg *Config
	err error
}

func TestWatch(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("d.yaml", basic)
	ticks := make(chan time.Time)
	read := make(chan struct{})
	got := make(chan loaded, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Watch(ctx, dir, func(c *Config, err error) { got <- loaded{c, err} }, withTicks(ticks, read))
	}()
	t.Cleanup(func() {
		cancel()
		for {
			select {
			case <-read:
			case <-done:
				return
			}
		}
	})
	<-read // the first reading
	// tick lets the watcher read the directory, and returns once it has.
	tick := func() {
		ticks <- time.Time{}
		<-read
	}
	next := func(step int) (loaded, bool) {
		select {
		case l := <-got:
			return l, true
		default:
			return loaded{}, false
		}
	}
	svc, clk, _ := setup(t, "")
	apply := func(step int, wantErr string) {
		t.Helper()
		l, ok := next(step)
		switch {
		case !ok:
			t.Fatalf("step %d: no call", step)
		case wantErr == "" && l.err != nil:
			t.Fatalf("step %d: got %v, want a config", step, l.err)
		case wantErr != "" && (l.err == nil || !strings.Contains(l.err.Error(), wantErr)):
			t.Fatalf("step %d: got %v, want an error with %q", step, l.err, wantErr)
		case l.err == nil:
			svc.Reload(l.cfg)
		}
	}

	apply(0, "") // the first reading is reported before any tick
	tick()
	if _, ok := next(1); ok {
		t.Fatalf("step 1: a call without a change")
	}
	run(t, svc, clk, []step{{0, request("d", desc("k", "v")), "OK: | OK 3/minute r=2 t=60"}})

	// A bad file is refused, once, and the last good config stays.
	write("e.yaml", "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n")
	tick()
	apply(2, "e.yaml:4: descriptor 'e.k': invalid rate limit unit 'fortnight'")
	tick()
	if _, ok := next(3); ok {
		t.Fatalf("step 3: the same bad config reported again")
	}
	run(t, svc, clk, []step{{0, request("d", desc("k", "v")), "OK: | OK 3/minute r=1 t=60"}})

	// Fixed, it is loaded with the rest, the counters kept.
	write("e.yaml", "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	tick()
	apply(4, "")
	run(t, svc, clk, []step{
		{0, request("d", desc("k", "v")), "OK: | OK 3/minute r=0 t=60"},
		{0, request("e", desc("k", "v")), "OK: | OK 1/second r=0 t=1"},
	})

	// A file removed, and a directory gone.
	if err := os.Remove(filepath.Join(dir, "e.yaml")); err != nil {
		t.Fatal(err)
	}
	tick()
	apply(5, "")
	run(t, svc, clk, []step{{0, request("e", desc("k", "v")), "OK: | OK"}})
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	tick()
	apply(6, "rls: invalid config")
	tick()
	if _, ok := next(7); ok {
		t.Fatalf("step 7: the same error reported again")
	}
}

func TestWatchStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	Watch(ctx, t.TempDir(), func(*Config, error) { calls++ }, WithInterval(time.Hour))
	if calls != 1 {
		t.Errorf("got %d calls, want the first reading's", calls)
	}
}
