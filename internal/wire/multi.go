package wire

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/spigot-go/spigot"
)

// BatchErr returns the error of a batch of n ops of which some failed,
// errs being their errors as Err returns them (nil for none): the error
// of one that failed because the store did (so that it does not match
// spigot.ErrRequestFailed), or else of the first, with how many failed.
func BatchErr(errs []error, n int) error {
	if len(errs) == 0 {
		return nil
	}
	err := errs[0]
	for _, e := range errs {
		if !errors.Is(e, spigot.ErrRequestFailed) {
			err = e
			break
		}
	}
	if len(errs) == 1 && n == 1 {
		return err
	}
	return fmt.Errorf("spigot: %d of %d ops failed, as this one: %w", len(errs), n, err)
}

// Slots is the number of hash slots of a Redis or Valkey Cluster.
const Slots = 16384

// Slot returns the cluster hash slot of key: the CRC16 (XMODEM) of its
// Tag, modulo Slots.
func Slot(key string) uint16 {
	var crc uint16
	for _, b := range []byte(Tag(key)) {
		crc = crc<<8 ^ crc16[byte(crc>>8)^b]
	}
	return crc % Slots
}

// Tag returns what a cluster, and go-redis's Ring, hash of key: the text
// between its first '{' and the first '}' after it when that is not
// empty, or else the whole key.
func Tag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// TagHash returns a 64-bit FNV-1a hash of key's Tag: the same for keys
// that a go-redis Ring keeps on the same shard, and, for keys with
// different tags, equal with a chance of 2^-64.
func TagHash(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(Tag(key)))
	return h.Sum64()
}

// crc16 is the table of CRC16-CCITT (XMODEM), polynomial 0x1021.
var crc16 = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
