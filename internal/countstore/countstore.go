// Package countstore holds a spigot.Store that counts the calls that
// reach the store it wraps, for the tests of every module that check how
// often a store is asked.
package countstore

import (
	"context"
	"sync/atomic"

	"github.com/spigot-go/spigot"
)

// Store counts the calls of Do and DoMulti (one each) that reach the
// store it embeds. It is safe for concurrent use.
type Store struct {
	spigot.Store
	calls atomic.Int64
}

// New returns a Store that counts the calls to s.
func New(s spigot.Store) *Store { return &Store{Store: s} }

// Calls reports how many calls have reached the store.
func (c *Store) Calls() int64 { return c.calls.Load() }

// Do counts the call and passes it on.
func (c *Store) Do(ctx context.Context, op spigot.Op) (spigot.Decision, error) {
	c.calls.Add(1)
	return c.Store.Do(ctx, op)
}

// DoMulti counts the call and passes it on.
func (c *Store) DoMulti(ctx context.Context, mode spigot.Mode, ops []spigot.Op, out []spigot.Decision) error {
	c.calls.Add(1)
	return c.Store.DoMulti(ctx, mode, ops, out)
}
