package store_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/store"
)

// TestMaxKeyLen: a key of MaxKeyLen bytes is applied; one byte more is
// bad input for every action, and the state is left as it was.
func TestMaxKeyLen(t *testing.T) {
	b := spigot.MustBucket("b", 3, spigot.PerSecond(1))
	now := time.Unix(1_700_000_000, 0)
	longest := strings.Repeat("k", spigot.MaxKeyLen)
	if err := (spigot.Op{Limit: b, Key: longest, N: 1}).Check(); err != nil {
		t.Fatalf("Check of a key of MaxKeyLen bytes: %v; want nil", err)
	}
	var st store.State
	if d, err := store.Apply(spigot.Op{Limit: b, Key: longest, N: 1}, &st, now); err != nil || d.N != 1 {
		t.Fatalf("Apply of a key of MaxKeyLen bytes: %+v, %v; want 1 taken", d, err)
	}
	kept := st
	for _, a := range []spigot.Action{spigot.Take, spigot.TakeUpTo, spigot.Refund, spigot.Reset, spigot.Peek} {
		op := spigot.Op{Limit: b, Key: longest + "x", Action: a, N: 1}
		if err := op.Check(); !errors.Is(err, spigot.ErrInvalidKey) {
			t.Errorf("%v: Check = %v; want an error matching ErrInvalidKey", a, err)
		}
		if _, err := store.Apply(op, &st, now); !errors.Is(err, spigot.ErrInvalidKey) || !strings.HasPrefix(err.Error(), "spigot: ") {
			t.Errorf("%v: Apply = %v; want a spigot error matching ErrInvalidKey", a, err)
		}
		if !reflect.DeepEqual(st, kept) {
			t.Errorf("%v: Apply of an invalid op changed the state: %+v; want %+v", a, st, kept)
		}
	}
}
