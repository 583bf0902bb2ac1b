// Package core is what package spigot shares with package store, the store
// author's kit, and no one else: the config a Limit points to, which the
// model in package store reads, and the checks of a call of DoMulti, which
// both packages make.
//
// Package spigot makes every Config and never changes one; package store
// reads them through Of, which package spigot registers when it
// initializes (package store imports package spigot, so spigot's
// initialization comes first).
package core

import (
	"errors"
	"fmt"
	"time"
)

// MaxExact is the largest scaled quantity a limit may hold: 2^53.
const MaxExact = 1 << 53

// Config is the config of a spigot.Limit: a bucket's or a window's
// parameters, in integers. It is comparable, and interned by package
// spigot, so that equal configs are one pointer.
type Config struct {
	Name     string
	Kind     uint8 // a spigot.Kind
	Capacity int64 // the most tokens the limit holds: a bucket's capacity, a window's Rate.Tokens
	Tokens   int64 // the rate's tokens
	Period   time.Duration
	Scale    int64 // buckets: units per token, period_µs / g
	Refill   int64 // buckets: units per microsecond, Rate.Tokens / g
	Max      int64 // buckets: capacity in units, capacity × scale
	Window   int64 // windows: the window in µs, a whole number of ms
	Offset   int64 // a fixed window: where windows start, in [0, window) µs
}

// of is the function that returns a spigot.Limit's config, registered by
// package spigot.
var of any

// Register registers f as the function that returns a Limit's config. Package
// spigot calls it once, when it initializes.
func Register[L any](f func(L) *Config) { of = f }

// Of returns the function registered by Register for Limits of type L. It
// panics if none was, or for another L: a mistake of this module's, found when
// the package that calls it initializes.
func Of[L any]() func(L) *Config {
	f, ok := of.(func(L) *Config)
	if !ok {
		panic(fmt.Sprintf("spigot: internal/core: no config function registered for %T", *new(L)))
	}
	return f
}

// CheckMulti returns the error of a call of DoMulti that must apply
// nothing: a mode above maxMode (matching errors.ErrUnsupported), out not as
// long as ops, or an invalid op (the error of its Check).
func CheckMulti[M ~uint8, O interface{ Check() error }](mode, maxMode M, ops []O, nout int) error {
	switch {
	case mode > maxMode:
		return fmt.Errorf("spigot: DoMulti: mode %d: %w", mode, errors.ErrUnsupported)
	case nout != len(ops):
		return fmt.Errorf("spigot: DoMulti: %d ops and %d decisions; want one decision per op", len(ops), nout)
	}
	for _, op := range ops {
		if err := op.Check(); err != nil {
			return err
		}
	}
	return nil
}
