package scriptstore

import (
	"context"

	"github.com/spigot-go/spigot/store"
)

// Pipelined is the Client of a library with valkey-go's API: valkey-go,
// and rueidis, from which it was forked. Its type parameters are the
// library's command, result, message and arbitrary-command types.
type Pipelined[Cmd any, R Result[M], M any, P interface {
	*M
	Message
}, A Arbitrary[A, Cmd]] struct {
	Do      func(ctx context.Context, cmd Cmd) R
	DoMulti func(ctx context.Context, cmds ...Cmd) []R
	// Arbitrary starts a command (the client's B().Arbitrary).
	Arbitrary func(words ...string) A
	// Classify reports whether an error of R is an error reply of the
	// server, and whether it is the nil reply (which is no error).
	Classify func(err error) (serverErr, isNil bool)
}

// Arbitrary is a library's builder of an arbitrary command.
type Arbitrary[A, Cmd any] interface {
	Keys(keys ...string) A
	Args(args ...string) A
	Build() Cmd
	ReadOnly() Cmd
}

// NewPipelined returns a store named name (see New) on a client with
// valkey-go's API, given by its methods Do, DoMulti and B().Arbitrary, the
// library's functions that tell an error reply of the server (isErr:
// valkey.IsValkeyErr, rueidis.IsRedisErr) and the nil reply (isNil), and
// whether the client is of a cluster. M and P are the library's message
// type and its pointer; the other type parameters follow from the
// arguments.
func NewPipelined[M any, P interface {
	*M
	Message
}, Cmd any, R Result[M], A Arbitrary[A, Cmd], E any](name string,
	do func(context.Context, Cmd) R, doMulti func(context.Context, ...Cmd) []R, arbitrary func(...string) A,
	isErr func(error) (E, bool), isNil func(error) bool, cluster bool, opts []store.Option) *Store {
	classify := func(err error) (serverErr, nilReply bool) {
		_, serverErr = isErr(err)
		return serverErr, isNil(err)
	}
	p := &Pipelined[Cmd, R, M, P, A]{Do: do, DoMulti: doMulti, Arbitrary: arbitrary, Classify: classify}
	return New(name, p, Topology{Cluster: cluster, Detach: true}, opts)
}

// build returns the command of a call: read-only for a ReadOnly call
// (which the client may send to a replica, and retries after a network
// error: a Peek changes nothing), never otherwise marked as one the client
// may resend.
func (p *Pipelined[Cmd, R, M, P, A]) build(c *Call) Cmd {
	cmd := p.Arbitrary(c.Command()...).Keys(c.Keys...).Args(c.Argv...)
	if c.ReadOnly {
		return cmd.ReadOnly()
	}
	return cmd.Build()
}

// Result is a library's result type: valkey.ValkeyResult,
// rueidis.RedisResult.
type Result[M any] interface {
	Error() error
	ToArray() ([]M, error)
	ToAny() (any, error)
}

// Message is a library's message type (*valkey.ValkeyMessage,
// *rueidis.RedisMessage), as far as the script's reply needs.
type Message interface {
	IsInt64() bool
	AsInt64() (int64, error)
}

// Send implements Client: one call with Do, several with DoMulti.
func (p *Pipelined[Cmd, R, M, P, A]) Send(ctx context.Context, calls []Call) {
	if len(calls) == 1 {
		p.reply(&calls[0], p.Do(ctx, p.build(&calls[0])))
		return
	}
	cmds := make([]Cmd, len(calls))
	for k := range calls {
		cmds[k] = p.build(&calls[k])
	}
	for k, r := range p.DoMulti(ctx, cmds...) {
		p.reply(&calls[k], r)
	}
}

// reply sets c.Reply from r: the integers of an array of integers, with
// no allocation for a call of one key, or else the value as ToAny reads
// it, for the decoder to name what came back.
func (p *Pipelined[Cmd, R, M, P, A]) reply(c *Call, r R) {
	c.Reply = Reply{}
	if err := r.Error(); err != nil {
		serverErr, isNil := p.Classify(err)
		if !isNil {
			c.Reply.Err, c.Reply.ServerErr = err, serverErr
		}
		return
	}
	if msgs, err := r.ToArray(); err == nil {
		ints := c.buf[:0]
		for i := range msgs {
			m := P(&msgs[i])
			if !m.IsInt64() {
				ints = nil
				break
			}
			n, _ := m.AsInt64()
			ints = append(ints, n)
		}
		if ints != nil {
			c.Reply.Ints = ints
			return
		}
	}
	c.Reply.Value, _ = r.ToAny()
}
