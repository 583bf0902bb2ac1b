package httplimit

import (
	"strings"
	"testing"

	"github.com/spigot-go/spigot"
)

// FuzzKeepMembers: whatever a field holds, keepMembers keeps either
// nothing or members of it as written, none with the limit's name, and
// keeping again what it kept changes nothing.
func FuzzKeepMembers(f *testing.F) {
	for _, s := range []string{
		`"a";r=1;t=2, "api";r=3`,
		`"a";q=1;qu="x, y";pk=:YWJj:;x=tok/en;y=?1;z=-1.5;d=@17;s=%"caf%c3%a9";flag, "b"`,
		`"api\"";r=1, "ap\\i"`,
		`api;r=1`, `"a",`, `"a";r=1 "b"`, `"`, `"a";=1`, ` , `, `"a";r=:abc`, `"a";r=%"x`,
	} {
		f.Add(s)
	}
	api := spigot.MustBucket("api", 1, spigot.PerSecond(1))
	limits := []spigot.Limit{api}
	f.Fuzz(func(t *testing.T, old string) {
		kept := string(keepMembers(nil, []string{old}, limits, nil))
		if kept == "" {
			return
		}
		for s := kept; s != ""; {
			member, name, rest, ok := nextMember(s)
			if !ok {
				t.Fatalf("keepMembers(%q) = %q: not a list", old, kept)
			}
			if !strings.Contains(old, member) || name == `"api"` {
				t.Fatalf("keepMembers(%q) = %q: member %q", old, kept, member)
			}
			s = rest
		}
		if again := string(keepMembers(nil, []string{kept}, limits, nil)); again != kept {
			t.Fatalf("keepMembers(%q) = %q, then %q", old, kept, again)
		}
	})
}

// TestSFStringIs: a name matches its string as ratefield.AppendString writes it,
// and nothing else.
func TestSFStringIs(t *testing.T) {
	for i, c := range []struct {
		quoted, name string
		want         bool
	}{
		{`"api"`, "api", true},
		{`"a\"b\\c"`, `a"b\c`, true},
		{`"caf??"`, "café", true},
		{`""`, "", true},
		{`"api"`, "ap", false},
		{`"ap"`, "api", false},
		{`"api`, "api", false},
		{`"a\\"`, `a"`, false},
		{`"a"b"`, `a"b`, false},
	} {
		if got := sfStringIs(c.quoted, c.name); got != c.want {
			t.Errorf("step %d: sfStringIs(%s, %q) = %v; want %v", i+1, c.quoted, c.name, got, c.want)
		}
	}
}
