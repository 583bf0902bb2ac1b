package rueidis_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/spigot-go/spigot/internal/gen"
)

// TestGenerated: the package's files are what internal/gen derives from
// store/valkey's, so a change to one store is a change to both. After a
// change to store/valkey, run go generate ./store/rueidis.
func TestGenerated(t *testing.T) {
	for from, to := range gen.Files {
		src, err := os.ReadFile(filepath.Join("..", "valkey", from))
		if err != nil {
			t.Fatal(err)
		}
		want, err := gen.Rueidis(from, src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(to)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("store/rueidis/%s is not what store/valkey/%s generates: run go generate ./store/rueidis", to, from)
		}
	}
}
