package testserver_test

import (
	"fmt"

	"github.com/spigot-go/spigot/internal/testserver"
)

// A test starts a server of each kind with Start(t, kind), which also stops
// it when the test ends:
//
//	for _, kind := range testserver.Kinds {
//		t.Run(string(kind), func(t *testing.T) {
//			srv := testserver.Start(t, kind)
//			client := goredis.NewClient(&goredis.Options{Addr: srv.Addr})
//			…
//			srv.Pause() // and Resume, Kill, Restart for fault tests
//		})
//	}
func Example() {
	for _, kind := range testserver.Kinds {
		fmt.Println(kind)
	}
	// Output:
	// redis-server
	// valkey-server
}
