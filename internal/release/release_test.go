package main

import (
	"archive/zip"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
)

// toy is a repository of two modules in the layout of spigot's: the root,
// and sub, which requires it at the placeholder that go.work maps.
var toy = map[string]string{
	"go.work": `go 1.26.0

use (
	.
	./sub
)

// The version of the last release, mapped to this tree.
replace example.com/toy v0.0.0-00010101000000-000000000000 => ./
`,
	"go.mod":       "module example.com/toy\n\ngo 1.26.0\n",
	"toy.go":       "package toy\n\nconst X = 1\n",
	"LICENSE":      "the toy's license\n",
	"CHANGELOG.md": "# Changelog\n\n## v0.1.0\n\nThe first.\n",
	"sub/go.mod":   "module example.com/toy/sub\n\ngo 1.26.0\n\nrequire example.com/toy v0.0.0-00010101000000-000000000000\n",
	"sub/sub.go":   "package sub\n\nimport \"example.com/toy\"\n\nvar Y = toy.X\n",
}

// newToy returns a git repository of files, committed.
func newToy(t *testing.T, files map[string]string) string {
	t.Helper()
	for _, tool := range []string{"git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	dir := t.TempDir()
	writeFiles(t, dir, files)
	ctx := context.Background()
	for _, args := range [][]string{
		{"init", "-q"},
		{"config", "user.name", "toy"},
		{"config", "user.email", "toy@localhost"},
		{"add", "-A"},
		{"commit", "-q", "-m", "toy"},
	} {
		if _, err := git(ctx, dir, args...); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRelease releases the toy at v0.1.0 and checks the commit, the tags,
// the go.mod, go.sum and go.work of the release, and that sub builds on
// its own from a proxy of the tags.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command: not in -short")
	}
	ctx := context.Background()
	dir := newToy(t, toy)
	rel, err := release(ctx, dir, "v0.1.0", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rel.tags, " "); got != "v0.1.0 sub/v0.1.0" {
		t.Errorf("tags: got %s, want v0.1.0 sub/v0.1.0", got)
	}
	for _, tag := range rel.tags {
		if c, err := git(ctx, dir, "rev-list", "-n", "1", tag); err != nil || c != rel.commit {
			t.Errorf("tag %s: got commit %s (%v), want the release's %s", tag, c, err, rel.commit)
		}
	}
	if msg, _ := git(ctx, dir, "log", "-1", "--format=%s"); !strings.HasPrefix(msg, "release v0.1.0: ") {
		t.Errorf("the commit's message: got %q", msg)
	}
	if status, _ := git(ctx, dir, "status", "--porcelain"); status != "" {
		t.Errorf("after the release, git status: got %q, want nothing", status)
	}
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if got := read("sub/go.mod"); !strings.Contains(got, "require example.com/toy v0.1.0\n") {
		t.Errorf("sub/go.mod:\n%s\nwant it to require example.com/toy v0.1.0", got)
	}
	work, err := modfile.ParseWork("go.work", []byte(read("go.work")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(work.Replace) != 1 || work.Replace[0].Old.Version != "v0.1.0" || work.Replace[0].New.Path != "./" ||
		!strings.Contains(read("go.work"), "// The version of the last release, mapped to this tree.\n") {
		t.Errorf("go.work:\n%s\nwant its comment, and example.com/toy v0.1.0 => ./", read("go.work"))
	}

	// sub's go.sum holds the hashes of the root's zip and go.mod at the tag.
	px := proxy{filepath.Join(t.TempDir(), "proxy")}
	hash, err := px.add(ctx, dir, "v0.1.0", rel.ws.modules[0], "v0.1.0", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum := read("sub/go.sum")
	if !strings.Contains(sum, "example.com/toy v0.1.0 "+hash+"\n") || !strings.Contains(sum, "example.com/toy v0.1.0/go.mod h1:") {
		t.Errorf("sub/go.sum:\n%s\nwant example.com/toy v0.1.0 %s and its go.mod's line", sum, hash)
	}
	// The root's LICENSE is in sub's zip, as the go command puts it there.
	if _, err := px.add(ctx, dir, "sub/v0.1.0", rel.ws.modules[1], "v0.1.0", time.Now()); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(filepath.Join(px.dir, "example.com", "toy", "sub", "@v", "v0.1.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	zr.Close()
	if want := "example.com/toy/sub@v0.1.0/LICENSE"; !slices.Contains(names, want) {
		t.Errorf("sub's zip: got %v, want %s in it", names, want)
	}
	env, err := goEnv(ctx, "example.com/toy", []string{px.url()}, filepath.Join(t.TempDir(), "modcache"), "-mod=readonly -modcacherw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(ctx, filepath.Join(dir, "sub"), env, "go", "build", "./..."); err != nil {
		t.Errorf("sub does not build on its own from the proxy of the tags: %v", err)
	}

	// A second release at the same version is refused.
	if _, err := release(ctx, dir, "v0.1.0", io.Discard); err == nil || !strings.Contains(err.Error(), "the tag v0.1.0 exists") {
		t.Errorf("release v0.1.0 again: got %v, want a refusal", err)
	}
}

// TestReleaseRefuses checks that release refuses what it must, and leaves
// the repository as it found it: HEAD, the tree and the tags.
func TestReleaseRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command: not in -short")
	}
	broken := make(map[string]string)
	for name, content := range toy {
		broken[name] = content
	}
	broken["sub/sub.go"] = "package sub\n\nimport \"example.com/toy\"\n\nvar Y string = toy.X\n"
	noLicense := make(map[string]string)
	for name, content := range toy {
		if name != "LICENSE" {
			noLicense[name] = content
		}
	}
	tests := []struct {
		files   map[string]string
		version string
		dirty   bool // an untracked file in the tree
		err     string
	}{
		{toy, "v0.1", false, "not a semantic version"},
		{toy, "v2.0.0", false, "no major version suffix"},
		{toy, "v0.2.0", false, "CHANGELOG.md has no section ## v0.2.0"},
		{toy, "v0.1.0", true, "the tree has changes or untracked files"},
		{noLicense, "v0.1.0", false, "no LICENSE"},
		{broken, "v0.1.0", false, "sub does not build on its own"},
	}
	ctx := context.Background()
	for i, tt := range tests {
		dir := newToy(t, tt.files)
		if tt.dirty {
			writeFiles(t, dir, map[string]string{"stray.txt": ""})
		}
		head, _ := git(ctx, dir, "rev-parse", "HEAD")
		_, err := release(ctx, dir, tt.version, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("step %d: release %s: got %v, want an error with %q", i, tt.version, err, tt.err)
		}
		after, _ := git(ctx, dir, "rev-parse", "HEAD")
		status, _ := git(ctx, dir, "status", "--porcelain")
		tags, _ := git(ctx, dir, "tag")
		if wantStatus := map[bool]string{true: "?? stray.txt"}[tt.dirty]; after != head || status != wantStatus || tags != "" {
			t.Errorf("step %d: after the refusal: HEAD %s (want %s), status %q (want %q), tags %q (want none)", i, after, head, status, wantStatus, tags)
		}
	}
}
