package main

import (
	"cmp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersion checks what spigot version prints for the build information
// of a release, a clone with and without uncommitted changes, and a binary
// that has none.
func TestVersion(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		info   *debug.BuildInfo // nil: no build information
		code   int
		stdout string
		stderr string
	}{
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/spigot-go/spigot/cmd/spigot", Version: "v0.1.0"}},
			0, "spigot v0.1.0 go1.26.8 " + platform + "\n", ""},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.2.0-rc.1"}},
			0, "spigot v0.2.0-rc.1 go1.26.8 " + platform + "\n", ""},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			0, "spigot (devel) go1.26.8 " + platform + "\n", ""},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{}},
			0, "spigot (devel) go1.26.8 " + platform + "\n", ""},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "false")},
			0, "spigot (devel) git 0123456789ab go1.26.8 " + platform + "\n", ""},
		{&debug.BuildInfo{GoVersion: "go1.27", Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "true")},
			0, "spigot (devel) git 0123456789ab+dirty go1.27 " + platform + "\n", ""},
		{nil, 1, "", "spigot version: the binary has no build information\n"},
	}
	t.Cleanup(func() { readBuildInfo = debug.ReadBuildInfo })
	for i, tt := range tests {
		readBuildInfo = func() (*debug.BuildInfo, bool) { return tt.info, tt.info != nil }
		checkRun(t, i, []string{"version"}, tt.code, tt.stdout, tt.stderr)
	}
	readBuildInfo = debug.ReadBuildInfo
	checkRun(t, len(tests), []string{"version", "extra"}, 2, "",
		"spigot version: unexpected argument \"extra\"\nRun 'spigot version -h' for usage.\n")
}

// TestVersionBuildInfo checks spigot version on the test binary's own build
// information: the main module's version, then the Go version that built
// it.
func TestVersionBuildInfo(t *testing.T) {
	out, errOut, code := runCmd(t, "version")
	info, _ := debug.ReadBuildInfo()
	want := cmp.Or(info.Main.Version, "(devel)")
	fields := strings.Fields(out)
	if code != 0 || errOut != "" || len(fields) < 4 || fields[0] != "spigot" || fields[1] != want ||
		fields[len(fields)-2] != runtime.Version() || fields[len(fields)-1] != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("spigot version: got %q, %q, exit status %d; want \"spigot %s … %s %s/%s\"",
			out, errOut, code, want, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
}
