package testserver

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// MainWithServer is Main for a package whose examples run on a server,
// which an example cannot start, having no testing.TB: it starts a server
// of kind, passes its address to use before any test or example runs,
// runs m, and stops the server.
//
// When kind's binary is not installed, it fails the run at once if
// SPIGOT_REQUIRE_SERVERS=1. Otherwise it runs the tests without the
// examples, as if -skip '^Example' were given (added to a -skip of the
// command line that names no subtest), and says so in a line of Main's,
// such as
//
//	github.com/spigot-go/spigot/store/valkey: valkey-server not found: the examples did not run; install it or set SPIGOT_REQUIRE_SERVERS=1
func MainWithServer(m *testing.M, kind Kind, use func(addr string)) {
	var lines []string
	if _, err := exec.LookPath(string(kind)); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			fmt.Fprintf(os.Stderr, "%stestserver: %s is not installed and %s=1\n", pkgPrefix(), kind, RequireEnv)
			os.Exit(1)
		}
		skipExamples()
		lines = append(lines, fmt.Sprintf("%s%s not found: the examples did not run; install it or set %s=1", pkgPrefix(), kind, RequireEnv))
	} else {
		dir, err := os.MkdirTemp("", "testserver-")
		if err == nil {
			defer os.RemoveAll(dir)
			var s *Server
			if s, err = startIn(kind, dir, nil); err == nil {
				defer s.Kill()
				use(s.Addr)
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%stestserver: the examples' server: %v\n", pkgPrefix(), err)
			os.Exit(1)
		}
	}
	m.Run()
	report(append(skipped.summary(pkgPrefix()), lines...))
}

// skipExamples adds ^Example to the -skip flag of go test, unless that
// names subtests (holds a '/'), which an alternation would change.
func skipExamples() {
	flag.Parse()
	switch old := flag.Lookup("test.skip").Value.String(); {
	case old == "":
		flag.Set("test.skip", "^Example")
	case !strings.Contains(old, "/"):
		flag.Set("test.skip", "^Example|"+old)
	}
}
