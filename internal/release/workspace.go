package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// A repoModule is one module of the workspace.
type repoModule struct {
	dir      string   // from the repository's root, slash-separated: ".", "store/redis"
	path     string   // the module path
	requires []string // the paths of the workspace's modules that its go.mod requires
	level    int      // 0 if it requires no module of the workspace, else one more than the highest of theirs
	tagged   bool     // it is tagged: a user can get it, or another module requires it
}

// tag returns the module's tag for version: version for the module at the
// repository's root, its directory and version for the others.
func (m *repoModule) tag(version string) string {
	if m.dir == "." {
		return version
	}
	return m.dir + "/" + version
}

// subdir returns the module's directory as x/mod/zip names it: "" for the
// repository's root.
func (m *repoModule) subdir() string {
	if m.dir == "." {
		return ""
	}
	return m.dir
}

// A workspace is the modules of a repository's go.work.
type workspace struct {
	root    string        // the repository's root, absolute
	modules []*repoModule // in dependency order: each after every module it requires, then in go.work's order
	byPath  map[string]*repoModule
}

// loadWorkspace reads the go.work at root and the go.mod of each module it
// uses.
func loadWorkspace(root string) (*workspace, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	ws := &workspace{root: root, byPath: make(map[string]*repoModule)}
	var files []*modfile.File
	for _, u := range work.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		if path.IsAbs(dir) || dir == ".." || strings.HasPrefix(dir, "../") {
			return nil, fmt.Errorf("go.work: use %s: not a directory of the repository", u.Path)
		}
		name := path.Join(dir, "go.mod")
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			return nil, err
		}
		if f.Module == nil {
			return nil, fmt.Errorf("%s: no module directive", name)
		}
		if len(f.Replace) > 0 {
			return nil, fmt.Errorf("%s: a replace directive: go install …@version refuses a module whose go.mod has one (go.work maps the workspace's modules)", name)
		}
		m := &repoModule{dir: dir, path: f.Module.Mod.Path}
		if ws.byPath[m.path] != nil {
			return nil, fmt.Errorf("go.work: %s and %s are both %s", ws.byPath[m.path].dir, dir, m.path)
		}
		ws.byPath[m.path] = m
		ws.modules = append(ws.modules, m)
		files = append(files, f)
	}
	if len(ws.modules) == 0 || ws.modules[0].dir != "." {
		return nil, fmt.Errorf("go.work: the first module it uses is not the repository's root (use .)")
	}
	required := make(map[string]bool)
	for i, m := range ws.modules {
		for _, r := range files[i].Require {
			if ws.byPath[r.Mod.Path] != nil && !slices.Contains(m.requires, r.Mod.Path) {
				m.requires = append(m.requires, r.Mod.Path)
				required[r.Mod.Path] = true
			}
		}
	}
	state := make(map[*repoModule]int) // 1 while its requirements are visited, 2 after
	var visit func(m *repoModule, chain []string) error
	visit = func(m *repoModule, chain []string) error {
		switch state[m] {
		case 1:
			return fmt.Errorf("the modules require each other in a cycle: %s", strings.Join(append(chain, m.dir), " → "))
		case 2:
			return nil
		}
		state[m] = 1
		for _, p := range m.requires {
			r := ws.byPath[p]
			if err := visit(r, append(chain, m.dir)); err != nil {
				return err
			}
			m.level = max(m.level, r.level+1)
		}
		state[m] = 2
		return nil
	}
	for _, m := range ws.modules {
		if err := visit(m, nil); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(ws.modules, func(a, b *repoModule) int { return a.level - b.level })
	for _, m := range ws.modules {
		has, err := hasPackage(root, m.dir, ws)
		if err != nil {
			return nil, err
		}
		m.tagged = required[m.path] || (has && !slices.Contains(strings.Split(m.path, "/"), "internal"))
	}
	return ws, nil
}

// hasPackage reports whether the module in dir has a package: a Go file
// that is not a test, outside testdata and the workspace's other modules.
func hasPackage(root, dir string, ws *workspace) (bool, error) {
	others := make(map[string]bool)
	for _, m := range ws.modules {
		others[m.dir] = m.dir != dir
	}
	found := false
	err := filepath.WalkDir(filepath.Join(root, filepath.FromSlash(dir)), func(p string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if d.IsDir() {
			if others[rel] || name == "testdata" || rel != dir && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		found = strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
		return nil
	})
	return found, err
}

// tagged returns the workspace's tagged modules, in dependency order.
func (ws *workspace) tagged() []*repoModule {
	var ms []*repoModule
	for _, m := range ws.modules {
		if m.tagged {
			ms = append(ms, m)
		}
	}
	return ms
}

// dirs returns the directories of modules.
func dirs(modules []*repoModule) []string {
	var ds []string
	for _, m := range modules {
		ds = append(ds, m.dir)
	}
	return ds
}

// checkVersion returns an error unless v is a version that release can
// tag: vMAJOR.MINOR.PATCH, with a pre-release or not, below v2.
func checkVersion(v string) error {
	if !semver.IsValid(v) || semver.Canonical(v) != v {
		return fmt.Errorf("%q is not a semantic version vMAJOR.MINOR.PATCH[-PRERELEASE] (such as v0.1.0)", v)
	}
	if semver.Major(v) != "v0" && semver.Major(v) != "v1" {
		return fmt.Errorf("%s: the module paths have no major version suffix (/%s), which a release of major version 2 or more needs", v, semver.Major(v))
	}
	return nil
}
