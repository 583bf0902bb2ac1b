package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// readBuildInfo is debug.ReadBuildInfo; tests replace it.
var readBuildInfo = debug.ReadBuildInfo

// version prints spigot's version and the Go version that built it.
func version(args []string, stdout, stderr io.Writer) int {
	const prog = "spigot version"
	fs := newFlagSet(prog)
	if err := parseFlags(fs, args, stdout, "usage: spigot version\n\n"+
		"Version prints the version of spigot's module, and, for a build from a\n"+
		"clone, the commit it was built from, then the Go version that built it\n"+
		"and the platform it runs on.\n"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return usageError(stderr, prog, "%v", err)
	}
	info, ok := readBuildInfo()
	if !ok {
		fmt.Fprintf(stderr, "%s: the binary has no build information\n", prog)
		return 1
	}
	fmt.Fprintln(stdout, versionLine(info))
	return 0
}

// versionLine returns "spigot VERSION [VCS REVISION[+dirty]] GOVERSION
// GOOS/GOARCH" for info: VERSION is the main module's, a release
// (v0.1.0) for go install …@v0.1.0, "(devel)" for a build from a clone;
// REVISION, the first 12 digits of the commit of a build from a clone,
// +dirty if the clone had uncommitted changes.
func versionLine(info *debug.BuildInfo) string {
	fields := []string{"spigot", info.Main.Version}
	if fields[1] == "" {
		fields[1] = "(devel)"
	}
	setting := make(map[string]string)
	for _, s := range info.Settings {
		setting[s.Key] = s.Value
	}
	if rev := setting["vcs.revision"]; rev != "" {
		rev = rev[:min(len(rev), 12)]
		if setting["vcs.modified"] == "true" {
			rev += "+dirty"
		}
		fields = append(fields, cmp.Or(setting["vcs"], "vcs"), rev)
	}
	fields = append(fields, info.GoVersion, runtime.GOOS+"/"+runtime.GOARCH)
	return strings.Join(fields, " ")
}
