package scriptstore

import "context"

// Pipelined is the Client of a library with valkey-go's API: valkey-go,
// and rueidis, from which it was forked. Its type parameters are the
// library's command, result and message types.
type Pipelined[Cmd any, R Result[M], M any, P interface {
	*M
	Message
}] struct {
	Do      func(ctx context.Context, cmd Cmd) R
	DoMulti func(ctx context.Context, cmds ...Cmd) []R
	// Build returns the command of a call: its Command, keys and Argv,
	// read-only for a ReadOnly call, never marked as one the client may
	// resend.
	Build func(c *Call) Cmd
	// Classify reports whether an error of R is an error reply of the
	// server, and whether it is the nil reply (which is no error).
	Classify func(err error) (serverErr, isNil bool)
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
func (p *Pipelined[Cmd, R, M, P]) Send(ctx context.Context, calls []Call) {
	if len(calls) == 1 {
		p.reply(&calls[0], p.Do(ctx, p.Build(&calls[0])))
		return
	}
	cmds := make([]Cmd, len(calls))
	for k := range calls {
		cmds[k] = p.Build(&calls[k])
	}
	for k, r := range p.DoMulti(ctx, cmds...) {
		p.reply(&calls[k], r)
	}
}

// reply sets c.Reply from r: the integers of an array of integers, with
// no allocation for a call of one key, or else the value as ToAny reads
// it, for the decoder to name what came back.
func (p *Pipelined[Cmd, R, M, P]) reply(c *Call, r R) {
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
