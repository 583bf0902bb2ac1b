package wire

import (
	"fmt"
	"strings"

	"github.com/spigot-go/spigot"
)

// unavailable are the codes (first words) of the error replies that say a
// server cannot serve requests now, whatever the key: loading its data,
// busy running a script, part of a cluster that is down or moving slots,
// a replica (cut off from its primary, or read-only), out of memory or
// unable to persist, or refusing this client.
var unavailable = map[string]bool{
	"LOADING":     true,
	"BUSY":        true,
	"CLUSTERDOWN": true,
	"TRYAGAIN":    true,
	"MOVED":       true, // a redirection the client did not follow
	"ASK":         true,
	"MASTERDOWN":  true,
	"READONLY":    true,
	"NOREPLICAS":  true,
	"OOM":         true,
	"MISCONF":     true,
	"NOAUTH":      true,
	"WRONGPASS":   true,
}

// Err returns err, from the client of a store named client ("redis",
// "valkey", "rueidis"), as the store returns it: "spigot: client: " and
// err, wrapped.
//
// reply says that err is an error reply of the server, rather than a
// failure to reach it (a refused or lost connection, a timeout, a closed
// client). A reply error matches spigot.ErrRequestFailed, since the server
// answered, unless its code says that the server cannot serve any request
// now: LOADING, BUSY, CLUSTERDOWN, TRYAGAIN, MOVED, ASK, MASTERDOWN,
// READONLY, NOREPLICAS, OOM, MISCONF, NOAUTH, WRONGPASS, and "ERR max
// number of clients reached". So a key that holds a list (WRONGTYPE) or a
// script that fails on one key fails that request only.
func Err(client string, err error, reply bool) error {
	wrapped := fmt.Errorf("spigot: %s: %w", client, err)
	if reply && !serverDown(err.Error()) {
		return requestError{wrapped}
	}
	return wrapped
}

// serverDown reports whether an error reply says that the server cannot
// serve any request now.
func serverDown(msg string) bool {
	code, _, _ := strings.Cut(msg, " ")
	return unavailable[code] || strings.HasPrefix(msg, "ERR max number of clients reached")
}

// requestError is an error that concerns one request, not the store: it
// matches spigot.ErrRequestFailed.
type requestError struct{ error }

func (e requestError) Unwrap() error { return e.error }

func (e requestError) Is(target error) bool { return target == spigot.ErrRequestFailed }
