package keyed_test

import (
	"fmt"

	"github.com/spigot-go/spigot/internal/keyed"
)

// A counter is a store's entry: a Header, then what the store keeps for
// the key, guarded by the Header's lock.
type counter struct {
	keyed.Header
	n int64
}

var counters = keyed.NewKind[counter]()

// add adds n to key's counter in t, making it if need be, and returns the
// sum, or 0 when t is at its cap.
func add(t *keyed.Table, key string, n int64) int64 {
	h := t.Hash("hits", key)
	sh := t.Shard(h)
	for {
		if e := sh.Find(h, "hits", key); e != nil {
			if !e.Lock() {
				continue // removed meanwhile: look again
			}
			c := counters.Of(e)
			c.n += n
			sum := c.n
			e.Unlock()
			return sum
		}
		sh.Lock()
		if sh.Find(h, "hits", key) == nil { // none was added meanwhile
			c := counters.New("hits", key)
			if !sh.Insert(h, &c.Header, 0) {
				sh.Unlock()
				return 0
			}
		}
		sh.Unlock()
	}
}

func Example() {
	t := keyed.New(keyed.Config{MaxKeys: 1000})
	add(t, "203.0.113.7", 2)
	fmt.Println(add(t, "203.0.113.7", 3), add(t, "198.51.100.1", 1), t.Len())
	// Output: 5 1 2
}
