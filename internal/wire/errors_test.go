package wire_test

import (
	"errors"
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/wire"
)

// TestErr: an error reply matches spigot.ErrRequestFailed unless its code
// says the server cannot serve any request; a failure to reach the server
// never does.
func TestErr(t *testing.T) {
	tests := []struct {
		err        string
		reply      bool
		perRequest bool
	}{
		{"WRONGTYPE Operation against a key holding the wrong kind of value script: d3c2, on @user_script:1.", true, true},
		{"ERR user_script:1: attempt to perform arithmetic on a nil value script: d13b, on @user_script:1.", true, true},
		{"ERR spigot: unreadable state at spigot:login:alice script: d13b, on @user_script:90.", true, true},
		{"ERR spigot: unsupported action jump", true, true},
		{"NOPERM this user has no permissions to access one of the keys used as arguments", true, true},
		{"ERR unknown command 'evalsha'", true, true},
		{"LOADING Redis is loading the dataset in memory", true, false},
		{"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", true, false},
		{"CLUSTERDOWN Hash slot not served", true, false},
		{"CLUSTERDOWN The cluster is down", true, false},
		{"TRYAGAIN Multiple keys request during rehashing of slot", true, false},
		{"MOVED 3999 127.0.0.1:6381", true, false},
		{"ASK 3999 127.0.0.1:6381", true, false},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", true, false},
		{"READONLY You can't write against a read only replica. script: 51ab, on @user_script:1.", true, false},
		{"NOREPLICAS Not enough good replicas to write.", true, false},
		{"OOM command not allowed when used memory > 'maxmemory'. script: 51ab, on @user_script:1.", true, false},
		{"MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", true, false},
		{"NOAUTH Authentication required.", true, false},
		{"WRONGPASS invalid username-password pair or user is disabled.", true, false},
		{"ERR max number of clients reached", true, false},
		{"dial tcp 127.0.0.1:1: connect: connection refused", false, false},
		{"i/o timeout", false, false},
		{"WRONGTYPE looks like a reply but came from elsewhere", false, false},
	}
	for i, tt := range tests {
		for _, client := range []string{"redis", "valkey", "rueidis"} {
			cause := errors.New(tt.err)
			err := wire.Err(client, cause, tt.reply)
			if got := errors.Is(err, spigot.ErrRequestFailed); got != tt.perRequest {
				t.Errorf("step %d: Err(%q, %q, reply %v) matches ErrRequestFailed: got %v, want %v", i, client, tt.err, tt.reply, got, tt.perRequest)
			}
			if !errors.Is(err, cause) {
				t.Errorf("step %d: Err(%q, %q) does not wrap the client's error", i, client, tt.err)
			}
			if got, want := err.Error(), "spigot: "+client+": "+tt.err; got != want {
				t.Errorf("step %d: Err(%q, %q) = %q, want %q", i, client, tt.err, got, want)
			}
		}
	}
}

// TestMalformedIsPerRequest: a reply that is not the script's concerns
// that request.
func TestMalformedIsPerRequest(t *testing.T) {
	if _, err := wire.Decode("QUEUED"); !errors.Is(err, spigot.ErrRequestFailed) {
		t.Errorf("Decode(QUEUED) = %v, want an error matching ErrRequestFailed", err)
	}
	if _, err := wire.Decode(int64(1)); !errors.Is(err, spigot.ErrRequestFailed) {
		t.Errorf("Decode(1) = %v, want an error matching ErrRequestFailed", err)
	}
	if _, err := wire.DecodeInts([wire.Fields]int64{0, 0, -2, 0, 1}); !errors.Is(err, spigot.ErrRequestFailed) {
		t.Errorf("DecodeInts(0 0 -2 0 1) = %v, want an error matching ErrRequestFailed", err)
	}
}
