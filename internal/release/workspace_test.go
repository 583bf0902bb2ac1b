package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCheckVersion(t *testing.T) {
	tests := []struct {
		version string
		err     string // in the error; "" for none
	}{
		{"v0.1.0", ""},
		{"v1.2.3", ""},
		{"v0.1.0-rc.1", ""},
		{"v0.1.0-rehearsal", ""},
		{"v0.1", "not a semantic version"},
		{"v1", "not a semantic version"},
		{"0.1.0", "not a semantic version"},
		{"v0.1.0+build", "not a semantic version"},
		{"v01.1.0", "not a semantic version"},
		{"", "not a semantic version"},
		{"v2.0.0", "no major version suffix (/v2)"},
		{"v10.0.0-rc.1", "no major version suffix (/v10)"},
	}
	for i, tt := range tests {
		err := checkVersion(tt.version)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("step %d: checkVersion(%q): got %v, want an error with %q", i, tt.version, err, tt.err)
		}
	}
}

// TestRepositoryWorkspace checks the order and the tags of the repository's
// own modules: each after every module it requires, the root first,
// cmd/spigot after internal/bench; tagged, every module a user gets and
// internal/bench, which cmd/spigot requires.
func TestRepositoryWorkspace(t *testing.T) {
	ws, err := loadWorkspace(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]bool)
	for i, m := range ws.modules {
		for _, p := range m.requires {
			if !seen[p] {
				t.Errorf("module %d, %s: before %s, which it requires", i, m.dir, ws.byPath[p].dir)
			}
		}
		seen[m.path] = true
	}
	if ws.modules[0].dir != "." {
		t.Errorf("the first module: got %s, want the root", ws.modules[0].dir)
	}
	order := dirs(ws.modules)
	if slices.Index(order, "cmd/spigot") < slices.Index(order, "internal/bench") {
		t.Errorf("order %v: cmd/spigot before internal/bench", order)
	}
	var tagged []string
	for _, m := range ws.tagged() {
		tagged = append(tagged, m.dir)
	}
	slices.Sort(tagged)
	want := []string{".", "cmd/spigot", "grpclimit", "internal/bench", "otelspigot", "otelspigot/otelgrpclimit", "store/redis", "store/rueidis", "store/valkey"}
	if !slices.Equal(tagged, want) {
		t.Errorf("tagged: got %v, want %v", tagged, want)
	}
	if got := ws.byPath["github.com/spigot-go/spigot/store/redis"].tag("v0.1.0"); got != "store/redis/v0.1.0" {
		t.Errorf("store/redis's tag: got %s, want store/redis/v0.1.0", got)
	}
	if got := ws.modules[0].tag("v0.1.0"); got != "v0.1.0" {
		t.Errorf("the root's tag: got %s, want v0.1.0", got)
	}
}

// TestWorkspaceErrors checks that loadWorkspace refuses a go.work whose
// modules require each other in a cycle, one whose first module is not the
// root, and a go.mod with a replace directive.
func TestWorkspaceErrors(t *testing.T) {
	tests := []struct {
		files map[string]string
		err   string
	}{
		{map[string]string{
			"go.work":      "go 1.26.0\n\nuse (\n\t.\n\t./a\n\t./b\n)\n",
			"go.mod":       "module example.com/r\n\ngo 1.26.0\n",
			"a/go.mod":     "module example.com/r/a\n\ngo 1.26.0\n\nrequire example.com/r/b v0.1.0\n",
			"b/go.mod":     "module example.com/r/b\n\ngo 1.26.0\n\nrequire example.com/r/a v0.1.0\n",
			"unrelated.go": "package r\n",
		}, "in a cycle: a → b → a"},
		{map[string]string{
			"go.work":  "go 1.26.0\n\nuse (\n\t./a\n\t.\n)\n",
			"go.mod":   "module example.com/r\n\ngo 1.26.0\n",
			"a/go.mod": "module example.com/r/a\n\ngo 1.26.0\n",
		}, "the first module it uses is not the repository's root"},
		{map[string]string{
			"go.work":  "go 1.26.0\n\nuse (\n\t.\n\t./a\n)\n",
			"go.mod":   "module example.com/r\n\ngo 1.26.0\n",
			"a/go.mod": "module example.com/r/a\n\ngo 1.26.0\n\nreplace example.com/r => ../\n",
		}, "a/go.mod: a replace directive"},
	}
	for i, tt := range tests {
		dir := t.TempDir()
		writeFiles(t, dir, tt.files)
		if _, err := loadWorkspace(dir); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("step %d: got %v, want an error with %q", i, err, tt.err)
		}
	}
}

// writeFiles writes files (name from dir → content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o666); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPrograms(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"README.md": "# x\n\n" +
		"<!-- go: quickstart -->\n```go\npackage main\n\nfunc main() {}\n```\n\n" +
		"```go\npackage main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(1)\n\tfmt.Println()\n\t// Output:\n\t// 1\n\t//\n}\n```\n\n" +
		"<!-- go: snippet x -->\n```go\nx := 1\n```\n\n" +
		"```\npackage main\n```\n"})
	progs, err := programs(dir, "README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []program{
		{file: "README.md", line: 4, mark: "quickstart", code: "package main\n\nfunc main() {}\n"},
		{file: "README.md", line: 10, code: "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(1)\n\tfmt.Println()\n\t// Output:\n\t// 1\n\t//\n}\n", output: "1\n\n"},
	}
	if !slices.Equal(progs, want) {
		t.Errorf("got %+v\nwant %+v", progs, want)
	}
	writeFiles(t, dir, map[string]string{"open.md": "```go\npackage main\n"})
	if _, err := programs(dir, "open.md"); err == nil {
		t.Errorf("open.md: got no error for a block left open")
	}
}

// TestRepositoryDocs checks that the rehearsal finds its programs and the
// README's install commands in the repository's own docs.
func TestRepositoryDocs(t *testing.T) {
	root := filepath.Join("..", "..")
	progs, err := rehearsed(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range progs {
		names = append(names, p.name)
	}
	if len(names) < 3 || names[0] != "quickstart" || names[1] != "grpc" || names[2] != "redis1" {
		t.Errorf("the rehearsed programs: got %v, want quickstart, grpc, then redis1 …", names)
	}
	gets, installs, err := installCommands(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(gets) == 0 || gets[0][2] != "github.com/spigot-go/spigot" || len(installs) != 1 || installs[0][2] != "github.com/spigot-go/spigot/cmd/spigot@latest" {
		t.Errorf("README.md's install block: got go get %v and go install %v; want the core first, and cmd/spigot@latest", gets, installs)
	}
}
