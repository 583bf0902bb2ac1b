package spigot_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spigot-go/spigot/internal/testserver"
)

// readmePrograms returns every complete program (a Go block that starts
// with "package main") in README.md.
func readmePrograms(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var programs []string
	for _, b := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if strings.HasPrefix(b[1], "package main\n") {
			programs = append(programs, b[1])
		}
	}
	if len(programs) == 0 {
		t.Fatal("README.md has no complete Go program (package main)")
	}
	return programs
}

// buildProgram builds src as a program of this module (so that it imports
// this tree's packages) into out, or os.DevNull.
func buildProgram(t *testing.T, src, out string) error {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// An overlay puts the file inside this module without writing into
	// the source tree.
	wd, _ := os.Getwd()
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{
		filepath.Join(wd, "internal", "readme", "main.go"): file,
	}})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	if output, err := exec.Command("go", "build", "-o", out, "-overlay", overlayFile, "./internal/readme").CombinedOutput(); err != nil {
		return &buildError{err, output}
	}
	return nil
}

type buildError struct {
	err    error
	output []byte
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + string(e.output) }

// TestREADMEQuickstartCompiles builds every complete program in README.md,
// so the front door never shows code that does not compile.
func TestREADMEQuickstartCompiles(t *testing.T) {
	for i, p := range readmePrograms(t) {
		if err := buildProgram(t, p, os.DevNull); err != nil {
			t.Errorf("README.md program %d does not build: %v", i+1, err)
		}
	}
}

// TestREADMEClusterExample runs the README's cluster program against a real
// Redis Cluster, its seeds in CLUSTER_SEEDS, and checks that it prints what
// its "// Output:" comment says.
func TestREADMEClusterExample(t *testing.T) {
	var program string
	for _, p := range readmePrograms(t) {
		if strings.Contains(p, "NewClusterClient") {
			program = p
		}
	}
	if program == "" {
		t.Fatal("README.md has no program with a NewClusterClient")
	}
	_, comment, ok := strings.Cut(program, "\t// Output:\n")
	if !ok {
		t.Fatal("README.md's cluster program has no // Output: comment")
	}
	var want strings.Builder
	for _, line := range strings.Split(comment, "\n") {
		text, ok := strings.CutPrefix(strings.TrimSpace(line), "// ")
		if !ok {
			break
		}
		want.WriteString(text + "\n")
	}

	cl := testserver.StartCluster(t, testserver.Redis)
	bin := filepath.Join(t.TempDir(), "cluster-example")
	if err := buildProgram(t, program, bin); err != nil {
		t.Fatalf("README.md's cluster program does not build: %v", err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "CLUSTER_SEEDS="+strings.Join(cl.Addrs()[:2], ","))
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README.md's cluster program: %v\n%s", err, got)
	}
	if string(got) != want.String() {
		t.Errorf("README.md's cluster program printed\n%s\nwant\n%s", got, want.String())
	}
}
