package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// run runs the command name in dir, with env added to the process's
// environment, and returns its standard output; its error, if it fails,
// has the command and its standard error.
func run(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.String(), fmt.Errorf("in %s: %s %s: %v\n%s", dir, name, strings.Join(args, " "), err, indent(msg))
	}
	return stdout.String(), nil
}

// git runs git in dir and returns its standard output without the
// newline at its end.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := run(ctx, dir, nil, "git", args...)
	return strings.TrimSuffix(out, "\n"), err
}

// indent returns text with a tab before each line.
func indent(text string) string {
	if text == "" {
		return ""
	}
	return "\t" + strings.ReplaceAll(text, "\n", "\n\t")
}

// goEnv returns the environment of a go command that builds a module on
// its own from the proxies (file:// URLs) and then from the machine's
// GOPROXY, with the checksum database off for the module paths under
// root's alone (GONOSUMDB: GOPRIVATE would also bypass the proxies), with
// the module cache modcache and the flags goflags.
func goEnv(ctx context.Context, rootPath string, proxies []string, modcache, goflags string) ([]string, error) {
	out, err := run(ctx, ".", nil, "go", "env", "GOPROXY", "GONOSUMDB")
	if err != nil {
		return nil, err
	}
	machine := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(machine) != 2 {
		return nil, fmt.Errorf("go env GOPROXY GONOSUMDB: got %q", out)
	}
	goproxy := strings.Join(proxies, ",")
	if machine[0] != "" {
		goproxy += "," + machine[0]
	}
	nosumdb := rootPath
	if machine[1] != "" {
		nosumdb = machine[1] + "," + rootPath
	}
	return []string{
		"GOWORK=off",
		"GOFLAGS=" + goflags,
		"GOPROXY=" + goproxy,
		"GONOSUMDB=" + nosumdb,
		"GOMODCACHE=" + modcache,
	}, nil
}

// machineModcacheProxy returns the download directory of the machine's
// module cache as a file:// GOPROXY entry, which the go command reads but
// never writes, or "" if it has none.
func machineModcacheProxy(ctx context.Context) (string, error) {
	out, err := run(ctx, ".", nil, "go", "env", "GOMODCACHE")
	if err != nil {
		return "", err
	}
	dir := filepath.Join(strings.TrimSpace(out), "cache", "download")
	if _, err := os.Stat(dir); err != nil {
		return "", nil
	}
	return proxy{dir}.url(), nil
}
