package resp_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/spigot-go/spigot/internal/resp"
)

// A Fake answers a command with its handler, PING with PONG and anything
// else with an unknown-command error, records every command's name, and
// hangs up when a handler says so.
func TestFake(t *testing.T) {
	f, err := resp.NewFake()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Handle("get", func(w *resp.Writer, args []string) { w.Bulk("value of " + args[1]) })
	f.Handle("QUIT", func(w *resp.Writer, _ []string) { w.HangUp() })
	if got, err := resp.Do(f.Addr, "GET", "k"); err != nil || got != "value of k" {
		t.Errorf("GET k = %q, %v; want %q", got, err, "value of k")
	}
	if err := resp.Ping(f.Addr); err != nil {
		t.Errorf("PING: %v", err)
	}
	if _, err := resp.Do(f.Addr, "HELLO", "3"); err == nil || !strings.Contains(err.Error(), "unknown command 'HELLO'") {
		t.Errorf("HELLO 3: error %v; want an unknown command", err)
	}
	if _, err := resp.Do(f.Addr, "QUIT"); err == nil {
		t.Error("QUIT: a reply; want the connection closed without one")
	}
	if got, want := f.Received(), []string{"GET", "PING", "HELLO", "QUIT"}; !slices.Equal(got, want) {
		t.Errorf("Received() = %q, want %q", got, want)
	}
	if n := f.Count("get"); n != 1 {
		t.Errorf("Count(get) = %d, want 1", n)
	}
}
