package spigot_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spigot-go/spigot/internal/testserver"
)

// readmePrograms returns every complete program (a Go block that starts
// with "package main") in README.md.
func readmePrograms(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var programs []string
	for _, b := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if strings.HasPrefix(b[1], "package main\n") {
			programs = append(programs, b[1])
		}
	}
	if len(programs) == 0 {
		t.Fatal("README.md has no complete Go program (package main)")
	}
	return programs
}

// readmeProgram returns the README's program that contains text.
func readmeProgram(t *testing.T, text string) string {
	t.Helper()
	for _, p := range readmePrograms(t) {
		if strings.Contains(p, text) {
			return p
		}
	}
	t.Fatalf("README.md has no program with %q", text)
	return ""
}

// buildProgram builds src as a program of this module (so that it imports
// this tree's packages) into out, or os.DevNull.
func buildProgram(t *testing.T, src, out string) error {
	t.Helper()
	return goCommand(t, map[string]string{"main.go": src}, "build", "-o", out)
}

// goCommand runs the go command (build, test) on a package of this module
// made of files (name → source), without writing into the source tree: an
// overlay puts them in internal/readme.
func goCommand(t *testing.T, files map[string]string, args ...string) error {
	t.Helper()
	dir := t.TempDir()
	wd, _ := os.Getwd()
	replace := map[string]string{}
	for name, src := range files {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		replace[filepath.Join(wd, "internal", "readme", name)] = file
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": replace})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	args = append(args, "-overlay", overlayFile, "./internal/readme")
	if output, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return &buildError{err, output}
	}
	return nil
}

type buildError struct {
	err    error
	output []byte
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + string(e.output) }

// TestREADMEQuickstartCompiles builds every complete program in README.md,
// so the front door never shows code that does not compile.
func TestREADMEQuickstartCompiles(t *testing.T) {
	for i, p := range readmePrograms(t) {
		if err := buildProgram(t, p, os.DevNull); err != nil {
			t.Errorf("README.md program %d does not build: %v", i+1, err)
		}
	}
}

// TestREADMEClusterExample runs the README's cluster program against a real
// Redis Cluster, its seeds in CLUSTER_SEEDS.
func TestREADMEClusterExample(t *testing.T) {
	cl := testserver.StartCluster(t, testserver.Redis)
	runREADMEProgram(t, "cluster", "NewClusterClient", "CLUSTER_SEEDS="+strings.Join(cl.Addrs()[:2], ","))
}

// TestREADMESeveralLimits runs the README's Group program and checks that
// it prints what its "// Output:" comment says.
func TestREADMESeveralLimits(t *testing.T) {
	runREADMEProgram(t, "Group", "spigot.NewGroup")
}

