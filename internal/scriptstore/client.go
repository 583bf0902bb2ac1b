package scriptstore

import (
	"context"
	"strconv"

	"github.com/spigot-go/spigot/internal/nilcheck"
	"github.com/spigot-go/spigot/internal/wire"
)

// CheckClient panics, with a message that names the store (name, as in
// New), if client, a client library's client given to the store's New,
// is nil.
func CheckClient(name string, client any) {
	if nilcheck.Nil(client) {
		panic("spigot: " + name + ": New: nil client")
	}
}

// A Client is a Redis client library, as the store sees it: something
// that sends commands and reads their replies. It is safe for concurrent
// use.
type Client interface {
	// Send sends calls together (one pipeline: one round trip, on a
	// cluster one per node, in parallel) and sets each call's Reply. Each
	// call is one command, the one its Command method names; a command
	// whose fate is unknown (a timeout, a lost connection) is never sent
	// again, but one the server refused without running it (a cluster's
	// MOVED or ASK) may be.
	Send(ctx context.Context, calls []Call)
}

// A Call is one run of the script: over Keys, with the arguments Argv.
type Call struct {
	Keys []string
	Argv []string

	// Source sends the script's source (EVAL) rather than its SHA-1
	// (EVALSHA); ReadOnly sends the read-only form (EVAL_RO,
	// EVALSHA_RO), which a client may route to a replica.
	Source, ReadOnly bool

	// Reply is set by Client.Send.
	Reply Reply

	argvAny []any                 // Argv, boxed, for a Topology.Boxed client
	words   [3]string             // what Command returns
	buf     [wire.MaxFields]int64 // room for the Ints of a call of one key
}

// Line returns the call's whole command (Command, Keys, Argv) for a client
// that takes it as ...any, such as go-redis (see Topology.Boxed): the
// command's words and the limits' parameters are boxed once, not on every
// call.
func (c *Call) Line() []any {
	argv := c.argvAny
	line := make([]any, 3, 3+len(c.Keys)+len(argv))
	line[0] = lower[b2i(c.Source)][b2i(c.ReadOnly)]
	line[1] = sha1Arg
	if c.Source {
		line[1] = scriptArg
	}
	line[2] = len(c.Keys) // boxing an int below 256 allocates nothing
	for _, k := range c.Keys {
		line = append(line, k)
	}
	return append(line, argv...)
}

// The words of Command and Line. Line's are in lower case, as go-redis
// looks commands up (in upper case, it would make a lower-case copy of
// each on every call to a cluster), and boxed once.
var (
	upper                  = [2][2]string{{"EVALSHA", "EVALSHA_RO"}, {"EVAL", "EVAL_RO"}}
	lower                  = [2][2]any{{"evalsha", "evalsha_ro"}, {"eval", "eval_ro"}}
	sha1Arg, scriptArg any = wire.SHA1(), wire.Script()
)

// Command returns the words before the call's keys, in room of the call's
// own: "EVALSHA", the
// script's SHA-1 and the number of keys, or the EVAL, EVALSHA_RO or
// EVAL_RO of Source and ReadOnly. Keys and Argv follow it.
func (c *Call) Command() []string {
	c.words = [3]string{upper[b2i(c.Source)][b2i(c.ReadOnly)], wire.SHA1(), strconv.Itoa(len(c.Keys))}
	if c.Source {
		c.words[1] = wire.Script()
	}
	return c.words[:]
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A Reply is what came back for a call, as a client decodes it.
type Reply struct {
	// Err is the client's error: a failure to reach the server, or, with
	// ServerErr, an error reply of the server. With an error, the other
	// fields mean nothing.
	Err       error
	ServerErr bool

	// Ints holds the reply when the client read it as an array of
	// integers, the script's reply; Value holds it otherwise (as []any of
	// int64 or anything else), for the decoder to read or to reject.
	Ints  []int64
	Value any
}
