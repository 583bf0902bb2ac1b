package wire_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/spigot-go/spigot"
	"github.com/spigot-go/spigot/internal/wire"
)

// TestSlot: the slots Redis gives (CLUSTER KEYSLOT; its cluster
// specification's CRC16 check value of "123456789" is 0x31C3).
func TestSlot(t *testing.T) {
	for _, c := range []struct {
		key  string
		slot uint16
	}{
		{"123456789", 0x31C3 % wire.Slots},
		{"", 0},
		{"foo", 12182},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"user1000", 3443},
		{"foo{}{bar}", wire.Slot("foo{}{bar}")}, // empty tag: the whole key
		{"foo{{bar}}zap", wire.Slot("{bar")},
		{"foo{bar}{zap}", wire.Slot("bar")},
	} {
		if got := wire.Slot(c.key); got != c.slot {
			t.Errorf("Slot(%q) = %d; want %d", c.key, got, c.slot)
		}
	}
	for key, tag := range map[string]string{"foo{}{bar}": "foo{}{bar}", "a{b}c": "b", "a{b": "a{b", "}{x}": "x"} {
		if got := wire.Tag(key); got != tag {
			t.Errorf("Tag(%q) = %q; want %q", key, got, tag)
		}
	}
	if wire.TagHash("spigot:ip:{u1}") != wire.TagHash("spigot:user:{u1}") || wire.TagHash("a") == wire.TagHash("b") {
		t.Error("TagHash: want equal hashes for equal tags only")
	}
}

func TestBatchErr(t *testing.T) {
	req := wire.Err("test", errors.New("WRONGTYPE no"), true)
	down := wire.Err("test", errors.New("connection refused"), false)
	if err := wire.BatchErr(nil, 5); err != nil {
		t.Errorf("no errors: %v", err)
	}
	if err := wire.BatchErr([]error{req}, 1); err != req {
		t.Errorf("one op: %v, want it as it is", err)
	}
	err := wire.BatchErr([]error{req, down}, 3)
	if errors.Is(err, spigot.ErrRequestFailed) || fmt.Sprint(err) != "spigot: 2 of 3 ops failed, as this one: spigot: test: connection refused" {
		t.Errorf("a failed store among failed requests: %v; want the store's error, not ErrRequestFailed", err)
	}
	if err := wire.BatchErr([]error{req, req}, 3); !errors.Is(err, spigot.ErrRequestFailed) {
		t.Errorf("failed requests only: %v; want ErrRequestFailed", err)
	}
}
