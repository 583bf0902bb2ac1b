package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

// A proxy is a module proxy in a directory, in the layout of the GOPROXY
// protocol (go help goproxy), which the go command reads through a file://
// URL: for each module, @v/list and each version's .info, .mod and .zip.
type proxy struct {
	dir string // absolute
}

// url returns the proxy's GOPROXY entry.
func (p proxy) url() string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p.dir)}).String()
}

// add serves m at version, as the go command would fetch it from the
// revision rev (a commit or a tree) of the repository at root: the zip
// from git archive of m's directory, with the root's LICENSE if the
// directory has none (x/mod/zip.CreateFromVCS); the go.mod of that
// revision; and the time t. It returns the hash of the zip, as go.sum
// has it.
func (p proxy) add(ctx context.Context, root, rev string, m *repoModule, version string, t time.Time) (string, error) {
	escPath, err := module.EscapePath(m.path)
	if err != nil {
		return "", err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(p.dir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", err
	}
	base := filepath.Join(dir, escVersion)
	f, err := os.Create(base + ".zip")
	if err != nil {
		return "", err
	}
	err = zip.CreateFromVCS(f, module.Version{Path: m.path, Version: version}, root, rev, m.subdir())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("%s@%s: %w", m.path, version, err)
	}
	gomod, err := run(ctx, root, nil, "git", "cat-file", "blob", rev+":"+path.Join(m.subdir(), "go.mod"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".mod", []byte(gomod), 0o666); err != nil {
		return "", err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, t.UTC().Truncate(time.Second)})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".info", info, 0o666); err != nil {
		return "", err
	}
	list, err := os.ReadFile(filepath.Join(dir, "list"))
	if err != nil && !os.IsNotExist(err) {
		return "", err
	}
	versions := strings.Fields(string(list))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
		semver.Sort(versions)
	}
	if err := os.WriteFile(filepath.Join(dir, "list"), []byte(strings.Join(versions, "\n")+"\n"), 0o666); err != nil {
		return "", err
	}
	return dirhash.HashZip(base+".zip", dirhash.Hash1)
}
