package spigot_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEQuickstartCompiles builds every complete program (a Go block
// that starts with "package main") in README.md, so the front door never
// shows code that does not compile.
func TestREADMEQuickstartCompiles(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	built := 0
	for i, b := range blocks {
		if !strings.HasPrefix(b[1], "package main\n") {
			continue
		}
		dir := t.TempDir()
		src := filepath.Join(dir, "main.go")
		if err := os.WriteFile(src, []byte(b[1]), 0o644); err != nil {
			t.Fatal(err)
		}
		// An overlay puts the file inside this module without writing
		// into the source tree.
		wd, _ := os.Getwd()
		overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{
			filepath.Join(wd, "internal", "readme", "main.go"): src,
		}})
		overlayFile := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("go", "build", "-o", os.DevNull, "-overlay", overlayFile, "./internal/readme").CombinedOutput()
		if err != nil {
			t.Errorf("README.md Go block %d does not build: %v\n%s", i+1, err, out)
		}
		built++
	}
	if built == 0 {
		t.Error("README.md has no complete Go program (package main) to build")
	}
}