// runREADMEProgram builds and runs the README's program that contains
// text, named name, with env added to its environment, and checks that it
// prints what its "// Output:" comment says.
func runREADMEProgram(t *testing.T, name, text string, env ...string) {
	t.Helper()
	program := readmeProgram(t, text)
	_, comment, ok := strings.Cut(program, "\t// Output:\n")
	if !ok {
		t.Fatalf("README.md's %s program has no // Output: comment", name)
	}
	var want strings.Builder
	for _, line := range strings.Split(comment, "\n") {
		text, ok := strings.CutPrefix(strings.TrimSpace(line), "// ")
		if !ok {
			break
		}
		want.WriteString(text + "\n")
	}
	bin := filepath.Join(t.TempDir(), name+"-example")
	if err := buildProgram(t, program, bin); err != nil {
		t.Fatalf("README.md's %s program does not build: %v", name, err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README.md's %s program: %v\n%s", name, err, got)
	}
	if string(got) != want.String() {
		t.Errorf("README.md's %s program printed\n%s\nwant\n%s", name, got, want.String())
	}
}

// TestREADMEQuickstart runs the README's login quickstart, as written,
// under quickstartTest: every attempt over a new connection (so from a new
// port), on IPv4 and IPv6 loopback.
func TestREADMEQuickstart(t *testing.T) {
	program := readmeProgram(t, "func handleLogin(")
	files := map[string]string{"main.go": program, "quickstart_test.go": quickstartTest}
	bin := filepath.Join(t.TempDir(), "quickstart.test")
	if err := goCommand(t, files, "test", "-c", "-vet=off", "-o", bin); err != nil {
		t.Fatalf("README.md's quickstart and its test do not build: %v", err)
	}
	cmd := exec.Command(bin, "-test.v")
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("README.md's quickstart: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// quickstartTest is a test of the README's quickstart program, compiled
// with it: it calls its handleLogin, clientIP and deny.
const quickstartTest = `package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spigot-go/spigot"
)

func TestLoginOverNewConnections(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{} // RemoteAddr, with its port
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.RemoteAddr] = true
		mu.Unlock()
		handleLogin(w, r)
	})
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v: not tested on it", addr, err)
			continue
		}
		srv := httptest.NewUnstartedServer(handler)
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		defer srv.Close()
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

		start := time.Now()
		var unauthorized, limited int
		for i := range 30 {
			resp, err := client.PostForm(srv.URL+"/login", url.Values{"password": {"wrong"}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusUnauthorized:
				unauthorized++
			case http.StatusTooManyRequests:
				limited++
				if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 3 {
					t.Errorf("%s: attempt %d: Retry-After %q, want 1 to 3 seconds", addr, i, resp.Header.Get("Retry-After"))
				}
			default:
				t.Errorf("%s: attempt %d: status %d", addr, i, resp.StatusCode)
			}
		}
		// 20 attempts, plus one per 3 s that the test took.
		most := 20 + int(time.Since(start)/(3*time.Second))
		if unauthorized < 20 || unauthorized > most || limited != 30-unauthorized {
			t.Errorf("%s: 30 wrong passwords over new connections: %d got 401 and %d got 429, want 20 to %d 401s and 429 for the rest",
				addr, unauthorized, limited, most)
		}
		resp, err := client.PostForm(srv.URL+"/login", url.Values{"password": {"hunter2"}})
		if err == nil {
			resp.Body.Close()
		}
		if err != nil || (resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusTooManyRequests) {
			t.Errorf("%s: the right password: %v, %v", addr, resp, err)
		}
	}
	if len(seen) < 31 {
		t.Errorf("the attempts came from %d client addresses, want each from a new port", len(seen))
	}
}

func TestClientIP(t *testing.T) {
	for i, tt := range []struct{ remote, want string }{
		{"203.0.113.7:1234", "203.0.113.7"},
		{"203.0.113.7:1235", "203.0.113.7"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[2001:0db8:0:0::1]:80", "2001:db8::1"},
		{"[::ffff:203.0.113.7]:1", "203.0.113.7"},
		{"[fe80::1%eth0]:80", "fe80::1"},
		{"not an address", "not an address"},
	} {
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = tt.remote
		if got := clientIP(r); got != tt.want {
			t.Errorf("step %d: clientIP(%q) = %q, want %q", i, tt.remote, got, tt.want)
		}
	}
}

func TestDeny(t *testing.T) {
	for i, tt := range []struct {
		a          spigot.Decision
		status     int
		retryAfter string
	}{
		{spigot.Decision{RetryAfter: 1500 * time.Millisecond}, http.StatusTooManyRequests, "2"},
		{spigot.Decision{RetryAfter: 3 * time.Second}, http.StatusTooManyRequests, "3"},
		{spigot.Decision{RetryAfter: time.Millisecond}, http.StatusTooManyRequests, "1"},
		{spigot.Decision{RetryAfter: spigot.Never}, http.StatusRequestEntityTooLarge, ""},
	} {
		w := httptest.NewRecorder()
		deny(w, tt.a)
		if w.Code != tt.status || w.Header().Get("Retry-After") != tt.retryAfter {
			t.Errorf("step %d: deny(RetryAfter %v): got %d, Retry-After %q; want %d, %q",
				i, tt.a.RetryAfter, w.Code, w.Header().Get("Retry-After"), tt.status, tt.retryAfter)
		}
	}
}
`
