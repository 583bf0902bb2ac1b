// Package store names what every store of spigot's shares: the keys a
// store writes (Key, DefaultPrefix, CheckPrefix). The stores themselves
// are its subpackages: memory (in process), redis (go-redis), valkey
// (valkey-go) and rueidis, which run spigot's model on the server in one
// Lua script per operation, and hybrid, a remote store in front of a
// local one.
//
// The README describes how a Redis-protocol store formats a state.
package store

import (
	"fmt"
	"strings"

	"github.com/spigot-go/spigot"
)

// DefaultPrefix starts the name of every key a store writes, unless the
// store is given another with its WithPrefix option.
const DefaultPrefix = "spigot:"

// Key returns the name of the state of key under limit l: prefix +
// l.Name() + ":" + key, except that a key holding a '{' is stored as
// "{}" + key. A valid prefix (CheckPrefix) ends in its only ':' and limit
// names have no ':', so the name splits back into its three parts in one
// way only: no two stores, limits or keys share a name.
//
// On a Redis Cluster (and a go-redis Ring) the slot of a name is decided
// by its first '{': the text between it and the next '}' when there is
// some (a hash tag), or else the whole name. With Key, a key never decides
// its slot: keys often come from clients, and a client that could write a
// tag ("{x}") could send all of its keys, or everyone's it can name, to
// one primary. The "{}" in front of a key with a '{' is an empty tag,
// which makes the cluster hash the whole name; keys without a '{' are
// stored as they are. A limit's name may hold a tag (such as "{login}",
// see spigot.NewBucket), which then decides the slot of every key of the
// limit. Stores add no tag of their own: it would move every existing
// key, refilling every limit during a rolling deploy, and it would stop a
// hot key's limits from spreading over the cluster.
func Key(prefix string, l spigot.Limit, key string) string {
	if strings.IndexByte(key, '{') >= 0 {
		return prefix + l.Name() + ":{}" + key
	}
	return prefix + l.Name() + ":" + key
}

// TaggedKey is Key for keys that are trusted to choose their slot: prefix
// + l.Name() + ":" + key, so that a {hash tag} in the key decides the
// slot when the limit's name has none. A key such as "{user42}" then puts
// every limit of that key in one slot, so that several limits of one key
// are applied in one script, at the cost of sending all of that key's
// traffic to one primary. The Redis-protocol stores use it with their
// WithKeyHashTags option; never use it for keys a client can write.
func TaggedKey(prefix string, l spigot.Limit, key string) string {
	return prefix + l.Name() + ":" + key
}

// CheckPrefix returns an error, starting with "spigot: ", unless p can
// start the name of every key a store writes: one non-empty word that
// ends in its only ':', without '{' or '}'. Prefixes of that shape never
// collide: with "app" (no ':'), bucket "login" and key "u" would be stored
// as "applogin:u", and with "a:" and "a:b:" bucket "b" and key "c:x" of
// the first would be bucket "c" and key "x" of the second. A brace would
// make a hash tag that sends every key of the store to one cluster slot.
func CheckPrefix(p string) error {
	word, ok := strings.CutSuffix(p, ":")
	switch {
	case !ok:
		return fmt.Errorf("spigot: prefix %q must end in ':', as %q does", p, DefaultPrefix)
	case word == "":
		return fmt.Errorf("spigot: prefix %q must have a word before its ':'", p)
	case strings.Contains(word, ":"):
		return fmt.Errorf("spigot: prefix %q must have only one ':', at its end: with two, prefixes such as \"a:\" and \"a:b:\" could name the same key", p)
	case strings.ContainsAny(word, "{}"):
		return fmt.Errorf("spigot: prefix %q must not contain '{' or '}': a hash tag would put every key of the store in one cluster slot", p)
	}
	return nil
}
