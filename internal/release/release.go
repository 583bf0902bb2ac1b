package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// A released is what release made: the commit and the tags, in the order
// it made them.
type released struct {
	commit string
	tags   []string
	ws     *workspace
}

// release releases the repository at root at version: one commit, then the
// tags (see the package doc). It reports its steps to out. If it fails, it
// leaves the tree, the branch and the tags as it found them.
func release(ctx context.Context, root, version string, out io.Writer) (rel *released, err error) {
	if err := checkVersion(version); err != nil {
		return nil, err
	}
	if status, err := git(ctx, root, "status", "--porcelain"); err != nil {
		return nil, err
	} else if status != "" {
		return nil, fmt.Errorf("the tree has changes or untracked files: commit, stash or remove them first\n%s", indent(status))
	}
	ws, err := loadWorkspace(root)
	if err != nil {
		return nil, err
	}
	root = ws.root
	if semver.Prerelease(version) == "" {
		changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
		if err != nil {
			return nil, err
		}
		if !regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(version) + `\b`).Match(changelog) {
			return nil, fmt.Errorf("CHANGELOG.md has no section ## %s: write what %s changes first", version, version)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "LICENSE")); err != nil {
		return nil, errors.New("no LICENSE at the repository's root: pkg.go.dev shows no documentation without one")
	}
	for _, m := range ws.tagged() {
		if _, err := git(ctx, root, "rev-parse", "-q", "--verify", "refs/tags/"+m.tag(version)); err == nil {
			return nil, fmt.Errorf("the tag %s exists", m.tag(version))
		}
	}
	head, err := git(ctx, root, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "release %s: %d modules, in dependency order: %s\n", version, len(ws.modules), strings.Join(dirs(ws.modules), " "))

	// From here on, a failure puts back HEAD, the tree and the tags.
	var tags, newSums []string
	for _, m := range ws.modules {
		sum := filepath.Join(root, filepath.FromSlash(m.dir), "go.sum")
		if _, err := os.Stat(sum); os.IsNotExist(err) {
			newSums = append(newSums, sum)
		}
	}
	defer func() {
		if err == nil {
			return
		}
		for _, t := range tags {
			git(context.WithoutCancel(ctx), root, "tag", "-d", t)
		}
		git(context.WithoutCancel(ctx), root, "reset", "-q", "--hard", head)
		for _, sum := range newSums {
			os.Remove(sum)
		}
		err = fmt.Errorf("%w\n(the tree, its branch and its tags are as they were)", err)
	}()

	if err := setVersions(ws, version); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "spigot-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	px := proxy{filepath.Join(tmp, "proxy")}
	proxies := []string{px.url()}
	if cache, err := machineModcacheProxy(ctx); err != nil {
		return nil, err
	} else if cache != "" {
		proxies = append(proxies, cache)
	}
	env, err := goEnv(ctx, ws.modules[0].path, proxies, filepath.Join(tmp, "modcache"), "-mod=mod -modcacherw -trimpath")
	if err != nil {
		return nil, err
	}
	if _, err := git(ctx, root, "add", "go.work"); err != nil {
		return nil, err
	}
	// Each module in turn: tidied and built on its own against the proxy,
	// which then serves it from the tree as it will be committed.
	now := time.Now()
	for _, m := range ws.modules {
		start := time.Now()
		dir := filepath.Join(root, filepath.FromSlash(m.dir))
		if _, err := run(ctx, dir, env, "go", "mod", "tidy"); err != nil {
			return nil, fmt.Errorf("%s does not tidy on its own: %w", m.dir, err)
		}
		if _, err := run(ctx, dir, append(env, "GOFLAGS=-mod=readonly -modcacherw -trimpath"), "go", "build", "-o", os.DevNull, "./..."); err != nil {
			return nil, fmt.Errorf("%s does not build on its own: %w", m.dir, err)
		}
		files := []string{path.Join(m.dir, "go.mod")}
		if _, err := os.Stat(filepath.Join(dir, "go.sum")); err == nil {
			files = append(files, path.Join(m.dir, "go.sum"))
		}
		if _, err := git(ctx, root, append([]string{"add", "--"}, files...)...); err != nil {
			return nil, err
		}
		tree, err := git(ctx, root, "write-tree")
		if err != nil {
			return nil, err
		}
		if _, err := px.add(ctx, root, tree, m, version, now); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "release %s: %s tidied and built on its own (%v)\n", version, m.dir, time.Since(start).Round(100*time.Millisecond))
	}
	unstaged, err := git(ctx, root, "diff", "--name-only")
	if err != nil {
		return nil, err
	}
	untracked, err := git(ctx, root, "ls-files", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	if other := strings.TrimSpace(unstaged + "\n" + untracked); other != "" {
		return nil, fmt.Errorf("the go command changed files other than go.mod, go.sum and go.work:\n%s", indent(other))
	}
	msg := fmt.Sprintf("release %s: every module requires the others at %s, with their go.sum lines; go.work maps %s to this tree", version, version, version)
	if _, err := git(ctx, root, "commit", "-q", "--allow-empty", "-m", msg); err != nil {
		return nil, err
	}
	commit, err := git(ctx, root, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	for _, m := range ws.tagged() {
		t := m.tag(version)
		if _, err := git(ctx, root, "tag", "-a", "-m", m.path+" "+version, t); err != nil {
			return nil, err
		}
		tags = append(tags, t)
	}
	fmt.Fprintf(out, "release %s: commit %s, tags %s\n", version, commit[:12], strings.Join(tags, " "))
	return &released{commit: commit, tags: tags, ws: ws}, nil
}

// setVersions sets, in every module's go.mod, each requirement on a module
// of ws to version, and, in go.work, maps version of each module that one
// requires to its directory.
func setVersions(ws *workspace, version string) error {
	required := make(map[string]bool)
	for _, m := range ws.modules {
		name := filepath.Join(ws.root, filepath.FromSlash(m.dir), "go.mod")
		data, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			return err
		}
		for _, p := range m.requires {
			if err := f.AddRequire(p, version); err != nil {
				return err
			}
			required[p] = true
		}
		if err := writeFile(name, modfile.Format(f.Syntax)); err != nil {
			return err
		}
	}
	name := filepath.Join(ws.root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	work, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return err
	}
	mapped := make(map[string]bool)
	for _, r := range slices.Clone(work.Replace) {
		m := ws.byPath[r.Old.Path]
		if m == nil || r.Old.Version == "" {
			continue
		}
		if want := "./" + m.dir; m.dir == "." && r.New.Path != "./" && r.New.Path != "." || m.dir != "." && path.Clean(r.New.Path) != path.Clean(want) {
			return fmt.Errorf("go.work: replace %s %s => %s: not the module's directory", r.Old.Path, r.Old.Version, r.New.Path)
		}
		if mapped[r.Old.Path] {
			if err := work.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return err
			}
			continue
		}
		// The old version is the token before "=>": set in place, the line
		// keeps its comments.
		tokens := r.Syntax.Token
		i := slices.Index(tokens, "=>")
		if i < 1 || tokens[i-1] != r.Old.Version {
			return fmt.Errorf("go.work: replace %s %s: cannot read the line", r.Old.Path, r.Old.Version)
		}
		tokens[i-1], r.Old.Version = version, version
		mapped[r.Old.Path] = true
	}
	for _, m := range ws.modules {
		if required[m.path] && !mapped[m.path] {
			dir := "./" + m.dir
			if m.dir == "." {
				dir = "./"
			}
			if err := work.AddReplace(m.path, version, dir, ""); err != nil {
				return err
			}
		}
	}
	work.Cleanup()
	return writeFile(name, modfile.Format(work.Syntax))
}

// writeFile writes data to the file name, which exists, keeping its mode.
func writeFile(name string, data []byte) error {
	fi, err := os.Stat(name)
	if err != nil {
		return err
	}
	return os.WriteFile(name, data, fi.Mode().Perm())
}

// joinTags returns the tags as git push names them.
func joinTags(tags []string) string {
	var refs []string
	for _, t := range tags {
		refs = append(refs, "refs/tags/"+t)
	}
	return strings.Join(refs, " ")
}
