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
// with "package main") in the repository's README.md.
func readmePrograms(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
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
// this tree's packages, with the stores' clients this module requires)
// into out, or os.DevNull.
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

// TestREADMEAlgorithms runs the README's program of the kinds of limit
// and checks that it prints what its "// Output:" comment says.
func TestREADMEAlgorithms(t *testing.T) {
	runREADMEProgram(t, "algorithms", "spigot.NewSlidingLog")
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
	program := readmeProgram(t, "func login(")
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
// with it: it serves its limit.Wrap(login) on loopback.
const quickstartTest = `package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// post sends one attempt over a new connection, and returns its status
// and headers.
func post(t *testing.T, client *http.Client, url_ string, user, password string) (int, http.Header) {
	t.Helper()
	resp, err := client.PostForm(url_, url.Values{"user": {user}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

func TestLoginOverNewConnections(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{} // RemoteAddr, with its port
	mux := http.NewServeMux()
	mux.Handle("POST /login", limit.Wrap(http.HandlerFunc(login)))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.RemoteAddr] = true
		mu.Unlock()
		mux.ServeHTTP(w, r)
	})
	attempts := 0
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
		alice := "alice@" + addr // an account of its own on each address

		// One account: 5 wrong passwords, then 429 until it refills.
		for i := range 7 {
			attempts++
			status, h := post(t, client, srv.URL+"/login", alice, "wrong")
			switch {
			case i < 5 && status != http.StatusUnauthorized:
				t.Errorf("%s: alice's attempt %d: status %d; want 401", addr, i+1, status)
			case i >= 5 && status != http.StatusTooManyRequests:
				t.Errorf("%s: alice's attempt %d: status %d; want 429", addr, i+1, status)
			case i >= 5:
				if s, err := strconv.Atoi(h.Get("Retry-After")); err != nil || s < 1 || s > 60 {
					t.Errorf("%s: attempt %d: Retry-After %q; want 1 to 60 seconds", addr, i+1, h.Get("Retry-After"))
				}
				if h.Get("X-Ratelimit-Limit") != "5" || h.Get("X-Ratelimit-Remaining") != "0" {
					t.Errorf("%s: attempt %d: X-RateLimit-Limit %q, -Remaining %q; want the account's, 5 and 0", addr, i+1, h.Get("X-Ratelimit-Limit"), h.Get("X-Ratelimit-Remaining"))
				}
			}
			if got, want := h.Get("Ratelimit-Policy"), "\"login-ip\";q=20;w=60, \"login-user\";q=5;w=300"; got != want {
				t.Errorf("%s: attempt %d: RateLimit-Policy %s; want %s", addr, i+1, got, want)
			}
		}
		// The right password is admitted? No: the account is out of
		// tokens, and a success does not skip the limit.
		if status, _ := post(t, client, srv.URL+"/login", alice, "hunter2"); status != http.StatusTooManyRequests {
			t.Errorf("%s: alice's right password while limited: status %d; want 429", addr, status)
		}
		attempts++
		// Many accounts from one address: the address's 20, less the 5
		// alice's admitted attempts took (her denied ones took nothing),
		// plus one per 3 s that the test took.
		var unauthorized, limited int
		for i := range 20 {
			attempts++
			switch status, _ := post(t, client, srv.URL+"/login", "user-"+strconv.Itoa(i), "wrong"); status {
			case http.StatusUnauthorized:
				unauthorized++
			case http.StatusTooManyRequests:
				limited++
			default:
				t.Errorf("%s: attempt %d: status %d", addr, i, status)
			}
		}
		most := 15 + int(time.Since(start)/(3*time.Second))
		if unauthorized < 15 || unauthorized > most || limited != 20-unauthorized {
			t.Errorf("%s: 20 accounts from one address: %d got 401 and %d got 429; want 15 to %d 401s and 429 for the rest", addr, unauthorized, limited, most)
		}
	}
	if len(seen) < attempts {
		t.Errorf("%d attempts came from %d client addresses; want each from a new port", attempts, len(seen))
	}
}

// TestResetOnSuccess: a right password forgives the account's failures.
func TestResetOnSuccess(t *testing.T) {
	srv := httptest.NewServer(limit.Wrap(http.HandlerFunc(login)))
	defer srv.Close()
	// From an address of its own, whose budget the other test did not use.
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	for i := range 4 {
		if status, _ := post(t, client, srv.URL, "bob", "wrong"); status != http.StatusUnauthorized {
			t.Fatalf("bob's attempt %d: status %d; want 401", i+1, status)
		}
	}
	if status, _ := post(t, client, srv.URL, "bob", "hunter2"); status != http.StatusNoContent {
		t.Fatalf("bob's right password: status %d; want 204", status)
	}
	if _, h := post(t, client, srv.URL, "bob", "wrong"); h.Get("X-Ratelimit-Remaining") == "" {
		t.Fatalf("no X-RateLimit-Remaining")
	} else if rl := h.Get("Ratelimit"); !strings.Contains(rl, "\"login-user\";r=4;") {
		t.Errorf("after a success, RateLimit %s; want the account full again less this attempt: r=4", rl)
	}
}
`
