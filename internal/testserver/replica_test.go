package testserver_test

import (
	"strings"
	"testing"

	"github.com/spigot-go/spigot/internal/testserver"
)

// A replica started by StartReplica is in sync, has every write of its
// primary once CaughtUp returns, and refuses writes of its own.
func TestStartReplica(t *testing.T) {
	for _, kind := range testserver.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			primary := testserver.Start(t, kind)
			replica := testserver.StartReplica(t, primary)
			for _, v := range []string{"1", "2", "3"} {
				if _, err := primary.Do("SET", "k", v); err != nil {
					t.Fatal(err)
				}
				primary.CaughtUp(t, replica)
				if got, err := replica.Do("GET", "k"); err != nil || got != v {
					t.Errorf("GET k on the replica after SET k %s on the primary = %q, %v", v, got, err)
				}
			}
			if _, err := replica.Do("SET", "k", "4"); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
				t.Errorf("SET on the replica: error %v; want READONLY", err)
			}
		})
	}
}
