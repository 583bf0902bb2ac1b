// Command rueidis writes store/rueidis from store/valkey (see package
// internal/gen). Run it from store/rueidis, as go generate does.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spigot-go/spigot/internal/gen"
)

func main() {
	for from, to := range gen.Files {
		src, err := os.ReadFile(filepath.Join("..", "valkey", from))
		if err == nil {
			src, err = gen.Rueidis(from, src)
		}
		if err == nil {
			err = os.WriteFile(to, src, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
